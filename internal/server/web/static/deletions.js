// Deletions: the audit records of the tenant's deletions (purged runs,
// with who, when and how much went; never what), and, for an admin key,
// deleting the whole tenant after typing its name.

import {h, clear, timeEl, num} from './dom.js';
import {api, can, currentSession, endingSession, path} from './api.js';
import {errorText} from './app.js';

// countsText says how much of each kind of data a deletion took.
export function countsText(counts) {
  const parts = Object.entries(counts || {}).filter(([, n]) => n > 0).map(([k, n]) => num(n) + ' ' + k.replaceAll('_', ' '));
  return parts.length ? parts.join(' · ') : 'nothing stored';
}

// recordView is one audit record, as a definition list.
export function recordView(d) {
  return h('dl.meta.deletion', {dataset: {deletion: d.id}},
    h('div', h('dt', 'Deleted'), h('dd', d.kind + ' ', h('span.mono', d.target))),
    h('div', h('dt', 'By'), h('dd.actor', d.actor)),
    h('div', h('dt', 'When'), h('dd', timeEl(d.created))),
    h('div', h('dt', 'What went'), h('dd.counts', countsText(d.counts))),
    h('div', h('dt', 'Record'), h('dd.mono', '#' + d.id)));
}

// typedConfirm is a confirm step: the button acts only once the field
// holds exactly want.
export function typedConfirm(label, want, what, act) {
  const input = h('input', {type: 'text', id: 'confirm-' + label.toLowerCase(), autocomplete: 'off', spellcheck: 'false',
    'aria-label': 'Type ' + want + ' to confirm'});
  const go = h('button.btn.danger', {type: 'submit', disabled: true}, label);
  const err = h('div.error', {role: 'alert', hidden: true});
  input.addEventListener('input', () => { go.disabled = input.value !== want; });
  const form = h('form.confirm-box', {onsubmit: async (e) => {
    e.preventDefault();
    if (input.value !== want) return;
    go.disabled = true;
    err.hidden = true;
    try {
      await act();
    } catch (x) {
      err.textContent = errorText(x);
      err.hidden = false;
      go.disabled = false;
    }
  }},
  h('p', what),
  h('label', {for: input.id}, 'Type ', h('code', want), ' to confirm:'),
  h('div.row', input, go), err);
  return {form, input};
}

export function deletionsPage(main) {
  document.title = 'Deletions · airlock';
  const list = h('div');
  const error = h('div.error', {role: 'alert', hidden: true});
  const empty = h('div.empty', {hidden: true}, h('strong', 'No deletions'),
    'Purging a run (on its page) leaves a record here: who, when, and how much went. The record outlives what it names.');
  main.append(h('div.page-head', h('h1', 'Deletions')), error, list, empty);
  if (can('admin')) {
    const tenant = currentSession().tenant;
    const zone = h('section.card.danger-zone', h('h2', 'Delete this tenant'));
    const start = h('button.btn.danger', {type: 'button', id: 'tenant-delete', onclick: () => {
      start.hidden = true;
      const force = h('input', {type: 'checkbox', id: 'tenant-delete-force'});
      const {form, input} = typedConfirm('Delete', tenant,
        'This deletes the tenant ' + tenant + ' and everything airlock keeps of it: runs, sandbox records, API keys (this one too: you are logged out), ' +
        'policies, templates, secrets, credits and their blobs. Only the record of the deletion stays. Runs still going must be cancelled first, ' +
        'unless you force it.',
        async () => {
          const url = path`/v1/tenants/${tenant}` + (force.checked ? '?force=true' : '');
          const d = await endingSession(() => api('DELETE', url));
          clear(main).append(h('div.panel.deleted', h('h1', 'Tenant deleted'), recordView(d)));
        });
      // Force: the tenant's keys are refused at once, its runs cancelled
      // and its sandboxes destroyed, then it is deleted.
      form.insertBefore(h('label.force', {for: force.id}, force,
        ' Force: cancel its runs and destroy its sandboxes first (its keys stop working at once)'), form.querySelector('.row'));
      zone.append(form);
      input.focus();
    }}, 'Delete tenant…');
    zone.append(h('p.muted', 'Everything of ' + tenant + ' goes, at once and for good.'), start);
    main.append(zone);
  }
  (async () => {
    let recs;
    try {
      ({deletions: recs} = await api('GET', '/v1/deletions'));
    } catch (err) {
      error.textContent = 'Cannot load the deletions: ' + errorText(err);
      error.hidden = false;
      return;
    }
    for (const d of recs) list.append(h('section.card', recordView(d)));
    empty.hidden = recs.length !== 0;
  })();
  return () => {};
}
