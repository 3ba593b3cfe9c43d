package server

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/ratelimit"
	"github.com/airlockrun/airlock/internal/store"
)

// The web UI's sessions. A person logs in with an API key once; the server
// verifies it with the Authenticator and answers with a session cookie that
// stands for the key's principal (its tenant, key id and scopes). The key
// itself is kept nowhere: not in the cookie, not in the session, not in the
// page. The session lives in this process's memory only, so a restart (or
// another replica behind a load balancer without sticky sessions) asks the
// person to log in again.
//
// Why each defence:
//   - The cookie is HttpOnly (no script reads it), SameSite=Strict (no other
//     site's page makes the browser send it), Secure when the browser talks
//     TLS, and named __Host- then (no sibling subdomain can plant one).
//   - Every state-changing request made with the cookie carries the
//     session's CSRF token in X-CSRF-Token, compared in constant time, and
//     an Origin header naming this server: SameSite alone leaves out old
//     browsers and same-site subdomains.
//   - A session ends after sessionIdle without use and sessionMax after
//     login, whichever is first, and as soon as its key is revoked: at
//     once when this server revoked it, else when it is next used a poll
//     (Config.StreamPoll) or more after its key was last found live
//     (revoke.go).
//   - The session id in the cookie is 256 random bits; the map holds only
//     its SHA-256, so a memory dump shows no usable cookie.

// Session limits.
const (
	// sessionIdle ends a session not used for this long.
	sessionIdle = time.Hour
	// sessionMax ends a session this long after login, used or not.
	sessionMax = 12 * time.Hour
	// maxSessions bounds the sessions held at once; logins past it are
	// refused until some expire or log out.
	maxSessions = 10000
	// maxLoginBody bounds the body of POST /ui/login.
	maxLoginBody = 4 << 10
)

// Session cookie names: the __Host- prefix when the browser talks TLS.
const (
	sessionCookie       = "airlock_session"
	secureSessionCookie = "__Host-airlock_session"
)

// CSRFHeader is the header that carries a session's CSRF token on every
// state-changing request made with the session cookie.
const CSRFHeader = "X-CSRF-Token"

// Session is the body of POST /ui/login and GET /ui/session: who the
// session stands for, when it ends, and its CSRF token, which the page
// sends back in X-CSRF-Token.
type Session struct {
	Tenant    string    `json:"tenant"`
	KeyID     string    `json:"key_id"`
	Scopes    []string  `json:"scopes"`
	CSRFToken string    `json:"csrf_token"`
	Expires   time.Time `json:"expires"`
}

// LoginRequest is the body of POST /ui/login.
type LoginRequest struct {
	Key string `json:"key"`
}

// session is one logged-in browser.
type session struct {
	p       auth.Principal
	csrf    string
	created time.Time
	// used is when the session last served a request; checked when its
	// key was last found unrevoked.
	used    time.Time
	checked time.Time
}

// expires is when s ends unless used again.
func (s *session) expires() time.Time {
	idle, most := s.used.Add(sessionIdle), s.created.Add(sessionMax)
	if idle.Before(most) {
		return idle
	}
	return most
}

// sessions holds the UI's sessions by the SHA-256 of their ids. It is safe
// for concurrent use.
type sessions struct {
	now func() time.Time
	// recheck is how long a session's key, once found live, is taken to
	// be: the server's stream poll, so that a key revoked elsewhere ends
	// its sessions here as soon as it ends its streams.
	recheck time.Duration

	mu sync.Mutex
	// byHash holds the live sessions (guarded by mu).
	byHash map[[sha256.Size]byte]*session
}

func newSessions(now func() time.Time, recheck time.Duration) *sessions {
	return &sessions{now: now, recheck: recheck, byHash: map[[sha256.Size]byte]*session{}}
}

var errTooManySessions = publicf(api.CodeUnavailable, "too many sessions are open; retry later")

// create starts a session for p and returns its id (for the cookie) and
// the session.
func (ss *sessions) create(p auth.Principal) (string, session, error) {
	id, err := randomToken()
	if err != nil {
		return "", session{}, err
	}
	csrf, err := randomToken()
	if err != nil {
		return "", session{}, err
	}
	now := ss.now()
	s := &session{p: p, csrf: csrf, created: now, used: now, checked: now}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.byHash) >= maxSessions {
		ss.sweep(now)
		if len(ss.byHash) >= maxSessions {
			return "", session{}, errTooManySessions
		}
	}
	ss.byHash[sha256.Sum256([]byte(id))] = s
	return id, *s, nil
}

// sweep drops the expired sessions. Preconditions: ss.mu held.
func (ss *sessions) sweep(now time.Time) {
	for h, s := range ss.byHash {
		if !now.Before(s.expires()) {
			delete(ss.byHash, h)
		}
	}
}

// get returns the live session of id and marks it used; ok is false for an
// unknown or expired id (an expired one is dropped). recheck says the
// session's key is due to be looked up again (and marks it looked up, so
// that concurrent requests look it up once).
func (ss *sessions) get(id string) (s session, recheck, ok bool) {
	if !validToken(id) {
		return session{}, false, false
	}
	h := sha256.Sum256([]byte(id))
	now := ss.now()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p, ok := ss.byHash[h]
	if !ok {
		return session{}, false, false
	}
	if !now.Before(p.expires()) {
		delete(ss.byHash, h)
		return session{}, false, false
	}
	if now.After(p.used) {
		p.used = now
	}
	if now.Sub(p.checked) >= ss.recheck || now.Before(p.checked) {
		p.checked, recheck = now, true
	}
	return *p, recheck, true
}

// drop ends the session of id, if any.
func (ss *sessions) drop(id string) {
	if !validToken(id) {
		return
	}
	h := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byHash, h)
}

// dropKey ends every session of tenant's key id.
func (ss *sessions) dropKey(tenant, keyID string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for h, s := range ss.byHash {
		if s.p.Tenant == tenant && s.p.KeyID == keyID {
			delete(ss.byHash, h)
		}
	}
}

// dropTenant ends every session of tenant's keys (the tenant is gone).
func (ss *sessions) dropTenant(tenant string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for h, s := range ss.byHash {
		if s.p.Tenant == tenant {
			delete(ss.byHash, h)
		}
	}
}

// tokenLen is the length of a session id or CSRF token: 32 random bytes,
// unpadded base64url.
var tokenLen = base64.RawURLEncoding.EncodedLen(32)

func randomToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// validToken reports whether t has the shape of a token randomToken makes.
func validToken(t string) bool {
	if len(t) != tokenLen {
		return false
	}
	_, err := base64.RawURLEncoding.Strict().DecodeString(t)
	return err == nil
}

// sessionID returns the session id a request's cookie carries, if any.
func sessionID(r *http.Request) (string, bool) {
	for _, name := range []string{secureSessionCookie, sessionCookie} {
		if c, err := r.Cookie(name); err == nil && c.Value != "" {
			return c.Value, true
		}
	}
	return "", false
}

// sessionCall reports whether a request is to be authenticated by its
// session cookie: it has one and carries no API key (a key, when given,
// is what the request is made with).
func sessionCall(r *http.Request) bool {
	if r.Header.Get("Authorization") != "" || r.Header.Get("X-API-Key") != "" {
		return false
	}
	_, ok := sessionID(r)
	return ok
}

// safeMethod reports whether a method changes nothing (RFC 9110 §9.2.1);
// every other needs the CSRF token and a matching Origin.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

var (
	errSessionEnded = publicf(api.CodeUnauthenticated, "the session has ended; log in again")
	errCrossOrigin  = publicf(api.CodeForbidden, "the request's Origin is not this server")
	errCSRF         = publicf(api.CodeForbidden, "the request lacks this session's CSRF token ("+CSRFHeader+")")
)

// checkOrigin refuses a request whose Origin header is missing or names
// another origin than the host the request was sent to. Browsers send
// Origin with every POST, also same-origin ones, so a missing Origin is
// not a browser on this page. Over TLS the scheme must be https; without,
// https is accepted too, for a server behind a TLS-terminating proxy (the
// host must match either way, which is what stops another site).
func checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	scheme, host, ok := strings.Cut(origin, "://")
	if !ok || host == "" || r.Host == "" || !strings.EqualFold(host, r.Host) {
		return errCrossOrigin
	}
	switch scheme = strings.ToLower(scheme); {
	case scheme == "https":
	case scheme == "http" && r.TLS == nil:
	default:
		return errCrossOrigin
	}
	return nil
}

// authenticateSession authenticates a request by its session cookie: the
// session must be live and its key unrevoked, and a state-changing request
// must carry a matching Origin and the session's CSRF token. The request
// then acts as the session's principal, under its key's rate limit.
func (s *Server) authenticateSession(r *http.Request, c *call) error {
	addr := "addr:" + remoteHost(r)
	if blocked, wait := s.fails.Blocked(addr); blocked {
		return &apiError{code: api.CodeRateLimited, msg: "too many failed authentications; retry later", retryAfter: ratelimit.RetryAfter(wait)}
	}
	id, _ := sessionID(r)
	sess, recheck, ok := s.sessions.get(id)
	if !ok {
		s.fails.Allow(addr)
		return errSessionEnded
	}
	if !safeMethod(r.Method) {
		if err := checkOrigin(r); err != nil {
			return err
		}
		got := r.Header.Get(CSRFHeader)
		if subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
			return errCSRF
		}
	}
	if recheck {
		live, err := s.keyLive(r, sess.p)
		if err != nil {
			c.log.Error("authentication: cannot look up a session's key", "key_id", sess.p.KeyID, "err", err)
			return publicf(api.CodeUnavailable, "cannot verify API keys now; retry later")
		}
		if !live {
			s.sessions.dropKey(sess.p.Tenant, sess.p.KeyID)
			c.log.Info("session ended: its key was revoked", "key_id", sess.p.KeyID)
			return errSessionEnded
		}
	}
	c.p = sess.p
	if ok, wait := s.keys.Allow("key:" + c.p.KeyID + "\x00" + c.p.Tenant); !ok {
		return &apiError{code: api.CodeRateLimited, msg: "too many requests for this key; retry later", retryAfter: ratelimit.RetryAfter(wait)}
	}
	c.view = store.ForTenant(s.o.Store, c.p.Tenant)
	return nil
}

// keyLive reports whether p's key still exists unrevoked, its tenant not
// being deleted (a tenant deleted, by another process too, has no keys).
func (s *Server) keyLive(r *http.Request, p auth.Principal) (bool, error) {
	keys, err := s.o.Store.ListAPIKeys(r.Context(), p.Tenant)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	i := slices.IndexFunc(keys, func(k store.APIKey) bool { return k.ID == p.KeyID })
	return i >= 0 && !keys[i].Revoked() && keys[i].TenantDeleting.IsZero(), nil
}

// secureBrowser reports whether the browser talks TLS to this server: the
// connection is TLS, or (behind a TLS-terminating proxy) the page's
// origin is https.
func secureBrowser(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(r.Header.Get("Origin")), "https://")
}

// setSessionCookie sets (or, with an empty id, clears) the session cookie.
func setSessionCookie(w http.ResponseWriter, r *http.Request, id string) {
	names := []string{sessionCookie}
	if secureBrowser(r) {
		names = []string{secureSessionCookie}
	}
	if id == "" {
		names = []string{sessionCookie, secureSessionCookie}
	}
	for _, name := range names {
		c := &http.Cookie{
			Name: name, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: name == secureSessionCookie || secureBrowser(r),
		}
		if id == "" {
			c.MaxAge = -1
		}
		http.SetCookie(w, c)
	}
}

func sessionOf(sess session) Session {
	scopes := slices.Clone(sess.p.Scopes)
	if scopes == nil {
		scopes = []string{}
	}
	return Session{Tenant: sess.p.Tenant, KeyID: sess.p.KeyID, Scopes: scopes, CSRFToken: sess.csrf, Expires: sess.expires().UTC()}
}

// uiLogin exchanges an API key for a session: POST /ui/login with
// {"key": KEY} from a page of this server (Origin), answered with the
// session cookie and the Session.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request, c *call) error {
	setUIHeaders(w, r)
	// A login from another site's page would log the victim's browser in
	// as the attacker (login CSRF).
	if err := checkOrigin(r); err != nil {
		return err
	}
	var q LoginRequest
	if err := decodeBody(http.MaxBytesReader(w, r.Body, maxLoginBody), &q, false); err != nil {
		return err
	}
	key := strings.TrimSpace(q.Key)
	if key == "" {
		return badRequest("key: the API key is required")
	}
	// The key is verified exactly as one in a request's Authorization
	// header is (the failed-attempt limit per address, the same answers,
	// the key's rate limit): authenticate sees a request with it.
	probe := r.Clone(r.Context())
	probe.Header = http.Header{"Authorization": {"Bearer " + key}}
	if err := s.authenticate(probe, c); err != nil {
		return err
	}
	// An old session of this browser ends with the new one.
	if old, ok := sessionID(r); ok {
		s.sessions.drop(old)
	}
	id, sess, err := s.sessions.create(c.p)
	if err != nil {
		return err
	}
	c.log.Info("ui session started", "tenant", c.p.Tenant, "key_id", c.p.KeyID)
	setSessionCookie(w, r, id)
	writeJSON(w, http.StatusOK, sessionOf(sess))
	return nil
}

// uiLogout ends the request's session and clears its cookie. With a live
// session it needs the CSRF token, like every action.
func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request, c *call) error {
	setUIHeaders(w, r)
	if err := checkOrigin(r); err != nil {
		return err
	}
	if id, ok := sessionID(r); ok {
		if sess, _, live := s.sessions.get(id); live {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(CSRFHeader)), []byte(sess.csrf)) != 1 {
				return errCSRF
			}
			s.sessions.drop(id)
			c.log.Info("ui session ended", "tenant", sess.p.Tenant, "key_id", sess.p.KeyID)
		}
	}
	setSessionCookie(w, r, "")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// uiSession answers the request's session (with its CSRF token, which the
// page keeps in memory only), or unauthenticated.
func (s *Server) uiSession(w http.ResponseWriter, r *http.Request, c *call) error {
	setUIHeaders(w, r)
	if !sessionCall(r) {
		return errSessionEnded
	}
	if err := s.authenticateSession(r, c); err != nil {
		if errors.Is(err, errSessionEnded) {
			setSessionCookie(w, r, "")
		}
		return err
	}
	id, _ := sessionID(r)
	sess, _, ok := s.sessions.get(id)
	if !ok {
		return errSessionEnded
	}
	writeJSON(w, http.StatusOK, sessionOf(sess))
	return nil
}
