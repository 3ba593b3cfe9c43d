// Sandboxes: the tenant's live sandboxes of the E2B API (polled), each
// with the ports its policy exposes: where they are reached, public or
// token, and the connections open to them now.

import {h, clear, statusBadge, decisionBadge, timeEl, bytes, num, every} from './dom.js';
import {api, can} from './api.js';
import {errorText} from './app.js';

// portsView is a sandbox's exposed ports, one line a rule.
function portsView(s) {
  if (s.ports.length === 0) return h('span.muted', 'none exposed');
  return h('ul.ports', ...s.ports.map((p) => h('li', {dataset: {ports: p.ports}},
    h('code', p.ports), ' ',
    decisionBadge(p.access === 'public' ? 'allow' : 'ask', p.access), ' ',
    // A single port's https URL opens; a range's and the data plane's
    // address (which wants the E2b-Sandbox-* headers) are only shown.
    p.url.startsWith('https://') && !p.url.includes('{port}')
      ? h('a.mono', {href: p.url, target: '_blank', rel: 'noopener noreferrer'}, p.url)
      : h('span.mono', {title: p.url.startsWith('https://') ? 'PORT in the range' : 'send E2b-Sandbox-Id: ' + s.id + ' and E2b-Sandbox-Port'}, p.url),
    ' ', h('span.muted.small', {class: 'open'}, num(p.open) + ' open'))));
}

export function sandboxesPage(main) {
  document.title = 'Sandboxes · airlock';
  const live = h('span.live.on', 'live');
  const body = h('tbody');
  const table = h('table.list.sandboxes',
    h('thead', h('tr',
      h('th', {scope: 'col'}, 'State'),
      h('th', {scope: 'col'}, 'Sandbox'),
      h('th.wide', {scope: 'col'}, 'Template'),
      h('th', {scope: 'col'}, 'Exposed ports'),
      h('th.num', {scope: 'col'}, 'Open'),
      h('th.num.wide', {scope: 'col'}, 'Traffic'),
      h('th.wide', {scope: 'col'}, 'Ends'))),
    body);
  const panel = h('div.panel', table);
  const empty = h('div.empty', {hidden: true}, h('strong', 'No live sandboxes'),
    'Sandboxes created through the E2B API show up here while they run or are paused.');
  const error = h('div.error', {role: 'alert', hidden: true});
  main.append(h('div.page-head', h('h1', 'Sandboxes'), live, h('span.spacer')), error, panel, empty);
  if (!can('runs:read')) {
    panel.hidden = true;
    empty.hidden = false;
    clear(empty).append(h('strong', 'This key cannot list sandboxes'), 'It lacks the runs:read scope.');
    return () => {};
  }
  return every(5000, async () => {
    let list;
    try {
      ({sandboxes: list} = await api('GET', '/v1/sandboxes'));
    } catch (err) {
      error.textContent = 'Cannot load the sandboxes: ' + errorText(err);
      error.hidden = false;
      live.classList.remove('on');
      return;
    }
    error.hidden = true;
    live.classList.add('on');
    clear(body);
    for (const s of list) {
      body.append(h('tr', {dataset: {sandbox: s.id}},
        h('td', statusBadge(s.state)),
        h('td', h('a.id', {href: '/ui/runs/' + s.run_id, title: 'Its record: ' + s.run_id}, s.id)),
        h('td.wide', s.template),
        h('td', portsView(s)),
        h('td.num', num(s.open)),
        h('td.num.wide', bytes(s.bytes)),
        h('td.wide', timeEl(s.end_at))));
    }
    panel.hidden = list.length === 0;
    empty.hidden = list.length !== 0;
  });
}
