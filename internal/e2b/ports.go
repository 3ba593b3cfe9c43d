package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// trafficHeader carries a sandbox's traffic access token, as E2B's edge
// reads it.
const trafficHeader = "E2b-Traffic-Access-Token"

// routingHeaders are the data plane's own request headers: they name the
// sandbox and carry the host's credential for it, and never reach the
// server in the sandbox (untrusted code). X-Access-Token does reach it:
// it is that sandbox's own envd token, which its code controls anyway,
// and E2B's servers in a sandbox (the code interpreter's) read it.
var routingHeaders = []string{"E2b-Sandbox-Id", "E2b-Sandbox-Port", trafficHeader}

// portCounters are a sandbox's connections through its preview URLs.
type portCounters struct {
	open  atomic.Int64 // requests being proxied now
	bytes atomic.Int64 // both ways, all connections, over the box's life

	mu sync.Mutex
	// byPort is guarded by mu: open, by port (a port with none is not
	// in it).
	byPort map[int]int64
}

// enter counts a connection to port as open, until leave.
func (c *portCounters) enter(port int) {
	c.mu.Lock()
	if c.byPort == nil {
		c.byPort = map[int]int64{}
	}
	c.byPort[port]++
	c.mu.Unlock()
}

// leave ends what enter counted.
func (c *portCounters) leave(port int) {
	c.mu.Lock()
	if c.byPort[port]--; c.byPort[port] <= 0 {
		delete(c.byPort, port)
	}
	c.mu.Unlock()
}

// openByPort is a copy of the connections open now, by port.
func (c *portCounters) openByPort() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byPort)
}

// trafficToken is the traffic access token create and connect tell: set
// when a port of the sandbox needs it (allowPublicTraffic: false, or a
// token rule of its policy), as E2B tells it only then.
func (b *box) trafficToken() string {
	if b.private {
		return b.traffic
	}
	for _, r := range b.template.doc.Ports.Expose {
		if r.Access == policy.AccessToken || r.Access == "" {
			return b.traffic
		}
	}
	return ""
}

// portAccess is the access of port: its policy's, made token by
// allowPublicTraffic: false; false when the policy does not expose it.
func (b *box) portAccess(port int) (policy.PortAccess, bool) {
	a, ok := b.template.doc.Ports.Access(port)
	if ok && b.private {
		a = policy.AccessToken
	}
	return a, ok
}

// portOpen reports whether r may reach port: exposed, and with the
// sandbox's traffic token where the port needs it.
func (b *box) portOpen(r *http.Request, port int) bool {
	access, exposed := b.portAccess(port)
	if access == policy.AccessToken {
		t := r.Header.Get(trafficHeader)
		return exposed && t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(b.traffic)) == 1
	}
	return exposed
}

// portError is the JSON body E2B's edge answers a refused request for a
// sandbox's port with; the SDKs' tests read these fields.
type portError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

func writePortError(w http.ResponseWriter, e portError) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Code)
	_ = json.NewEncoder(w).Encode(e) // the client may be gone
}

// The refusals' messages, E2B's words where E2B has the case.
const (
	msgNotFound     = "The sandbox was not found"
	msgPortClosed   = "The sandbox is running but port is not open"
	msgTokenMissing = "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing"
	msgTokenInvalid = "Sandbox is secured with traffic access token. Provided token in header 'e2b-traffic-access-token' is invalid"
)

// portConn is one proxied request's account, for its audit record.
type portConn struct {
	in, out atomic.Int64 // bytes to the sandbox's server, and from it
	dialErr atomic.Pointer[error]
	limited atomic.Bool // a bound of ports ended it
}

// servePort proxies a data-plane request for port (never envd's) of
// sandbox id to that port inside the sandbox: HTTP/1.1, streamed both
// ways, and upgrades (WebSocket) for their whole life. Who may: the
// sandbox's policy must expose the port (ports.expose); a port whose
// access is token needs the sandbox's traffic access token, and only
// that token (the envd access token is not taken here: it commands the
// whole sandbox, and a client of a port should not need to hold it).
// Refusals are E2B's edge's answers; every request, refused or not, is
// an audit record and an event in the sandbox's log.
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int) {
	t0 := s.now()
	rec := Record{Sandbox: clip(id), Op: "port", Port: port, Client: r.RemoteAddr}
	refuse := func(outcome string, e portError) {
		rec.Outcome = outcome
		rec.Detail = fmt.Sprintf("port %d: %s", port, e.Message)
		s.audit.record(rec)
		e.SandboxID = id
		writePortError(w, e)
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	var lv *live
	if b != nil {
		lv = s.wake(r, b, func() bool { return b.portOpen(r, port) })
	}
	if lv == nil {
		// Unknown, dead and paused answer alike: E2B's edge cannot tell
		// them apart either, and no tenant learns of another's.
		refuse("not_found", portError{Message: msgNotFound, Code: http.StatusBadGateway})
		return
	}
	rec.Tenant, rec.Sandbox = b.tenant, b.id
	access, exposed := b.portAccess(port)
	if access == policy.AccessToken || !exposed && b.private {
		// A private sandbox asks for its token before it tells whether
		// a port is exposed.
		switch t := r.Header.Get(trafficHeader); {
		case t == "":
			refuse("denied", portError{Message: msgTokenMissing, Code: http.StatusForbidden})
			return
		case subtle.ConstantTimeCompare([]byte(t), []byte(b.traffic)) != 1:
			refuse("denied", portError{Message: msgTokenInvalid, Code: http.StatusForbidden})
			return
		}
	}
	if !exposed {
		refuse("not_exposed", portError{Message: fmt.Sprintf("Port %d is not exposed by the sandbox's policy", port), Port: port, Code: http.StatusForbidden})
		return
	}
	limits := &b.template.doc.Ports
	if budget := int64(limits.MaxBytes); budget > 0 && b.ports.bytes.Load() >= budget {
		refuse("limited", portError{Message: "The sandbox's traffic budget (ports.max_bytes) is spent", Port: port, Code: http.StatusTooManyRequests})
		return
	}
	if n := b.ports.open.Add(1); n > limits.Connections() {
		b.ports.open.Add(-1)
		refuse("limited", portError{Message: fmt.Sprintf("The sandbox has too many open connections (ports.max_connections: %d)", limits.Connections()), Port: port, Code: http.StatusTooManyRequests})
		return
	}
	defer b.ports.open.Add(-1)
	b.ports.enter(port)
	defer b.ports.leave(port)
	cn, ok := lv.sb.(sandbox.Connector)
	if !ok {
		refuse("unsupported", portError{Message: msgPortClosed, Port: port, Code: http.StatusBadGateway})
		return
	}

	var pc portConn
	rec.Outcome = "ok"
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			// The server sees the host its client asked for, as in E2B,
			// or the sandbox's maskRequestHost.
			pr.Out.Host = b.requestHost(pr.In.Host, port)
			for _, h := range routingHeaders {
				pr.Out.Header.Del(h)
			}
			pr.SetXForwarded()
		},
		// One connection per request, so that each is accounted to its
		// request; the executor's channel makes a connection cheap.
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				// Early: the request follows the stream's opening at
				// once, without a round trip to the executor's dial;
				// a failed dial comes back as the request's error.
				c, err := sandbox.ConnectEarly(ctx, cn, port)
				if err != nil {
					pc.dialErr.Store(&err)
					return nil, err
				}
				return &meteredConn{Conn: c, pc: &pc, box: &b.ports, limits: limits}, nil
			},
		},
		FlushInterval: -1,
		// What the proxy logs itself (a copy that failed mid-body): the
		// server's log, not the log package's.
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if de := sandbox.DialError(err); de != nil && pc.dialErr.Load() == nil {
				// An early connection's dial failed: the request it
				// took never reached the sandbox, and is not counted.
				pc.dialErr.Store(&de)
				b.ports.bytes.Add(-pc.in.Swap(0))
			}
			switch de := pc.dialErr.Load(); {
			case de != nil:
				// Nothing listening is E2B's 502; a sandbox that ended
				// meanwhile is one that is not found.
				rec.Outcome = "closed"
				e := portError{SandboxID: id, Message: msgPortClosed, Port: port, Code: http.StatusBadGateway}
				if !errors.Is(*de, sandbox.ErrPortClosed) {
					rec.Outcome = "error"
					if errors.Is(*de, sandbox.ErrLost) {
						rec.Outcome, e = "not_found", portError{SandboxID: id, Message: msgNotFound, Code: http.StatusBadGateway}
					}
				}
				writePortError(w, e)
			case r.Context().Err() != nil:
				rec.Outcome = "canceled" // the client went away
			case errors.Is(err, errPortBytes):
				rec.Outcome = "limited"
				writePortError(w, portError{SandboxID: id, Message: err.Error(), Port: port, Code: http.StatusBadGateway})
			default:
				rec.Outcome = "error"
				writePortError(w, portError{SandboxID: id, Message: "The sandbox's server did not answer", Port: port, Code: http.StatusBadGateway})
			}
		},
	}
	// The request's body is the sandbox server's to read, as long as it
	// takes, and its answer may start first (a streamed /execute does):
	// without full duplex the HTTP server would read the rest of the body
	// away itself, and close it, once the answer's header is written,
	// racing the proxy's copy of it (the copy then fails and cuts the
	// answer off).
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy.ServeHTTP(w, r)
	if pc.limited.Load() {
		rec.Outcome = "limited"
	}
	d := s.now().Sub(t0)
	rec.BytesIn, rec.BytesOut, rec.DurationMS = pc.in.Load(), pc.out.Load(), d.Milliseconds()
	rec.Detail = fmt.Sprintf("port %d from %s: %s %s, %d bytes in, %d out, %s", port, r.RemoteAddr, r.Method, clip(r.URL.Path), rec.BytesIn, rec.BytesOut, d.Round(time.Millisecond))
	s.audit.record(rec)
}

// errPortBytes ends a connection that reached a bound of ports.
var errPortBytes = errors.New("the connection reached the sandbox's traffic limit (ports.max_connection_bytes or ports.max_bytes)")

// meteredConn counts a proxied connection's bytes, into its request's
// account and its sandbox's, and ends it at the policy's bounds.
type meteredConn struct {
	net.Conn
	pc     *portConn
	box    *portCounters
	limits *policy.Ports
}

func (c *meteredConn) count(dir *atomic.Int64, n int) error {
	if n == 0 {
		return nil
	}
	one := dir.Add(int64(n))
	all := c.box.bytes.Add(int64(n))
	if perConn := int64(c.limits.MaxConnectionBytes); perConn > 0 && one > perConn || c.limits.MaxBytes > 0 && all > int64(c.limits.MaxBytes) {
		c.pc.limited.Store(true)
		_ = c.Conn.Close()
		return errPortBytes
	}
	return nil
}

// Read reads what the sandbox's server sends.
func (c *meteredConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if cerr := c.count(&c.pc.out, n); cerr != nil && err == nil {
		err = cerr
	}
	return n, err
}

// Write writes what the client sends.
func (c *meteredConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if cerr := c.count(&c.pc.in, n); cerr != nil && err == nil {
		err = cerr
	}
	return n, err
}
