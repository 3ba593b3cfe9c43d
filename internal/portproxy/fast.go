package portproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// maxResponseHeader bounds the header of a sandbox server's answer (and
// of its informational answers, each), on both paths: the server is
// untrusted code, and a header is held whole in the host's memory.
const maxResponseHeader = 1 << 20

// max1xx bounds the informational answers (1xx but 101) relayed before
// the answer: a server that sends more has its exchange ended, on both
// paths, rather than stream 1xx headers for ever.
const max1xx = 5

var errTooMany1xx = &protocolError{fmt.Sprintf("sent more than %d informational answers", max1xx)}

// limit1xx is ctx with a trace that ends the proxy path's exchange at
// the informational answer past max1xx (httputil.ReverseProxy relays
// each as it comes, and net/http bounds only each one's header).
func limit1xx(ctx context.Context) context.Context {
	var n atomic.Int32
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error {
			if n.Add(1) > max1xx {
				return errTooMany1xx
			}
			return nil
		},
	})
}

// fast reports whether r takes the fast path: no body and no upgrade,
// so that the exchange is one write of the request and one read of the
// answer, done in the handler's goroutine. What has a body (streamed
// while the answer may already come back) or an upgrade (a connection
// for as long as it lasts) takes httputil.ReverseProxy.
func fast(r *http.Request) bool {
	return (r.Body == nil || r.Body == http.NoBody) && r.ContentLength <= 0 && len(r.TransferEncoding) == 0 &&
		upgradeType(r.Header) == "" && r.Method != http.MethodConnect
}

// outbound is the request the sandbox's server gets for in, on both
// paths, with ctx: httputil.ReverseProxy's rules for an outbound request
// (hop-by-hop headers removed, an upgrade kept, the client's forwarding
// headers replaced by this hop's, unparsable query parameters dropped,
// no default User-Agent) and the relay's own (the port on the sandbox's
// loopback, the Host, the headers that never reach the server).
func (rl *Relay) outbound(ctx context.Context, in *http.Request) *http.Request {
	out := in.Clone(ctx)
	if in.ContentLength == 0 {
		out.Body = nil
	}
	if out.Header == nil {
		out.Header = http.Header{}
	}
	out.Close = false
	up := upgradeType(out.Header)
	removeHopByHop(out.Header)
	if tokenIn(in.Header["Te"], "trailers") {
		out.Header.Set("Te", "trailers")
	}
	if up != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", up)
	}
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		out.Header.Del(h)
	}
	out.URL.RawQuery = cleanQuery(out.URL.RawQuery)
	out.URL.Scheme, out.URL.Host = "http", net.JoinHostPort("127.0.0.1", strconv.Itoa(rl.Port))
	out.Host = in.Host
	if rl.Host != nil {
		out.Host = rl.Host(in.Host)
	}
	for _, h := range rl.Strip {
		out.Header.Del(h)
	}
	(&httputil.ProxyRequest{In: in, Out: out}).SetXForwarded()
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // no Go default in its place
	}
	return out
}

// hopHeaders are removed from every request and answer relayed, with
// those the Connection header names (RFC 9110, 7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, f := range hopHeaders {
		h.Del(f)
	}
}

// upgradeType is the protocol h asks to upgrade to, or "".
func upgradeType(h http.Header) string {
	if !tokenIn(h["Connection"], "upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// tokenIn reports whether the comma-separated values hold token, in any
// case.
func tokenIn(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

// cleanQuery drops the query parameters a server could read otherwise
// than the relay did (a ';', a bad escape), as httputil.ReverseProxy does.
func cleanQuery(s string) string {
	for i := 0; i < len(s); {
		switch s[i] {
		case ';':
			v, _ := url.ParseQuery(s)
			return v.Encode()
		case '%':
			if i+2 >= len(s) || !ishex(s[i+1]) || !ishex(s[i+2]) {
				v, _ := url.ParseQuery(s)
				return v.Encode()
			}
			i += 3
		default:
			i++
		}
	}
	return s
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// checkSwitch is the refusal of a 101 answer (with header ans) to a
// request with header req, nil when the request asked for that switch.
func checkSwitch(req, ans http.Header) error {
	asked, got := upgradeType(req), upgradeType(ans)
	switch {
	case asked == "":
		return &protocolError{"switched protocols when the request asked for no upgrade"}
	case !strings.EqualFold(asked, got):
		return &protocolError{fmt.Sprintf("switched to %q when the request asked for %q", clip(got), clip(asked))}
	}
	return nil
}

// protocolError is an answer the fast path refuses: what follows "the
// sandbox's server" in the refusal.
type protocolError struct{ what string }

func (e *protocolError) Error() string { return "the sandbox's server " + e.what }

// headerLimit reads from r, failing once more than left bytes were read
// while on: a header's bound.
type headerLimit struct {
	r    io.Reader
	left int64
	on   bool
}

var errHeaderTooLarge = &protocolError{fmt.Sprintf("sent an answer whose header is over %d bytes", maxResponseHeader)}

func (l *headerLimit) Read(p []byte) (int, error) {
	if !l.on {
		return l.r.Read(p)
	}
	if l.left <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// fastBufs are the fast path's buffers: a request written, an answer
// read, a body copied.
var fastBufs = sync.Pool{New: func() any {
	return &fastBuf{w: bufio.NewWriterSize(nil, 4<<10), r: bufio.NewReaderSize(nil, 4<<10), copy: make([]byte, 32<<10)}
}}

type fastBuf struct {
	w    *bufio.Writer
	r    *bufio.Reader
	copy []byte
}

// serveFast relays r, which has no body and no upgrade, in this
// goroutine: it writes the request on an early connection and reads the
// answer with http.ReadResponse, with the rules the proxy path keeps
// (outbound for the request; for the answer: informational answers
// relayed, an upgrade nobody asked for refused, hop-by-hop headers
// removed, the body streamed and flushed as it comes, trailers kept, a
// header bounded, nothing read after the answer's end).
func (x *exchange) serveFast(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out := x.rl.outbound(ctx, r)
	// One connection per request, as on the proxy path: the server reads
	// this one request on it, and its end after the answer.
	out.Close = true
	conn, err := x.dial(ctx)
	if err != nil {
		x.fail(w, r, err)
		return
	}
	defer conn.Close()
	// A client gone, or the caller's cancel (a revoked exposure), ends
	// the exchange where it waits.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	b := fastBufs.Get().(*fastBuf)
	defer func() {
		b.w.Reset(nil)
		b.r.Reset(nil)
		fastBufs.Put(b)
	}()
	b.w.Reset(conn)
	if err := out.Write(b.w); err != nil {
		x.fail(w, r, err)
		return
	}
	if err := b.w.Flush(); err != nil {
		x.fail(w, r, err)
		return
	}
	lim := &headerLimit{r: conn}
	b.r.Reset(lim)
	var res *http.Response
	for n := 0; ; n++ {
		lim.left, lim.on = maxResponseHeader, true
		res, err = http.ReadResponse(b.r, out)
		if err != nil {
			x.fail(w, r, err)
			return
		}
		code := res.StatusCode
		if code == http.StatusSwitchingProtocols {
			res.Body.Close()
			x.fail(w, r, checkSwitch(out.Header, res.Header))
			return
		}
		if code >= 200 || code < 100 {
			break
		}
		// An informational answer (103 Early Hints) reaches the client
		// as the proxy relays it; one past max1xx ends the exchange
		// (after it is relayed, as on the proxy path: limit1xx).
		h := w.Header()
		copyHeader(h, res.Header)
		w.WriteHeader(code)
		clear(h)
		if n >= max1xx {
			x.fail(w, r, errTooMany1xx)
			return
		}
	}
	lim.on = false
	defer res.Body.Close()
	removeHopByHop(res.Header)
	copyHeader(w.Header(), res.Header)
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		w.Header().Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)
	rc := http.NewResponseController(w)
	if b.r.Buffered() == 0 && res.Body != http.NoBody {
		// None of the body has come yet: the header goes now, as the
		// proxy sends it, for a client of a stream (events, a long
		// poll) to see the answer begin. A body that came with its
		// header goes out with it, in one write.
		_ = rc.Flush()
	}
	for {
		n, rerr := res.Body.Read(b.copy)
		if n > 0 {
			if _, werr := w.Write(b.copy[:n]); werr != nil {
				panic(http.ErrAbortHandler) // the client went away mid-answer
			}
			_ = rc.Flush()
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if !errors.Is(rerr, context.Canceled) && ctx.Err() == nil {
				x.rl.logf("portproxy: read error during body copy: %v", rerr)
			}
			// The answer is cut: the client must see it cut.
			panic(http.ErrAbortHandler)
		}
	}
	if len(res.Trailer) > 0 {
		_ = rc.Flush() // chunked, for the trailers to follow
	}
	if len(res.Trailer) == announced {
		copyHeader(w.Header(), res.Trailer)
		return
	}
	for k, vv := range res.Trailer {
		for _, v := range vv {
			w.Header().Add(http.TrailerPrefix+k, v)
		}
	}
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		for _, v := range vv {
			dst.Add(k, v)
		}
	}
}

// logf logs what the relay logs itself, as the proxy does.
func (rl *Relay) logf(format string, args ...any) {
	l := rl.ErrorLog
	if l == nil {
		l = log.Default()
	}
	l.Printf(format, args...)
}
