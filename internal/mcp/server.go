package mcp

import (
	"context"
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

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/ratelimit"
	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/tools"
)

// Sandboxes boots the sandboxes of MCP sessions. The wiring provides it:
// this host's backend for `airlock mcp`, the server's for `/mcp`.
type Sandboxes interface {
	// Create boots a sandbox as req asks for caller p. A request the
	// caller should correct (an unknown policy or image, a bad limit) is a
	// *RequestError; its message is shown to the client.
	Create(ctx context.Context, p auth.Principal, req CreateRequest) (*Box, error)
}

// CreateRequest is what create_sandbox asks for. Empty fields take the
// policy's values.
type CreateRequest struct {
	// Policy names a stored policy; "" is the session's default policy.
	Policy string `json:"policy,omitempty"`
	// Image names an image of the host's store for the sandbox's root.
	Image string `json:"image,omitempty"`
	// Memory and Disk are sizes ("512M", "2G"); Pids and CPUs numbers.
	Memory string  `json:"memory,omitempty"`
	Disk   string  `json:"disk,omitempty"`
	Pids   int64   `json:"pids,omitempty"`
	CPUs   float64 `json:"cpus,omitempty"`
}

// Box is a sandbox booted for a session and what governs it.
type Box struct {
	Sandbox sandbox.Sandbox
	// Policy decides every tool call in the sandbox.
	Policy *policy.Document
	// PolicyName is the policy's name as the client knows it ("default").
	PolicyName string
	// Destroy ends the sandbox and whatever serves it (its egress proxy).
	// It is called once.
	Destroy func(ctx context.Context) error
}

// RequestError is a failure the client caused and may correct; its Msg is
// shown as it is.
type RequestError struct{ Msg string }

func (e *RequestError) Error() string { return e.Msg }

// Options configure a Server. Sandboxes is required.
type Options struct {
	Sandboxes Sandboxes
	// Approver holds asked calls; nil answers every ask with a denial
	// that says no approvals can be held here.
	Approver Approver
	// Audit receives one JSON line (a Record) per call; nil records none.
	Audit io.Writer
	// Runs, when not nil, adds the run-level tools (start_run,
	// run_status, run_timeline, list_approvals, decide_approval).
	Runs Runs
	// Limits configure the sandbox tools (timeouts, result caps).
	Limits tools.Limits
	// Redact scrubs a result's text before it leaves the host (secret
	// values that may have reached a sandbox); nil leaves it as it is.
	Redact func(string) string
	// ProgressInterval is how often a call that waits (a running
	// command, a held approval) sends a progress notification to a
	// client that asked for them; default 1s.
	ProgressInterval time.Duration
	// RateLimit, when not nil, limits each API key's requests to the
	// HTTP handler (a request past it is answered 429 with Retry-After,
	// before the protocol sees it); FailLimit limits the failed
	// authentications of each remote address the same way. Nil limits
	// nothing.
	RateLimit, FailLimit *ratelimit.Limiter
	// Preview, when not nil, is the data plane expose_port's URLs are
	// on (airlock serve's), which hands their requests to ServePort. Nil
	// opens a listener of the host for each exposed port instead (airlock
	// mcp, whose client is on this machine).
	Preview Preview
	// PortHost is the address expose_port's listeners are opened on
	// (each on a port of its own) and its URLs name, without Preview;
	// default 127.0.0.1.
	PortHost string
	// Events, when not nil, keeps each event a sandbox reports (each is
	// also an audit line of source sandbox), beyond the session's memory
	// and under the tenant's retention; nil keeps them in memory only.
	Events store.SandboxEvents
	// Version is airlock's version, reported to clients.
	Version string
	Now     func() time.Time
	Logger  *slog.Logger
}

// Server serves airlock's sandbox tools over MCP. It is safe for
// concurrent use; Close destroys every sandbox it still holds.
type Server struct {
	o     Options
	tools []tools.Tool

	mu sync.Mutex
	// sessions holds the state of each live MCP session (guarded by mu).
	sessions map[*sdk.ServerSession]*session
	// closed is set by Close; no sandbox is created after it (guarded by mu).
	closed bool
	// servers are the SDK servers made by ServeStdio and Handler (guarded
	// by mu), whose sessions Close ends.
	servers []*sdk.Server
	// preview holds the sandboxes with a port on the data plane, by id
	// (guarded by mu).
	preview map[string]previewBox
	// wg counts the goroutines that end sessions.
	wg sync.WaitGroup

	auditMu sync.Mutex // serialises lines of Options.Audit
}

// New returns a Server.
func New(o Options) *Server {
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Redact == nil {
		o.Redact = func(s string) string { return s }
	}
	if o.PortHost == "" {
		o.PortHost = "127.0.0.1"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return &Server{o: o, tools: tools.SandboxTools(o.Limits), sessions: map[*sdk.ServerSession]*session{}}
}

// principalFunc says who makes a call.
type principalFunc func(ctx context.Context, req *sdk.CallToolRequest) (auth.Principal, error)

// ServeStdio serves one session over t (stdio, or in-process pipes) for
// p, until the client leaves or ctx ends; the session's sandboxes are
// destroyed before it returns.
func (s *Server) ServeStdio(ctx context.Context, t sdk.Transport, p auth.Principal) error {
	srv := s.sdkServer(func(context.Context, *sdk.CallToolRequest) (auth.Principal, error) { return p, nil })
	ss, err := srv.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcp: connect: %w", err)
	}
	err = ss.Wait()
	s.wg.Wait()
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// Authenticator verifies the API key of an HTTP request's headers.
type Authenticator func(ctx context.Context, h http.Header) (auth.Principal, error)

// Handler returns the Streamable HTTP handler (with its SSE streams) for
// /mcp. Every request must carry a key authn accepts: one it refuses is
// answered 401 before the protocol sees it; each call is authorised again
// by the key's scopes.
func (s *Server) Handler(authn Authenticator) http.Handler {
	srv := s.sdkServer(func(ctx context.Context, req *sdk.CallToolRequest) (auth.Principal, error) {
		if req.Extra == nil || req.Extra.Header == nil {
			return auth.Principal{}, errors.New("no API key: the call carries no HTTP headers")
		}
		return authn(ctx, req.Extra.Header)
	})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Logger:              s.o.Logger,
		MaxRequestBodyBytes: 4 << 20,
		// Why: the SDK refuses a request that reached a loopback
		// listener with another Host, against DNS rebinding of an
		// unauthenticated local server. Every request here carries an
		// API key a rebinding page does not have, and a reverse proxy on
		// the same machine (Host: airlock.example.com to 127.0.0.1) must
		// work.
		DisableLocalhostProtection: true,
	})
	refuse := func(w http.ResponseWriter, status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": codeForbidden, "message": msg}})
		_, _ = w.Write(b)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := "addr:" + remoteHost(r)
		if s.o.FailLimit != nil {
			if blocked, wait := s.o.FailLimit.Blocked(addr); blocked {
				w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetryAfter(wait)))
				refuse(w, http.StatusTooManyRequests, "rate limited: too many failed authentications; retry later")
				return
			}
		}
		p, err := authn(r.Context(), r.Header)
		if err != nil {
			if s.o.FailLimit != nil {
				s.o.FailLimit.Allow(addr)
			}
			refuse(w, http.StatusUnauthorized, "unauthorized: "+err.Error())
			return
		}
		if s.o.RateLimit != nil {
			// The key's bucket, as the API's (a key id is unique, the
			// tenant keeps two tenants' buckets apart regardless).
			if ok, wait := s.o.RateLimit.Allow("key:" + p.KeyID + "\x00" + p.Tenant); !ok {
				w.Header().Set("Retry-After", strconv.Itoa(ratelimit.RetryAfter(wait)))
				refuse(w, http.StatusTooManyRequests, "rate limited: too many requests for this key; retry later")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// remoteHost is the host of r's remote address.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Close ends every session (an HTTP client's streams end with it) and
// destroys their sandboxes. Sessions still open get no new sandbox.
func (s *Server) Close(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	var all []*session
	for _, se := range s.sessions {
		all = append(all, se)
	}
	servers := append([]*sdk.Server(nil), s.servers...)
	s.mu.Unlock()
	for _, srv := range servers {
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	}
	for _, se := range all {
		se.destroyAll(ctx, s)
	}
	s.wg.Wait()
}

// watch ends ss's sandboxes when it ends.
//
// Preconditions: s.mu is held, ss has just been added to s.sessions.
func (s *Server) watch(ss *sdk.ServerSession, se0 *session) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = ss.Wait()
		close(se0.done)
		s.mu.Lock()
		se := s.sessions[ss]
		delete(s.sessions, ss)
		s.mu.Unlock()
		if se != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			se.destroyAll(ctx, s)
		}
	}()
}

// session returns ss's state, making it on first use.
func (s *Server) session(ss *sdk.ServerSession) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[ss]
	if se == nil {
		se = &session{id: ss.ID(), boxes: map[string]*liveBox{}, push: make(chan report.Entry, pushQueue), done: make(chan struct{})}
		if se.id == "" {
			se.id = "mcp-" + strings.TrimPrefix(sandbox.NewID(), "sb-")
		}
		s.sessions[ss] = se
		s.watch(ss, se)
		s.wg.Add(1)
		go s.pushEvents(ss, se)
	}
	return se
}

// sdkServer is an SDK server whose calls are made by whom who says.
func (s *Server) sdkServer(who principalFunc) *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "airlock", Title: "airlock sandboxes", Version: s.o.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       s.o.Logger,
	})
	s.mu.Lock()
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	for _, t := range append(s.lifecycleTools(), s.runTools()...) {
		scope := t.scope
		if scope == "" {
			scope = auth.ScopeSandboxes
		}
		srv.AddTool(t.tool, s.handler(who, t.name, scope, t.run))
	}
	for _, t := range s.tools {
		st := t
		srv.AddTool(sandboxToolSpec(st), s.handler(who, st.Spec().Name, auth.ScopeSandboxes, func(ctx context.Context, c *callCtx) (*sdk.CallToolResult, error) {
			return s.runSandboxTool(ctx, c, st)
		}))
	}
	return srv
}

const instructions = "airlock runs commands and file operations in disposable, isolated Linux sandboxes. " +
	"Call create_sandbox to get one (or call any sandbox tool without `sandbox`: the session's first sandbox is used, created with the default policy if there is none). " +
	"Every call is decided by the sandbox's policy: a denied call returns an error saying which rule denied it; a call the policy asks a person about waits until someone approves it with `airlock approve ID` (progress notifications say which ID)."

// callCtx is one tool call as a handler sees it.
type callCtx struct {
	req  *sdk.CallToolRequest
	p    auth.Principal
	se   *session
	args map[string]json.RawMessage
	rec  *Record

	mu   sync.Mutex
	sent int // progress notifications sent (guarded by mu)
}

// codeForbidden is the JSON-RPC error code of a call its caller may not make.
const codeForbidden = -32001

// handler wraps run with what every call gets: the caller's identity and
// scope, argument parsing, and the audit record.
func (s *Server) handler(who principalFunc, name, scope string, run func(context.Context, *callCtx) (*sdk.CallToolResult, error)) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (res *sdk.CallToolResult, err error) {
		rec := &Record{Tool: name, Outcome: "ok"}
		se := s.session(req.Session)
		rec.Session = se.id
		defer func() {
			switch {
			case err != nil && rec.Outcome == "ok":
				rec.Outcome = "error"
			case res != nil && res.IsError && rec.Outcome == "ok":
				rec.Outcome = "tool_error"
			}
			s.audit(*rec)
		}()
		p, err := who(ctx, req)
		if err != nil {
			rec.Outcome = "unauthorized"
			return nil, &jsonrpcError{Code: codeForbidden, Message: "unauthorized: " + err.Error()}
		}
		rec.Tenant, rec.KeyID = p.Tenant, p.KeyID
		if !p.Can(scope) {
			rec.Outcome = "forbidden"
			return nil, &jsonrpcError{Code: codeForbidden, Message: fmt.Sprintf("forbidden: %s needs an API key with the %q scope; this key (%s) has %s", name, scope, p.KeyID, scopeList(p.Scopes))}
		}
		args := map[string]json.RawMessage{}
		if raw := req.Params.Arguments; len(raw) > 0 && string(raw) != "null" {
			if err := json.Unmarshal(raw, &args); err != nil {
				rec.Outcome = "invalid"
				return nil, invalidParams("%s: arguments must be a JSON object: %v", name, err)
			}
		}
		return run(ctx, &callCtx{req: req, p: p, se: se, args: args, rec: rec})
	}
}

func scopeList(scopes []string) string {
	if len(scopes) == 0 {
		return "no scopes"
	}
	return "scopes " + strings.Join(scopes, ", ")
}

// jsonrpcError is a protocol-level error the SDK sends as it is.
type jsonrpcError = jsonrpc.Error

const codeInvalidParams = jsonrpc.CodeInvalidParams

// invalidParams is the JSON-RPC error for malformed arguments.
func invalidParams(format string, a ...any) error {
	return &jsonrpcError{Code: codeInvalidParams, Message: fmt.Sprintf(format, a...)}
}

// audit writes r as a line of the audit log.
func (s *Server) audit(r Record) {
	if s.o.Audit == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = s.o.Now().UTC()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	b = append(b, '\n')
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	_, _ = s.o.Audit.Write(b) // best effort: a failing audit sink must not stop a call
}

// textResult is a result with one text content.
func (s *Server) textResult(text string, isError bool, structured any) *sdk.CallToolResult {
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: s.o.Redact(text)}},
		IsError:           isError,
		StructuredContent: structured,
	}
}

// session is one MCP session's sandboxes.
type session struct {
	id string
	// push queues the events of the session's sandboxes for its client
	// (pushEvents); done is closed when the session ends. pushDropped
	// counts the events the full queue refused since the last push.
	push        chan report.Entry
	done        chan struct{}
	pushDropped atomic.Uint64

	mu sync.Mutex
	// boxes are the session's sandboxes by id (guarded by mu).
	boxes map[string]*liveBox
	// order lists their ids, oldest first (guarded by mu).
	order []string
	// creating serialises the implicit creation of a first sandbox.
	creating sync.Mutex
}

// liveBox is a session's sandbox.
type liveBox struct {
	*Box
	id      string
	tenant  string
	created time.Time
	// end, when not nil, is called once the sandbox is destroyed (the
	// approver's End).
	end  func(ctx context.Context)
	once sync.Once
	// ports are the sandbox's exposed ports, closed before it is destroyed.
	ports boxPorts
	// events keeps what the sandbox reported through its event channel
	// (sandbox_events, GET /v1/sandboxes/{id}/events); stopEvents drains
	// the channel before the sandbox is destroyed, and the log is ended
	// after.
	events     *report.Log
	stopEvents func()
}

func (b *liveBox) destroy(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		b.ports.close()
		if b.stopEvents != nil {
			b.stopEvents()
		}
		err = b.Destroy(ctx)
		if b.events != nil {
			b.events.End()
		}
		if b.end != nil {
			b.end(ctx)
		}
	})
	return err
}

// get returns the sandbox id of tenant; "" names the first one.
func (se *session) get(tenant, id string) (*liveBox, bool) {
	se.mu.Lock()
	defer se.mu.Unlock()
	if id == "" {
		for _, i := range se.order {
			if b := se.boxes[i]; b.tenant == tenant {
				return b, true
			}
		}
		return nil, false
	}
	b, ok := se.boxes[id]
	if !ok || b.tenant != tenant {
		return nil, false // another tenant's sandbox is one that does not exist
	}
	return b, true
}

func (se *session) list(tenant string) []*liveBox {
	se.mu.Lock()
	defer se.mu.Unlock()
	var out []*liveBox
	for _, i := range se.order {
		if b := se.boxes[i]; b.tenant == tenant {
			out = append(out, b)
		}
	}
	return out
}

func (se *session) remove(id string) {
	se.mu.Lock()
	defer se.mu.Unlock()
	delete(se.boxes, id)
	for i, x := range se.order {
		if x == id {
			se.order = append(se.order[:i], se.order[i+1:]...)
			break
		}
	}
}

func (se *session) destroyAll(ctx context.Context, s *Server) {
	se.mu.Lock()
	all := make([]*liveBox, 0, len(se.boxes))
	for _, id := range se.order {
		all = append(all, se.boxes[id])
	}
	se.boxes, se.order = map[string]*liveBox{}, nil
	se.mu.Unlock()
	for _, b := range all {
		outcome := "ok"
		if err := b.destroy(ctx); err != nil {
			outcome = "error"
			s.o.Logger.Warn("destroy sandbox at session end", "sandbox_id", b.id, "err", err)
		}
		s.audit(Record{Session: se.id, Tenant: b.tenant, Sandbox: b.id, Tool: "session.end", Outcome: outcome, Detail: "sandbox destroyed with its session"})
	}
}
