package egress

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/egress/guard"
	"github.com/airlockrun/airlock/internal/hostname"
	"github.com/airlockrun/airlock/internal/policy"
)

// hopHeaders are removed in both directions (RFC 9110 section 7.6.1), plus
// the proxy's own: the sandbox's Proxy-Authorization never travels on.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// removeHopByHop deletes the hop-by-hop headers and every header the
// Connection header names.
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// forward handles one HTTP request (absolute-form, or origin-form inside an
// inspected tunnel) and reports whether the connection may carry another.
func (s *session) forward(ctx context.Context, req *http.Request, rec Record, m meter) bool {
	hasBody := req.Body != nil && req.Body != http.NoBody
	// A refused request's body is not read, so the connection can only
	// be reused when there is none.
	keepAfterRefusal := !hasBody && !req.Close && req.ProtoAtLeast(1, 1)
	refuse := func(status int, reason string) bool {
		sent := s.refuse(status, reason, !keepAfterRefusal)
		refused(&rec, status, reason)
		s.finish(&rec, m)
		return sent && keepAfterRefusal
	}

	scheme, host, port, status, reason := s.target(req)
	if status != 0 {
		return refuse(status, reason)
	}
	rec.Host, rec.Port, rec.Inspected = host, port, true
	if _, err := decisionPath(req.URL); err != nil {
		return refuse(http.StatusBadRequest, "bad_request:path")
	}
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	v := s.decide(ctx, policy.Request{Host: host, Port: port, Method: req.Method, Path: path})
	v.apply(&rec)
	if !v.ok {
		return refuse(http.StatusForbidden, v.reason)
	}

	body := &reqBody{r: req.Body, conn: s.conn, idle: s.p.lim.IdleTimeout}
	out := req.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme = scheme
	out.URL.Host = hostPort(scheme, host, port)
	out.URL.User = nil
	out.Host = ""
	out.Close = false
	out.Trailer = nil
	out.TransferEncoding = nil
	out.GetBody = nil
	if hasBody {
		out.Body = body
	} else {
		out.Body = http.NoBody
		out.ContentLength = 0
	}
	removeHopByHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		// Send none rather than net/http's default: the proxy adds
		// nothing of its own to the request.
		out.Header.Set("User-Agent", "")
	}
	// Credentials go in after the sandbox's headers were cleaned, so
	// nothing the sandbox sends can take their place.
	names, reason := s.p.inject(ctx, out, host, port)
	if reason != "" {
		return refuse(http.StatusForbidden, reason)
	}
	injected := len(names) > 0
	rec.Credential = strings.Join(names, ",")
	if injected {
		// Ask for a body the proxy can scrub, and refuse partial ones: a
		// range could cut an echoed secret in pieces the scrubber does not
		// recognize.
		out.Header.Set("Accept-Encoding", "identity")
		out.Header.Del("Range")
		out.Header.Del("If-Range")
	}
	if hasBody && strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// Answer the client's wait here; the Transport sends the body
		// right away.
		_, _ = s.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		_ = s.bw.Flush()
	}
	out.Header.Del("Expect")

	resp, addr, err := s.p.roundTrip(out)
	rec.Addr = addr
	if err != nil {
		// A failure reading the sandbox's body is the sandbox's, not the
		// upstream's.
		switch berr := body.readErr(); {
		case errors.Is(berr, errBytesOut):
			return refuse(http.StatusForbidden, "limit:bytes_out")
		case berr != nil:
			return refuse(http.StatusBadRequest, "bad_request:body")
		}
		status, reason := s.p.upstreamFailure(err, &rec, host)
		return refuse(status, reason)
	}
	defer resp.Body.Close()
	keep, err := s.writeResponse(req, resp, injected)
	if errors.Is(err, errUnscrubbable) {
		// Nothing was sent yet: the response could not be made safe.
		return refuse(http.StatusBadGateway, "upstream:encoding")
	}
	rec.Status = resp.StatusCode
	if err != nil {
		keep = false
	}
	if hasBody && !body.eof.Load() {
		// The upstream answered without reading the whole body; what is
		// left on the connection is not a request.
		keep = false
	}
	s.finish(&rec, m)
	return keep
}

// target works out where a request goes: the absolute-form URL outside a
// tunnel, the tunnel's host inside one (where the request's Host must name
// that host). A non-zero status refuses the request.
func (s *session) target(req *http.Request) (scheme, host string, port, status int, reason string) {
	if s.tun == nil {
		if !req.URL.IsAbs() || req.URL.Host == "" {
			return "", "", 0, http.StatusBadRequest, "bad_request:origin_form"
		}
		if req.URL.Scheme != "http" {
			return "", "", 0, http.StatusBadRequest, "bad_request:scheme"
		}
		h, port, err := parseAuthority(req.URL.Host, 80)
		if err != nil {
			return "", "", 0, http.StatusBadRequest, "bad_request:authority"
		}
		host, err := hostname.Normalize(h)
		if err != nil {
			return "", "", 0, http.StatusBadRequest, "bad_request:host"
		}
		return "http", host, port, 0, ""
	}
	scheme, defPort := "http", 80
	if s.tun.tls {
		scheme, defPort = "https", 443
	}
	if req.URL.IsAbs() && req.URL.Scheme != scheme {
		return "", "", 0, http.StatusBadRequest, "bad_request:scheme"
	}
	h, port, err := parseAuthority(req.Host, defPort)
	if err != nil {
		return "", "", 0, http.StatusBadRequest, "bad_request:host"
	}
	host, err = hostname.Normalize(h)
	if err != nil {
		return "", "", 0, http.StatusBadRequest, "bad_request:host"
	}
	if host != s.tun.host || port != s.tun.port {
		// Forwarding to the tunnel host under another name would be
		// domain fronting past the decision; say so instead.
		return "", "", 0, http.StatusForbidden, "host_mismatch"
	}
	return scheme, host, port, 0, ""
}

// reqBody is the sandbox's request body as the Transport reads it. Each
// read gets IdleTimeout. Close does not drain (the Transport may close it
// when the upstream answers early): the session then closes the connection
// instead of reading the rest.
type reqBody struct {
	r      io.Reader
	conn   net.Conn
	idle   time.Duration
	eof    atomic.Bool
	closed atomic.Bool

	mu sync.Mutex
	// err is guarded by mu: the first error reading from the sandbox.
	err error
}

// readErr returns the first error reading the body from the sandbox.
func (b *reqBody) readErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

var errBodyClosed = errors.New("egress: request body closed")

func (b *reqBody) Read(p []byte) (int, error) {
	if b.eof.Load() {
		return 0, io.EOF
	}
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	_ = b.conn.SetReadDeadline(time.Now().Add(b.idle))
	n, err := b.r.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.eof.Store(true)
	case err != nil:
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *reqBody) Close() error {
	b.closed.Store(true)
	return nil
}

// dialError marks a failure to reach the upstream (as opposed to a guard
// refusal), for upstreamFailure.
type dialError struct{ err error }

func (e *dialError) Error() string { return "egress: dial upstream: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// dialUpstream is the Transport's DialContext: every upstream connection of
// forwarded requests goes through the guard.
func (p *Proxy) dialUpstream(ctx context.Context, _, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &dialError{err}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, &dialError{err}
	}
	c, _, err := p.dial(ctx, host, port)
	return c, err
}

// dial connects to host:port through the guard. A refusal comes back as
// the guard's *DeniedError, anything else as a *dialError.
func (p *Proxy) dial(ctx context.Context, host string, port int) (net.Conn, netip.AddrPort, error) {
	c, addr, err := p.dialer.Dial(ctx, host, port)
	if err != nil {
		var d *guard.DeniedError
		if errors.As(err, &d) {
			return nil, addr, err
		}
		return nil, addr, &dialError{err}
	}
	return c, addr, nil
}

// roundTrip sends out upstream and returns the response and the address of
// the connection it used.
func (p *Proxy) roundTrip(out *http.Request) (*http.Response, string, error) {
	var (
		mu   sync.Mutex
		addr string
	)
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		mu.Lock()
		addr = i.Conn.RemoteAddr().String()
		mu.Unlock()
	}}
	out = out.WithContext(httptrace.WithClientTrace(out.Context(), trace))
	resp, err := p.transport.RoundTrip(out)
	mu.Lock()
	defer mu.Unlock()
	return resp, addr, err
}

// upstreamFailure maps an error from dialing or a round trip to a status
// and reason: guard refusals are 403 "guard:<reason>" (and turn the record
// into a denial), everything else is 502/504 "upstream:<what>". The error
// itself, scrubbed, only goes to the log.
func (p *Proxy) upstreamFailure(err error, rec *Record, host string) (int, string) {
	var d *guard.DeniedError
	if errors.As(err, &d) {
		if d.Addr.IsValid() {
			rec.Addr = d.Addr.String()
		}
		switch d.Reason {
		case guard.ReasonResolveFailed, guard.ReasonNoAddress:
			p.logErr("resolve upstream", err, "host", host)
			return http.StatusBadGateway, "upstream:resolve"
		}
		rec.Decision = DecisionDenied
		return http.StatusForbidden, "guard:" + d.Reason
	}
	p.logErr("upstream", err, "host", host)
	var (
		de *dialError
		ve *tls.CertificateVerificationError
		ae tls.AlertError
		he tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &de):
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
			return http.StatusGatewayTimeout, "upstream:timeout"
		}
		return http.StatusBadGateway, "upstream:dial"
	case errors.As(err, &ve), errors.As(err, &ae), errors.As(err, &he):
		return http.StatusBadGateway, "upstream:tls"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusGatewayTimeout, "upstream:timeout"
	case strings.Contains(err.Error(), "response headers exceeded"):
		// net/http has no typed error for MaxResponseHeaderBytes.
		return http.StatusBadGateway, "limit:response_header"
	}
	return http.StatusBadGateway, "upstream:error"
}

// writeResponse sends the upstream's response to the sandbox. Hop-by-hop
// headers go, header values are scrubbed of known secrets, and when a
// credential was injected the body is scrubbed too: then its length can
// change, so it goes out chunked (or until close for HTTP/1.0). Upstream
// trailers are dropped. It returns errUnscrubbable, having written nothing,
// when the body cannot be scrubbed; otherwise whether the connection may be
// reused.
func (s *session) writeResponse(req *http.Request, resp *http.Response, scrub bool) (bool, error) {
	h := resp.Header
	removeHopByHop(h)
	h.Del("Content-Length")
	s.p.scrubHeader(h)
	noBody := req.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified || resp.StatusCode < 200
	var body io.Reader = resp.Body
	length := resp.ContentLength
	if scrub && !noBody {
		switch strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding"))) {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				return false, fmt.Errorf("%w: gzip: %w", errUnscrubbable, err)
			}
			defer zr.Close()
			body = zr
			h.Del("Content-Encoding")
		default:
			// An encoding the proxy cannot read could carry the secret
			// past the scrubber.
			return false, errUnscrubbable
		}
		body = s.p.redactor.Reader(body)
		length = -1
	}
	keep := !req.Close && req.ProtoAtLeast(1, 1)
	chunked := false
	switch {
	case noBody:
		if req.Method == http.MethodHead && length >= 0 && !scrub {
			h.Set("Content-Length", strconv.FormatInt(length, 10))
		}
	case length >= 0:
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	case req.ProtoAtLeast(1, 1):
		chunked = true
	default:
		keep = false // the body ends when the connection does
	}
	text := http.StatusText(resp.StatusCode)
	if text == "" {
		text = "status"
	}
	fmt.Fprintf(s.bw, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, text)
	if err := h.Write(s.bw); err != nil {
		return false, err
	}
	if chunked {
		_, _ = s.bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !keep {
		_, _ = s.bw.WriteString("Connection: close\r\n")
	}
	_, _ = s.bw.WriteString("\r\n")
	// A body of known length that fits the buffer goes out in one write
	// with the head (copyBody flushes after its first read), saving a
	// write and a wake-up of the client per response. Any other head goes
	// out at once, so a streamed response is not held back.
	small := !noBody && length >= 0 && length <= int64(s.bw.Available())
	if !small {
		if err := s.bw.Flush(); err != nil {
			return false, err
		}
	}
	if noBody {
		return keep, nil
	}
	n, err := s.copyBody(body, chunked)
	if err != nil {
		return false, err
	}
	if length >= 0 && n != length {
		return false, fmt.Errorf("egress: upstream body %d bytes, declared %d", n, length)
	}
	return keep, nil
}

// errUnscrubbable means a response body is in an encoding the proxy
// cannot scrub.
var errUnscrubbable = errors.New("egress: response encoding cannot be scrubbed")

// copyBody streams body to the sandbox, flushing after every read so
// streamed responses (server-sent events) are not held back.
func (s *session) copyBody(body io.Reader, chunked bool) (int64, error) {
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	buf := *bp
	var total int64
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			total += int64(n)
			if chunked {
				fmt.Fprintf(s.bw, "%x\r\n", n)
			}
			_, _ = s.bw.Write(buf[:n])
			if chunked {
				_, _ = s.bw.WriteString("\r\n")
			}
			if err := s.bw.Flush(); err != nil {
				return total, err
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return total, rerr
		}
	}
	if chunked {
		_, _ = s.bw.WriteString("0\r\n\r\n")
	}
	// Whatever is left: the last chunk, or a head whose body was empty.
	if err := s.bw.Flush(); err != nil {
		return total, err
	}
	return total, nil
}

// scrubHeader replaces known secret values in response headers. A header
// whose name holds a secret is dropped: a name cannot carry "[redacted]".
func (p *Proxy) scrubHeader(h http.Header) {
	for k, vs := range h {
		if p.redactor.String(k) != k {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = p.redactor.String(v)
		}
	}
}
