// The runs list: live status (polled), filters by status, j/k and Enter.

import {h, clear, statusBadge, timeEl, shortID, listNav, every, num} from './dom.js';
import {api, can} from './api.js';
import {navigate, errorText} from './app.js';

// filters are the status filters, each a set of statuses (none: all).
const filters = [
  ['all', 'All', []],
  ['active', 'Active', ['queued', 'running', 'awaiting_approval']],
  ['awaiting_approval', 'Awaiting approval', ['awaiting_approval']],
  ['paused', 'Paused', ['paused']],
  ['completed', 'Completed', ['completed']],
  ['failed', 'Failed', ['failed', 'failed_verification']],
  ['cancelled', 'Cancelled', ['cancelled']],
];

const pageSize = 50;

export function runsPage(main, _params, url) {
  document.title = 'Runs · airlock';
  let filter = filters.find((f) => f[0] === url.searchParams.get('status')) || filters[0];
  let shown = pageSize;
  let cursor = '';

  const live = h('span.live.on', 'live');
  const chips = h('div.chips', {role: 'toolbar', 'aria-label': 'Filter by status'});
  const body = h('tbody');
  const table = h('table.list.runs',
    h('thead', h('tr',
      h('th', {scope: 'col'}, 'Status'),
      h('th', {scope: 'col'}, 'Task'),
      h('th.wide', {scope: 'col'}, 'Run'),
      h('th.wide', {scope: 'col'}, 'Model'),
      h('th.num.wide', {scope: 'col'}, 'Events'),
      h('th', {scope: 'col'}, 'Created'),
      h('th.wide', {scope: 'col'}, 'Updated'))),
    body);
  const panel = h('div.panel', table);
  const empty = h('div.empty', {hidden: true});
  const error = h('div.error', {role: 'alert', hidden: true});
  const more = h('button.btn', {type: 'button', onclick: () => { shown += pageSize; refresh(); }}, 'Load more');
  const moreRow = h('div.more', {hidden: true}, more);

  for (const f of filters) {
    chips.append(h('button.chip', {type: 'button', 'aria-pressed': String(f === filter), dataset: {filter: f[0]},
      onclick: () => {
        filter = f;
        shown = pageSize;
        for (const c of chips.children) c.setAttribute('aria-pressed', String(c.dataset.filter === f[0]));
        const q = f[0] === 'all' ? '/ui/' : '/ui/?status=' + f[0];
        history.replaceState(null, '', q);
        refresh();
      }}, f[1]));
  }

  main.append(
    h('div.page-head', h('h1', 'Runs'), live, h('span.spacer')),
    chips, error, panel, empty, moreRow);

  if (!can('runs:read')) {
    panel.hidden = true;
    chips.hidden = true;
    live.hidden = true;
    empty.hidden = false;
    empty.append(h('strong', 'This key cannot list runs'), 'It lacks the runs:read scope.');
    return () => {};
  }

  async function refresh() {
    const q = new URLSearchParams({limit: String(Math.min(shown, 500))});
    if (filter[2].length) q.set('status', filter[2].join(','));
    let list;
    try {
      list = await api('GET', '/v1/runs?' + q);
      error.hidden = true;
      live.className = 'live on';
    } catch (err) {
      error.textContent = 'Cannot load the runs: ' + errorText(err);
      error.hidden = false;
      live.className = 'live off';
      return;
    }
    cursor = list.next_cursor || '';
    const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.run : null;
    clear(body);
    for (const r of list.runs) {
      const href = '/ui/runs/' + r.id;
      body.append(h('tr', {tabindex: '0', dataset: {run: r.id, href}, onclick: (e) => {
        if (e.target.closest('a')) return;
        navigate(href);
      }},
      h('td', statusBadge(r.status)),
      h('td.task', {title: r.task}, h('a', {href, tabindex: '-1'}, r.task)),
      h('td.wide', h('span.id', {title: r.id}, shortID(r.id))),
      h('td.wide', h('span.muted', r.model)),
      h('td.num.wide', num(r.events)),
      h('td', timeEl(r.created)),
      h('td.wide', timeEl(r.updated))));
    }
    if (focused) {
      const row = body.querySelector(`tr[data-run="${CSS.escape(focused)}"]`);
      if (row) row.focus({preventScroll: true});
    }
    panel.hidden = list.runs.length === 0;
    empty.hidden = list.runs.length !== 0;
    clear(empty);
    if (list.runs.length === 0) {
      if (filter[0] === 'all') {
        empty.append(h('strong', 'No runs yet'), 'Create one through the API: ', h('code', 'POST /v1/runs'), '.');
      } else {
        empty.append(h('strong', 'No ' + filter[1].toLowerCase() + ' runs'), 'Runs show up here as their status changes.');
      }
    }
    moreRow.hidden = !cursor || shown >= 500;
  }

  const stopNav = listNav(body, 'tr', (row) => navigate(row.dataset.href));
  const stopPoll = every(3000, refresh);
  return () => {
    stopNav();
    stopPoll();
  };
}
