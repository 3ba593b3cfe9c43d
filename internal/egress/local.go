package egress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/bridge"
)

// maxRecordPath bounds the path kept in a Record.
const maxRecordPath = 512

// serveLocal gives an origin-form request to the Local handler and reports
// whether the connection may carry another request. The request is
// allowed by the proxy (the handler does its own checks); the record says
// Local, the path, and the status the handler answered.
func (s *session) serveLocal(ctx context.Context, req *http.Request, rec Record, m meter) bool {
	p := s.p
	hasBody := req.Body != nil && req.Body != http.NoBody
	keepAfterRefusal := !hasBody && !req.Close && req.ProtoAtLeast(1, 1)
	rec.Local, rec.Rule, rec.Inspected = true, "local", true
	rec.Path = req.URL.EscapedPath()
	if len(rec.Path) > maxRecordPath {
		rec.Path = rec.Path[:maxRecordPath]
	}
	refuse := func(status int, reason string) bool {
		sent := s.refuse(status, reason, !keepAfterRefusal)
		refused(&rec, status, reason)
		s.finish(&rec, m)
		return sent && keepAfterRefusal
	}
	if !strings.HasPrefix(req.RequestURI, "/") || req.Method == http.MethodConnect {
		return refuse(http.StatusBadRequest, "bad_request:origin_form")
	}
	if l := p.lim.MaxBytesOut; l > 0 && p.bytesOut.Load() >= l {
		return refuse(http.StatusForbidden, "limit:bytes_out")
	}
	if l := p.lim.MaxBytesIn; l > 0 && p.bytesIn.Load() >= l {
		return refuse(http.StatusForbidden, "limit:bytes_in")
	}
	rec.Decision = DecisionAllowed

	r := req.WithContext(bridge.WithIdentity(ctx, p.id))
	body := &reqBody{r: req.Body, conn: s.conn, idle: p.lim.IdleTimeout}
	if hasBody {
		r.Body = body
	} else {
		r.Body = http.NoBody
	}
	// What the handler sees is what a server would: no proxy headers.
	removeHopByHop(r.Header)
	if hasBody && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		_, _ = s.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		_ = s.bw.Flush()
	}
	r.Header.Del("Expect")

	w := &localWriter{
		s: s, header: make(http.Header), length: -1,
		keep: !req.Close && req.ProtoAtLeast(1, 1), head: req.Method == http.MethodHead,
	}
	if !s.callLocal(w, r) {
		w.keep = false
		if !w.wroteHeader {
			// Nothing was sent: say so rather than cut the connection.
			w.header = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("airlock: internal error\n"))
		}
	}
	if ctx.Err() != nil {
		// Close or the total timeout is ending the connection.
		w.keep = false
	}
	err := w.finish()
	rec.Status = w.status
	keep := w.keep && err == nil
	if hasBody && !body.eof.Load() {
		// The handler left part of the body unread; what is left on the
		// connection is not a request.
		keep = false
	}
	s.finish(&rec, m)
	return keep
}

// callLocal runs the handler and reports whether it returned normally. A
// panic is contained to this request (the proxy serves other sandboxes'
// connections in the same process) and logged, scrubbed, unless it is
// http.ErrAbortHandler.
func (s *session) callLocal(w *localWriter, r *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if err, isErr := v.(error); isErr && errors.Is(err, http.ErrAbortHandler) {
				return
			}
			s.p.logErr("local handler panicked", fmt.Errorf("%v", v), "path", r.URL.Path)
		}
	}()
	s.p.local.ServeHTTP(w, r)
	return true
}

// localWriter is the http.ResponseWriter of a Local request: it writes
// HTTP/1.1 to the sandbox connection, chunked unless the handler set a
// Content-Length, and sends what it has on every Flush.
type localWriter struct {
	s           *session
	header      http.Header
	wroteHeader bool
	status      int
	head        bool  // a HEAD request: no body goes out
	noBody      bool  // the status or method allows no body
	chunked     bool  // the body goes out chunked
	length      int64 // the declared Content-Length, or -1
	written     int64
	keep        bool  // the connection may carry another request
	err         error // the first error writing to the sandbox
}

var _ http.Flusher = (*localWriter)(nil)

func (w *localWriter) Header() http.Header { return w.header }

// WriteHeader sends the status line and headers (buffered until the first
// Flush or the end). Informational statuses are dropped; an invalid one
// becomes 500.
func (w *localWriter) WriteHeader(code int) {
	if w.wroteHeader || code >= 100 && code < 200 {
		return
	}
	if code < 200 || code > 999 {
		code = http.StatusInternalServerError
	}
	w.wroteHeader, w.status = true, code
	h := w.header.Clone()
	if strings.EqualFold(strings.TrimSpace(h.Get("Connection")), "close") {
		w.keep = false
	}
	removeHopByHop(h)
	cl := h.Get("Content-Length")
	h.Del("Content-Length")
	w.noBody = w.head || code == http.StatusNoContent || code == http.StatusNotModified
	if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 && cl != "" {
		w.length = n
		if code != http.StatusNoContent && code != http.StatusNotModified {
			h.Set("Content-Length", cl)
		}
	}
	switch {
	case w.noBody:
	case w.length >= 0:
	case w.keep:
		w.chunked = true
	default:
		// HTTP/1.0 or closing anyway: the body ends with the connection.
		w.keep = false
	}
	bw := w.s.bw
	text := http.StatusText(code)
	if text == "" {
		text = "status"
	}
	fmt.Fprintf(bw, "HTTP/1.1 %03d %s\r\n", code, text)
	_ = h.Write(bw)
	if w.chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if !w.keep {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
}

// Write sends b as part of the body (a chunk, when chunked). It never
// writes past a declared Content-Length.
func (w *localWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.head {
			return len(b), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if len(b) == 0 {
		return 0, nil
	}
	if w.length >= 0 && w.written+int64(len(b)) > w.length {
		return 0, http.ErrContentLength
	}
	bw := w.s.bw
	if w.chunked {
		fmt.Fprintf(bw, "%x\r\n", len(b))
	}
	n, err := bw.Write(b)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.written += int64(n)
	if err != nil {
		w.err = err
		return n, err
	}
	return n, nil
}

// Flush sends what was written so far.
func (w *localWriter) Flush() { _ = w.FlushError() }

// FlushError sends what was written so far and returns the error of doing
// so (http.ResponseController uses it).
func (w *localWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	if err := w.s.bw.Flush(); err != nil {
		w.err = err
	}
	return w.err
}

// finish ends the response after the handler returned: a handler that
// wrote nothing answers 200 with an empty body, a chunked body gets its
// last chunk, and everything is flushed. A body shorter than its declared
// length ends the connection.
func (w *localWriter) finish() error {
	if !w.wroteHeader {
		if w.header.Get("Content-Length") == "" && w.header.Get("Transfer-Encoding") == "" {
			w.header.Set("Content-Length", "0")
		}
		w.WriteHeader(http.StatusOK)
	}
	if w.chunked && w.err == nil {
		_, _ = w.s.bw.WriteString("0\r\n\r\n")
	}
	if w.length >= 0 && !w.noBody && w.written != w.length {
		w.keep = false
		if w.err == nil {
			w.err = fmt.Errorf("egress: local handler wrote %d of %d declared bytes", w.written, w.length)
		}
	}
	if err := w.s.bw.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}
