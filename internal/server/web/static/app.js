// The airlock web UI: a page per path under /ui/, rendered here from the
// JSON API. app.js routes, keeps the top bar, and owns the global keys.

import {h, clear, isTyping, every} from './dom.js';
import {api, loadSession, login, logout, currentSession, whenLoggedOut, can, APIError} from './api.js';
import {runsPage} from './runs.js';
import {runPage} from './run.js';
import {approvalsPage} from './approvals.js';
import {creditsPage} from './credits.js';
import {policiesPage} from './policies.js';
import {templatesPage} from './templates.js';
import {secretsPage} from './secrets.js';
import {sandboxesPage} from './sandboxes.js';
import {deletionsPage} from './deletions.js';

const main = document.getElementById('main');
const top = document.getElementById('top');
let cleanup = () => {};
let stopBadge = () => {};

// routes maps a path to its page: a function (main, params, url) that
// renders into main and returns the function that stops its timers and
// streams.
const routes = [
  [/^\/ui\/?$/, 'runs', runsPage],
  [/^\/ui\/runs\/?$/, 'runs', runsPage],
  [/^\/ui\/runs\/(run_[A-Za-z0-9_-]+)$/, 'runs', runPage],
  [/^\/ui\/approvals\/?$/, 'approvals', approvalsPage],
  [/^\/ui\/credits\/?$/, 'credits', creditsPage],
  [/^\/ui\/policies\/?$/, 'policies', policiesPage],
  [/^\/ui\/templates\/?$/, 'templates', templatesPage],
  [/^\/ui\/secrets\/?$/, 'secrets', secretsPage],
  [/^\/ui\/sandboxes\/?$/, 'sandboxes', sandboxesPage],
  [/^\/ui\/deletions\/?$/, 'deletions', deletionsPage],
];

// navigate shows the page of url (a path under /ui/), adding it to the
// history unless replace.
export function navigate(url, replace) {
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  render();
}

// toast shows a short message at the bottom of the page.
let toastTimer = null;
export function toast(msg, bad) {
  const el = document.getElementById('toast');
  el.textContent = msg;
  el.className = 'toast' + (bad ? ' bad' : '');
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, bad ? 6000 : 3000);
}

// errorText is an error as a person reads it, with the request id that
// the server's log has.
export function errorText(err) {
  if (err instanceof APIError) {
    return err.message + (err.requestID ? ' (request ' + err.requestID + ')' : '');
  }
  return String(err && err.message ? err.message : err);
}

async function render() {
  cleanup();
  cleanup = () => {};
  const url = new URL(location.href);
  if (!currentSession()) {
    showLogin();
    return;
  }
  if (url.pathname === '/ui/login') {
    navigate('/ui/', true);
    return;
  }
  top.hidden = false;
  let page = null;
  let params = [];
  let name = '';
  for (const [re, n, p] of routes) {
    const m = url.pathname.match(re);
    if (m) {
      page = p;
      params = m.slice(1);
      name = n;
      break;
    }
  }
  for (const a of document.querySelectorAll('.nav a')) {
    if (a.dataset.page === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  clear(main);
  if (!page) {
    main.append(h('div.empty', h('strong', 'No such page'), h('a', {href: '/ui/'}, 'Go to the runs')));
    return;
  }
  cleanup = page(main, params, url) || (() => {});
}

function showLogin() {
  top.hidden = true;
  stopBadge();
  document.title = 'Log in · airlock';
  clear(main);
  const err = h('div.error', {role: 'alert', hidden: true});
  const input = h('input', {type: 'password', id: 'key', name: 'key', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'airlock_…', required: true, 'aria-describedby': 'key-hint'});
  const button = h('button.btn.primary', {type: 'submit'}, 'Log in');
  const form = h('form', {
    onsubmit: async (e) => {
      e.preventDefault();
      err.hidden = true;
      button.disabled = true;
      try {
        await login(input.value.trim());
        input.value = '';
        startSession();
        const back = new URL(location.href).pathname;
        navigate(back === '/ui/login' ? '/ui/' : back + location.search, true);
      } catch (x) {
        err.textContent = errorText(x);
        err.hidden = false;
        input.select();
      } finally {
        button.disabled = false;
      }
    },
  }, h('div', h('label', {for: 'key'}, 'API key'), input), err, button);
  main.append(h('section.login', {'aria-labelledby': 'login-title'},
    h('div.brand', h('span.brand-mark', {'aria-hidden': 'true'}), 'airlock'),
    h('h1', {id: 'login-title'}, 'Log in'),
    h('p.muted', 'Use an API key of your tenant. Its scopes decide what you can see and do here.'),
    form,
    h('p.hint', {id: 'key-hint'},
      'The key is exchanged for a session cookie and is not kept in the browser. ',
      'Make one with ', h('code', 'airlock keys create --tenant NAME --name me'), '.')));
  input.focus();
}

// startSession fills the top bar and starts the approvals badge.
function startSession() {
  const s = currentSession();
  document.getElementById('who').textContent = s.tenant + ' · ' + s.key_id;
  document.getElementById('who').title = 'Scopes: ' + s.scopes.join(', ');
  stopBadge();
  const badge = document.getElementById('approval-count');
  if (!can('approvals') && !can('runs:read')) {
    badge.hidden = true;
    return;
  }
  stopBadge = every(5000, async () => {
    if (!currentSession()) return;
    const {approvals} = await api('GET', '/v1/approvals');
    badge.textContent = approvals.length;
    badge.hidden = approvals.length === 0;
    badge.setAttribute('aria-label', approvals.length + ' pending');
  });
}

// refreshBadge updates the approvals badge now (after a decision).
export function refreshBadge() {
  if (!currentSession()) return;
  api('GET', '/v1/approvals').then(({approvals}) => {
    const badge = document.getElementById('approval-count');
    badge.textContent = approvals.length;
    badge.hidden = approvals.length === 0;
  }).catch(() => {});
}

// Links under /ui/ open in this page (no reload); downloads and other
// links behave as links do.
document.addEventListener('click', (e) => {
  const a = e.target.closest('a');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  if (a.hasAttribute('download') || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/ui/') || url.pathname.startsWith('/ui/static/')) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
  main.focus({preventScroll: true});
  window.scrollTo(0, 0);
});

window.addEventListener('popstate', render);

// Global keys: ? help, g then r/a/c/p/s to go to a page.
let pendingG = false;
document.addEventListener('keydown', (e) => {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || isTyping(e.target) || !currentSession()) return;
  const help = document.getElementById('help');
  if (e.key === '?') {
    e.preventDefault();
    if (!help.open) help.showModal();
    return;
  }
  if (pendingG) {
    pendingG = false;
    const to = {r: '/ui/', a: '/ui/approvals', c: '/ui/credits', p: '/ui/policies', s: '/ui/secrets'}[e.key];
    if (to) {
      e.preventDefault();
      navigate(to);
    }
    return;
  }
  if (e.key === 'g') {
    pendingG = true;
    setTimeout(() => { pendingG = false; }, 1200);
  }
});

document.getElementById('help-button').addEventListener('click', () => document.getElementById('help').showModal());
document.getElementById('logout').addEventListener('click', async () => {
  cleanup();
  cleanup = () => {};
  await logout().catch(() => {});
  navigate('/ui/login', true);
});

whenLoggedOut(() => {
  cleanup();
  cleanup = () => {};
  toast('Your session has ended. Log in again.', true);
  showLogin();
});

(async () => {
  try {
    await loadSession();
  } catch (err) {
    clear(main).append(h('div.error', 'The server did not answer: ' + errorText(err)));
    return;
  }
  if (currentSession()) startSession();
  render();
})();
