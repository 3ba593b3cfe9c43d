package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/hostname"
	"github.com/airlockrun/airlock/internal/policy"
)

var (
	// errBytesOut and errBytesIn cut connections once a byte budget is spent.
	errBytesOut = errors.New("egress: limit of bytes from the sandbox reached")
	errBytesIn  = errors.New("egress: limit of bytes to the sandbox reached")
)

// aLongTimeAgo is a deadline in the past: it wakes a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// meteredConn is a sandbox connection. It counts bytes in both directions,
// for the connection's records and the proxy's totals, and cuts the
// connection once the proxy's byte budget is spent.
type meteredConn struct {
	net.Conn
	p *Proxy
	// in and out are this connection's totals (to and from the sandbox);
	// atomic because a tunnel reads and writes from two goroutines.
	in, out atomic.Int64
	// lenient exempts the proxy's own exchanges from the byte budgets:
	// reading a request head and writing a refusal. Once a budget is spent
	// the sandbox must still be told why it is cut off; both are bounded.
	lenient atomic.Bool
}

func (c *meteredConn) Read(b []byte) (int, error) {
	if m := c.p.lim.MaxBytesOut; m > 0 && c.p.bytesOut.Load() >= m && !c.lenient.Load() {
		return 0, errBytesOut
	}
	n, err := c.Conn.Read(b)
	c.addOut(n)
	return n, err
}

func (c *meteredConn) Write(b []byte) (int, error) {
	if m := c.p.lim.MaxBytesIn; m > 0 && c.p.bytesIn.Load() >= m && !c.lenient.Load() {
		return 0, errBytesIn
	}
	n, err := c.Conn.Write(b)
	c.addIn(n)
	return n, err
}

// addOut counts n bytes received from the sandbox; addIn n bytes sent to
// it. A tunnel moves bytes past Read and Write and counts them here.
func (c *meteredConn) addOut(n int) {
	if n > 0 {
		c.out.Add(int64(n))
		c.p.bytesOut.Add(int64(n))
	}
}

func (c *meteredConn) addIn(n int) {
	if n > 0 {
		c.in.Add(int64(n))
		c.p.bytesIn.Add(int64(n))
	}
}

// outLeft and inLeft return how many more bytes may be received from and
// sent to the sandbox under the proxy's budgets (math.MaxInt64 when
// unlimited), or the error that cuts the connection once one is spent.
func (p *Proxy) outLeft() (int64, error) {
	return budgetLeft(p.lim.MaxBytesOut, p.bytesOut.Load(), errBytesOut)
}

func (p *Proxy) inLeft() (int64, error) {
	return budgetLeft(p.lim.MaxBytesIn, p.bytesIn.Load(), errBytesIn)
}

func budgetLeft(limit, used int64, spent error) (int64, error) {
	if limit <= 0 {
		return math.MaxInt64, nil
	}
	if used >= limit {
		return 0, spent
	}
	return limit - used, nil
}

// errNoHalfClose is returned by CloseWrite on a connection that cannot
// half-close.
var errNoHalfClose = errors.New("egress: connection cannot half-close")

// CloseWrite half-closes the connection when the transport supports it.
func (c *meteredConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errNoHalfClose
}

// bufConn reads through r (a bufio.Reader holding bytes the client already
// sent) and writes to the connection itself.
type bufConn struct {
	net.Conn
	r io.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// idleWriter gives every write IdleTimeout to complete.
type idleWriter struct {
	c net.Conn
	d time.Duration
}

func (w idleWriter) Write(b []byte) (int, error) {
	_ = w.c.SetWriteDeadline(time.Now().Add(w.d))
	return w.c.Write(b)
}

// tunnelTarget is the destination of an inspected tunnel: every request
// inside goes there and nowhere else.
type tunnelTarget struct {
	host string
	port int
	tls  bool // the sandbox speaks TLS inside the tunnel (and so does the proxy upstream)
}

// session serves HTTP/1.1 requests from one sandbox connection, or from an
// inspected tunnel inside one.
type session struct {
	p    *Proxy
	mc   *meteredConn // the sandbox connection, for byte counts
	conn net.Conn     // what HTTP is read from and written to: mc, or TLS over it
	lr   *io.LimitedReader
	br   *bufio.Reader
	bw   *bufio.Writer
	tun  *tunnelTarget // nil outside an inspected tunnel
}

func newSession(p *Proxy, mc *meteredConn, conn net.Conn, tun *tunnelTarget) *session {
	lr := &io.LimitedReader{R: conn}
	return &session{
		p:    p,
		mc:   mc,
		conn: conn,
		lr:   lr,
		br:   bufio.NewReaderSize(lr, 4<<10),
		bw:   bufio.NewWriterSize(idleWriter{conn, p.lim.IdleTimeout}, 4<<10),
		tun:  tun,
	}
}

// meter marks where a record's bytes and duration start.
type meter struct {
	start     time.Time
	in0, out0 int64
}

func (s *session) meter() meter {
	return meter{start: time.Now(), in0: s.mc.in.Load(), out0: s.mc.out.Load()}
}

// finish fills in bytes and duration and writes the record.
func (s *session) finish(rec *Record, m meter) {
	rec.BytesIn = s.mc.in.Load() - m.in0
	rec.BytesOut = s.mc.out.Load() - m.out0
	rec.Duration = time.Since(m.start)
	s.p.record(*rec)
}

// serveConn owns one accepted sandbox connection until it ends.
func (p *Proxy) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	mc := &meteredConn{Conn: c, p: p}
	n := p.conns.Add(1)
	defer p.conns.Add(-1)
	if n > int64(p.lim.MaxConns) {
		p.reject(mc)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.lim.TotalTimeout)
	defer cancel()
	// Close (and the total timeout) end the connection wherever it blocks.
	defer afterFunc(ctx, func() { _ = c.Close() })()
	newSession(p, mc, mc, nil).serve(ctx)
}

// afterFunc runs f in its own goroutine when ctx is done, like
// context.AfterFunc; the returned stop either keeps f from running or waits
// until it has returned, so that Close, which waits for the proxy's
// goroutines, waits for f too.
func afterFunc(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	return func() {
		if !cancel() {
			<-done
		}
	}
}

// reject answers a connection over MaxConns with 403 "limit:conns". It
// reads the request head first (bounded in size and time) so the client
// sees the answer rather than a reset, and so the record names the target.
func (p *Proxy) reject(mc *meteredConn) {
	const reason = "limit:conns"
	s := newSession(p, mc, mc, nil)
	m := s.meter()
	rec := Record{Time: m.start, Decision: DecisionDenied, Reason: reason}
	if p.rejecting.Add(1) > maxRejecting {
		// Too many at once: spend nothing more on this one.
		p.rejecting.Add(-1)
		s.finish(&rec, m)
		return
	}
	defer p.rejecting.Add(-1)
	_ = mc.SetReadDeadline(time.Now().Add(min(rejectTimeout, p.lim.IdleTimeout)))
	s.lr.N = int64(p.lim.MaxHeaderBytes)
	if req, err := http.ReadRequest(s.br); err == nil {
		rec.Method = req.Method
		target := req.URL.Host
		if req.Method == http.MethodConnect {
			target = req.RequestURI
		}
		if h, port, err := parseAuthority(target, 80); err == nil {
			if h, err := hostname.Normalize(h); err == nil {
				rec.Host, rec.Port = h, port
			}
		}
	}
	s.refuse(http.StatusForbidden, reason, true)
	rec.Status = http.StatusForbidden
	s.finish(&rec, m)
}

// serve reads and handles requests until the connection should close.
func (s *session) serve(ctx context.Context) {
	for ctx.Err() == nil {
		_ = s.conn.SetReadDeadline(time.Now().Add(s.p.lim.IdleTimeout))
		s.lr.N = int64(s.p.lim.MaxHeaderBytes)
		m := s.meter()
		s.mc.lenient.Store(true)
		req, err := http.ReadRequest(s.br)
		s.mc.lenient.Store(false)
		if err != nil {
			if s.lr.N <= 0 {
				s.refuseRecord(Record{}, m, http.StatusRequestHeaderFieldsTooLarge, "limit:request_header")
				return
			}
			if quietEnd(err) {
				return
			}
			s.refuseRecord(Record{}, m, http.StatusBadRequest, "bad_request:syntax")
			return
		}
		s.lr.N = math.MaxInt64
		rec := Record{Time: m.start, Method: req.Method}
		if req.Method == http.MethodConnect {
			if s.tun != nil {
				s.refuseRecord(rec, m, http.StatusBadRequest, "bad_request:nested_connect")
				return
			}
			s.connect(ctx, req, rec, m)
			return
		}
		if s.tun == nil && s.p.local != nil && !req.URL.IsAbs() {
			if !s.serveLocal(ctx, req, rec, m) {
				return
			}
			continue
		}
		if !s.forward(ctx, req, rec, m) {
			return
		}
	}
}

// quietEnd reports whether a failed read of a request head is just the
// client going away or idling out between requests: no record for those.
func quietEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, errBytesOut) || errors.Is(err, errBytesIn)
}

// refuse writes a short error response with ReasonHeader and reports
// whether it was sent. The body repeats the reason for people reading curl
// output; reasons are fixed strings and never carry request data or secrets.
func (s *session) refuse(status int, reason string, closeConn bool) bool {
	s.mc.lenient.Store(true)
	defer s.mc.lenient.Store(false)
	text := http.StatusText(status)
	what := "refused"
	if status == http.StatusForbidden {
		what = "blocked by policy"
	} else if status >= 500 {
		what = "upstream unavailable"
	}
	body := fmt.Sprintf("airlock egress: %s (%s)\n", what, reason)
	fmt.Fprintf(s.bw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n%s: %s\r\nContent-Length: %d\r\n",
		status, text, ReasonHeader, reason, len(body))
	if closeConn {
		_, _ = s.bw.WriteString("Connection: close\r\n")
	}
	_, _ = s.bw.WriteString("\r\n")
	_, _ = s.bw.WriteString(body)
	return s.bw.Flush() == nil
}

// refuseRecord refuses, closing the connection, and records the refusal.
func (s *session) refuseRecord(rec Record, m meter, status int, reason string) {
	s.refuse(status, reason, true)
	if rec.Time.IsZero() {
		rec.Time = m.start
	}
	refused(&rec, status, reason)
	s.finish(&rec, m)
}

// refused marks rec as answered with an error status. A 4xx is a refusal;
// a 5xx is an upstream failure after an allowing decision, which stays.
func refused(rec *Record, status int, reason string) {
	if status < 500 || rec.Decision == "" {
		rec.Decision = DecisionDenied
	}
	rec.Status, rec.Reason = status, reason
}

// verdict is the outcome of decide.
type verdict struct {
	ok       bool
	decision string // DecisionAllowed, DecisionAsked or DecisionDenied
	reason   string // ReasonHeader value when denied; "approved" when asked
	rule     string
}

func (v verdict) apply(rec *Record) {
	rec.Decision, rec.Reason, rec.Rule = v.decision, v.reason, v.rule
}

// decide judges r: byte budgets first, then the policy, then the Approver
// when the policy says ask.
func (s *session) decide(ctx context.Context, r policy.Request) verdict {
	p := s.p
	if m := p.lim.MaxBytesOut; m > 0 && p.bytesOut.Load() >= m {
		return verdict{decision: DecisionDenied, reason: "limit:bytes_out"}
	}
	if m := p.lim.MaxBytesIn; m > 0 && p.bytesIn.Load() >= m {
		return verdict{decision: DecisionDenied, reason: "limit:bytes_in"}
	}
	d := p.pol.Decide(r)
	switch d.Verdict {
	case policy.Allow:
		return verdict{ok: true, decision: DecisionAllowed, rule: d.Rule}
	case policy.Ask:
		if p.approver == nil {
			return verdict{decision: DecisionDenied, reason: "policy:ask_unavailable", rule: d.Rule}
		}
		actx, done := s.watchClient(ctx)
		ok, err := p.approver.Ask(actx, p.id, r)
		done()
		if err != nil {
			p.logErr("approval failed", err, "host", r.Host)
			return verdict{decision: DecisionDenied, reason: "policy:ask_failed", rule: d.Rule}
		}
		if !ok {
			return verdict{decision: DecisionDenied, reason: "policy:ask_rejected", rule: d.Rule}
		}
		return verdict{ok: true, decision: DecisionAsked, reason: "approved", rule: d.Rule}
	}
	reason := d.Reason
	if reason == "" {
		reason = "deny"
	}
	return verdict{decision: DecisionDenied, reason: "policy:" + reason, rule: d.Rule}
}

// watchClient returns a context canceled when the sandbox closes the
// connection while a request is held for approval. It watches by peeking one
// byte, which consumes nothing; the returned func stops the watch and must be
// called before the connection is read again.
func (s *session) watchClient(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	_ = s.conn.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := s.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cancel()
		}
	}()
	return ctx, func() {
		_ = s.conn.SetReadDeadline(aLongTimeAgo)
		<-done
		_ = s.conn.SetReadDeadline(time.Time{})
		cancel()
	}
}

// connect handles a CONNECT request; the connection ends with it.
func (s *session) connect(ctx context.Context, req *http.Request, rec Record, m meter) {
	h, port, err := parseAuthority(req.RequestURI, 0)
	if err != nil {
		s.refuseRecord(rec, m, http.StatusBadRequest, "bad_request:authority")
		return
	}
	host, err := hostname.Normalize(h)
	if err != nil {
		s.refuseRecord(rec, m, http.StatusBadRequest, "bad_request:host")
		return
	}
	rec.Host, rec.Port = host, port
	if s.p.pol.Inspect(host, port) {
		s.inspect(ctx, host, port, rec, m)
		return
	}
	v := s.decide(ctx, policy.Request{Host: host, Port: port})
	v.apply(&rec)
	if !v.ok {
		s.refuseRecord(rec, m, http.StatusForbidden, v.reason)
		return
	}
	up, addr, err := s.p.dial(ctx, host, port)
	if err != nil {
		status, reason := s.p.upstreamFailure(err, &rec, host)
		s.refuseRecord(rec, m, status, reason)
		return
	}
	defer up.Close()
	rec.Addr = addr.String()
	_, _ = s.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	rec.Status = http.StatusOK
	if err := s.bw.Flush(); err != nil {
		s.finish(&rec, m)
		return
	}

	// The upstream connection exists (so refusals above could be HTTP
	// answers), but it gets no byte until the ClientHello names the host
	// the policy allowed.
	_ = s.conn.SetReadDeadline(time.Now().Add(s.p.lim.IdleTimeout))
	sni, hello, err := readClientHello(s.br)
	if err != nil {
		rec.Decision, rec.Reason = DecisionDenied, "not_tls"
		if !errors.Is(err, errNotTLS) {
			rec.Reason = "no_client_hello"
		}
		s.finish(&rec, m)
		return
	}
	if !sniMatches(sni, host, false) {
		rec.Decision, rec.Reason = DecisionDenied, "sni_mismatch"
		s.finish(&rec, m)
		return
	}
	_ = s.conn.SetDeadline(time.Time{})
	_ = up.SetWriteDeadline(time.Now().Add(s.p.lim.IdleTimeout))
	if _, err := up.Write(hello); err == nil {
		_ = up.SetWriteDeadline(time.Time{})
		s.relay(ctx, up)
	}
	s.finish(&rec, m)
}

// sniMatches reports whether a ClientHello's server name fits the CONNECT
// host: the same name after normalization, or, for an IP literal host, no
// name (or the same address). emptyOK accepts a missing name for any host.
func sniMatches(sni, host string, emptyOK bool) bool {
	if sni == "" {
		if emptyOK {
			return true
		}
		_, err := netip.ParseAddr(host)
		return err == nil
	}
	n, err := hostname.Normalize(sni)
	return err == nil && n == host
}
