package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/ratelimit"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// Authenticator verifies an API key and returns the principal it stands
// for (auth.Keys is one). An unknown, revoked or malformed key gives an
// error matching auth.ErrUnauthenticated; any other error means keys
// cannot be checked now, and the request is refused as unavailable.
type Authenticator interface {
	Verify(ctx context.Context, key string) (auth.Principal, error)
}

// Options are what a Server needs from its host.
type Options struct {
	// Store is the run store; the server reads tenants' objects only
	// through its tenant-scoped view (store.ForTenant).
	Store store.Store
	// Blobs holds artifacts and uploaded workspaces.
	Blobs *blob.Store
	// Engine creates, cancels, pauses, forks runs and decides approvals.
	Engine *engine.Engine
	// Auth verifies API keys. Required.
	Auth Authenticator
	// Feed carries new events to event streams: wire its Publish to this
	// process's engine.Options.OnEvents so that streams hear of an append
	// at once; events other processes append come every
	// Config.StreamPoll. Nil gives the server a feed of its own, which
	// hears of every append by polling.
	Feed *Feed
	// Resume hands a paused run to a worker that resumes it (it must not
	// block on the drive); nil answers resumes with unavailable.
	Resume func(ctx context.Context, runID string) error
	// Logger receives request and error logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock of rate limits and UI sessions; nil means time.Now.
	Now func() time.Time
	// Config tunes limits; zero fields take their defaults.
	Config Config
	// UploadBudget returns how many bytes of uploaded workspaces a
	// tenant may keep at once (the data policy's upload_bytes): an upload
	// past it is refused. Nil, or 0 for a tenant: no budget.
	UploadBudget func(tenant string) int64
	// Metrics is the registry /metrics serves; the API registers its own
	// metrics on it. Nil means a registry with only the API's.
	Metrics *prometheus.Registry
	// Secrets is the host's encrypted secret store, which /v1/secrets
	// manages with each caller's tenant as the store's tenant. Nil answers
	// those endpoints unavailable.
	Secrets *secret.Store
	// Redactor, when not nil, is the host's redactor: every secret value
	// set through the API is added to it, so that the host's log and the
	// run store scrub it from then on (as the host does with the secrets
	// it reads itself).
	Redactor *secret.Redactor
	// ResolveImage resolves the image of a template created through
	// /v1/templates to its digest (the host's image store). Nil refuses
	// every template: there is no image to make its sandboxes of.
	ResolveImage ImageResolver
	// Sandboxes tells the live sandboxes of the host's E2B API and MCP
	// sessions, which /v1/sandboxes lists with their exposed ports and
	// whose exposures it revokes; nil lists none.
	Sandboxes Sandboxes
	// Deleter purges runs and deletes tenants for DELETE /v1/runs/{id}
	// and DELETE /v1/tenants/{name}; host.Host is the one that also
	// removes what the host keeps outside the store. Nil means the
	// store's deletions and the blobs they free.
	Deleter Deleter
}

// Server is the API, an http.Handler. It is safe for concurrent use.
type Server struct {
	o       Options
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	routes  []route
	keys    *ratelimit.Limiter // per API key
	fails   *ratelimit.Limiter // failed authentications per remote address
	metrics metrics
	// sessions are the web UI's logins (session.go).
	sessions *sessions
	// watch ends event streams whose key is revoked (revoke.go).
	watch *keyWatch

	// closing ends every event stream when closed (CloseStreams).
	closing   chan struct{}
	closeOnce sync.Once
	draining  atomic.Bool

	streamsMu sync.Mutex
	// streams counts the open event streams per key id (guarded by
	// streamsMu).
	streams map[string]int
}

// New returns a server; it starts nothing.
func New(o Options) (*Server, error) {
	if o.Store == nil || o.Blobs == nil || o.Engine == nil || o.Auth == nil {
		return nil, errors.New("server: Store, Blobs, Engine and Auth are required")
	}
	cfg := o.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Feed == nil {
		o.Feed = NewFeed()
	}
	s := &Server{
		o: o, cfg: cfg, log: o.Logger, mux: http.NewServeMux(), closing: make(chan struct{}), streams: map[string]int{},
		keys: ratelimit.New(cfg.Rate, cfg.Burst, o.Now), fails: ratelimit.New(cfg.Rate, cfg.Burst, o.Now),
	}
	m, merr := newMetrics(o.Metrics)
	if merr != nil {
		return nil, fmt.Errorf("server: metrics: %w", merr)
	}
	s.metrics = m
	s.watch = newKeyWatch(o.Store, o.Now, cfg.StreamPoll, o.Logger)
	s.routes = s.table()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.pattern, s.wrap(rt))
	}
	if err := s.routeUI(); err != nil {
		return nil, fmt.Errorf("server: ui: %w", err)
	}
	s.mux.Handle("/", s.wrap(route{pattern: "/", scopes: anyKey, h: s.noRoute}))
	return s, nil
}

// handler is an endpoint: it writes a response, or returns an error the
// server answers in the error shape (before anything was written).
type handler func(w http.ResponseWriter, r *http.Request, c *call) error

// route is one endpoint: its method and pattern (net/http's syntax), the
// scopes of which the caller needs one (nil: any key; public: no key),
// and the largest request body it reads (0: Config.MaxBody).
type route struct {
	method  string
	pattern string
	public  bool
	scopes  []string
	body    int64
	h       handler
}

var (
	anyKey          = []string{}
	scopeRunsRead   = []string{auth.ScopeRunsRead}
	scopeRunsWrite  = []string{auth.ScopeRunsWrite}
	scopeApprovals  = []string{auth.ScopeApprovals}
	scopeApprovalsR = []string{auth.ScopeApprovals, auth.ScopeRunsRead}
	scopeAdmin      = []string{auth.ScopeAdmin}
	scopeSecrets    = []string{auth.ScopeSecretsWrite}
)

// table lists every endpoint; the OpenAPI document describes exactly
// these (a test checks).
func (s *Server) table() []route {
	return []route{
		{method: "GET", pattern: "/healthz", public: true, h: s.healthz},
		{method: "GET", pattern: "/readyz", public: true, h: s.readyz},
		{method: "GET", pattern: "/metrics", scopes: scopeAdmin, h: s.metricsText},
		{method: "GET", pattern: "/openapi.json", scopes: anyKey, h: s.openAPI},
		{method: "POST", pattern: "/v1/uploads", scopes: scopeRunsWrite, body: int64(s.cfg.MaxUpload), h: s.upload},
		{method: "POST", pattern: "/v1/runs", scopes: scopeRunsWrite, h: s.createRun},
		{method: "GET", pattern: "/v1/runs", scopes: scopeRunsRead, h: s.listRuns},
		{method: "GET", pattern: "/v1/runs/{id}", scopes: scopeRunsRead, h: s.getRun},
		{method: "DELETE", pattern: "/v1/runs/{id}", scopes: scopeRunsWrite, h: s.purgeRun},
		{method: "POST", pattern: "/v1/runs/{id}/cancel", scopes: scopeRunsWrite, h: s.cancelRun},
		{method: "POST", pattern: "/v1/runs/{id}/pause", scopes: scopeRunsWrite, h: s.pauseRun},
		{method: "POST", pattern: "/v1/runs/{id}/resume", scopes: scopeRunsWrite, h: s.resumeRun},
		{method: "POST", pattern: "/v1/runs/{id}/fork", scopes: scopeRunsWrite, h: s.forkRun},
		{method: "GET", pattern: "/v1/runs/{id}/events", scopes: scopeRunsRead, h: s.events},
		{method: "GET", pattern: "/v1/runs/{id}/events/stream", scopes: scopeRunsRead, h: s.stream},
		{method: "GET", pattern: "/v1/runs/{id}/artifacts", scopes: scopeRunsRead, h: s.listArtifacts},
		{method: "GET", pattern: "/v1/runs/{id}/artifacts/{name...}", scopes: scopeRunsRead, h: s.getArtifact},
		{method: "GET", pattern: "/v1/approvals", scopes: scopeApprovalsR, h: s.listApprovals},
		{method: "POST", pattern: "/v1/approvals/{id}/approve", scopes: scopeApprovals, h: s.approve},
		{method: "POST", pattern: "/v1/approvals/{id}/deny", scopes: scopeApprovals, h: s.deny},
		{method: "GET", pattern: "/v1/policies", scopes: scopeRunsRead, h: s.listPolicies},
		{method: "POST", pattern: "/v1/policies/validate", scopes: scopeRunsWrite, body: store.MaxPolicyLen, h: s.validatePolicy},
		{method: "POST", pattern: "/v1/policies/{name}", scopes: scopeAdmin, body: store.MaxPolicyLen, h: s.putPolicy},
		{method: "GET", pattern: "/v1/policies/{name}/versions", scopes: scopeRunsRead, h: s.policyVersions},
		{method: "GET", pattern: "/v1/policies/{name}/versions/{ref}", scopes: scopeRunsRead, h: s.policyVersion},
		{method: "GET", pattern: "/v1/templates", scopes: scopeRunsRead, h: s.listTemplates},
		{method: "POST", pattern: "/v1/templates/{name}", scopes: scopeAdmin, body: store.MaxTemplateLen, h: s.putTemplate},
		{method: "GET", pattern: "/v1/templates/{name}/versions", scopes: scopeRunsRead, h: s.templateVersions},
		{method: "GET", pattern: "/v1/templates/{name}/versions/{ref}", scopes: scopeRunsRead, h: s.templateVersion},
		{method: "DELETE", pattern: "/v1/templates/{name}", scopes: scopeAdmin, h: s.deleteTemplate},
		{method: "GET", pattern: "/v1/credits", scopes: scopeRunsRead, h: s.credits},
		{method: "POST", pattern: "/v1/credits/grants", scopes: scopeAdmin, h: s.grant},
		{method: "POST", pattern: "/v1/keys/{id}/revoke", scopes: scopeAdmin, h: s.revokeKey},
		{method: "GET", pattern: "/v1/sandboxes", scopes: scopeRunsRead, h: s.listSandboxes},
		{method: "GET", pattern: "/v1/sandboxes/{id}", scopes: scopeRunsRead, h: s.getSandbox},
		{method: "GET", pattern: "/v1/sandboxes/{id}/exposures", scopes: scopeRunsRead, h: s.listExposures},
		{method: "GET", pattern: "/v1/sandboxes/{id}/events", scopes: scopeRunsRead, h: s.sandboxEvents},
		{method: "DELETE", pattern: "/v1/sandboxes/{id}/exposures/{port}", scopes: scopeRunsWrite, h: s.revokeExposure},
		{method: "GET", pattern: "/v1/secrets", scopes: scopeSecrets, h: s.listSecrets},
		{method: "PUT", pattern: "/v1/secrets/{name}", scopes: scopeSecrets, body: maxSecretBody, h: s.putSecret},
		{method: "DELETE", pattern: "/v1/secrets/{name}", scopes: scopeSecrets, h: s.deleteSecret},
		{method: "GET", pattern: "/v1/deletions", scopes: scopeRunsRead, h: s.listDeletions},
		{method: "DELETE", pattern: "/v1/tenants/{name}", scopes: scopeAdmin, h: s.deleteTenant},
	}
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// HTTPServer returns an http.Server for the API with its header limit and
// timeouts; shutting it down ends the event streams (CloseStreams), so
// that Shutdown does not wait for them.
func (s *Server) HTTPServer() *http.Server {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    int(s.cfg.MaxHeader),
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	hs.RegisterOnShutdown(s.CloseStreams)
	return hs
}

// CloseStreams ends every event stream (clients reconnect with
// Last-Event-ID, to this process or another) and makes /readyz answer
// unavailable: the server is draining.
func (s *Server) CloseStreams() {
	s.draining.Store(true)
	s.closeOnce.Do(func() { close(s.closing) })
}

// call is one request as the handlers see it.
type call struct {
	id  string
	p   auth.Principal
	log *slog.Logger
	// view is the caller's tenant's view of the store; nil for public
	// endpoints.
	view *store.TenantStore
	// session is the SHA-256 of the UI session's id the request was
	// authenticated by; nil for an API key's.
	session *[sha256.Size]byte
}

// wrap puts an endpoint behind the request id, authentication, rate limit
// and scope checks, and catches panics.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		c := &call{id: newRequestID()}
		c.log = s.log.With("request_id", c.id)
		annotate(r, rt, c)
		rec.Header().Set("X-Request-Id", c.id)
		rec.Header().Set("X-Content-Type-Options", "nosniff")
		// A slow client may not hold a connection: the body must arrive
		// within Config.RequestTimeout, and the answer be taken within
		// twice it, which leaves time to say that the body did not come
		// (streams, uploads and downloads set deadlines of their own).
		rc := http.NewResponseController(rec)
		_ = rc.SetReadDeadline(start.Add(s.cfg.RequestTimeout))
		_ = rc.SetWriteDeadline(start.Add(2 * s.cfg.RequestTimeout))
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler { //nolint:errorlint // a panic value, compared as net/http compares it
					panic(v)
				}
				c.log.Error("panic serving request", "route", rt.pattern, "panic", fmt.Sprint(v))
				if !rec.wrote {
					s.writeError(rec, c, errors.New("panic"))
				}
			}
			s.metrics.request(strings.TrimSpace(rt.method+" "+rt.pattern), strconv.Itoa(rec.status()), time.Since(start))
			c.log.Debug("request", "method", r.Method, "route", rt.pattern, "status", rec.status(),
				"duration_ms", time.Since(start).Milliseconds())
		}()
		if !rt.public {
			if err := s.authenticate(r, c); err != nil {
				s.writeError(rec, c, err)
				return
			}
			c.log = c.log.With("tenant", c.p.Tenant, "key_id", c.p.KeyID)
			annotateTenant(r, c)
			if !mayCall(c.p, rt.scopes) {
				s.writeError(rec, c, publicf(api.CodeForbidden, "this key lacks the scope %s", strings.Join(rt.scopes, " or ")))
				return
			}
		}
		// A body announced over the route's limit is refused before any
		// of it is read: reading would send a client that asked first
		// (Expect: 100-continue, as curl does for large bodies) 100
		// Continue, and the connection would be reset under its upload
		// rather than answered. net/http closes the connection after
		// this answer, unread body and all. A body without a length is
		// cut at the limit as it is read.
		limit := rt.body
		if limit == 0 {
			limit = int64(s.cfg.MaxBody)
		}
		if r.ContentLength > limit {
			s.writeError(rec, c, publicf(api.CodeTooLarge, "the request body is over %d bytes", limit))
			return
		}
		r.Body = http.MaxBytesReader(rec, r.Body, limit)
		if err := rt.h(rec, r, c); err != nil {
			if rec.wrote {
				c.log.Warn("request failed after its response began", "route", rt.pattern, "err", err)
				return
			}
			s.writeError(rec, c, err)
		}
	})
}

func mayCall(p auth.Principal, scopes []string) bool {
	if len(scopes) == 0 {
		return true
	}
	for _, sc := range scopes {
		if p.Can(sc) {
			return true
		}
	}
	return false
}

// authenticate verifies the request's API key (or, with no key but a UI
// session cookie, the session: authenticateSession), then takes a token of
// the key's rate limit. A remote address that keeps failing is limited before
// its keys are even looked up.
func (s *Server) authenticate(r *http.Request, c *call) error {
	if sessionCall(r) {
		return s.authenticateSession(r, c)
	}
	key, err := apiKey(r)
	if err != nil {
		return err
	}
	addr := "addr:" + remoteHost(r)
	if blocked, wait := s.fails.Blocked(addr); blocked {
		return &apiError{code: api.CodeRateLimited, msg: "too many failed authentications; retry later", retryAfter: ratelimit.RetryAfter(wait)}
	}
	p, err := s.o.Auth.Verify(r.Context(), key)
	switch {
	case err == nil && store.ValidateTenant(p.Tenant) != nil:
		c.log.Error("authentication: a key's principal has no valid tenant", "key_id", p.KeyID)
		return publicf(api.CodeUnauthenticated, "the API key is not valid")
	case auth.TenantDeleted(err):
		c.log.Info("authentication failed", "err", err)
		return publicf(api.CodeUnauthenticated, "the API key is not valid: its tenant is being deleted")
	case errors.Is(err, auth.ErrUnauthenticated):
		s.fails.Allow(addr)
		c.log.Info("authentication failed", "err", err)
		return publicf(api.CodeUnauthenticated, "the API key is not valid")
	case err != nil:
		// The key store failed: not the caller's fault, and no answer
		// about the key.
		c.log.Error("authentication: cannot verify keys", "err", err)
		return publicf(api.CodeUnavailable, "cannot verify API keys now; retry later")
	}
	c.p = p
	if ok, wait := s.keys.Allow("key:" + p.KeyID + "\x00" + p.Tenant); !ok {
		return &apiError{code: api.CodeRateLimited, msg: "too many requests for this key; retry later", retryAfter: ratelimit.RetryAfter(wait)}
	}
	c.view = store.ForTenant(s.o.Store, p.Tenant)
	return nil
}

// maxKeyLen bounds an API key as presented.
const maxKeyLen = 512

// apiKey reads the key of "Authorization: Bearer KEY" or "X-API-Key: KEY".
func apiKey(r *http.Request) (string, error) {
	var key string
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, rest, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", publicf(api.CodeUnauthenticated, "the Authorization header must be Bearer and an API key")
		}
		key = strings.TrimSpace(rest)
	} else {
		key = strings.TrimSpace(r.Header.Get("X-API-Key"))
	}
	switch {
	case key == "":
		return "", publicf(api.CodeUnauthenticated, "an API key is required (Authorization: Bearer KEY)")
	case len(key) > maxKeyLen:
		return "", publicf(api.CodeUnauthenticated, "the API key is not valid")
	}
	return key, nil
}

func remoteHost(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// recorder remembers whether and with which status a response began. It
// unwraps for http.ResponseController (flushes and deadlines).
type recorder struct {
	http.ResponseWriter
	wrote bool
	code  int
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.wrote, r.code = true, code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.wrote, r.code = true, http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		if !r.wrote {
			r.wrote, r.code = true, http.StatusOK
		}
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if !r.wrote {
		return 0
	}
	return r.code
}

// noRoute answers a path no endpoint has, or a method an endpoint's path
// does not take.
func (s *Server) noRoute(_ http.ResponseWriter, r *http.Request, _ *call) error {
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			return publicf(api.CodeMethodNotAllowed, "%s is not allowed here", clipText(r.Method, 16))
		}
	}
	return errNoRoute
}

// decodeBody reads one JSON value of at most limit bytes from rd into v:
// unknown fields and trailing data are errors; an empty body leaves v as
// it is when optional.
func decodeBody(rd io.Reader, v any, optional bool) error {
	er := &errReader{r: rd}
	dec := json.NewDecoder(er)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(er.err, &tooLarge):
		return er.err
	case er.err != nil:
		// A connection that broke or timed out: nothing about it is
		// the client's to read.
		return badRequest("the request body could not be read")
	}
	switch {
	case errors.Is(err, io.EOF) && optional:
		return nil
	case errors.Is(err, io.EOF):
		return badRequest("the request needs a JSON body")
	case err != nil:
		return badRequest("malformed JSON body: %s", clipText(strings.TrimPrefix(err.Error(), "json: "), 300))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if errors.As(er.err, &tooLarge) {
			return er.err
		}
		return badRequest("malformed JSON body: data after the JSON value")
	}
	return nil
}

// errReader remembers the first read error other than io.EOF, so that a
// broken connection is told apart from malformed JSON.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && e.err == nil {
		e.err = err
	}
	return n, err
}

// decode reads the request's JSON body into v, within Config.MaxBody.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	return decodeBody(http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxBody)), v, optional)
}

// clipText bounds text quoted back to a client and makes it valid UTF-8.
func clipText(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request, _ *call) error {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyz answers ok when the store answers and the server is not
// draining.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.draining.Load() {
		return publicf(api.CodeUnavailable, "the server is shutting down")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.o.Store.ListRuns(ctx, store.RunFilter{Limit: 1}); err != nil {
		c.log.Warn("readiness: the store does not answer", "err", err)
		return publicf(api.CodeUnavailable, "the store does not answer")
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	return nil
}

func (s *Server) metricsText(w http.ResponseWriter, r *http.Request, _ *call) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}
