// Policies: the tenant's stored policies (latest version of each); Enter
// or a click shows a policy's versions.

import {h, clear, timeEl, listNav} from './dom.js';
import {api, can} from './api.js';
import {errorText} from './app.js';

export function policiesPage(main) {
  document.title = 'Policies · airlock';
  const body = h('tbody');
  const table = h('table.list',
    h('thead', h('tr',
      h('th', {scope: 'col'}, 'Name'),
      h('th.num', {scope: 'col'}, 'Version'),
      h('th', {scope: 'col'}, 'Hash'),
      h('th', {scope: 'col'}, 'Stored'),
      h('th', {scope: 'col'}, 'By'),
      h('th', {scope: 'col'}, 'Source'))),
    body);
  const panel = h('div.panel', table);
  const error = h('div.error', {role: 'alert', hidden: true});
  const empty = h('div.empty.panel', {hidden: true}, h('strong', 'No stored policies'),
    'Store one with ', h('code', 'POST /v1/policies/NAME'), ' or ', h('code', 'airlock policy put'), '.');
  main.append(h('div.page-head', h('h1', 'Policies')), error, panel, empty);

  if (!can('runs:read')) {
    panel.hidden = true;
    empty.hidden = false;
    clear(empty).append(h('strong', 'This key cannot list policies'), 'It lacks the runs:read scope.');
    return () => {};
  }

  function row(v, cls) {
    return h('tr', {class: cls || null},
      h('td', h('strong.mono', v.name)),
      h('td.num', 'v' + v.version),
      h('td', h('span.id', {title: v.hash}, v.hash.slice(0, 12))),
      h('td', timeEl(v.created)),
      h('td', h('span.id', v.by || '—')),
      h('td.muted', v.source || ''));
  }

  async function toggle(tr, name) {
    if (tr.dataset.open === 'true') {
      while (tr.nextSibling && tr.nextSibling.classList.contains('versions')) tr.nextSibling.remove();
      tr.dataset.open = 'false';
      tr.setAttribute('aria-expanded', 'false');
      return;
    }
    let vs;
    try {
      ({versions: vs} = await api('GET', '/v1/policies/' + encodeURIComponent(name) + '/versions'));
    } catch (err) {
      error.textContent = errorText(err);
      error.hidden = false;
      return;
    }
    let at = tr;
    for (const v of vs) {
      const r = row(v, 'versions');
      at.after(r);
      at = r;
    }
    tr.dataset.open = 'true';
    tr.setAttribute('aria-expanded', 'true');
  }

  (async () => {
    let ps;
    try {
      ({policies: ps} = await api('GET', '/v1/policies'));
    } catch (err) {
      error.textContent = 'Cannot load the policies: ' + errorText(err);
      error.hidden = false;
      return;
    }
    for (const p of ps) {
      const tr = row(p);
      tr.tabIndex = 0;
      tr.dataset.policy = p.name;
      tr.setAttribute('aria-expanded', 'false');
      tr.title = 'Show the versions';
      tr.addEventListener('click', () => toggle(tr, p.name));
      body.append(tr);
    }
    panel.hidden = ps.length === 0;
    empty.hidden = ps.length !== 0;
  })();

  return listNav(body, 'tr[data-policy]', (tr) => toggle(tr, tr.dataset.policy));
}
