package mcp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// TrafficHeader carries a sandbox's traffic token to a port exposed with
// access token.
const TrafficHeader = "Airlock-Traffic-Token"

// boxPorts are the exposed ports of a session's sandbox: one listener of
// the host each, proxied to the port inside the sandbox.
type boxPorts struct {
	open  atomic.Int64 // requests being proxied now, all ports
	bytes atomic.Int64 // both ways, all requests, over the sandbox's life

	mu sync.Mutex
	// byPort holds the exposed ports (guarded by mu).
	byPort map[int]*exposedPort
	// token is the sandbox's traffic token, made at the first exposure
	// that needs it (guarded by mu).
	token string
	// closed is set once the sandbox is destroyed; nothing is exposed
	// after it (guarded by mu).
	closed bool
}

// exposedPort is one port served on a listener of the host.
type exposedPort struct {
	port   int
	access policy.PortAccess
	url    string
	srv    *http.Server
	done   chan struct{} // closed when srv.Serve has returned
}

// close ends every exposed port's listener and its open connections.
func (p *boxPorts) close() {
	p.mu.Lock()
	p.closed = true
	all := p.byPort
	p.byPort = nil
	p.mu.Unlock()
	for _, e := range all {
		_ = e.srv.Close()
		<-e.done
	}
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
	msg := fmt.Sprintf("port %d of sandbox %s is reachable at %s (access %s: anyone who can reach that address)", a.Port, b.id, e.url, access)
	if access == policy.AccessToken {
		// Why the token is returned: the caller commands this sandbox
		// already (it created it, and may run anything in it), the token
		// opens this sandbox's exposed ports and nothing else, and a
		// client of the port needs it. It is in no audit record.
		st["token_header"], st["token"] = TrafficHeader, token
		msg = fmt.Sprintf("port %d of sandbox %s is reachable at %s (access token: send the header %s: %s)", a.Port, b.id, e.url, TrafficHeader, token)
	}
	return s.textResult(msg, false, st), nil
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

// expose serves port of b on a new listener of the host (Options.PortAddr),
// or returns the one already serving it, with the sandbox's traffic token
// when access needs one.
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
	ln, err := net.Listen("tcp", net.JoinHostPort(s.o.PortHost, "0"))
	if err != nil {
		return nil, "", fmt.Errorf("listen for port %d: %w", port, err)
	}
	e := &exposedPort{port: port, access: access, url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	e.srv = &http.Server{
		Handler:           s.portHandler(c.se.id, b, port, access),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelDebug),
	}
	go func() {
		defer close(e.done)
		_ = e.srv.Serve(ln) // returns once close closes it
	}()
	if bp.byPort == nil {
		bp.byPort = map[int]*exposedPort{}
	}
	bp.byPort[port] = e
	s.audit(Record{Session: c.se.id, Tenant: b.tenant, KeyID: c.p.KeyID, Sandbox: b.id, Tool: "port.expose", Outcome: "ok", Detail: fmt.Sprintf("port %d (%s) at %s", port, access, e.url)})
	return e, bp.token, nil
}

// portHandler proxies requests to port inside b: HTTP/1.1 streamed both
// ways and upgrades (WebSocket), each one audited, under the policy's
// ports bounds (max_connections, max_connection_bytes, max_bytes).
func (s *Server) portHandler(session string, b *liveBox, port int, access policy.PortAccess) http.Handler {
	cn := b.Sandbox.(sandbox.Connector)
	limits := &b.Policy.Ports
	bp := &b.ports
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		rec := Record{Session: session, Tenant: b.tenant, Sandbox: b.id, Tool: "port", Outcome: "ok"}
		refuse := func(outcome string, status int, msg string) {
			rec.Outcome, rec.Detail = outcome, fmt.Sprintf("port %d from %s: %s", port, r.RemoteAddr, msg)
			s.audit(rec)
			http.Error(w, msg, status)
		}
		if access == policy.AccessToken {
			bp.mu.Lock()
			want := bp.token
			bp.mu.Unlock()
			got := r.Header.Get(TrafficHeader)
			if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				refuse("denied", http.StatusForbidden, "this port needs the sandbox's traffic token in the "+TrafficHeader+" header")
				return
			}
		}
		if budget := int64(limits.MaxBytes); budget > 0 && bp.bytes.Load() >= budget {
			refuse("limited", http.StatusTooManyRequests, "the sandbox's traffic budget (ports.max_bytes) is spent")
			return
		}
		if n := bp.open.Add(1); n > limits.Connections() {
			bp.open.Add(-1)
			refuse("limited", http.StatusTooManyRequests, fmt.Sprintf("the sandbox has too many open connections (ports.max_connections: %d)", limits.Connections()))
			return
		}
		defer bp.open.Add(-1)
		var mc meter
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
				pr.Out.Host = pr.In.Host
				// Why: the server in the sandbox is untrusted code; the
				// token is the host's credential for it.
				pr.Out.Header.Del(TrafficHeader)
				pr.SetXForwarded()
			},
			Transport: &http.Transport{
				DisableKeepAlives: true,
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					conn, err := cn.Connect(ctx, port)
					if err != nil {
						mc.dialErr.Store(&err)
						return nil, err
					}
					return &meteredConn{Conn: conn, m: &mc, all: &bp.bytes, limits: limits}, nil
				},
			},
			FlushInterval: -1,
			ErrorLog:      slog.NewLogLogger(s.o.Logger.Handler(), slog.LevelDebug),
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				de := mc.dialErr.Load()
				switch {
				case de != nil && errors.Is(*de, sandbox.ErrPortClosed):
					rec.Outcome = "closed"
					http.Error(w, fmt.Sprintf("nothing in the sandbox listens on port %d", port), http.StatusBadGateway)
				case r.Context().Err() != nil:
					rec.Outcome = "canceled"
				case mc.limited.Load():
					rec.Outcome = "limited"
					http.Error(w, errPortBytes.Error(), http.StatusBadGateway)
				default:
					rec.Outcome = "error"
					http.Error(w, "the sandbox's server did not answer", http.StatusBadGateway)
				}
			},
		}
		_ = http.NewResponseController(w).EnableFullDuplex()
		proxy.ServeHTTP(w, r)
		if mc.limited.Load() {
			rec.Outcome = "limited"
		}
		rec.Detail = fmt.Sprintf("port %d from %s: %s %s, %d bytes in, %d out, %s", port, r.RemoteAddr, r.Method, clip(r.URL.Path), mc.in.Load(), mc.out.Load(), time.Since(t0).Round(time.Millisecond))
		s.audit(rec)
	})
}

// errPortBytes ends a connection that reached a bound of ports.
var errPortBytes = errors.New("the connection reached the sandbox's traffic limit (ports.max_connection_bytes or ports.max_bytes)")

// meter is one proxied request's account.
type meter struct {
	in, out atomic.Int64 // bytes to the sandbox's server, and from it
	limited atomic.Bool  // a bound of ports ended it
	dialErr atomic.Pointer[error]
}

// meteredConn counts a proxied connection's bytes, into its request's
// account and its sandbox's, and ends it at the policy's bounds.
type meteredConn struct {
	net.Conn
	m      *meter
	all    *atomic.Int64
	limits *policy.Ports
}

func (c *meteredConn) count(dir *atomic.Int64, n int) error {
	if n == 0 {
		return nil
	}
	one, all := dir.Add(int64(n)), c.all.Add(int64(n))
	if per := int64(c.limits.MaxConnectionBytes); per > 0 && one > per || c.limits.MaxBytes > 0 && all > int64(c.limits.MaxBytes) {
		c.m.limited.Store(true)
		_ = c.Conn.Close()
		return errPortBytes
	}
	return nil
}

// Read reads what the sandbox's server sends.
func (c *meteredConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if cerr := c.count(&c.m.out, n); cerr != nil && err == nil {
		err = cerr
	}
	return n, err
}

// Write writes what the client sends.
func (c *meteredConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if cerr := c.count(&c.m.in, n); cerr != nil && err == nil {
		err = cerr
	}
	return n, err
}
