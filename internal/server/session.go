package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
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
// page. Sessions live in the store (store.UISessions), so every server on
// it (the replicas behind a load balancer, with no sticky sessions) serves
// every logged-in browser, a restart logs no one out, and a logout, a
// key's revocation or a tenant's deletion through any of them ends the
// session on all of them at its next request. Nothing else of a session is
// kept in a process: the CSRF token is derived from the session id, and an
// event stream made with a session ends, on whichever server holds it,
// within a poll (Config.StreamPoll) of the session's end (revoke.go).
//
// Why each defence:
//   - The cookie is HttpOnly (no script reads it), SameSite=Strict (no other
//     site's page makes the browser send it), Secure when the browser talks
//     TLS, and named __Host- then (no sibling subdomain can plant one).
//   - Every state-changing request made with the cookie carries the
//     session's CSRF token in X-CSRF-Token, compared in constant time, and
//     an Origin header naming this server: SameSite alone leaves out old
//     browsers and same-site subdomains. The token is the SHA-256 of the
//     session id under a label of its own: another site's page cannot know
//     it (it would need the cookie, which it cannot read), and it needs no
//     secret a replica would have to share.
//   - A session ends after sessionIdle without use and sessionMax after
//     login, whichever is first, and as soon as its key is revoked or its
//     tenant's deletion begins: the store's lookup of a session checks its
//     key and tenant in the same query, every request.
//   - The session id in the cookie is 256 random bits; the store holds only
//     its SHA-256, so a copy of the database shows no usable cookie, nor
//     the CSRF token (a different hash of the id, which the store lacks).

// Session limits.
const (
	// sessionIdle ends a session not used for this long.
	sessionIdle = time.Hour
	// sessionMax ends a session this long after login, used or not.
	sessionMax = 12 * time.Hour
	// sessionTouch is how often a session's use is written to the store:
	// a request finding the recorded use this old or older records it.
	// The idle limit is counted from the recorded use, so a session ends
	// at most this much early, never late.
	sessionTouch = time.Minute
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
	p auth.Principal
	// hash is the SHA-256 of the session id: the store's key.
	hash    [sha256.Size]byte
	csrf    string
	expires time.Time
}

// sessions reads and writes the UI's sessions in the store. It is safe
// for concurrent use and holds no session itself.
type sessions struct {
	st  store.UISessions
	now func() time.Time
	log *slog.Logger
}

func newSessions(st store.UISessions, now func() time.Time, log *slog.Logger) *sessions {
	return &sessions{st: st, now: now, log: log}
}

// csrfLabel separates the CSRF token's hash of a session id from the
// store's.
const csrfLabel = "airlock ui csrf token\x00"

// csrfToken is the CSRF token of session id.
func csrfToken(id string) string {
	sum := sha256.Sum256([]byte(csrfLabel + id))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// expiry is when a session made at created and last used at used ends.
func expiry(created, used time.Time) time.Time {
	idle, most := used.Add(sessionIdle), created.Add(sessionMax)
	if idle.Before(most) {
		return idle
	}
	return most
}

// create starts a session for p and returns its id (for the cookie) and
// the session. A key with store.MaxUISessionsPerKey sessions loses its
// least recently used one. Expired sessions of every key are swept.
func (ss *sessions) create(ctx context.Context, p auth.Principal) (string, session, error) {
	id, err := randomToken()
	if err != nil {
		return "", session{}, err
	}
	now := ss.now().UTC()
	sess := session{p: p, hash: sha256.Sum256([]byte(id)), csrf: csrfToken(id), expires: expiry(now, now)}
	u := store.UISession{Hash: sess.hash[:], Tenant: p.Tenant, KeyID: p.KeyID, Created: now, Used: now, Expires: sess.expires}
	if err := ss.st.CreateUISession(ctx, u, store.MaxUISessionsPerKey); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			// The key was revoked between its check and here.
			return "", session{}, errSessionEnded
		}
		return "", session{}, err
	}
	if n, err := ss.st.ExpireUISessions(ctx, now); err != nil {
		ss.log.Warn("cannot sweep expired ui sessions", "err", err)
	} else if n > 0 {
		ss.log.Debug("expired ui sessions swept", "sessions", n)
	}
	return id, sess, nil
}

// get returns the live session of id and records its use (at most every
// sessionTouch). A malformed, unknown, expired or ended id gives
// errSessionEnded; a store that fails, its error.
func (ss *sessions) get(ctx context.Context, id string) (session, error) {
	if !validToken(id) {
		return session{}, errSessionEnded
	}
	h := sha256.Sum256([]byte(id))
	now := ss.now().UTC()
	u, err := ss.st.UISession(ctx, h[:], now)
	if errors.Is(err, store.ErrNotFound) {
		return session{}, errSessionEnded
	}
	if err != nil {
		return session{}, err
	}
	sess := session{
		p:    auth.Principal{Tenant: u.Tenant, KeyID: u.KeyID, Scopes: u.Scopes},
		hash: h, csrf: csrfToken(id), expires: u.Expires,
	}
	if now.Sub(u.Used) >= sessionTouch {
		sess.expires = expiry(u.Created, now)
		err := ss.st.TouchUISession(ctx, h[:], now, sess.expires)
		if errors.Is(err, store.ErrNotFound) {
			return session{}, errSessionEnded // ended a moment ago
		}
		if err != nil {
			return session{}, err
		}
	}
	return sess, nil
}

// drop ends the session of id, if any, on every server.
func (ss *sessions) drop(ctx context.Context, id string) error {
	if !validToken(id) {
		return nil
	}
	h := sha256.Sum256([]byte(id))
	if err := ss.st.DeleteUISession(ctx, h[:]); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
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
// session must be live in the store (its key unrevoked, its tenant not
// being deleted), and a state-changing request must carry a matching
// Origin and the session's CSRF token. The request then acts as the
// session's principal, under its key's rate limit.
func (s *Server) authenticateSession(r *http.Request, c *call) error {
	addr := "addr:" + remoteHost(r)
	if blocked, wait := s.fails.Blocked(addr); blocked {
		return &apiError{code: api.CodeRateLimited, msg: "too many failed authentications; retry later", retryAfter: ratelimit.RetryAfter(wait)}
	}
	id, _ := sessionID(r)
	sess, err := s.sessions.get(r.Context(), id)
	if errors.Is(err, errSessionEnded) {
		s.fails.Allow(addr)
		return err
	}
	if err != nil {
		c.log.Error("authentication: cannot look up a ui session", "err", err)
		return publicf(api.CodeUnavailable, "cannot verify sessions now; retry later")
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
	c.p, c.session = sess.p, &sess.hash
	if ok, wait := s.keys.Allow("key:" + c.p.KeyID + "\x00" + c.p.Tenant); !ok {
		return &apiError{code: api.CodeRateLimited, msg: "too many requests for this key; retry later", retryAfter: ratelimit.RetryAfter(wait)}
	}
	c.view = store.ForTenant(s.o.Store, c.p.Tenant)
	return nil
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
	return Session{Tenant: sess.p.Tenant, KeyID: sess.p.KeyID, Scopes: scopes, CSRFToken: sess.csrf, Expires: sess.expires.UTC()}
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
		if err := s.sessions.drop(r.Context(), old); err != nil {
			c.log.Error("login: cannot end the browser's old ui session", "err", err)
			return publicf(api.CodeUnavailable, "cannot start a session now; retry later")
		}
	}
	id, sess, err := s.sessions.create(r.Context(), c.p)
	if errors.Is(err, errSessionEnded) {
		return publicf(api.CodeUnauthenticated, "the API key is not valid")
	}
	if err != nil {
		c.log.Error("login: cannot store a ui session", "err", err)
		return publicf(api.CodeUnavailable, "cannot start a session now; retry later")
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
		sess, err := s.sessions.get(r.Context(), id)
		switch {
		case errors.Is(err, errSessionEnded):
		case err != nil:
			c.log.Error("logout: cannot look up a ui session", "err", err)
			return publicf(api.CodeUnavailable, "cannot end the session now; retry later")
		default:
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(CSRFHeader)), []byte(sess.csrf)) != 1 {
				return errCSRF
			}
			if err := s.sessions.drop(r.Context(), id); err != nil {
				c.log.Error("logout: cannot end a ui session", "err", err)
				return publicf(api.CodeUnavailable, "cannot end the session now; retry later")
			}
			// Its event streams here end now, elsewhere within a poll.
			s.watch.endSession(sess.p.Tenant, sess.hash)
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
	sess, err := s.sessions.get(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sessionOf(sess))
	return nil
}
