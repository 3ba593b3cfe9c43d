// Credits: the tenant's balance and its ledger, newest page first loaded
// on demand.

import {h, clear, timeEl, credits, shortID, listNav} from './dom.js';
import {api, can} from './api.js';
import {errorText} from './app.js';

export function creditsPage(main) {
  document.title = 'Credits · airlock';
  const amount = h('span.amount', '…');
  const body = h('tbody');
  const table = h('table.list',
    h('thead', h('tr',
      h('th', {scope: 'col'}, 'Entry'),
      h('th', {scope: 'col'}, 'When'),
      h('th', {scope: 'col'}, 'Kind'),
      h('th.num', {scope: 'col'}, 'Amount'),
      h('th', {scope: 'col'}, 'Run'),
      h('th', {scope: 'col'}, 'Note'))),
    body);
  const panel = h('div.panel', table);
  const error = h('div.error', {role: 'alert', hidden: true});
  const empty = h('div.empty.panel', {hidden: true}, h('strong', 'No ledger entries'), 'Grants and debits show up here.');
  const more = h('button.btn', {type: 'button', onclick: () => load(next)}, 'Load more');
  const moreRow = h('div.more', {hidden: true}, more);
  main.append(h('div.page-head', h('h1', 'Credits')),
    h('div.balance', amount, h('span.muted', 'credits')),
    error, panel, empty, moreRow);
  let next = 0;

  if (!can('runs:read')) {
    amount.textContent = '—';
    panel.hidden = true;
    empty.hidden = false;
    clear(empty).append(h('strong', 'This key cannot read credits'), 'It lacks the runs:read scope.');
    return () => {};
  }

  async function load(after) {
    let c;
    try {
      c = await api('GET', '/v1/credits?limit=100' + (after ? '&after=' + after : ''));
    } catch (err) {
      error.textContent = 'Cannot load the credits: ' + errorText(err);
      error.hidden = false;
      return;
    }
    amount.textContent = c.credits;
    amount.classList.toggle('neg', c.balance < 0);
    for (const e of c.entries) {
      body.append(h('tr', {tabindex: '0'},
        h('td', h('span.id', '#' + e.id)),
        h('td', timeEl(e.created)),
        h('td', e.kind),
        h('td.num', h('span.amount', {class: e.amount < 0 ? 'neg' : 'pos'}, (e.amount > 0 ? '+' : '') + credits(e.amount))),
        h('td', e.run_id ? h('a', {href: '/ui/runs/' + e.run_id, title: e.run_id}, shortID(e.run_id)) : h('span.muted', '—')),
        h('td.muted', e.note || '')));
    }
    next = c.next_after || 0;
    moreRow.hidden = !next;
    panel.hidden = body.children.length === 0;
    empty.hidden = body.children.length !== 0;
  }
  load(0);
  return listNav(body, 'tr', (row) => {
    const a = row.querySelector('a');
    if (a) a.click();
  });
}
