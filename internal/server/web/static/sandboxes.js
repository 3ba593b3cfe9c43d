// Sandboxes: the tenant's live sandboxes of the E2B API and of MCP
// sessions (polled). An E2B sandbox shows the ports its policy exposes; an
// MCP sandbox the ports its client exposed with expose_port, who exposed
// each and when, and (for a key with runs:write) a button that revokes
// one. Each shows where the port is reached, public or token, and the
// connections open to it now.

import {h, clear, statusBadge, decisionBadge, timeEl, bytes, num, every} from './dom.js';
import {api, can, path} from './api.js';
import {toast, errorText} from './app.js';

// urlView is where a port is reached: a single port's https URL opens; a
// range's and the data plane's address (which wants headers naming the
// sandbox and the port) are only shown.
function urlView(url, title) {
  return url.startsWith('https://') && !url.includes('{port}')
    ? h('a.mono', {href: url, target: '_blank', rel: 'noopener noreferrer'}, url)
    : h('span.mono', {title}, url);
}

// exposuresView is an MCP sandbox's exposed ports, one line a port, each
// with its revoke button (and its confirmation) when the key may revoke.
// hold(true) while a confirmation is open keeps the poll from redrawing
// it away; revoke(port) revokes.
function exposuresView(s, hold, revoke) {
  if (s.exposures.length === 0) return h('span.muted', 'none exposed');
  return h('ul.ports', ...s.exposures.map((e) => {
    const li = h('li', {dataset: {port: String(e.port)}},
      h('code', String(e.port)), ' ',
      decisionBadge(e.access === 'public' ? 'allow' : 'ask', e.access), ' ',
      urlView(e.url, e.headers ? 'send ' + Object.entries(e.headers).map(([k, v]) => k + ': ' + v).join(', ') : 'needs the sandbox\'s traffic token'), ' ',
      h('span.muted.small', {class: 'open'}, num(e.open) + ' open'), ' ',
      h('span.muted.small', {class: 'by'}, 'by ', h('code', e.by || 'local'), ' ', timeEl(e.at)));
    if (!can('runs:write')) return li;
    const ask = h('button.btn.danger.small', {type: 'button', dataset: {act: 'revoke'}}, 'Revoke…');
    const yes = h('button.btn.danger.small', {type: 'button', dataset: {act: 'confirm'}}, 'Revoke port ' + e.port);
    const no = h('button.btn.ghost.small', {type: 'button'}, 'Cancel');
    const sure = h('span.row', {hidden: true}, yes, no);
    ask.addEventListener('click', () => { hold(true); ask.hidden = true; sure.hidden = false; no.focus(); });
    no.addEventListener('click', () => { hold(false); sure.hidden = true; ask.hidden = false; ask.focus(); });
    yes.addEventListener('click', async () => {
      yes.disabled = true;
      if (!await revoke(e.port)) yes.disabled = false;
    });
    li.append(' ', ask, sure);
    return li;
  }));
}

// portsView is a sandbox's exposed ports, one line a rule.
function portsView(s) {
  if (s.ports.length === 0) return h('span.muted', 'none exposed');
  return h('ul.ports', ...s.ports.map((p) => h('li', {dataset: {ports: p.ports}},
    h('code', p.ports), ' ',
    decisionBadge(p.access === 'public' ? 'allow' : 'ask', p.access), ' ',
    urlView(p.url, p.url.startsWith('https://') ? 'PORT in the range' : 'send E2b-Sandbox-Id: ' + s.id + ' and E2b-Sandbox-Port'),
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
    'Sandboxes created through the E2B API show up here while they run or are paused, and those of MCP sessions while their sessions last.');
  const error = h('div.error', {role: 'alert', hidden: true});
  main.append(h('div.page-head', h('h1', 'Sandboxes'), live, h('span.spacer')), error, panel, empty);
  if (!can('runs:read')) {
    panel.hidden = true;
    empty.hidden = false;
    clear(empty).append(h('strong', 'This key cannot list sandboxes'), 'It lacks the runs:read scope.');
    return () => {};
  }
  // held is set while a revoke's confirmation is open: the poll then
  // leaves the table as it is.
  let held = false;
  const hold = (on) => { held = on; };
  async function load() {
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
    if (held) return;
    clear(body);
    for (const s of list) {
      const mcp = s.origin === 'mcp';
      const revoke = async (port) => {
        try {
          await api('DELETE', path`/v1/sandboxes/${s.id}/exposures/${String(port)}`);
          toast('Revoked port ' + port + ' of ' + s.id + '.');
        } catch (err) {
          error.textContent = 'Cannot revoke port ' + port + ' of ' + s.id + ': ' + errorText(err);
          error.hidden = false;
          return false;
        }
        held = false;
        await load();
        return true;
      };
      body.append(h('tr', {dataset: {sandbox: s.id, origin: s.origin}},
        h('td', statusBadge(s.state)),
        h('td', s.run_id
          ? h('a.id', {href: '/ui/runs/' + s.run_id, title: 'Its record: ' + s.run_id}, s.id)
          : h('span.id', {title: 'An MCP session\'s sandbox: its record is the MCP audit log'}, s.id)),
        h('td.wide', mcp ? h('span', h('span.muted.small', 'MCP · policy '), s.template) : s.template),
        h('td', mcp ? exposuresView(s, hold, revoke) : portsView(s)),
        h('td.num', num(s.open)),
        h('td.num.wide', bytes(s.bytes)),
        h('td.wide', mcp ? h('span.muted', 'with its session') : timeEl(s.end_at))));
    }
    panel.hidden = list.length === 0;
    empty.hidden = list.length !== 0;
  }
  return every(5000, load);
}
