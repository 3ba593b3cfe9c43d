package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/portproxy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// TrafficHeader carries a sandbox's traffic token to a port exposed with
// access token.
const TrafficHeader = "Airlock-Traffic-Token"

// Preview is a data plane on which sandboxes' ports are reached (airlock
// serve's: the one E2B sandboxes' preview URLs are on). It hands the
// requests for this server's sandboxes to Server.ServePort.
type Preview interface {
	// PreviewURL is where port of sandbox id is reached, and the request
	// headers a client sends there to name the sandbox and the port (none
	// when the URL's host names them: PORT-ID.DOMAIN); ok is false when
	// the server has no data plane.
	PreviewURL(id string, port int) (url string, headers map[string]string, ok bool)
}

// boxPorts are the exposed ports of a session's sandbox.
type boxPorts struct {
	// ctr counts the sandbox's connections and bytes, all ports.
	ctr portproxy.Counters

	mu sync.Mutex
	// byPort holds the exposed ports (guarded by mu).
	byPort map[int]*exposedPort
	// token is the sandbox's traffic token, made at the first exposure
	// that needs it (guarded by mu).
	token string
	// closed is set once the sandbox is destroyed; nothing is exposed
	// after it (guarded by mu).
	closed bool
	// release, when not nil, takes the sandbox off the data plane
	// (guarded by mu).
	release func()
	// seq numbers the requests relayed, for exposedPort.conns (guarded
	// by mu).
	seq uint64
}

// exposedPort is one exposed port: on the data plane (srv nil), or on a
// listener of the host of its own.
type exposedPort struct {
	port    int
	access  policy.PortAccess
	url     string
	headers map[string]string // what a client sends to name it on the data plane
	srv     *http.Server
	done    chan struct{} // closed when srv.Serve has returned
	// by is the API key (its id) that exposed it; at when.
	by string
	at time.Time
	// conns cancels the requests relayed to it now, by number; revoked
	// is set once Revoke has taken it off (both guarded by boxPorts.mu).
	conns   map[uint64]context.CancelFunc
	revoked bool
}

// close ends every exposed port's listener and its open connections, and
// takes the sandbox off the data plane.
func (p *boxPorts) close() {
	p.mu.Lock()
	p.closed = true
	all, release := p.byPort, p.release
	p.byPort, p.release = nil, nil
	p.mu.Unlock()
	if release != nil {
		release()
	}
	for _, e := range all {
		if e.srv != nil {
			_ = e.srv.Close()
			<-e.done
		}
	}
}

// exposed returns port's exposure and the sandbox's token, nil when port
// is not exposed (or the sandbox is gone).
func (p *boxPorts) exposed(port int) (*exposedPort, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byPort[port], p.token
}

// exposePort is the expose_port tool.
func (s *Server) exposePort(ctx context.Context, c *callCtx) (*sdk.CallToolResult, error) {
	var a struct {
		Sandbox string `json:"sandbox"`
		Port    int    `json:"port"`
	}
	if err := decodeStrict("expose_port", c.args, &a); err != nil {
		c.rec.Outcome = "invalid"
		return nil, err
	}
	if a.Port < 1 || a.Port > 65535 {
		c.rec.Outcome = "invalid"
		return nil, invalidParams("expose_port: invalid arguments: port %d is not a TCP port (1-65535)", a.Port)
	}
	c.rec.Detail = "port " + strconv.Itoa(a.Port)
	b, ok := c.se.get(c.p.Tenant, a.Sandbox)
	if !ok {
		c.rec.Sandbox, c.rec.Outcome = a.Sandbox, "not_found"
		if a.Sandbox == "" {
			return s.textResult("error: this session has no sandbox: create_sandbox makes one, and a server started in it can then be exposed", true, nil), nil
		}
		return s.textResult(fmt.Sprintf("error: no sandbox %q in this session: list_sandboxes lists them", a.Sandbox), true, nil), nil
	}
	c.rec.Sandbox = b.id
	// Why the policy and only it: a port's server is code the host does
	// not trust answering clients the host does; ports.expose is where
	// the sandbox's owner said which ports may be reached and by whom.
	access, exposed := b.Policy.Ports.Access(a.Port)
	if !exposed {
		c.rec.Decision, c.rec.Outcome = string(policy.Deny), "denied"
		return s.textResult(fmt.Sprintf("error: port %d is not exposed by the sandbox's policy %s (ports.expose names %s)", a.Port, b.PolicyName, exposedList(b.Policy.Ports)), true,
			map[string]any{"sandbox": b.id, "port": a.Port, "exposed": false}), nil
	}
	c.rec.Decision = string(policy.Allow)
	if _, ok := b.Sandbox.(sandbox.Connector); !ok {
		c.rec.Outcome = "unsupported"
		return s.textResult("error: this host's sandboxes cannot be reached on their ports", true, nil), nil
	}
	e, token, err := s.expose(c, b, a.Port, access)
	if err != nil {
		c.rec.Outcome = "error"
		return s.textResult("error: expose_port: "+err.Error(), true, nil), nil
	}
	st := map[string]any{"sandbox": b.id, "port": a.Port, "exposed": true, "url": e.url, "access": string(access), "needs_token": access == policy.AccessToken}
	where := e.url
	if len(e.headers) > 0 {
		st["headers"] = e.headers
		where += " with the headers " + headerList(e.headers)
	}
	msg := fmt.Sprintf("port %d of sandbox %s is reachable at %s (access %s: anyone who can reach that address)", a.Port, b.id, where, access)
	if access == policy.AccessToken {
		// Why the token is returned: the caller commands this sandbox
		// already (it created it, and may run anything in it), the token
		// opens this sandbox's exposed ports and nothing else, and a
		// client of the port needs it. It is in no audit record.
		st["token_header"], st["token"] = TrafficHeader, token
		msg = fmt.Sprintf("port %d of sandbox %s is reachable at %s (access token: send the header %s: %s)", a.Port, b.id, where, TrafficHeader, token)
	}
	return s.textResult(msg, false, st), nil
}

// headerList spells headers as a client sends them.
func headerList(h map[string]string) string {
	var out string
	for i, k := range slices.Sorted(maps.Keys(h)) {
		if i > 0 {
			out += ", "
		}
		out += k + ": " + h[k]
	}
	return out
}

// exposedList names the ports rules expose, for a refusal.
func exposedList(p policy.Ports) string {
	if len(p.Expose) == 0 {
		return "none"
	}
	var out string
	for i, r := range p.Expose {
		if i > 0 {
			out += ", "
		}
		out += r.Ports.String()
	}
	return out
}

// errNoDataPlane refuses expose_port on a server without a data plane.
var errNoDataPlane = errors.New("this server has no data plane for sandboxes' ports: its operator sets e2b.sandbox_addr (and e2b.domain for PORT-ID.DOMAIN URLs) in airlock serve's configuration")

// expose makes port of b reachable, or returns its exposure when it is
// already, with the sandbox's traffic token when access needs one: on the
// data plane (Options.Preview), else on a new listener of the host
// (Options.PortHost).
func (s *Server) expose(c *callCtx, b *liveBox, port int, access policy.PortAccess) (*exposedPort, string, error) {
	bp := &b.ports
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if bp.closed {
		return nil, "", errors.New("the sandbox has been destroyed")
	}
	if access == policy.AccessToken && bp.token == "" {
		var k [32]byte
		_, _ = rand.Read(k[:]) // crypto/rand.Read does not fail
		bp.token = hex.EncodeToString(k[:])
	}
	if e := bp.byPort[port]; e != nil {
		return e, bp.token, nil
	}
	e := &exposedPort{port: port, access: access, by: c.p.KeyID, at: s.o.Now()}
	if s.o.Preview != nil {
		url, headers, ok := s.o.Preview.PreviewURL(b.id, port)
		if !ok {
			return nil, "", errNoDataPlane
		}
		e.url, e.headers = url, headers
		if bp.release == nil {
			bp.release = s.onDataPlane(c.se.id, b)
		}
	} else {
		ln, err := net.Listen("tcp", net.JoinHostPort(s.o.PortHost, "0"))
		if err != nil {
			return nil, "", fmt.Errorf("listen for port %d: %w", port, err)
		}
		e.url, e.done = "http://"+ln.Addr().String(), make(chan struct{})
		session := c.se.id
		e.srv = &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s.servePort(w, r, session, b, port)
			}),
			ReadHeaderTimeout: 30 * time.Second,
			ErrorLog:          slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelDebug),
		}
		go func() {
			defer close(e.done)
			_ = e.srv.Serve(ln) // returns once close closes it
		}()
	}
	if bp.byPort == nil {
		bp.byPort = map[int]*exposedPort{}
	}
	bp.byPort[port] = e
	s.audit(Record{Session: c.se.id, Tenant: b.tenant, KeyID: c.p.KeyID, Sandbox: b.id, Tool: "port.expose", Outcome: "ok", Detail: fmt.Sprintf("port %d (%s) at %s", port, access, e.url)})
	return e, bp.token, nil
}

// onDataPlane puts b, of session, where ServePort finds it, and returns
// what takes it off.
func (s *Server) onDataPlane(session string, b *liveBox) func() {
	s.mu.Lock()
	if s.preview == nil {
		s.preview = map[string]previewBox{}
	}
	s.preview[b.id] = previewBox{session: session, box: b}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.preview, b.id)
		s.mu.Unlock()
	}
}

// previewBox is a sandbox with a port on the data plane.
type previewBox struct {
	session string
	box     *liveBox
}

// ServePort serves a data-plane request for port of sandbox id, when id
// is a sandbox of this server with a port on the data plane; it returns
// false, having written nothing, for any other id (the data plane answers
// for those). A port expose_port has not exposed is refused; one exposed
// with access token needs the sandbox's token in TrafficHeader. The data
// plane removes its own routing headers before it calls.
func (s *Server) ServePort(w http.ResponseWriter, r *http.Request, id string, port int) bool {
	s.mu.Lock()
	pb, ok := s.preview[id]
	s.mu.Unlock()
	if !ok {
		return false
	}
	s.servePort(w, r, pb.session, pb.box, port)
	return true
}

// servePort relays r to port inside b, as its exposure allows, and audits
// it: the one handler of both the data plane and the host's listeners.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, session string, b *liveBox, port int) {
	rec := Record{Session: session, Tenant: b.tenant, Sandbox: b.id, Tool: "port"}
	refuse := func(outcome string, status int, msg string) {
		rec.Outcome, rec.Detail = outcome, fmt.Sprintf("port %d from %s: %s", port, r.RemoteAddr, msg)
		s.audit(rec)
		http.Error(w, msg, status)
	}
	e, token := b.ports.exposed(port)
	if e == nil {
		refuse("not_exposed", http.StatusForbidden, fmt.Sprintf("port %d of sandbox %s is not exposed: expose_port exposes it", port, b.id))
		return
	}
	if e.access == policy.AccessToken && !portproxy.TokenOK(r.Header.Get(TrafficHeader), token) {
		refuse("denied", http.StatusForbidden, "this port needs the sandbox's traffic token in the "+TrafficHeader+" header")
		return
	}
	// Why a context of its own: Revoke ends the request, and the
	// connection it has upgraded to, however long it would last.
	client := r.Context()
	ctx, cancel := context.WithCancel(client)
	defer cancel()
	untrack, ok := b.ports.track(e, cancel)
	if !ok {
		refuse("not_exposed", http.StatusForbidden, fmt.Sprintf("port %d of sandbox %s is not exposed: expose_port exposes it", port, b.id))
		return
	}
	defer untrack()
	r = r.WithContext(ctx)
	rl := &portproxy.Relay{
		Sandbox: b.Sandbox.(sandbox.Connector), Port: port, Limits: &b.Policy.Ports, Counters: &b.ports.ctr,
		// Why: the server in the sandbox is untrusted code; the token is
		// the host's credential for it.
		Strip: []string{TrafficHeader},
		Refuse: func(w http.ResponseWriter, f portproxy.Refusal) {
			http.Error(w, f.Message, f.Status)
		},
		ErrorLog: slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelDebug),
		Done: func(res portproxy.Result) {
			rec.Outcome, rec.Detail = res.Outcome, res.Detail
			if ctx.Err() != nil && client.Err() == nil {
				rec.Outcome = "revoked"
			}
			s.audit(rec)
		},
	}
	rl.ServeHTTP(w, r)
}
