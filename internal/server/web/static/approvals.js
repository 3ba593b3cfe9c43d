// The approvals inbox: every pending approval of the tenant's runs, with
// approve and deny (deny asks for a reason: the model is told). Polled;
// j/k move, a approves, d denies the selected one.

import {h, timeEl, listNav, every, isTyping} from './dom.js';
import {actionView} from './tools.js';
import {api, can, path} from './api.js';
import {toast, errorText, refreshBadge} from './app.js';

// decisionControls are the approve and deny buttons of approval id, with
// the deny form; done(decision) runs after the server took a decision.
export function decisionControls(id, done) {
  const approveBtn = h('button.btn.approve.small', {type: 'button', dataset: {act: 'approve'}}, 'Approve');
  const denyBtn = h('button.btn.deny.small', {type: 'button', dataset: {act: 'deny'}}, 'Deny…');
  const reason = h('textarea', {name: 'reason', required: true, maxlength: '1024',
    placeholder: 'Why not? The model is told. Enter denies.', 'aria-label': 'Reason for denying'});
  const confirmDeny = h('button.btn.danger.small', {type: 'submit'}, 'Deny');
  const cancelDeny = h('button.btn.ghost.small', {type: 'button'}, 'Cancel');
  const err = h('div.error', {role: 'alert', hidden: true});
  const buttons = h('div.row', approveBtn, denyBtn);
  const form = h('form.deny-form', {hidden: true}, reason, h('div.row', confirmDeny, cancelDeny));
  const box = h('div.decide', buttons, form, err);

  const send = async (decision, body) => {
    err.hidden = true;
    for (const b of [approveBtn, denyBtn, confirmDeny]) b.disabled = true;
    try {
      await api('POST', path`/v1/approvals/${id}/` + decision, body);
      toast(decision === 'approve' ? 'Approved.' : 'Denied.');
      refreshBadge();
      done(decision === 'approve' ? 'approved' : 'denied');
    } catch (x) {
      err.textContent = errorText(x);
      err.hidden = false;
      for (const b of [approveBtn, denyBtn, confirmDeny]) b.disabled = false;
    }
  };
  approveBtn.addEventListener('click', () => send('approve', {}));
  denyBtn.addEventListener('click', () => {
    buttons.hidden = true;
    form.hidden = false;
    reason.focus();
  });
  cancelDeny.addEventListener('click', () => {
    form.hidden = true;
    buttons.hidden = false;
    denyBtn.focus();
  });
  // A reason is one line (the server takes no line breaks): Enter denies,
  // as in any one-line form, and a pasted line break becomes a space. The
  // box wraps, so that a long reason can be read back. An Enter that
  // finishes composing text (an input method) is left to it.
  reason.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') {
      e.preventDefault();
      cancelDeny.click();
    } else if (e.key === 'Enter' && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  reason.addEventListener('input', () => {
    if (/[\r\n]/.test(reason.value)) reason.value = reason.value.replace(/\r\n?|\n/g, ' ');
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const r = reason.value.trim();
    if (!r) {
      reason.focus();
      return;
    }
    send('deny', {reason: r});
  });
  if (!can('approvals')) {
    buttons.hidden = true;
    box.append(h('p.muted.small', 'This key lacks the approvals scope: it can see, not decide.'));
  }
  return box;
}

export function approvalsPage(main) {
  document.title = 'Approvals · airlock';
  const live = h('span.live.on', 'live');
  const list = h('div.inbox', {role: 'list'});
  const empty = h('div.empty.panel', {hidden: true}, h('strong', 'Nothing waits for you'),
    'Actions that a run\u2019s policy asks about show up here.');
  const error = h('div.error', {role: 'alert', hidden: true});
  main.append(h('div.page-head', h('h1', 'Approvals'), live), error, list, empty);
  // Cards stay while their decision is being made, even if a poll no
  // longer lists them.
  const cards = new Map();

  function card(a) {
    const what = a.destination
      ? h('div', h('span.muted', 'Network: '), h('code', a.destination), a.sandbox ? h('span.muted', ' from sandbox ' + a.sandbox) : null)
      : actionView(a.action);
    const el = h('article.approval', {tabindex: '0', role: 'listitem', dataset: {id: a.id}, 'aria-label': 'Approval for ' + a.task},
      h('div.approval-top',
        h('a.task', {href: '/ui/runs/' + a.run_id}, a.task),
        h('span.id', 'step ' + a.step),
        h('span.when', 'asked ', timeEl(a.requested), a.expires ? [' · expires ', timeEl(a.expires)] : null)),
      what,
      a.reason ? h('div.policy', h('span.badge.plain.d-ask', 'ask'), h('span', a.reason)) : null,
      decisionControls(a.id, () => {
        cards.delete(a.id);
        el.remove();
        showEmpty();
      }));
    return el;
  }

  function showEmpty() {
    empty.hidden = list.children.length > 0;
  }

  async function refresh() {
    let as;
    try {
      ({approvals: as} = await api('GET', '/v1/approvals'));
      error.hidden = true;
      live.className = 'live on';
    } catch (err) {
      error.textContent = 'Cannot load the approvals: ' + errorText(err);
      error.hidden = false;
      live.className = 'live off';
      return;
    }
    const ids = new Set(as.map((a) => a.id));
    for (const [id, el] of cards) {
      // Keep a card whose deny form is open or busy.
      const busy = el.querySelector('form:not([hidden])') || el.contains(document.activeElement);
      if (!ids.has(id) && !busy) {
        el.remove();
        cards.delete(id);
      }
    }
    for (const a of as) {
      if (!cards.has(a.id)) {
        const el = card(a);
        cards.set(a.id, el);
        list.append(el);
      }
    }
    showEmpty();
  }

  const stopNav = listNav(list, 'article.approval', (el) => {
    const a = el.querySelector('a.task');
    if (a) a.click();
  });
  const onKey = (e) => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || isTyping(e.target)) return;
    const el = document.activeElement && document.activeElement.closest && document.activeElement.closest('article.approval');
    if (!el || !list.contains(el)) return;
    const act = {a: 'approve', d: 'deny'}[e.key];
    if (!act) return;
    const b = el.querySelector(`button[data-act="${act}"]`);
    if (b && !b.disabled && !b.closest('[hidden]')) {
      e.preventDefault();
      b.click();
    }
  };
  document.addEventListener('keydown', onKey);
  const stopPoll = every(2000, refresh);
  return () => {
    stopNav();
    stopPoll();
    document.removeEventListener('keydown', onKey);
  };
}
