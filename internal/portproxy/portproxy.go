// Package portproxy relays a client's HTTP request to a port inside a
// sandbox: HTTP/1.1 streamed both ways and upgrades (WebSocket) for their
// whole life, over the sandbox's Connector (the executor's channel: the
// sandbox has no network interface). It is the one relay behind every way
// a sandbox's port is reached: E2B's data plane (preview URLs of E2B
// sandboxes), and MCP's expose_port (a loopback listener for `airlock
// mcp`, the serve's data plane for /mcp).
//
// It keeps the policy's ports bounds (ports.max_connections,
// max_connection_bytes, max_bytes) and accounts each request's bytes, so
// that its caller can write one audit record per request. Who may reach
// a port (ports.expose, a traffic token) is the caller's decision, made
// before Serve; the caller names the headers (routing, credentials) that
// must never reach the sandbox's server, which is untrusted code.
//
// A request takes one of two paths, under the same rules (outbound for
// the request, one meter, one set of refusals): one without a body or an
// upgrade is written on the connection and its answer read back in the
// handler's goroutine (serveFast: no transport, none of its goroutines
// to wait for a CPU); one with a body or an upgrade goes through
// httputil.ReverseProxy, streamed both ways.
//
// It imports only the sandbox contract and the policy leaf.
//
// Importers: the services that reach sandboxes' ports (internal/e2b,
// internal/mcp).
package portproxy

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// The outcomes of a request, as audit records name them.
const (
	OK       = "ok"        // the sandbox's server answered
	Limited  = "limited"   // a bound of ports refused or ended it
	Closed   = "closed"    // nothing in the sandbox listens on the port
	Lost     = "not_found" // the sandbox ended meanwhile
	Canceled = "canceled"  // the client went away
	Failed   = "error"     // the sandbox's server did not answer
)

// ErrBytes ends a connection that reached a bound of ports.
var ErrBytes = errors.New("the connection reached the sandbox's traffic limit (ports.max_connection_bytes or ports.max_bytes)")

// Counters are one sandbox's connections through its ports, across every
// request the relay serves for it. The zero value is ready.
type Counters struct {
	open  atomic.Int64 // requests being relayed now
	bytes atomic.Int64 // both ways, all requests, over the sandbox's life

	mu sync.Mutex
	// byPort is guarded by mu: open, by port (a port with none is not
	// in it).
	byPort map[int]int64
}

// Open is the requests being relayed now.
func (c *Counters) Open() int64 { return c.open.Load() }

// Bytes is what the sandbox's requests carried, both ways, so far.
func (c *Counters) Bytes() int64 { return c.bytes.Load() }

// OpenByPort is a copy of the requests open now, by port.
func (c *Counters) OpenByPort() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byPort)
}

func (c *Counters) enter(port int) {
	c.mu.Lock()
	if c.byPort == nil {
		c.byPort = map[int]int64{}
	}
	c.byPort[port]++
	c.mu.Unlock()
}

func (c *Counters) leave(port int) {
	c.mu.Lock()
	if c.byPort[port]--; c.byPort[port] <= 0 {
		delete(c.byPort, port)
	}
	c.mu.Unlock()
}

// TokenOK reports whether got is want, a sandbox's traffic token, in
// constant time; an empty want opens nothing.
func TokenOK(got, want string) bool {
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Refusal is why a request did not reach, or did not get an answer from,
// the sandbox's server: its outcome, the HTTP status to answer and the
// relay's words for it. The caller writes it in its own form.
type Refusal struct {
	Outcome string
	Status  int
	Message string
}

// Relay serves requests for one port of one sandbox (an http.Handler). Sandbox, Port,
// Limits, Counters and Refuse are required.
type Relay struct {
	Sandbox sandbox.Connector
	Port    int
	// Limits are the sandbox's policy's ports bounds.
	Limits *policy.Ports
	// Counters are the sandbox's, shared by all its ports' relays.
	Counters *Counters
	// Host, when not nil, gives the Host header the sandbox's server
	// sees from the one its client sent; nil keeps the client's.
	Host func(clientHost string) string
	// Strip names request headers that never reach the sandbox's server:
	// the routing and credentials of whoever routed the request here.
	Strip []string
	// Refuse answers a request refused or failed, after the relay
	// decided it (it writes nothing itself then).
	Refuse func(w http.ResponseWriter, f Refusal)
	// Done, when not nil, receives each request's account once it has
	// ended, refused, answered or cut off: also when the exchange is
	// aborted mid-answer (then ServeHTTP panics with http.ErrAbortHandler
	// after Done, as httputil.ReverseProxy does, so that the client sees
	// the answer cut rather than complete).
	Done func(Result)
	// ErrorLog receives what the proxy logs itself (a copy that failed
	// mid-body); nil is the log package's default logger.
	ErrorLog *log.Logger

	proxyOnly bool // the tests' switch: no fast path
}

// Result is one request's account, for its audit record.
type Result struct {
	Outcome string
	// In is what went to the sandbox's server, Out what came back.
	In, Out  int64
	Duration time.Duration
	// Detail says it in a line: the port, the client, the request, the
	// bytes and the time, or the refusal.
	Detail string
}

// meter is one request's account while it is relayed.
type meter struct {
	in, out atomic.Int64
	limited atomic.Bool // a bound of ports ended it
	dialErr atomic.Pointer[error]
}

// ServeHTTP relays r to the port, under the bounds: a request while the
// sandbox's traffic budget is spent, or over its connections at once, is
// refused (429); a connection that reaches a byte bound is closed. It
// returns once the exchange (an upgraded one too) has ended, having given
// its account to Done.
func (rl *Relay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	res := Result{Outcome: OK}
	done := func() {
		if rl.Done != nil {
			rl.Done(res)
		}
	}
	refuse := func(f Refusal) {
		res.Outcome, res.Duration = f.Outcome, time.Since(t0)
		res.Detail = fmt.Sprintf("port %d from %s: %s", rl.Port, r.RemoteAddr, f.Message)
		rl.Refuse(w, f)
		done()
	}
	lim, ctr := rl.Limits, rl.Counters
	if budget := int64(lim.MaxBytes); budget > 0 && ctr.bytes.Load() >= budget {
		refuse(Refusal{Limited, http.StatusTooManyRequests, "the sandbox's traffic budget (ports.max_bytes) is spent"})
		return
	}
	if n := ctr.open.Add(1); n > lim.Connections() {
		ctr.open.Add(-1)
		refuse(Refusal{Limited, http.StatusTooManyRequests, fmt.Sprintf("the sandbox has too many open connections (ports.max_connections: %d)", lim.Connections())})
		return
	}
	defer ctr.open.Add(-1)
	ctr.enter(rl.Port)
	defer ctr.leave(rl.Port)

	x := &exchange{rl: rl}
	// The account is given however the exchange ends: the proxy panics
	// with http.ErrAbortHandler when a copy fails after the answer has
	// begun (a byte bound reached mid-answer, the sandbox gone), and so
	// does the fast path.
	defer func() {
		p := recover()
		if x.m.limited.Load() {
			res.Outcome = Limited
		} else if x.outcome != "" {
			res.Outcome = x.outcome
		} else if p != nil && r.Context().Err() != nil {
			res.Outcome = Canceled // the client went away mid-answer
		} else if p != nil {
			res.Outcome = Failed
		}
		res.In, res.Out, res.Duration = x.m.in.Load(), x.m.out.Load(), time.Since(t0)
		res.Detail = fmt.Sprintf("port %d from %s: %s %s, %d bytes in, %d out, %s", rl.Port, r.RemoteAddr, r.Method, clip(r.URL.Path), res.In, res.Out, res.Duration.Round(time.Millisecond))
		if x.failed != nil {
			res.Detail += ": " + x.failed.Message
		} else if res.Outcome == Limited {
			res.Detail += ": " + ErrBytes.Error()
		}
		done()
		if p != nil {
			panic(p)
		}
	}()
	if fast(r) && !rl.proxyOnly {
		x.serveFast(w, r)
		return
	}
	x.serveProxy(w, r)
}

// exchange is one request's relay, by either path: its meter and how it
// failed, when it did.
type exchange struct {
	rl *Relay
	m  meter
	// outcome, when set, is the request's outcome other than OK.
	outcome string
	// failed is the refusal answered, when the exchange failed before
	// the sandbox's server answered.
	failed *Refusal
}

// dial opens the request's connection to the port, metered. Early: the
// request follows the stream's opening at once, without a round trip to
// the executor's dial; a failed dial comes back as the request's error.
func (x *exchange) dial(ctx context.Context) (net.Conn, error) {
	rl := x.rl
	c, err := sandbox.ConnectEarly(ctx, rl.Sandbox, rl.Port)
	if err != nil {
		x.m.dialErr.Store(&err)
		return nil, err
	}
	return &meteredConn{Conn: c, m: &x.m, ctr: rl.Counters, limits: rl.Limits}, nil
}

// serveProxy relays r with httputil.ReverseProxy: a request with a body
// (streamed both ways, full duplex) or an upgrade.
func (x *exchange) serveProxy(w http.ResponseWriter, r *http.Request) {
	rl := x.rl
	proxy := &httputil.ReverseProxy{
		// The outbound request is the relay's own (outbound), the one
		// the fast path sends too; the proxy's is dropped.
		Rewrite: func(pr *httputil.ProxyRequest) { pr.Out = rl.outbound(limit1xx(pr.Out.Context()), pr.In) },
		// One connection per request, so that each is accounted to its
		// request; the executor's channel makes a connection cheap.
		Transport: &http.Transport{
			DisableKeepAlives: true,
			// What the server sends reaches the client as it is, as on
			// the fast path: no gzip asked for on the client's behalf.
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxResponseHeader,
			DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return x.dial(ctx) },
		},
		// A switch of protocols nobody asked for is refused here, where
		// the proxy closes the connection it came on (its own refusal of
		// it leaves that connection open).
		ModifyResponse: func(res *http.Response) error {
			if res.StatusCode == http.StatusSwitchingProtocols {
				return checkSwitch(res.Request.Header, res.Header)
			}
			return nil
		},
		FlushInterval: -1,
		ErrorLog:      rl.ErrorLog,
		ErrorHandler:  func(w http.ResponseWriter, r *http.Request, err error) { x.fail(w, r, err) },
	}
	// The request's body is the sandbox server's to read, as long as it
	// takes, and its answer may start first (a streamed /execute does):
	// without full duplex the HTTP server would read the rest of the body
	// away itself, and close it, once the answer's header is written,
	// racing the proxy's copy of it (the copy then fails and cuts the
	// answer off).
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy.ServeHTTP(w, r)
}

// fail answers a request whose exchange failed before the sandbox's
// server answered, with the refusal that says why (none when the client
// went away).
func (x *exchange) fail(w http.ResponseWriter, r *http.Request, err error) {
	rl, m := x.rl, &x.m
	if de := sandbox.DialError(err); de != nil && m.dialErr.Load() == nil {
		// An early connection's dial failed: the request it took never
		// reached the sandbox, and is not counted.
		m.dialErr.Store(&de)
		rl.Counters.bytes.Add(-m.in.Swap(0))
	}
	var f Refusal
	switch de := m.dialErr.Load(); {
	case de != nil && errors.Is(*de, sandbox.ErrPortClosed):
		f = Refusal{Closed, http.StatusBadGateway, fmt.Sprintf("nothing in the sandbox listens on port %d", rl.Port)}
	case de != nil && errors.Is(*de, sandbox.ErrLost):
		f = Refusal{Lost, http.StatusBadGateway, "the sandbox has ended"}
	case r.Context().Err() != nil:
		x.outcome = Canceled // the client went away: no one to answer
		return
	case m.limited.Load() || errors.Is(err, ErrBytes):
		f = Refusal{Limited, http.StatusBadGateway, ErrBytes.Error()}
	default:
		f = Refusal{Failed, http.StatusBadGateway, "the sandbox's server " + failure(err)}
	}
	x.failed, x.outcome = &f, f.Outcome
	rl.Refuse(w, f)
}

// failure says, after "the sandbox's server", how an exchange that
// reached the server failed: what a client can act on (a server that
// died mid-request resets or closes; one that is not HTTP answers
// garbage), where "did not answer" would hide it.
func failure(err error) string {
	var pe *protocolError
	switch {
	case errors.As(err, &pe):
		return pe.what
	case errors.Is(err, syscall.ECONNRESET):
		return "reset the connection before it answered"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "server closed") || strings.HasSuffix(err.Error(), "EOF"):
		return "closed the connection before it answered"
	case strings.Contains(err.Error(), "malformed") || strings.Contains(err.Error(), "too many 1xx") || strings.Contains(err.Error(), "response headers exceeded"):
		return "sent an answer that is not HTTP/1.1: " + clip(err.Error())
	}
	return "did not answer: " + clip(err.Error())
}

// clip bounds a client's path in a record.
func clip(s string) string {
	const most = 80
	if len(s) > most {
		return s[:most] + "..."
	}
	return s
}

// meteredConn counts a relayed connection's bytes, into its request's
// account and its sandbox's, and ends it at the policy's bounds.
type meteredConn struct {
	net.Conn
	m      *meter
	ctr    *Counters
	limits *policy.Ports
}

func (c *meteredConn) count(dir *atomic.Int64, n int) error {
	if n == 0 {
		return nil
	}
	one, all := dir.Add(int64(n)), c.ctr.bytes.Add(int64(n))
	if per := int64(c.limits.MaxConnectionBytes); per > 0 && one > per || c.limits.MaxBytes > 0 && all > int64(c.limits.MaxBytes) {
		c.m.limited.Store(true)
		_ = c.Conn.Close()
		return ErrBytes
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

// Write writes what the client sends. It counts before it writes: the
// proxy path's transport writes on a goroutine of its own, and once the
// server has the bytes (and may have answered, and the request's account
// been given) they must be in the account. What a failed write did not
// carry is taken back; a write over a bound is not made and stays
// counted (the bound is spent: the next request is refused).
func (c *meteredConn) Write(p []byte) (int, error) {
	if err := c.count(&c.m.in, len(p)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	c.uncount(&c.m.in, len(p)-n)
	return n, err
}

// uncount takes back n bytes counted but not carried.
func (c *meteredConn) uncount(dir *atomic.Int64, n int) {
	if n > 0 {
		dir.Add(-int64(n))
		c.ctr.bytes.Add(-int64(n))
	}
}
