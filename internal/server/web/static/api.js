// The JSON API as the UI calls it: with the session cookie (sent by the
// browser, unreadable here) and, on every state-changing request, the
// session's CSRF token in X-CSRF-Token. The token lives in this module's
// memory only; the API key never reaches the page after login.

let session = null;
let onLoggedOut = () => {};

// APIError is an error answer of the API: {code, message, request_id}.
export class APIError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : 'HTTP ' + status);
    this.status = status;
    this.code = body && body.code;
    this.requestID = body && body.request_id;
  }
}

async function errorOf(r) {
  let body = null;
  try { body = await r.json(); } catch { /* not the API's shape */ }
  return new APIError(r.status, body);
}

// currentSession is the logged-in session, or null.
export function currentSession() { return session; }

// can reports whether the session's key holds scope (admin holds all).
export function can(scope) {
  return !!session && (session.scopes.includes(scope) || session.scopes.includes('admin'));
}

// whenLoggedOut sets what happens when the API says the session ended.
export function whenLoggedOut(fn) { onLoggedOut = fn; }

// leaving is set while the user's own act ends the session (deleting the
// tenant its key belongs to): a request in flight beside it (the badge's
// poll) that is answered 401 then ends the session without taking the
// page, which shows what the act did, away.
let leaving = false;

// endingSession runs act, which ends the session when it succeeds: the
// session is forgotten then, and no later 401 logs the page out.
export async function endingSession(act) {
  leaving = true;
  try {
    const v = await act();
    session = null;
    return v;
  } catch (e) {
    leaving = false;
    throw e;
  }
}

// loggedOut forgets the session the server says has ended.
function loggedOut() {
  session = null;
  if (!leaving) onLoggedOut();
}

// loadSession asks the server for the browser's session; null when none.
export async function loadSession() {
  const r = await fetch('/ui/session', {headers: {Accept: 'application/json'}, cache: 'no-store', credentials: 'same-origin'});
  if (r.status === 401) {
    session = null;
    return null;
  }
  if (!r.ok) throw await errorOf(r);
  session = await r.json();
  return session;
}

// login exchanges an API key for a session.
export async function login(key) {
  const r = await fetch('/ui/login', {
    method: 'POST',
    headers: {'Content-Type': 'application/json', Accept: 'application/json'},
    body: JSON.stringify({key}),
    credentials: 'same-origin',
    cache: 'no-store',
  });
  if (!r.ok) throw await errorOf(r);
  session = await r.json();
  leaving = false;
  return session;
}

// logout ends the session.
export async function logout() {
  const token = session ? session.csrf_token : '';
  session = null;
  await fetch('/ui/logout', {method: 'POST', headers: {'X-CSRF-Token': token}, credentials: 'same-origin', cache: 'no-store'});
}

// api calls the JSON API and returns the decoded answer (null for 204).
export async function api(method, path, body) {
  const headers = {Accept: 'application/json'};
  if (method !== 'GET' && method !== 'HEAD') headers['X-CSRF-Token'] = session ? session.csrf_token : '';
  const init = {method, headers, credentials: 'same-origin', cache: 'no-store'};
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  if (r.status === 401) {
    loggedOut();
    throw await errorOf(r);
  }
  if (!r.ok) throw await errorOf(r);
  if (r.status === 204) return null;
  return r.json();
}

// text fetches a text resource (an artifact), at most limit bytes of it
// kept; it returns {text, size, cut}.
export async function text(path, limit) {
  const r = await fetch(path, {credentials: 'same-origin', cache: 'no-store'});
  if (r.status === 401) loggedOut();
  if (!r.ok) throw await errorOf(r);
  const size = Number(r.headers.get('Content-Length') || 0);
  const reader = r.body.getReader();
  const chunks = [];
  let got = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    chunks.push(value);
    got += value.length;
    if (got >= limit) {
      reader.cancel();
      break;
    }
  }
  const all = new Uint8Array(Math.min(got, limit));
  let at = 0;
  for (const c of chunks) {
    const part = c.subarray(0, Math.min(c.length, all.length - at));
    all.set(part, at);
    at += part.length;
    if (at >= all.length) break;
  }
  return {text: new TextDecoder().decode(all), size: size || got, cut: got >= limit};
}

// path builds an API path from parts, each escaped.
export function path(strings, ...vals) {
  let out = strings[0];
  vals.forEach((v, i) => { out += encodeURIComponent(v) + strings[i + 1]; });
  return out;
}
