// A list of a tenant's named, versioned documents (stored policies,
// templates): the latest version of each; Enter or a click on one shows its
// versions. The policies and templates pages differ only in their words,
// their API path and their third column.

import {h, clear, timeEl, listNav} from './dom.js';
import {api, can} from './api.js';
import {errorText} from './app.js';

// versionedPage fills main. o: title (the page's heading), noun (plural,
// for messages), path (the API's collection, like /v1/policies), key (the
// list's field in its answer and, singular, rows' data attribute: attr),
// column (the third column's heading) and cell (its cell of a version),
// empty (the nodes after "No stored …" that say how to store one).
export function versionedPage(main, o) {
  document.title = o.title + ' · airlock';
  const body = h('tbody');
  const table = h('table.list',
    h('thead', h('tr',
      h('th', {scope: 'col'}, 'Name'),
      h('th.num', {scope: 'col'}, 'Version'),
      h('th', {scope: 'col'}, o.column),
      h('th', {scope: 'col'}, 'Stored'),
      h('th', {scope: 'col'}, 'By'),
      h('th', {scope: 'col'}, 'Source'))),
    body);
  const panel = h('div.panel', table);
  const error = h('div.error', {role: 'alert', hidden: true});
  const empty = h('div.empty.panel', {hidden: true}, h('strong', o.emptyTitle), ...o.empty);
  main.append(h('div.page-head', h('h1', o.title)), error, panel, empty);

  if (!can('runs:read')) {
    panel.hidden = true;
    empty.hidden = false;
    clear(empty).append(h('strong', 'This key cannot list ' + o.noun), 'It lacks the runs:read scope.');
    return () => {};
  }

  function row(v, cls) {
    return h('tr', {class: cls || null},
      h('td', h('strong.mono', v.name)),
      h('td.num', 'v' + v.version),
      h('td', o.cell(v)),
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
      ({versions: vs} = await api('GET', o.path + '/' + encodeURIComponent(name) + '/versions'));
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
    let list;
    try {
      ({[o.key]: list} = await api('GET', o.path));
    } catch (err) {
      error.textContent = 'Cannot load the ' + o.noun + ': ' + errorText(err);
      error.hidden = false;
      return;
    }
    for (const v of list) {
      const tr = row(v);
      tr.tabIndex = 0;
      tr.dataset[o.attr] = v.name;
      tr.setAttribute('aria-expanded', 'false');
      tr.title = 'Show the versions';
      tr.addEventListener('click', () => toggle(tr, v.name));
      body.append(tr);
    }
    panel.hidden = list.length === 0;
    empty.hidden = list.length !== 0;
  })();

  return listNav(body, 'tr[data-' + o.attr + ']', (tr) => toggle(tr, tr.dataset[o.attr]));
}
