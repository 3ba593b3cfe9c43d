package e2b

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/param"
)

// publicError is an error whose text is written for the client, with the
// HTTP status it answers.
type publicError struct {
	status int
	msg    string
}

func (e *publicError) Error() string { return e.msg }

// errNoSandbox answers every id the caller may not see: unknown, killed,
// or another tenant's. The SDK reads "not found" from the body's code.
var errNoSandbox = &publicError{status: 404, msg: "sandbox not found"}

// apiError is the control plane's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"code":500,"message":"internal error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeAPIError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// caller is an authenticated control-plane request.
type caller struct {
	p auth.Principal
}

// apiFunc is a control-plane handler; a returned error is answered (a
// publicError with its text, anything else as an internal error).
type apiFunc func(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error

func (s *Server) apiRoutes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, op string, f apiFunc) {
		mux.Handle(pattern, s.authed(op, f))
	}
	handle("POST /sandboxes", "sandbox.create", s.handleCreate)
	handle("POST /v2/sandboxes", "sandbox.create", s.handleCreate)
	handle("GET /sandboxes", "sandbox.list", s.handleList)
	handle("GET /v2/sandboxes", "sandbox.list", s.handleList)
	handle("GET /sandboxes/{id}", "sandbox.info", s.handleInfo)
	handle("DELETE /sandboxes/{id}", "sandbox.kill", s.handleKill)
	handle("POST /sandboxes/{id}/timeout", "sandbox.timeout", s.handleTimeout)
	handle("POST /sandboxes/{id}/refreshes", "sandbox.refresh", s.handleRefresh)
	handle("POST /sandboxes/{id}/connect", "sandbox.connect", s.handleConnect)
	handle("POST /v2/sandboxes/{id}/connect", "sandbox.connect", s.handleConnect)
	handle("POST /sandboxes/{id}/resume", "sandbox.resume", s.handleConnect)
	handle("POST /sandboxes/{id}/pause", "sandbox.pause", s.handlePause)
	handle("GET /sandboxes/{id}/metrics", "sandbox.metrics", s.handleMetrics)
	handle("POST /sandboxes/{id}/snapshots", "snapshot.create", s.handleCreateSnapshot)
	handle("POST /sandboxes/{id}/fork", "sandbox.fork", s.handleFork)
	handle("PUT /sandboxes/{id}/network", "sandbox.network", s.handleUpdateNetwork)
	handle("GET /snapshots", "snapshot.list", s.handleListSnapshots)
	handle("DELETE /templates/{templateID}", "snapshot.delete", s.handleDeleteSnapshot)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotImplemented, fmt.Sprintf("%s %s is not served by airlock's E2B API", r.Method, clip(r.URL.Path)))
	})
	return mux
}

// authed checks the API key and the sandboxes scope, bounds the body, and
// audits the call.
func (s *Server) authed(op string, f apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		key := r.Header.Get("X-API-KEY")
		p, err := s.o.Keys.Verify(ctx, key)
		switch {
		case auth.TenantDeleted(err):
			s.audit.record(Record{Op: op, Outcome: "unauthenticated", Sandbox: clip(r.PathValue("id"))})
			writeAPIError(w, http.StatusUnauthorized, "invalid API key: its tenant is being deleted")
			return
		case errors.Is(err, auth.ErrUnauthenticated):
			s.audit.record(Record{Op: op, Outcome: "unauthenticated", Sandbox: clip(r.PathValue("id"))})
			writeAPIError(w, http.StatusUnauthorized, "invalid API key")
			return
		case err != nil:
			s.log.Error("verify API key", "err", err)
			writeAPIError(w, http.StatusServiceUnavailable, "the key store is unavailable; try again")
			return
		case !p.Can(auth.ScopeSandboxes):
			s.audit.record(Record{Tenant: p.Tenant, KeyID: p.KeyID, Op: op, Outcome: "forbidden"})
			writeAPIError(w, http.StatusForbidden, "this API key lacks the sandboxes scope")
			return
		}
		if ok, wait := s.apiLimit.Allow(p.KeyID); !ok {
			// 429 with an integer Retry-After: the SDK waits and retries,
			// then raises RateLimitError.
			s.audit.record(Record{Tenant: p.Tenant, KeyID: p.KeyID, Op: op, Outcome: "limited", Sandbox: r.PathValue("id")})
			w.Header().Set("Retry-After", retryAfter(wait))
			writeAPIError(w, http.StatusTooManyRequests, fmt.Sprintf("rate limit: an API key makes %g calls a second (%d at once); retry later", s.cfg.APIRate, s.cfg.APIBurst))
			return
		}
		// A body announced over the limit is refused unread, as the
		// airlock API does: reading it would answer a client that asked
		// first (Expect: 100-continue) 100 Continue, then reset it.
		if r.ContentLength > s.cfg.MaxMessage {
			s.audit.record(Record{Tenant: p.Tenant, KeyID: p.KeyID, Op: op, Outcome: "invalid", Sandbox: clip(r.PathValue("id")), Detail: "body too large"})
			writeAPIError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", s.cfg.MaxMessage))
			return
		}
		if id := r.PathValue("id"); id != "" && s.lookup(p.Tenant, id) == nil && s.relayAPI(w, r, p.Tenant, id) {
			// Another replica's sandbox: that replica answered (and
			// audits the call); this one records the relay.
			s.audit.record(Record{Tenant: p.Tenant, KeyID: p.KeyID, Op: op, Outcome: "relayed", Sandbox: clip(id)})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxMessage)
		err = f(ctx, w, r, caller{p: p})
		rec := Record{Tenant: p.Tenant, KeyID: p.KeyID, Op: op, Outcome: "ok", Sandbox: r.PathValue("id")}
		if err != nil {
			var pe *publicError
			if errors.As(err, &pe) {
				rec.Outcome, rec.Detail = outcomeOf(pe.status), clipDetail(pe.msg)
				writeAPIError(w, pe.status, pe.msg)
			} else {
				rec.Outcome = "error"
				s.log.Error("e2b API", "op", op, "tenant", p.Tenant, "sandbox_id", rec.Sandbox, "err", err)
				writeAPIError(w, http.StatusInternalServerError, "internal error")
			}
			if pe == errNoSandbox {
				// An id the caller may not see is recorded without it
				// being linked to whoever owns it.
				rec.Outcome = "not_found"
			}
		}
		if (op != "sandbox.list" && op != "snapshot.list") || err != nil {
			s.audit.record(rec)
		}
	})
}

func outcomeOf(status int) string {
	switch status {
	case 400, 413:
		return "invalid"
	case 403:
		return "denied"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	case 429:
		return "limited"
	}
	return "error"
}

// readBody decodes a JSON body into v; an empty body is {}.
func readBody(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &publicError{status: 413, msg: fmt.Sprintf("the request body is over %d bytes", mb.Limit)}
		}
		return &publicError{status: 400, msg: "reading the request body failed"}
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &publicError{status: 400, msg: "malformed JSON body: " + clip(err.Error())}
	}
	return nil
}

// sandboxJSON is the Sandbox schema: what create and connect return.
type sandboxJSON struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// TrafficAccessToken is set when a port of the sandbox needs it.
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	Domain             string `json:"domain,omitempty"`
}

// clientID is the deprecated, required clientID field.
const clientID = "airlock"

func (s *Server) sandboxJSON(b *box) sandboxJSON {
	return sandboxJSON{
		SandboxID: b.id, TemplateID: b.template.name, ClientID: clientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: b.token, TrafficAccessToken: b.trafficToken(), Domain: s.cfg.Domain,
	}
}

// listedJSON is the ListedSandbox schema; detailJSON adds SandboxDetail's
// fields.
type listedJSON struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	EnvdVersion string            `json:"envdVersion"`
	State       string            `json:"state"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

type detailJSON struct {
	listedJSON
	EnvdAccessToken     string        `json:"envdAccessToken,omitempty"`
	Domain              string        `json:"domain,omitempty"`
	AllowInternetAccess bool          `json:"allowInternetAccess"`
	Lifecycle           lifecycleJSON `json:"lifecycle"`
	Network             networkJSON   `json:"network"`
	// PauseKind is set while the sandbox is paused: what the pause kept,
	// "memory" (its processes, frozen) or "filesystem"; PauseNote says
	// why a pause that asked for memory kept files only, or lost its
	// memory since. ResumeKind and ResumeNote say the same of a running
	// sandbox's last resume. Airlock fields; E2B's SDKs ignore them.
	PauseKind  string `json:"pauseKind,omitempty"`
	PauseNote  string `json:"pauseNote,omitempty"`
	ResumeKind string `json:"resumeKind,omitempty"`
	ResumeNote string `json:"resumeNote,omitempty"`
}

// networkJSON is SandboxNetworkConfig as getInfo tells it.
type networkJSON struct {
	AllowPublicTraffic bool `json:"allowPublicTraffic"`
}

type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

func (s *Server) listedJSON(b *box) listedJSON {
	b.mu.Lock()
	state, end := b.state, b.endAt
	b.mu.Unlock()
	l := b.spec.Limits
	return listedJSON{
		SandboxID: b.id, TemplateID: b.template.name, ClientID: clientID, StartedAt: b.started, EndAt: end.UTC(),
		CPUCount: max(1, int(l.CPUs+0.999)), MemoryMB: l.MemoryBytes >> 20, DiskSizeMB: l.DiskBytes >> 20, EnvdVersion: EnvdVersion,
		State: state, Metadata: b.metadata,
	}
}

func (s *Server) handleCreate(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req createRequest
	if err := readBody(r, &req); err != nil {
		return err
	}
	b, err := s.create(ctx, c.p.Tenant, c.p.KeyID, req)
	if err != nil {
		return err
	}
	s.audit.record(Record{
		Tenant: b.tenant, KeyID: c.p.KeyID, Sandbox: b.id, Op: "sandbox.boot", Outcome: "ok",
		Detail: clipDetail(fmt.Sprintf("template %s (%s), env keys %s", b.template.name, b.template.source, strings.Join(slices.Sorted(maps.Keys(b.envs)), ","))),
	})
	w.Header().Set("Location", "/sandboxes/"+b.id)
	if note := s.internetNote(req.AllowInternetAccess, b.template); note != "" {
		w.Header().Set(internetHeader, note)
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(b))
	return nil
}

func (s *Server) handleInfo(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	d := detailJSON{
		listedJSON: s.listedJSON(b), EnvdAccessToken: b.token, Domain: s.cfg.Domain,
		AllowInternetAccess: b.internet && s.hasEgress(b.template), Lifecycle: lifecycleJSON{OnTimeout: "kill", AutoResume: b.autoResume},
		Network: networkJSON{AllowPublicTraffic: !b.private},
	}
	if b.autoPause {
		d.Lifecycle.OnTimeout = "pause"
	}
	b.mu.Lock()
	if d.State == statePaused {
		d.PauseKind, d.PauseNote = cmpOr(b.pauseKind, pauseKindFilesystem), b.pauseNote
	} else {
		d.ResumeKind, d.ResumeNote = b.resumeKind, b.resumeNote
	}
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *Server) handleKill(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	s.end(ctx, b, endKilled, c.p.KeyID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// timeoutRequest is the body of timeout, connect and resume.
type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
	// Duration is refreshes' name for it.
	Duration *int64 `json:"duration"`
	// Memory asks connect or pause to keep memory.
	Memory *bool `json:"memory"`
}

func (s *Server) handleTimeout(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req timeoutRequest
	if err := readBody(r, &req); err != nil {
		return err
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	if req.Timeout == nil {
		return &publicError{status: 400, msg: "timeout: required, in seconds"}
	}
	d, err := s.timeoutOf(req.Timeout, b.template, b.tenant)
	if err != nil {
		return &publicError{status: 400, msg: err.Error()}
	}
	b.mu.Lock()
	b.endAt = s.now().Add(d)
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleRefresh extends the lifetime by duration seconds, never shortens
// it (the older keep-alive call).
func (s *Server) handleRefresh(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req timeoutRequest
	if err := readBody(r, &req); err != nil {
		return err
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	d, err := s.timeoutOf(req.Duration, b.template, b.tenant)
	if err != nil {
		return &publicError{status: 400, msg: err.Error()}
	}
	b.mu.Lock()
	if end := s.now().Add(d); end.After(b.endAt) {
		b.endAt = end
	}
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleConnect answers 200 for a running sandbox (its lifetime extended
// to the timeout asked, never shortened) and 201 for a paused one, which
// it resumes: a fresh sandbox from the workspace snapshot.
func (s *Server) handleConnect(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req timeoutRequest
	if err := readBody(r, &req); err != nil {
		return err
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	d, err := s.timeoutOf(req.Timeout, b.template, b.tenant)
	if err != nil {
		return &publicError{status: 400, msg: err.Error()}
	}
	b.mu.Lock()
	state := b.state
	if state == stateRunning {
		if end := s.now().Add(d); end.After(b.endAt) {
			b.endAt = end
		}
	}
	b.mu.Unlock()
	switch state {
	case stateRunning:
		writeJSON(w, http.StatusOK, s.sandboxJSON(b))
		return nil
	case statePaused:
		if err := s.resume(ctx, b, d); err != nil {
			return err
		}
		b.mu.Lock()
		kind, note := b.resumeKind, b.resumeNote
		b.mu.Unlock()
		detail := "thawed in place: processes and memory kept"
		if kind != pauseKindMemory {
			detail = "fresh sandbox from the workspace snapshot; memory not kept"
			if note != "" {
				detail += ": " + note
			}
		}
		s.audit.record(Record{Tenant: b.tenant, KeyID: c.p.KeyID, Sandbox: b.id, Op: "sandbox.resume", Outcome: "ok", Detail: clipDetail(detail)})
		w.Header().Set(resumeKindHeader, kind)
		writeJSON(w, http.StatusCreated, s.sandboxJSON(b))
		return nil
	}
	return errNoSandbox
}

func (s *Server) handlePause(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req timeoutRequest
	if err := readBody(r, &req); err != nil {
		return err
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	// Memory is kept unless asked not to (the SDK sends memory: true by
	// default, false for keepMemory: false).
	if err := s.pause(ctx, b, "api", req.Memory == nil || *req.Memory); err != nil {
		return err
	}
	b.mu.Lock()
	kind, note := b.pauseKind, b.pauseNote
	b.mu.Unlock()
	w.Header().Set(pauseKindHeader, kind)
	if note != "" {
		w.Header().Set(pauseNoteHeader, note)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// internetHeader answers a create that asked for internet access the
// sandbox does not have: "none; " and why.
const internetHeader = "Airlock-Internet-Access"

// What a pause kept, told in the pause response's header and a paused
// sandbox's getInfo (pauseKind): pauseKindMemory (freeze.go), or
// pauseKindFilesystem, the workspace's files only: running processes,
// memory and open connections end, and a resume boots afresh. The resume
// (connect) response's header says what the resume restored.
const (
	pauseKindHeader     = "Airlock-Pause-Kind"
	pauseNoteHeader     = "Airlock-Pause-Note"
	resumeKindHeader    = "Airlock-Resume-Kind"
	pauseKindFilesystem = "filesystem"
)

// List paging.
const (
	defaultListLimit = 100
	maxListLimit     = 100
)

// listQuery is a parsed list call.
type listQuery struct {
	metadata     map[string]string
	states       map[string]bool
	template     string
	startedAfter time.Time
	desc         bool
	limit        int
	after        cursor
}

// The whole-number parameters of a list call: package param checks each
// against its bounds, as it does the airlock API's.
var (
	listLimitParam = param.Int{Name: "limit", Min: 1, Max: maxListLimit, Default: defaultListLimit}
	// tokenTimeParam is the start time in a page token, in nanoseconds
	// since 1970 (a token's, not a client's, unless forged).
	tokenTimeParam = param.Int{Name: "nextToken", Max: math.MaxInt64}
)

// cursor is the last sandbox of a page: X-Next-Token is its encoding.
type cursor struct {
	started time.Time
	id      string
}

func (c cursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.started.UnixNano(), 10) + "." + c.id))
}

func parseCursor(tok string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) > 128 {
		return cursor{}, errors.New("malformed")
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := tokenTimeParam.Parse(ns)
	if !ok || ns == "" || err != nil || id == "" {
		return cursor{}, errors.New("malformed")
	}
	return cursor{started: time.Unix(0, n).UTC(), id: id}, nil
}

// parseListQuery reads a list call's query: metadata (itself a query
// string, encoded once more), state (comma-joined), template,
// startedAfter (RFC 3339), order, limit, nextToken.
func parseListQuery(q url.Values) (listQuery, error) {
	lq := listQuery{limit: defaultListLimit, states: map[string]bool{}}
	if m := q.Get("metadata"); m != "" {
		if len(m) > 8<<10 {
			return lq, errors.New("metadata: too long")
		}
		mv, err := url.ParseQuery(m)
		if err != nil {
			return lq, errors.New("metadata: want key=value pairs joined with &")
		}
		lq.metadata = map[string]string{}
		for k, vs := range mv {
			lq.metadata[k] = vs[len(vs)-1]
		}
	}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			switch st {
			case stateRunning, statePaused:
				lq.states[st] = true
			case "":
			default:
				return lq, fmt.Errorf("state %q: want running or paused", clip(st))
			}
		}
	}
	if len(lq.states) == 0 {
		lq.states = map[string]bool{stateRunning: true, statePaused: true}
	}
	lq.template = q.Get("template")
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return lq, errors.New("startedAfter: want an RFC 3339 time")
		}
		lq.startedAfter = t
	}
	switch q.Get("order") {
	case "asc":
	case "", "desc":
		// E2B's default: newest first.
		lq.desc = true
	default:
		return lq, errors.New("order: want asc or desc")
	}
	n, err := listLimitParam.Parse(q.Get("limit"))
	if err != nil {
		return lq, err
	}
	lq.limit = int(n)
	if v := q.Get("nextToken"); v != "" {
		c, err := parseCursor(v)
		if err != nil {
			return lq, errors.New("nextToken: not a token this server gave")
		}
		lq.after = c
	}
	return lq, nil
}

func (s *Server) handleList(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	lq, err := parseListQuery(r.URL.Query())
	if err != nil {
		return &publicError{status: 400, msg: err.Error()}
	}
	s.mu.Lock()
	var mine []*box
	for _, b := range s.boxes {
		if b.tenant == c.p.Tenant {
			mine = append(mine, b)
		}
	}
	s.mu.Unlock()
	all := make([]listedJSON, 0, len(mine))
	for _, b := range mine {
		all = append(all, s.listedJSON(b))
	}
	// The other replicas' sandboxes, from their records.
	all = append(all, s.remoteListed(ctx, c.p.Tenant)...)
	var rows []listedJSON
	for _, l := range all {
		if !lq.states[l.State] || (lq.template != "" && lq.template != l.TemplateID) || (!lq.startedAfter.IsZero() && !l.StartedAt.After(lq.startedAfter)) {
			continue
		}
		match := true
		for k, v := range lq.metadata {
			if got, ok := l.Metadata[k]; !ok || got != v {
				match = false
			}
		}
		if match {
			rows = append(rows, l)
		}
	}
	order := func(a, b listedJSON) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.SandboxID, b.SandboxID)
	}
	slices.SortFunc(rows, order)
	if lq.desc {
		slices.Reverse(rows)
	}
	if lq.after.id != "" {
		at := listedJSON{StartedAt: lq.after.started, SandboxID: lq.after.id}
		i := 0
		for i < len(rows) && !(lq.desc && order(rows[i], at) < 0 || !lq.desc && order(rows[i], at) > 0) {
			i++
		}
		rows = rows[i:]
	}
	if len(rows) > lq.limit {
		rows = rows[:lq.limit]
		last := rows[len(rows)-1]
		w.Header().Set("X-Next-Token", cursor{started: last.StartedAt, id: last.SandboxID}.token())
	}
	if rows == nil {
		rows = []listedJSON{}
	}
	writeJSON(w, http.StatusOK, rows)
	return nil
}
