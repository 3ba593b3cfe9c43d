package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
)

// Options tune a Client; the zero value is ready to use.
type Options struct {
	// HTTPClient sends the requests; nil means a client of this package's
	// own (never http.DefaultClient). Its redirect policy is replaced: a
	// redirect is answered as an error, not followed.
	HTTPClient *http.Client
	// Timeout bounds each request and the reading of its answer, but for
	// event streams, uploads and downloads, which only the caller's
	// context bounds. Zero means one minute.
	Timeout time.Duration
	// MaxResponse bounds a JSON answer's body in bytes (event pages are
	// bounded by their page size instead). Zero means 16 MiB.
	MaxResponse int64
	// StreamIdle is how long an event stream may stay silent (the server
	// sends a keepalive every 15 s by default) before it is dropped and
	// resumed. Zero means one minute.
	StreamIdle time.Duration
	// Reconnects bounds how many times in a row Follow reconnects without
	// receiving an event. Zero means 10; negative means none.
	Reconnects int
	// Insecure allows http:// URLs of hosts other than loopback, which
	// send the API key in clear text.
	Insecure bool
	// UserAgent is sent as User-Agent; empty sends "airlock-client".
	UserAgent string
}

// Defaults of Options.
const (
	defaultTimeout     = time.Minute
	defaultMaxResponse = 16 << 20
	defaultStreamIdle  = time.Minute
	defaultReconnects  = 10
	// maxKeyLen is the server's bound on an API key as presented.
	maxKeyLen = 512
	// maxErrorBody bounds the body of an error answer that is read.
	maxErrorBody = 64 << 10
	// maxMessage bounds the server's message kept in an *Error.
	maxMessage = 2000
	// rateRetries is how many times a request refused by the rate limit
	// is sent again, and maxRateWait the longest wait before one.
	rateRetries = 3
	maxRateWait = 10 * time.Second
)

// Client calls one airlock serve API with one API key. It is safe for
// concurrent use.
type Client struct {
	base *url.URL
	key  string
	hc   *http.Client
	o    Options
}

// New returns a client of the API at baseURL (http:// or https://, with an
// optional path prefix) that authenticates with key.
func New(baseURL, key string, o Options) (*Client, error) {
	u, err := checkURL(baseURL, o.Insecure)
	if err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	if o.MaxResponse <= 0 {
		o.MaxResponse = defaultMaxResponse
	}
	if o.StreamIdle <= 0 {
		o.StreamIdle = defaultStreamIdle
	}
	if o.Reconnects == 0 {
		o.Reconnects = defaultReconnects
	}
	if o.UserAgent == "" {
		o.UserAgent = "airlock-client"
	}
	hc := &http.Client{}
	if o.HTTPClient != nil {
		c := *o.HTTPClient
		hc = &c
	} else {
		hc.Transport = newTransport()
	}
	// Never follow a redirect: the answer is the API's or an error, and
	// the key goes nowhere else.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: u, key: key, hc: hc, o: o}, nil
}

// newTransport is the default transport with bounded connection setup.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DialContext:       (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2: true,
		MaxIdleConns:      16,
		// One host: all of them may be its (the default keeps 2, and a
		// client used concurrently would dial for most requests).
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
	}
}

// checkURL validates the API's base URL.
func checkURL(raw string, insecure bool) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("client: API URL: not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("client: API URL: want http:// or https://, not %q", clipText(u.Scheme, 20))
	case u.Host == "" || u.Hostname() == "":
		return nil, errors.New("client: API URL: no host")
	case u.User != nil:
		// Credentials in the URL would travel in error messages and
		// logs; the key is given apart.
		return nil, errors.New("client: API URL: must not hold credentials (the API key is given apart)")
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, errors.New("client: API URL: must not have a query or fragment")
	case u.Scheme == "http" && !insecure && !loopback(u.Hostname()):
		return nil, fmt.Errorf("client: API URL %s: plain http beyond loopback would send the API key in clear text; use https", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkKey validates an API key's form without saying anything of it.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("client: no API key")
	case len(key) > maxKeyLen:
		return fmt.Errorf("client: the API key is over %d bytes", maxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] >= 0x7f {
			return errors.New("client: the API key holds spaces or control characters")
		}
	}
	return nil
}

// Error is an error answer of the API: its {code, message, request_id}
// body, or what the status says when the body is not that shape.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is one of the api.Code constants (for a body that is not the
	// API's shape, the one the status maps to).
	Code string
	// Message is the server's message, printable text of at most 2000
	// bytes.
	Message string
	// RequestID names the request in the server's log.
	RequestID string
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration
}

// Error returns "CODE: MESSAGE (request ID)".
func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.RequestID != "" {
		s += " (request " + e.RequestID + ")"
	}
	return s
}

// IsCode reports whether err is or wraps an *Error with code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// codeOf is the code an HTTP status maps to, for answers without the
// API's error body (a proxy's, say).
func codeOf(status int) string {
	for code, st := range api.Codes {
		if st == status {
			return code
		}
	}
	switch {
	case status == http.StatusBadGateway || status == http.StatusGatewayTimeout:
		return api.CodeUnavailable
	case status >= 500:
		return api.CodeInternal
	}
	return api.CodeBadRequest
}

// decodeError builds the *Error of an answer with a status that is not
// 2xx from its headers and (at most maxErrorBody bytes of) its body.
func decodeError(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status}
	var b api.ErrorBody
	if json.Unmarshal(body, &b) == nil && b.Code != "" && printableCode(b.Code) {
		e.Code, e.Message, e.RequestID = b.Code, clipText(b.Message, maxMessage), clipText(b.RequestID, 64)
	} else {
		e.Code = codeOf(status)
	}
	if e.Message == "" {
		e.Message = strings.ToLower(http.StatusText(status))
		if e.Message == "" {
			e.Message = "HTTP status " + strconv.Itoa(status)
		}
	}
	if e.RequestID == "" {
		e.RequestID = clipText(h.Get("X-Request-Id"), 64)
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && s >= 0 && s < 86400 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

func printableCode(c string) bool {
	if len(c) > 40 {
		return false
	}
	for _, r := range c {
		if (r < 'a' || r > 'z') && r != '_' {
			return false
		}
	}
	return true
}

// clipText makes text from the server fit to print: valid UTF-8 without
// control characters (each becomes a space), at most n bytes.
func clipText(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.In(r, unicode.Bidi_Control) {
			return ' '
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// request is one call of the API.
type request struct {
	method string
	path   string // escaped, from the API's root: "/v1/runs/run_1"
	query  url.Values
	// body is sent as is: JSON (in) or bytes (raw); stream, when not nil,
	// is sent instead and cannot be sent again.
	in          any
	raw         []byte
	stream      io.Reader
	contentType string
	header      http.Header
	// long requests (streams, uploads, downloads) have no Timeout.
	long bool
}

// send sends q and returns the answer when its status is 2xx; any other
// is read and returned as *Error. An answer refused by the rate limit is
// sent again (up to rateRetries times, waiting as the server says) when
// its body can be sent again. The caller closes the body; cancel ends the
// request's own timeout, after the body is read.
func (c *Client) send(ctx context.Context, q request) (resp *http.Response, cancel context.CancelFunc, err error) {
	var body []byte
	switch {
	case q.in != nil:
		if body, err = json.Marshal(q.in); err != nil {
			return nil, nil, fmt.Errorf("client: %s %s: %w", q.method, q.path, err)
		}
		if q.contentType == "" {
			q.contentType = "application/json"
		}
	case q.raw != nil:
		body = q.raw
	}
	for attempt := 0; ; attempt++ {
		rctx, rcancel := ctx, context.CancelFunc(func() {})
		if !q.long {
			rctx, rcancel = context.WithTimeout(ctx, c.o.Timeout)
		}
		resp, err := c.sendOnce(rctx, q, body)
		if err != nil {
			rcancel()
			return nil, nil, err
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp, rcancel, nil
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		rcancel()
		e := decodeError(resp.StatusCode, resp.Header, b)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			e.Message = "the server answered with a redirect, which this client does not follow (is AIRLOCK_URL the API's address?)"
		}
		if e.Code != api.CodeRateLimited || q.stream != nil || attempt >= rateRetries || e.RetryAfter > maxRateWait {
			return nil, nil, e
		}
		if err := sleep(ctx, e.RetryAfter); err != nil {
			return nil, nil, e
		}
	}
}

func (c *Client) sendOnce(ctx context.Context, q request, body []byte) (*http.Response, error) {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + q.path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", q.method, q.path, err)
	}
	u.Path = p
	if len(q.query) > 0 {
		u.RawQuery = q.query.Encode()
	}
	var rd io.Reader
	if q.stream != nil {
		rd = q.stream
	} else if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, q.method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", q.method, q.path, err)
	}
	for k, vs := range q.header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("User-Agent", c.o.UserAgent)
	if q.contentType != "" {
		req.Header.Set("Content-Type", q.contentType)
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s %s: %w", q.method, q.path, transportErr(err))
	}
	return resp, nil
}

// transportErr drops the URL from a transport error (it is in the
// caller's message already) and keeps what went wrong.
func transportErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// call sends q and decodes its JSON answer into out (nil: discard),
// reading at most limit bytes (0: Options.MaxResponse).
func (c *Client) call(ctx context.Context, q request, out any, limit int64) error {
	resp, cancel, err := c.send(ctx, q)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	if limit <= 0 {
		limit = c.o.MaxResponse
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("client: %s %s: read the answer: %w", q.method, q.path, err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("client: %s %s: the answer is over %d bytes", q.method, q.path, limit)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("client: %s %s: malformed answer: %w", q.method, q.path, err)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(s) }
