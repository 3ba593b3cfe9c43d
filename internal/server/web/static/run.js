// A run's page: its header (status, model, usage), its timeline drawn from
// the event log as it streams (model turns, tool calls with their policy
// decision, approval and output, egress and LLM calls, verification,
// artifacts), and its patch as a diff. The stream is an EventSource on the
// API's SSE endpoint: it resumes by itself after a drop, sending
// Last-Event-ID, so the server sends each event once.

import {h, clear, statusBadge, decisionBadge, finalStatuses, bytes, duration, clock, credits, num, clip, timeEl, listNav, every} from './dom.js';
import {api, text, can} from './api.js';
import {toast, errorText, refreshBadge} from './app.js';
import {renderDiff} from './diff.js';
import {decisionControls} from './approvals.js';
import {argsView, prose, actionView} from './tools.js';
import {recordView, typedConfirm} from './deletions.js';

// eventTypes are the event names of the stream (a Go test checks this
// list against the event package's).
export const eventTypes = [
  'run.created', 'run.started', 'run.paused', 'run.resumed', 'run.cancelled', 'run.completed', 'run.failed', 'run.forked',
  'policy.resolved', 'sandbox.provisioned', 'sandbox.lost', 'sandbox.destroyed',
  'model.request', 'model.response', 'tool.proposed', 'policy.decision', 'tool.started', 'tool.finished', 'tool.uncertain',
  'egress.decision', 'artifact.stored', 'snapshot.taken', 'workspace.fetched', 'retry', 'verification.result', 'budget.exhausted',
  'approval.requested', 'approval.decided', 'llm.call', 'sandbox.created', 'sandbox.op', 'sandbox.usage',
  'sandbox.event', 'sandbox.events_dropped',
];

// Bounds of what is drawn: the page stays fast on a long run, and the
// downloads hold the rest.
const maxOutput = 64 * 1024;
const maxProse = 20000;
const maxArgs = 8000;
const maxPatch = 1 << 20;

// The events that change what the header shows.
const headerEvents = new Set(['run.started', 'run.paused', 'run.resumed', 'run.cancelled', 'run.completed', 'run.failed',
  'model.response', 'approval.requested', 'approval.decided', 'verification.result', 'llm.call']);

// artifactURL is the download URL of an artifact (each path segment
// escaped).
export function artifactURL(runID, name) {
  return '/v1/runs/' + encodeURIComponent(runID) + '/artifacts/' + name.split('/').map(encodeURIComponent).join('/');
}

// sandboxEventView is what a sandbox event says, as elements of text.
function sandboxEventView(p) {
  const f = (x) => String(Math.round(x * 1000) / 1000);
  switch (p.kind) {
    case 'progress': return [p.pct !== undefined ? h('strong', f(p.pct) + '%') : null, h('span', clip(p.message || '', 300)[0])];
    case 'log': return [h('span.muted', p.level || 'info'), h('span', clip(p.message || '', 300)[0])];
    case 'metric': return [h('span.mono', p.name), h('span', '= ' + f(p.value) + (p.unit || ''))];
    case 'test': return [h('span.mono', p.name), decisionBadge(p.status === 'fail' ? 'deny' : 'allow', p.status),
      p.duration_s !== undefined ? h('span.muted', f(p.duration_s) + ' s') : null];
    case 'artifact': return [h('span.mono', p.path), p.artifact ? h('span.muted', '→ ' + p.artifact) : null,
      p.refused ? h('span', '— refused: ' + p.refused) : null];
  }
  return [h('span.mono', clip(JSON.stringify(p.data), 300)[0])];
}

export function runPage(main, [id]) {
  document.title = id + ' · airlock';
  const runURL = '/v1/runs/' + encodeURIComponent(id);
  let run = null;
  let es = null;
  let ended = false;
  let lastSeq = 0;
  let step = 0;
  let llm = {calls: 0, cost: 0};
  let refreshTimer = null;
  let patchShown = '';
  // calls are the tool call cards by call id; asks the approval boxes by
  // approval id.
  const calls = new Map();
  const asks = new Map();

  const title = h('h1', {id: 'run-title'}, 'Loading…');
  const badge = h('span');
  const actions = h('div.actions');
  const meta = h('dl.meta');
  const tl = h('ol.timeline', {'aria-labelledby': 'timeline-title'});
  const foot = h('div.tl-foot', {role: 'status'});
  const outcome = h('section.card', {hidden: true});
  const verification = h('section.card', {hidden: true});
  const artifactList = h('ul.artifacts');
  const artifacts = h('section.card', h('h2', 'Artifacts'), artifactList);
  const patch = h('section.patch', {hidden: true, 'aria-labelledby': 'patch-title'});
  const purgeBox = h('section.card.danger-zone', {hidden: true, 'aria-label': 'Purge the run'});
  // retained says, of a run whose payloads retention deleted, how many
  // and when (as `airlock runs show` does): its steps, usage and summary
  // went with them.
  const retained = h('div.card.retained', {hidden: true, role: 'status', id: 'retained'});
  const purged = h('div.panel.deleted', {hidden: true}, h('h1', 'Run purged'));
  const missing = h('div.empty.panel', {hidden: true}, h('strong', 'No such run'),
    'It does not exist, or belongs to another tenant. ', h('a', {href: '/ui/'}, 'Back to the runs'));
  const page = h('div',
    h('a.back', {href: '/ui/'}, '← Runs'),
    h('div.run-title', title, badge, actions),
    purgeBox,
    retained,
    meta,
    h('div.run-body',
      h('section', {'aria-label': 'Timeline'},
        h('h2.section-title', {id: 'timeline-title'}, 'Timeline'),
        tl, foot),
      h('aside.side', outcome, verification, artifacts)),
    patch);
  main.append(page, missing, purged);
  artifactList.append(h('li.muted.small', 'None yet.'));

  // --- header ---

  function metaItem(label, value, title) {
    return h('div', h('dt', label), h('dd', {title: title || (typeof value === 'string' ? value : null)}, value));
  }

  function drawHeader() {
    if (!run) return;
    // A retained run's task went with its payloads: its id stands in.
    const name = run.task || run.id;
    title.textContent = name;
    document.title = name.slice(0, 60) + ' · airlock';
    clear(badge).append(statusBadge(run.status));
    const end = run.finished ? new Date(run.finished) : (finalStatuses.includes(run.status) ? new Date(run.updated) : new Date());
    const u = run.usage || {};
    clear(meta).append(...[
      metaItem('Run', h('span.mono', run.id), run.id),
      metaItem('Model', run.model || '—'),
      metaItem('Policy', run.policy_hash ? h('span.mono', run.policy_hash.slice(0, 12)) : 'default', run.policy_hash),
      metaItem('Created', timeEl(run.created)),
      metaItem('Duration', duration(end - new Date(run.created))),
      metaItem('Steps', run.payloads_deleted ? 'deleted' : num(run.steps)),
      metaItem('Tokens', run.payloads_deleted ? 'deleted' : num(u.input_tokens) + ' in · ' + num(u.output_tokens) + ' out'),
      llm.calls ? metaItem('LLM gateway', llm.calls + ' calls · ' + credits(llm.cost) + ' cr') : null,
      u.cost_micro_usd ? metaItem('Model cost', '$' + (u.cost_micro_usd / 1e6).toFixed(4)) : null,
      metaItem('Events', num(run.events)),
      run.parent_run_id ? metaItem('Forked from', h('a', {href: '/ui/runs/' + run.parent_run_id}, run.parent_run_id)) : null,
    ].filter(Boolean));
    if (run.metadata) {
      for (const [k, v] of Object.entries(run.metadata)) meta.append(metaItem(k, v));
    }
    drawActions();
    drawOutcome();
    drawRetained();
  }

  function drawRetained() {
    const d = run.payloads_deleted;
    retained.hidden = !d;
    if (!d) return;
    clear(retained).append(h('strong', num(d.count) + ' payloads deleted by retention on ' + String(d.at).slice(0, 10)),
      h('span.muted', ' (UTC). The steps, usage and summary went with them; the event log still verifies, and the run cannot be resumed or forked.'));
  }

  function drawActions() {
    const ended = run && can('runs:write') && finalStatuses.includes(run.status);
    // An ended run's page redraws as its artifacts and events arrive: the
    // Purge button stays the same node, so a click on it is never lost to
    // a redraw.
    if (ended && purgeBox.hidden && actions.querySelector('#purge')) return;
    clear(actions);
    if (!run || !can('runs:write')) return;
    if (ended) {
      if (!purgeBox.hidden) return;
      actions.append(h('button.btn.small.danger', {type: 'button', id: 'purge', onclick: askPurge}, 'Purge…'));
      return;
    }
    const act = (label, verb, cls, ask) => h('button.btn.small', {type: 'button', class: cls, onclick: async (e) => {
      if (ask && !window.confirm(ask)) return;
      e.target.disabled = true;
      try {
        run = await api('POST', runURL + '/' + verb, {});
        toast(label + ': done.');
        refreshRun();
      } catch (x) {
        toast(errorText(x), true);
      } finally {
        e.target.disabled = false;
      }
    }}, label);
    if (run.status === 'paused') actions.append(act('Resume', 'resume', ''));
    else actions.append(act('Pause', 'pause', ''));
    actions.append(act('Cancel', 'cancel', 'danger', 'Cancel this run? Nothing more of it runs.'));
  }

  // askPurge shows the purge's confirm step: the run's id, typed. A
  // purged run's page shows the record of its deletion instead.
  function askPurge() {
    clear(actions);
    const {form, input} = typedConfirm('Purge', run.id,
      'Purging deletes this run and every run forked from it: the event log, artifacts, labels and the blobs nothing else uses. ' +
      'The credits it spent stay spent. Only the record of the deletion stays.',
      async () => {
        const d = await api('DELETE', runURL);
        stop();
        page.hidden = true;
        purged.append(recordView(d), h('p', h('a', {href: '/ui/deletions'}, 'All deletions'), ' · ', h('a', {href: '/ui/'}, 'Back to the runs')));
        purged.hidden = false;
        toast('Purged ' + run.id + '.');
      });
    form.append(h('button.btn.small', {type: 'button', onclick: () => {
      purgeBox.hidden = true;
      drawActions();
    }}, 'Keep it'));
    clear(purgeBox).append(form);
    purgeBox.hidden = false;
    input.focus();
  }

  function drawOutcome() {
    if (!run || !finalStatuses.includes(run.status)) {
      outcome.hidden = true;
      return;
    }
    outcome.hidden = false;
    clear(outcome).append(h('h2', 'Outcome ', statusBadge(run.status)));
    if (run.summary) outcome.append(h('p.prose', clip(run.summary, maxProse)[0]));
    if (run.reason) outcome.append(h('p.muted', run.reason));
  }

  function drawVerification(v) {
    if (!v) return;
    verification.hidden = false;
    clear(verification).append(h('h2', 'Verification ', decisionBadge(v.passed ? 'allow' : 'deny', v.passed ? 'passed' : 'failed')),
      checkList(v.checks || []));
  }

  async function refreshRun() {
    try {
      run = await api('GET', runURL);
    } catch (err) {
      if (err.status === 404) {
        page.hidden = true;
        missing.hidden = false;
        stop();
        return;
      }
      foot.textContent = 'Cannot load the run: ' + errorText(err);
      return;
    }
    drawHeader();
    drawVerification(run.verification);
    if (finalStatuses.includes(run.status)) loadArtifacts();
  }

  function soon() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(refreshRun, 250);
  }

  // --- artifacts and the patch ---

  async function loadArtifacts() {
    let list;
    try {
      ({artifacts: list} = await api('GET', runURL + '/artifacts'));
    } catch {
      return;
    }
    clear(artifactList);
    if (!list.length) artifactList.append(h('li.muted.small', 'None yet.'));
    for (const a of list) {
      artifactList.append(h('li', h('a', {href: artifactURL(id, a.name), download: a.name.split('/').pop(), title: a.digest}, a.name),
        h('span.size', bytes(a.size))));
    }
    const p = list.find((a) => a.name === 'patch.diff');
    if (p && p.digest !== patchShown) {
      patchShown = p.digest;
      showPatch(p);
    }
  }

  async function showPatch(a) {
    patch.hidden = false;
    clear(patch).append(h('div.section-title', h('h2', {id: 'patch-title'}, 'Changes'),
      h('a.btn.small', {href: artifactURL(id, a.name), download: 'patch.diff', id: 'patch-download'}, 'Download patch.diff'),
      h('span.muted.small', bytes(a.size))));
    try {
      const t = await text(artifactURL(id, a.name), maxPatch);
      patch.append(renderDiff(t.text, t.cut));
    } catch (err) {
      patch.append(h('div.error', 'Cannot load the patch: ' + errorText(err)));
    }
  }

  // --- the timeline ---

  // follow says the page was at its bottom before an event was drawn, so
  // it scrolls on with the run.
  function atBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }

  function entry(kind, ev, ...content) {
    const li = h('li.ev', {class: 'k-' + kind, tabindex: '-1', dataset: {seq: ev.seq, type: ev.type}}, ...content);
    tl.append(li);
    return li;
  }

  function when(ev) {
    return h('span.ev-time', {title: new Date(ev.time).toLocaleString() + ' · event ' + ev.seq}, clock(ev.time));
  }

  function line(kind, ev, ...content) {
    return entry(kind, ev, h('div.ev-line', {class: kind === 'quiet' ? 'quiet' : ''}, ...content, when(ev)));
  }

  function card(kind, ev, head, ...body) {
    const bodyEl = h('div.ev-body', ...body);
    const box = h('div.ev-box', h('div.ev-head', ...head, when(ev)), bodyEl);
    const li = entry(kind, ev, box);
    return {li, box, body: bodyEl};
  }

  function checkList(checks) {
    return h('ul.checks', checks.map((c) => h('li',
      h('span.mark', {class: c.passed ? 'pass' : 'fail', 'aria-label': c.passed ? 'passed' : 'failed'}, c.passed ? '✓' : '✗'),
      h('span', h('span.mono', c.name), c.exit_code !== undefined && c.exit_code !== null ? h('span.muted', ' · exit ' + c.exit_code) : null),
      c.detail ? h('span.detail', clip(c.detail, 2000)[0]) : null)));
  }

  // callCard returns the card of a tool call, made on first mention.
  function callCard(ev, p) {
    let c = calls.get(p.call_id);
    if (c) return c;
    const name = h('span.ev-title.mono', p.tool || 'tool');
    const decision = h('span');
    const state = h('span');
    const {li, box, body} = card('tool', ev, [name, decision, state]);
    c = {li, box, body, decision, state, args: h('div'), policy: h('div'), approval: h('div'), result: h('div'), tool: p.tool};
    body.append(c.args, c.policy, c.approval, c.result);
    calls.set(p.call_id, c);
    return c;
  }

  // askBox draws an approval request into parent and keeps it by id, to
  // be updated when it is decided.
  function askBox(parent, ev, p) {
    const box = h('div.approval-box');
    box.append(h('div.row', h('strong', 'Approval requested'), p.reason ? h('span', '— ' + p.reason) : null));
    const expires = p.expires ? h('div.muted.small', 'Expires ', timeEl(p.expires)) : null;
    const controls = decisionControls(p.approval_id, () => {});
    box.append(...[expires, controls].filter(Boolean));
    parent.append(box);
    asks.set(p.approval_id, {box, controls, expires});
  }

  function decided(ev, p) {
    const a = asks.get(p.approval_id);
    const text = [decisionBadge(p.decision), p.by ? h('span.muted', ' by ' + p.by) : null, p.reason ? h('span', ' — ' + p.reason) : null];
    if (!a) {
      line(p.decision === 'approved' ? 'ok' : 'warn', ev, h('strong', 'Approval'), ...text);
      return;
    }
    a.controls.remove();
    if (a.expires) a.expires.remove();
    a.box.classList.add('decided');
    a.box.append(h('div.row', ...text));
  }

  const renderers = {
    'run.created': (ev, p) => line('quiet', ev, h('strong', 'Run created'), h('span.muted', '· ' + (p.model || '')),
      p.parent_run_id ? h('span', '· forked from ', h('a', {href: '/ui/runs/' + p.parent_run_id}, p.parent_run_id), ' at event ' + p.parent_seq) : null),
    'run.started': (ev, p) => line('quiet', ev, 'Started', p.host ? h('span.muted', 'on ' + p.host) : null),
    'run.paused': (ev, p) => line('warn', ev, h('strong', 'Paused'), p.reason ? h('span', '— ' + p.reason) : null),
    'run.resumed': (ev, p) => line('quiet', ev, 'Resumed', h('span.muted', '(' + p.reason + ')')),
    'run.cancelled': (ev, p) => line('bad', ev, h('strong', 'Cancelled'), p.by ? h('span.muted', 'by ' + p.by) : null,
      p.reason ? h('span', '— ' + p.reason) : null),
    'run.completed': (ev, p) => card('ok', ev, [h('span.ev-title', 'Completed'), statusBadge('completed')],
      p.summary ? prose(p.summary) : null,
      h('div.muted.small', num(p.steps) + ' steps · ' + num(p.usage && p.usage.input_tokens) + ' tokens in · ' + num(p.usage && p.usage.output_tokens) + ' out')),
    'run.failed': (ev, p) => card('bad', ev, [h('span.ev-title', p.status === 'failed_verification' ? 'Failed verification' : 'Failed'), statusBadge(p.status || 'failed')],
      h('p', p.reason), p.error ? h('pre.cmd', clip(p.error, maxArgs)[0]) : null),
    'run.forked': (ev, p) => line('quiet', ev, 'Forked after step ' + p.at_step + ' into', h('a', {href: '/ui/runs/' + p.child_run_id}, p.child_run_id)),
    'policy.resolved': (ev, p) => line('quiet', ev, 'Policy', h('span.mono', (p.policy_hash || '').slice(0, 12) || 'default'),
      p.source ? h('span.muted', '· ' + p.source) : null, p.version ? h('span.muted', '· ' + p.version) : null),
    'sandbox.provisioned': (ev, p) => line('quiet', ev, 'Sandbox', h('span.mono', p.sandbox), 'ready',
      h('span.muted', [p.backend, duration(p.duration_ms), p.snapshot ? 'restored from a snapshot' : ''].filter(Boolean).join(' · '))),
    'sandbox.lost': (ev, p) => line('bad', ev, h('strong', 'Sandbox lost'), h('span.mono', p.sandbox), h('span', '— ' + p.reason)),
    'sandbox.destroyed': (ev, p) => line('quiet', ev, 'Sandbox', h('span.mono', p.sandbox), 'destroyed', p.reason ? h('span.muted', '(' + p.reason + ')') : null),
    'model.request': () => {},
    'model.response': (ev, p) => {
      const u = p.usage || {};
      const asked = (p.tool_calls || []).map((c) => c.name);
      card('model', ev, [h('span.ev-title', 'Model'), h('span.muted.small', p.model || p.provider),
        h('span.muted.small', num(u.input_tokens) + ' in · ' + num(u.output_tokens) + ' out · ' + duration(p.duration_ms))],
      p.text ? prose(p.text) : null,
      asked.length ? h('div.muted.small', 'Calls ', asked.map((n, i) => [i ? ', ' : '', h('span.mono', n)])) : null);
    },
    'tool.proposed': (ev, p) => {
      const c = callCard(ev, p);
      clear(c.args).append(argsView(p.tool, p.args));
    },
    'policy.decision': (ev, p) => {
      if (!p.call_id && p.input) {
        // An events rule's decision on what a sandbox reported (events.rules).
        line(p.decision === 'stop' || p.decision === 'deny' ? 'bad' : 'warn', ev, h('span.muted', 'Policy'), decisionBadge(p.decision, p.decision),
          h('code', p.rule || ''), h('span.muted', 'on ' + p.input), p.reason ? h('span', '— ' + p.reason) : null);
        return;
      }
      const c = callCard(ev, p);
      clear(c.decision).append(decisionBadge(p.decision));
      clear(c.policy).append(h('div.policy', h('span.muted', 'Policy'), decisionBadge(p.decision),
        p.rule ? h('code', p.rule) : h('span.muted', 'default'), p.reason ? h('span', '— ' + p.reason) : null));
      if (p.decision === 'deny') c.li.className = 'ev k-bad';
    },
    'tool.started': (ev, p) => {
      const c = callCard(ev, p);
      clear(c.state).append(h('span.muted.small', h('span.spinner', {'aria-hidden': 'true'}), ' running'),
        p.sandbox ? h('span.muted.small', ' in ' + p.sandbox) : null);
    },
    'tool.finished': (ev, p) => {
      const c = callCard(ev, p);
      const failed = p.is_error || (p.exit_code !== undefined && p.exit_code !== null && p.exit_code !== 0);
      const facts = [];
      if (p.exit_code !== undefined && p.exit_code !== null) facts.push('exit ' + p.exit_code);
      else if (p.outcome && p.outcome !== 'ok') facts.push(p.outcome);
      facts.push(duration(p.duration_ms));
      clear(c.state).append(decisionBadge(failed ? 'deny' : 'allow', facts.join(' · ')));
      if (failed) c.li.className = 'ev k-bad';
      clear(c.result);
      if (p.error) c.result.append(h('div.error', clip(p.error, maxArgs)[0]));
      const out = p.output || '';
      if (!out) {
        c.result.append(h('div.muted.small', 'No output.'));
        return;
      }
      const [shown, cut] = clip(out, maxOutput);
      const lines = shown.split('\n').length;
      const size = p.output_bytes || out.length;
      const details = h('details.output', {open: !p.is_error && shown.length <= 2000 && lines <= 24 ? true : p.is_error},
        h('summary', 'Output · ' + bytes(size) + ' · ' + num(lines) + (lines === 1 ? ' line' : ' lines')),
        h('pre.out', shown),
        cut || p.output_truncated ? h('div.out-note', [
          cut ? num(cut) + ' more characters not drawn.' : '',
          p.output_truncated ? ' The command wrote ' + bytes(p.output_bytes) + '; the model saw the capped output above.' : '',
        ].join(' ').trim()) : null);
      c.box.append(details);
      if (p.secrets && p.secrets.length) c.box.append(h('div.out-note', 'Redacted what looks like a secret (' + p.secrets.join(', ') + ').'));
    },
    'tool.uncertain': (ev, p) => {
      const c = callCard(ev, p);
      c.li.className = 'ev k-warn';
      clear(c.state).append(decisionBadge('ask', 'uncertain'));
      c.result.append(h('div.muted', p.reason));
    },
    'egress.decision': (ev, p) => line(p.decision === 'allowed' ? 'quiet' : p.decision === 'denied' ? 'bad' : 'warn', ev,
      h('span', 'Egress'), decisionBadge(p.decision),
      h('span.mono', [p.method, p.host + (p.port ? ':' + p.port : '') + (p.path || '')].filter(Boolean).join(' ')),
      p.status ? h('span.muted', String(p.status)) : null,
      h('span.muted', [p.rule ? 'rule ' + p.rule : '', p.reason, p.credential ? 'credential ' + p.credential : '',
        p.bytes_in || p.bytes_out ? bytes(p.bytes_out) + ' up · ' + bytes(p.bytes_in) + ' down' : ''].filter(Boolean).join(' · '))),
    'artifact.stored': (ev, p) => {
      if (p.kind === 'snapshot' || p.name.startsWith('snapshots/')) return;
      line(p.secrets && p.secrets.length ? 'warn' : 'ok', ev, 'Kept', h('a', {href: artifactURL(id, p.name), download: p.name.split('/').pop()}, p.name), h('span.muted', bytes(p.size)),
        p.secrets && p.secrets.length ? h('span', (p.secrets_kept ? '— holds' : '— redacted') + ' what looks like a secret (' + p.secrets.join(', ') + ')') : null);
      loadArtifacts();
    },
    'snapshot.taken': (ev, p) => line('quiet', ev, 'Snapshot of', h('span.mono', p.sandbox), h('span.muted', bytes(p.size) + ' · ' + duration(p.duration_ms))),
    'workspace.fetched': (ev, p) => line('quiet', ev, 'Fetched', h('span.mono', p.url + (p.ref ? ' ' + p.ref : '')), 'into', h('span.mono', p.sandbox),
      h('span.muted', [p.commit ? p.commit.slice(0, 12) : '', bytes(p.size), duration(p.duration_ms)].filter(Boolean).join(' · '))),
    'sandbox.created': (ev, p) => line('quiet', ev, 'Sandbox', h('span.mono', p.sandbox_id), 'from template', h('span.mono', p.template)),
    'sandbox.op': (ev, p) => line(p.outcome === 'ok' ? 'quiet' : 'warn', ev, 'Sandbox', h('span.mono', p.op),
      p.outcome !== 'ok' ? decisionBadge('deny', p.outcome) : null,
      h('span.muted', [p.detail, p.count > 1 ? '×' + num(p.count) : ''].filter(Boolean).join(' · '))),
    'sandbox.usage': (ev, p) => line('quiet', ev, 'Sandbox usage', h('span.mono', p.sandbox_id),
      h('span.muted', [duration(p.sandbox_ms) + ' up', duration(p.cpu_ms) + ' CPU', credits(p.cost_micro_credits || 0) + ' cr'].join(' · '))),
    // What a sandbox reported about itself: its own words, shown as
    // text, marked as the sandbox's, never as the host's.
    'sandbox.event': (ev, p) => line(p.refused || p.level === 'error' || p.status === 'fail' ? 'warn' : 'quiet', ev,
      h('span', 'Sandbox'), h('span.mono', p.sandbox), h('span.muted', 'reports'), h('span.mono', p.kind), ...sandboxEventView(p)),
    'sandbox.events_dropped': (ev, p) => {
      const host = (p.malformed || 0) + (p.unknown_kind || 0) + (p.oversize || 0) + (p.rate || 0) + (p.invalid || 0);
      const inside = (p.exec_oversize || 0) + (p.exec_rate || 0) + (p.exec_queue || 0) + (p.exec_conns || 0);
      line('warn', ev, 'Sandbox', h('span.mono', p.sandbox), h('span.muted', 'events not recorded:'),
        h('span', num(host) + ' refused by the host · ' + num(inside) + ' dropped in the sandbox · ' + num(p.artifacts || 0) + ' artifacts not stored'));
    },
    'retry': (ev, p) => line('warn', ev, 'Retrying the ' + p.what, h('span.muted', '(attempt ' + p.attempt + ', in ' + duration(p.delay_ms) + ')'), h('span', '— ' + p.reason)),
    'verification.result': (ev, p) => {
      card(p.passed ? 'ok' : 'bad', ev, [h('span.ev-title', 'Verification'), decisionBadge(p.passed ? 'allow' : 'deny', p.passed ? 'passed' : 'failed'),
        h('span.muted.small', duration(p.duration_ms))], checkList(p.checks || []));
      drawVerification(p);
    },
    'budget.exhausted': (ev, p) => line('bad', ev, h('strong', 'Budget spent:'), h('span.mono', p.budget), h('span.muted', num(p.used) + ' of ' + num(p.limit))),
    'approval.requested': (ev, p) => {
      const c = p.call_id ? calls.get(p.call_id) : null;
      if (c) {
        c.li.className = 'ev k-warn';
        askBox(c.approval, ev, p);
        return;
      }
      const {body} = card('warn', ev, [h('span.ev-title', 'Network access'), h('span.mono', p.destination || ''),
        p.sandbox ? h('span.muted.small', 'from ' + p.sandbox) : null]);
      body.append(actionView(p.action));
      askBox(body, ev, p);
    },
    'approval.decided': (ev, p) => {
      decided(ev, p);
      refreshBadge();
    },
    'llm.call': (ev, p) => {
      llm.calls++;
      llm.cost += p.cost_micro_credits || 0;
      const u = p.usage || {};
      line(p.outcome === 'ok' ? 'quiet' : 'warn', ev, 'LLM', h('span.mono', p.api), h('span.mono', p.model),
        p.outcome !== 'ok' ? decisionBadge('deny', p.outcome) : null,
        h('span.muted', [num(u.input_tokens) + ' in · ' + num(u.output_tokens) + ' out', credits(p.cost_micro_credits || 0) + ' cr',
          duration(p.latency_ms), p.reason].filter(Boolean).join(' · ')));
    },
  };

  function onEvent(ev) {
    if (ev.seq <= lastSeq) return;
    lastSeq = ev.seq;
    const p = ev.payload || {};
    const follow = atBottom() && lastSeq > 1;
    if (p.step && p.step > step && /^(model|tool|policy\.decision)/.test(ev.type)) {
      step = p.step;
      tl.append(h('li.step', 'Step ' + step));
    }
    const draw = renderers[ev.type];
    if (draw) draw(ev, p);
    if (headerEvents.has(ev.type)) soon();
    if (follow && !ended) window.scrollTo(0, document.body.scrollHeight);
  }

  // --- the stream ---

  function setLive(state) {
    clear(foot);
    if (state === 'live') foot.append(h('span.live.on', 'Live — new events appear as the run goes on'));
    else if (state === 'retry') foot.append(h('span.live.off', 'Reconnecting…'));
    else foot.append(h('span.muted', 'End of the log · ' + num(lastSeq) + ' events'));
  }

  function connect() {
    es = new EventSource(runURL + '/events/stream');
    const onMessage = (m) => {
      let ev;
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      onEvent(ev);
    };
    for (const t of eventTypes) es.addEventListener(t, onMessage);
    es.addEventListener('end', () => {
      ended = true;
      es.close();
      es = null;
      setLive('end');
      refreshRun();
      loadArtifacts();
    });
    es.onopen = () => setLive('live');
    es.onerror = () => {
      if (!es) return;
      if (es.readyState === EventSource.CLOSED) {
        // The server answered something other than a stream (204 when
        // nothing is left, an error): the run's state says which.
        es = null;
        ended = true;
        setLive('end');
        refreshRun();
        loadArtifacts();
      } else {
        setLive('retry');
      }
    };
  }

  function stop() {
    if (es) es.close();
    es = null;
    clearTimeout(refreshTimer);
  }

  connect();
  loadArtifacts();
  // The header's duration and usage, and the run itself (first call now).
  const stopTick = every(5000, () => { if (!ended) return refreshRun(); });
  const stopNav = listNav(tl, 'li.ev', (li) => {
    const d = li.querySelector('details');
    if (d) d.open = !d.open;
  });
  return () => {
    stop();
    stopTick();
    stopNav();
  };
}
