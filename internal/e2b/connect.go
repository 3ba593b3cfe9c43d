package e2b

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Connect protocol (connectrpc.com/docs/protocol), JSON codec only:
// unary calls are a plain JSON body each way; server-streaming calls carry
// enveloped messages (1 flag byte, a 4-byte big-endian length, the JSON),
// the last of which has the end-stream flag and holds the error, if any.

// Envelope flags.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// envelopeHeader is the size of an envelope's prefix.
const envelopeHeader = 5

// Connect error codes (the subset this server sends).
const (
	codeCanceled         = "canceled"
	codeUnknown          = "unknown"
	codeInvalidArgument  = "invalid_argument"
	codeDeadlineExceeded = "deadline_exceeded"
	codeNotFound         = "not_found"
	codeAlreadyExists    = "already_exists"
	codePermissionDenied = "permission_denied"
	codeResourceExhaust  = "resource_exhausted"
	codeFailedPrecond    = "failed_precondition"
	codeUnimplemented    = "unimplemented"
	codeInternal         = "internal"
	codeUnavailable      = "unavailable"
	codeUnauthenticated  = "unauthenticated"
)

// rpcError is a Connect error: a code from the closed set above and a
// message written for the client.
type rpcError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *rpcError) Error() string { return e.Code + ": " + e.Message }

func rpcErrorf(code, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// httpStatus is the status a unary call answers code with, per the
// Connect protocol's table.
func httpStatus(code string) int {
	switch code {
	case codeCanceled:
		return 499
	case codeInvalidArgument, codeFailedPrecond:
		return http.StatusBadRequest
	case codeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case codeNotFound:
		return http.StatusNotFound
	case codeAlreadyExists:
		return http.StatusConflict
	case codePermissionDenied:
		return http.StatusForbidden
	case codeResourceExhaust:
		return http.StatusTooManyRequests
	case codeUnimplemented:
		return http.StatusNotImplemented
	case codeUnavailable:
		return http.StatusServiceUnavailable
	case codeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// Envelope decoding errors.
var (
	errShortEnvelope = errors.New("connect: truncated envelope")
	errNoEnvelope    = errors.New("connect: empty request stream")
)

// TooLargeError says a message was over the limit; its text names both
// sizes, never the content.
type TooLargeError struct {
	Size, Max int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("connect: message of %d bytes is over the limit of %d", e.Size, e.Max)
}

// readEnvelope reads one envelope from r. A message longer than limit is
// refused from its length prefix, before any of it is read. io.EOF means r
// ended cleanly before an envelope; a stream that ends inside one is
// errShortEnvelope.
func readEnvelope(r io.Reader, limit int64) (flags byte, msg []byte, err error) {
	var hdr [envelopeHeader]byte
	n, err := io.ReadFull(r, hdr[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return 0, nil, io.EOF
	case err != nil:
		return 0, nil, errShortEnvelope
	}
	size := int64(binary.BigEndian.Uint32(hdr[1:]))
	if size > limit {
		return hdr[0], nil, &TooLargeError{Size: size, Max: limit}
	}
	msg = make([]byte, size)
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, errShortEnvelope
	}
	return hdr[0], msg, nil
}

// appendEnvelope appends msg, enveloped with flags, to dst.
func appendEnvelope(dst []byte, flags byte, msg []byte) []byte {
	dst = append(dst, flags, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(msg)))
	return append(dst, msg...)
}

// decodeStreamRequest reads the single request message of a
// server-streaming call: exactly one uncompressed, non-end-stream
// envelope of at most limit bytes, then the end of the body.
func decodeStreamRequest(r io.Reader, limit int64) ([]byte, error) {
	flags, msg, err := readEnvelope(r, limit)
	if errors.Is(err, io.EOF) {
		return nil, errNoEnvelope
	}
	if err != nil {
		return nil, err
	}
	switch {
	case flags&flagCompressed != 0:
		return nil, errors.New("connect: compressed messages are not supported")
	case flags != 0:
		return nil, fmt.Errorf("connect: unexpected envelope flags %#x", flags)
	}
	var one [1]byte
	if n, _ := io.ReadFull(r, one[:]); n > 0 {
		return nil, errors.New("connect: a server-streaming call takes exactly one request message")
	}
	return msg, nil
}

// requestError maps a decoding error to the Connect error the client sees.
func requestError(err error) *rpcError {
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return rpcErrorf(codeResourceExhaust, "request message of %d bytes is over the limit of %d", tl.Size, tl.Max)
	}
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	return rpcErrorf(codeInvalidArgument, "%s", strings.TrimPrefix(err.Error(), "connect: "))
}

// checkRequest checks what every Connect call shares: POST, the content
// type (want), the protocol version and no compression. A non-nil
// status means the caller must answer it with the error.
func checkRequest(r *http.Request, want string) (int, *rpcError) {
	if r.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, rpcErrorf(codeUnimplemented, "method %s: Connect calls are POST", r.Method)
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != want {
		return http.StatusUnsupportedMediaType, rpcErrorf(codeUnimplemented, "content type %q: this server speaks %s (the JSON codec)", clip(r.Header.Get("Content-Type")), want)
	}
	if v := r.Header.Get("Connect-Protocol-Version"); v != "" && v != "1" {
		return http.StatusBadRequest, rpcErrorf(codeInvalidArgument, "Connect-Protocol-Version %q: want 1", clip(v))
	}
	for _, h := range []string{"Content-Encoding", "Connect-Content-Encoding"} {
		if v := r.Header.Get(h); v != "" && v != "identity" {
			return http.StatusBadRequest, rpcErrorf(codeUnimplemented, "%s %q: compressed requests are not supported", h, clip(v))
		}
	}
	return 0, nil
}

// connectTimeout parses Connect-Timeout-Ms: 0 when absent.
func connectTimeout(r *http.Request) (time.Duration, *rpcError) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || len(v) > 10 {
		return 0, rpcErrorf(codeInvalidArgument, "Connect-Timeout-Ms %q: want 1 to 10 digits", clip(v))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// writeUnaryError answers a unary call with err.
func writeUnaryError(w http.ResponseWriter, status int, err *rpcError) {
	if status == 0 {
		status = httpStatus(err.Code)
	}
	b, _ := json.Marshal(err)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if status == http.StatusUnsupportedMediaType {
		h.Set("Accept-Post", "application/json, application/connect+json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeUnary answers a unary call with the message v.
func writeUnary(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeUnaryError(w, 0, rpcErrorf(codeInternal, "internal error"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// decodeMessage decodes a proto3 JSON message into v. Unknown fields are
// ignored, as proto3 JSON parsers may.
func decodeMessage(b []byte, v any) *rpcError {
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return rpcErrorf(codeInvalidArgument, "malformed request message: %s", clip(err.Error()))
	}
	return nil
}

// endStream is the last envelope of a stream.
type endStream struct {
	Error *rpcError `json:"error,omitempty"`
}

// stream writes a server-streaming response: each message in its own
// envelope, flushed at once. Only one goroutine may use it.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration // per write
	buf     []byte
	started bool
}

func newStream(w http.ResponseWriter, writeTimeout time.Duration) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), timeout: writeTimeout}
}

func (s *stream) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "application/connect+json")
	h.Set("Cache-Control", "no-store")
	// Tell buffering proxies in front not to hold the stream back.
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
}

// send writes one message and flushes it.
func (s *stream) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.write(0, b)
}

func (s *stream) write(flags byte, msg []byte) error {
	s.start()
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	s.buf = appendEnvelope(s.buf[:0], flags, msg)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// end writes the end-stream envelope, with err when not nil.
func (s *stream) end(err *rpcError) error {
	b, _ := json.Marshal(endStream{Error: err})
	return s.write(flagEndStream, b)
}

// clip shortens untrusted text quoted in a message.
func clip(s string) string {
	const limit = 80
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
