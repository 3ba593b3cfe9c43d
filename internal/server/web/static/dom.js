// DOM and formatting helpers. Every text the UI shows goes through
// textContent (h's string children): nothing is ever parsed as HTML, so
// text from a run (a model's answer, a command's output) cannot become
// markup or script.

// h makes an element: h('a.link', {href: '/x'}, 'text', child, ...).
// Attributes starting with "on" are event listeners; null and false
// attributes and children are skipped; arrays of children are flattened.
export function h(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split('.');
  const el = document.createElement(tag || 'div');
  if (classes.length) el.className = classes.join(' ');
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = [el.className, v].filter(Boolean).join(' ');
    } else if (k === 'dataset') {
      Object.assign(el.dataset, v);
    } else if (v === true) {
      el.setAttribute(k, '');
    } else {
      el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.append(c);
    else el.append(document.createTextNode(String(c)));
  }
}

// clear removes every child of el.
export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// statusBadge is a run status as a colored badge.
export function statusBadge(status) {
  return h('span.badge', {class: 'st-' + status}, status.replaceAll('_', ' '));
}

// decisionBadge is a policy, egress or approval decision as a badge.
export function decisionBadge(decision, label) {
  return h('span.badge.plain', {class: 'd-' + decision}, label || decision);
}

// The run statuses that end a run.
export const finalStatuses = ['completed', 'failed_verification', 'failed', 'cancelled'];

// bytes writes a size: 980 B, 1.2 KB, 3.4 MB.
export function bytes(n) {
  if (n === undefined || n === null) return '';
  if (n < 1000) return n + ' B';
  const units = ['KB', 'MB', 'GB', 'TB'];
  let v = n;
  for (const u of units) {
    v /= 1000;
    if (v < 1000 || u === 'TB') return (v < 10 ? v.toFixed(1) : Math.round(v)) + ' ' + u;
  }
  return n + ' B';
}

// duration writes milliseconds: 340 ms, 2.1 s, 3 min 4 s, 2 h 5 min.
export function duration(ms) {
  if (ms === undefined || ms === null || ms < 0) return '';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + ' min ' + Math.round(s % 60) + ' s';
  return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
}

// ago writes a time relative to now: "just now", "4 min ago", or a date.
export function ago(t) {
  if (!t) return '';
  const d = new Date(t);
  const s = (Date.now() - d.getTime()) / 1000;
  if (s < -86400) return d.toLocaleDateString(undefined, {year: 'numeric', month: 'short', day: 'numeric'});
  if (s < -3600) return 'in ' + Math.round(-s / 3600) + ' h';
  if (s < -60) return 'in ' + Math.round(-s / 60) + ' min';
  if (s < -10) return 'in ' + Math.round(-s) + ' s';
  if (s < 10) return 'just now';
  if (s < 60) return Math.round(s) + ' s ago';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  if (s < 86400) return Math.round(s / 3600) + ' h ago';
  return d.toLocaleDateString(undefined, {year: 'numeric', month: 'short', day: 'numeric'});
}

// timeEl is a <time> with a relative text and the full time as its title.
export function timeEl(t) {
  if (!t) return h('span.muted', '—');
  const d = new Date(t);
  return h('time', {datetime: d.toISOString(), title: d.toLocaleString()}, ago(t));
}

// clock writes a time of day: 14:03:27.
export function clock(t) {
  return new Date(t).toLocaleTimeString(undefined, {hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false});
}

// credits writes micro-credits as credits: 1.5, 0.000125.
export function credits(micro) {
  const neg = micro < 0;
  let m = Math.abs(micro);
  const whole = Math.floor(m / 1e6);
  let frac = String(m % 1e6).padStart(6, '0').replace(/0+$/, '');
  return (neg ? '-' : '') + whole + (frac ? '.' + frac : '');
}

// num writes an integer with thousands separators.
export function num(n) {
  return (n || 0).toLocaleString();
}

// shortID shortens a run id for lists: run_01J… → its last 8 characters.
export function shortID(id) {
  return id && id.length > 14 ? '…' + id.slice(-8) : id;
}

// clip cuts text to n characters and says how much was cut.
export function clip(text, n) {
  if (!text || text.length <= n) return [text || '', 0];
  return [text.slice(0, n), text.length - n];
}

// listNav makes j/k and the arrow keys move the focus through the items
// of container that match selector, and Enter call open(item). It returns
// the function that removes the handler.
export function listNav(container, selector, open) {
  const onKey = (e) => {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey || isTyping(e.target)) return;
    const items = [...container.querySelectorAll(selector)];
    if (!items.length) return;
    const at = items.findIndex((it) => it === document.activeElement || it.contains(document.activeElement));
    let next = -1;
    if (e.key === 'j' || e.key === 'ArrowDown') next = at < 0 ? 0 : Math.min(items.length - 1, at + 1);
    else if (e.key === 'k' || e.key === 'ArrowUp') next = at < 0 ? 0 : Math.max(0, at - 1);
    else if (e.key === 'Enter' && at >= 0 && items[at] === document.activeElement && open) {
      e.preventDefault();
      open(items[at], e);
      return;
    } else return;
    e.preventDefault();
    items[next].focus();
    items[next].scrollIntoView({block: 'nearest'});
  };
  document.addEventListener('keydown', onKey);
  return () => document.removeEventListener('keydown', onKey);
}

// isTyping reports whether a key event's target takes text.
export function isTyping(t) {
  return t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable);
}

// every calls fn now and then every ms while the page is visible, until
// the returned function is called.
export function every(ms, fn) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    if (document.visibilityState === 'visible') {
      try { await fn(); } catch (err) { console.warn(err); }
    }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
