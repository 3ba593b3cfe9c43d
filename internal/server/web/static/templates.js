// Templates: the tenant's environment templates (latest version of each);
// Enter or a click shows a template's versions.

import {h, clear, timeEl, listNav} from './dom.js';
import {api, can} from './api.js';
import {errorText} from './app.js';

export function templatesPage(main) {
  document.title = 'Templates · airlock';
  const body = h('tbody');
  const table = h('table.list',
    h('thead', h('tr',
      h('th', {scope: 'col'}, 'Name'),
      h('th.num', {scope: 'col'}, 'Version'),
      h('th', {scope: 'col'}, 'Image'),
      h('th', {scope: 'col'}, 'Stored'),
      h('th', {scope: 'col'}, 'By'),
      h('th', {scope: 'col'}, 'Source'))),
    body);
  const panel = h('div.panel', table);
  const error = h('div.error', {role: 'alert', hidden: true});
  const empty = h('div.empty.panel', {hidden: true}, h('strong', 'No templates'),
    'Store one with ', h('code', 'POST /v1/templates/NAME'), ' or ', h('code', 'airlock template create'), '.');
  main.append(h('div.page-head', h('h1', 'Templates')), error, panel, empty);

  if (!can('runs:read')) {
    panel.hidden = true;
    empty.hidden = false;
    clear(empty).append(h('strong', 'This key cannot list templates'), 'It lacks the runs:read scope.');
    return () => {};
  }

  function row(v, cls) {
    const at = v.image.lastIndexOf('@');
    const short = at < 0 ? v.image : v.image.slice(0, at + 1) + v.image.slice(at + 1).replace('sha256:', '').slice(0, 12);
    return h('tr', {class: cls || null},
      h('td', h('strong.mono', v.name)),
      h('td.num', 'v' + v.version),
      h('td', h('span.id', {title: v.image}, short)),
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
      ({versions: vs} = await api('GET', '/v1/templates/' + encodeURIComponent(name) + '/versions'));
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
    let ts;
    try {
      ({templates: ts} = await api('GET', '/v1/templates'));
    } catch (err) {
      error.textContent = 'Cannot load the templates: ' + errorText(err);
      error.hidden = false;
      return;
    }
    for (const t of ts) {
      const tr = row(t);
      tr.tabIndex = 0;
      tr.dataset.template = t.name;
      tr.setAttribute('aria-expanded', 'false');
      tr.title = 'Show the versions';
      tr.addEventListener('click', () => toggle(tr, t.name));
      body.append(tr);
    }
    panel.hidden = ts.length === 0;
    empty.hidden = ts.length !== 0;
  })();

  return listNav(body, 'tr[data-template]', (tr) => toggle(tr, tr.dataset.template));
}
