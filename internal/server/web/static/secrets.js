// Secrets: the tenant's secrets in the host's encrypted store, by name,
// with the hosts each is bound to. A value is only ever typed here and
// sent once (PUT /v1/secrets/NAME); the server never sends one back, and
// the field is cleared as soon as the request is made.

import {h, clear, timeEl, listNav} from './dom.js';
import {api, can, path} from './api.js';
import {toast, errorText} from './app.js';

// nameRule is what a secret's name may be: the rule the server enforces
// (secret.ValidName), said the way a person reads it.
const nameRule = "1 to 128 of letters, digits, '_', '.' and '-', starting with a letter or digit";

// nameProblem says what is wrong with a secret's name, or '' when
// nothing is: secret.ValidName's rule, which the server applies again.
export function nameProblem(name) {
  if (name === '') return 'Give the secret a name: ' + nameRule + '.';
  if (name.length > 128 || !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(name)) {
    return 'A secret\u2019s name is ' + nameRule + '.';
  }
  return '';
}

// hostList splits the hosts field: patterns separated by commas or
// spaces.
function hostList(text) {
  return text.split(/[\s,]+/).filter(Boolean);
}

export function secretsPage(main) {
  document.title = 'Secrets · airlock';
  const body = h('tbody');
  const table = h('table.list.secrets',
    h('thead', h('tr',
      h('th', {scope: 'col'}, 'Name'),
      h('th', {scope: 'col'}, 'Hosts'),
      h('th', {scope: 'col'}, 'Updated'),
      h('th', {scope: 'col', 'aria-label': 'Actions'}))),
    body);
  const panel = h('div.panel', {hidden: true}, table);
  const error = h('div.error', {role: 'alert', hidden: true});
  const empty = h('div.empty.panel', {hidden: true}, h('strong', 'No secrets'),
    'Set one below, or with ', h('code', 'airlock secrets set NAME'), '.');

  // The name is checked here (nameProblem) and said so in words: the
  // browser's own message for a pattern says only that the name does not
  // match.
  const name = h('input', {type: 'text', id: 'secret-name', name: 'name', required: true, maxlength: '128', autocomplete: 'off',
    spellcheck: 'false', placeholder: 'GITHUB_TOKEN', title: 'A secret\u2019s name is ' + nameRule + '.',
    'aria-describedby': 'secret-form-error'});
  // The value field is write-only: a password field the browser does not
  // offer to save, emptied as soon as the value is sent.
  const value = h('input', {type: 'password', id: 'secret-value', name: 'value', required: true, autocomplete: 'new-password',
    spellcheck: 'false', placeholder: 'the value, never shown again'});
  const hosts = h('input', {type: 'text', id: 'secret-hosts', name: 'hosts', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'api.github.com, *.example.com (optional)'});
  const setBtn = h('button.btn.primary', {type: 'submit'}, 'Set secret');
  const formErr = h('div.error', {id: 'secret-form-error', role: 'alert', hidden: true});
  const form = h('form.secret-form.panel', {'aria-labelledby': 'secret-form-title', novalidate: true},
    h('h2', {id: 'secret-form-title'}, 'Set a secret'),
    h('div.fields',
      h('div', h('label', {for: 'secret-name'}, 'Name'), name),
      h('div', h('label', {for: 'secret-value'}, 'Value'), value),
      h('div', h('label', {for: 'secret-hosts'}, 'Hosts'), hosts)),
    h('p.muted.small', 'Setting an existing name replaces its value and hosts. Values are stored encrypted and are never shown.'),
    formErr, h('div.row', setBtn));

  main.append(h('div.page-head', h('h1', 'Secrets')), error, panel, empty, form);

  if (!can('secrets:write')) {
    form.remove();
    empty.hidden = false;
    clear(empty).append(h('strong', 'This key cannot manage secrets'), 'It lacks the secrets:write scope.');
    return () => {};
  }

  function row(s) {
    const del = h('button.btn.danger.small', {type: 'button', dataset: {act: 'delete'}}, 'Delete…');
    const confirm = h('button.btn.danger.small', {type: 'button', dataset: {act: 'confirm'}}, 'Delete ' + s.name);
    const cancel = h('button.btn.ghost.small', {type: 'button'}, 'Cancel');
    const sure = h('span.row', {hidden: true}, confirm, cancel);
    const tr = h('tr', {tabindex: '0', dataset: {secret: s.name}},
      h('td', h('strong.mono', s.name)),
      h('td', s.hosts.length ? s.hosts.map((x) => h('code.host', x)) : h('span.muted', 'any the policy binds')),
      h('td', timeEl(s.updated)),
      h('td.secret-actions', del, sure));
    del.addEventListener('click', () => {
      del.hidden = true;
      sure.hidden = false;
      cancel.focus();
    });
    cancel.addEventListener('click', () => {
      sure.hidden = true;
      del.hidden = false;
      del.focus();
    });
    confirm.addEventListener('click', async () => {
      confirm.disabled = true;
      try {
        await api('DELETE', path`/v1/secrets/${s.name}`);
        toast('Deleted ' + s.name + '.');
        await load();
      } catch (err) {
        error.textContent = 'Cannot delete ' + s.name + ': ' + errorText(err);
        error.hidden = false;
        confirm.disabled = false;
      }
    });
    return tr;
  }

  async function load() {
    let list;
    try {
      ({secrets: list} = await api('GET', '/v1/secrets'));
      error.hidden = true;
    } catch (err) {
      error.textContent = 'Cannot load the secrets: ' + errorText(err);
      error.hidden = false;
      return;
    }
    clear(body);
    for (const s of list) body.append(row(s));
    panel.hidden = list.length === 0;
    empty.hidden = list.length !== 0;
  }

  // The name's field is invalid while its name is (its message is the
  // rule), and says so once the form was tried.
  const checkName = () => {
    const p = nameProblem(name.value.trim());
    name.setCustomValidity(p);
    if (name.hasAttribute('aria-invalid')) name.setAttribute('aria-invalid', String(p !== ''));
    return p;
  };
  name.addEventListener('input', () => {
    checkName();
    if (!formErr.hidden && formErr.dataset.field === 'name' && name.validity.valid) formErr.hidden = true;
  });

  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    formErr.hidden = true;
    const n = name.value.trim();
    const v = value.value;
    // Cleared before the request is even answered: the value lives in
    // this page only as long as it takes to send it.
    value.value = '';
    const bad = checkName();
    if (bad) {
      name.setAttribute('aria-invalid', 'true');
      formErr.textContent = bad;
      formErr.dataset.field = 'name';
      formErr.hidden = false;
      name.focus();
      return;
    }
    if (!v) {
      formErr.textContent = 'Give the secret a value.';
      formErr.dataset.field = 'value';
      formErr.hidden = false;
      value.focus();
      return;
    }
    setBtn.disabled = true;
    try {
      const s = await api('PUT', path`/v1/secrets/${n}`, {value: v, hosts: hostList(hosts.value)});
      toast('Set ' + s.name + '.');
      name.value = '';
      hosts.value = '';
      await load();
    } catch (err) {
      formErr.textContent = errorText(err);
      formErr.hidden = false;
      value.focus();
    } finally {
      setBtn.disabled = false;
    }
  });

  load();
  return listNav(body, 'tr[data-secret]', null);
}
