package model

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/secret"
)

// Options configures a provider. The zero value of every field is a useful
// default, except Key, which the hosted APIs require.
type Options struct {
	// Key is the API key, from the host's secret store or environment. It is
	// sent only in the provider's auth header and is scrubbed from every
	// error and log line.
	Key secret.Value
	// BaseURL overrides the API's address. As with the official SDKs, the
	// OpenAI base includes /v1 (https://api.openai.com/v1) and the Anthropic
	// one does not (https://api.anthropic.com). Required for
	// openai-compatible (e.g. http://localhost:11434/v1 for Ollama).
	BaseURL string
	// HTTPClient sends the requests; nil means a client of this package's
	// own (never http.DefaultClient).
	HTTPClient *http.Client
	// Logger receives retry warnings; nil discards them.
	Logger *slog.Logger
	// Retry bounds the retries of failed calls.
	Retry RetryPolicy
	// Clock times retry waits; nil means the real clock. Tests inject a
	// fake one so that backoff costs no time.
	Clock Clock
	// IdleTimeout ends an attempt when no byte of the reply arrives for this
	// long, waiting for the response headers included (3 minutes when zero;
	// a local server may take long to read a big prompt).
	IdleTimeout time.Duration
	// AttemptTimeout bounds one attempt from request to last byte (15
	// minutes when zero).
	AttemptTimeout time.Duration
	// MaxTokens is the reply cap sent when Request.MaxTokens is zero (8192
	// when zero).
	MaxTokens int
	// MaxResponseBytes bounds one response body (32 MiB when zero).
	MaxResponseBytes int64
}

// Clock is the time source of retry waits.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, and then returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// RetryPolicy bounds retries. A call is retried on HTTP 408, 409, 429 and
// 5xx, on retryable error events in a stream, on timeouts and on dropped
// connections (reset, refused, closed early, stream cut before its end);
// never on another 4xx, and never once the caller's context is done. Waits
// follow exponential backoff with full jitter, and are at least what a
// Retry-After header asks for.
type RetryPolicy struct {
	// MaxAttempts counts the first try (5 when zero; 1 disables retries).
	MaxAttempts int
	// BaseDelay is the backoff cap of the first retry (1s when zero); the
	// cap doubles with each retry up to MaxDelay (30s when zero).
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxElapsed bounds the time from the first attempt to the start of the
	// last (10 minutes when zero): no wait is begun that would end past it,
	// not even one a Retry-After header asks for.
	MaxElapsed time.Duration
	// Jitter picks a wait in [0, limit]; nil means uniformly at random.
	Jitter func(limit time.Duration) time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.BaseDelay <= 0 {
		p.BaseDelay = time.Second
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = 30 * time.Second
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = 10 * time.Minute
	}
	if p.Jitter == nil {
		p.Jitter = func(limit time.Duration) time.Duration {
			if limit <= 0 {
				return 0
			}
			return rand.N(limit + 1)
		}
	}
	return p
}

// backoff returns the wait before retry number n (counting from 1).
func (p RetryPolicy) backoff(n int, err error) time.Duration {
	limit := p.MaxDelay
	if n < 32 {
		if d := p.BaseDelay << (n - 1); d > 0 && d < limit {
			limit = d
		}
	}
	wait := p.Jitter(limit)
	var ae *APIError
	if errors.As(err, &ae) && ae.RetryAfter > wait {
		wait = ae.RetryAfter
	}
	return wait
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// timeoutError ends an attempt that took too long; it is retryable.
type timeoutError struct {
	what  string
	after time.Duration
}

func (e *timeoutError) Error() string { return fmt.Sprintf("%s after %s", e.what, e.after) }

// Timeout marks the error as a timeout, as net.Error does.
func (e *timeoutError) Timeout() bool { return true }

// errBodyTooLarge is returned when a response passes MaxResponseBytes.
var errBodyTooLarge = errors.New("response body too large")

// scrubbedError replaces an error whose text held the key. It does not
// unwrap: the original's text is exactly what must not escape.
type scrubbedError struct{ msg string }

func (e *scrubbedError) Error() string { return e.msg }

// client is the HTTP machinery the adapters share: auth, retries, timeouts,
// error decoding, redaction.
type client struct {
	provider    string
	baseURL     string
	http        *http.Client
	key         secret.Value
	redact      *secret.Redactor
	log         *slog.Logger
	retry       RetryPolicy
	clock       Clock
	idle        time.Duration
	attempt     time.Duration
	maxBody     int64
	maxTokens   int
	requestIDHd string
}

func newClient(provider, defaultBase, requestIDHeader string, o Options) (*client, error) {
	base := strings.TrimRight(o.BaseURL, "/")
	if base == "" {
		base = defaultBase
	}
	if base == "" {
		return nil, fmt.Errorf("%s: a base URL is required", provider)
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("%s: base URL %q is not http(s)", provider, base)
	}
	c := &client{
		provider:    provider,
		baseURL:     base,
		http:        o.HTTPClient,
		key:         o.Key,
		redact:      secret.NewRedactor(),
		log:         o.Logger,
		retry:       o.Retry.withDefaults(),
		clock:       o.Clock,
		idle:        o.IdleTimeout,
		attempt:     o.AttemptTimeout,
		maxBody:     o.MaxResponseBytes,
		maxTokens:   o.MaxTokens,
		requestIDHd: requestIDHeader,
	}
	c.redact.Add(o.Key)
	if c.http == nil {
		// A client of our own, never http.DefaultClient: no other code can
		// change its settings or read its traffic through a shared hook.
		t, ok := http.DefaultTransport.(*http.Transport)
		if !ok {
			t = &http.Transport{}
		}
		c.http = &http.Client{Transport: t.Clone()}
	} else {
		hc := *c.http
		c.http = &hc
	}
	// Redirects are not followed: net/http would carry x-api-key (it only
	// strips Authorization and cookies) to whatever host a server names.
	c.http.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.clock == nil {
		c.clock = realClock{}
	}
	if c.idle <= 0 {
		c.idle = 3 * time.Minute
	}
	if c.attempt <= 0 {
		c.attempt = 15 * time.Minute
	}
	if c.maxBody <= 0 {
		c.maxBody = 32 << 20
	}
	if c.maxTokens <= 0 {
		c.maxTokens = 8192
	}
	return c, nil
}

// exchange is one API call as an adapter describes it.
type exchange struct {
	path   string
	body   []byte
	header func(http.Header)
	// decodeStream reads a text/event-stream body; decodeJSON a whole
	// application/json one (servers that ignore "stream": true).
	decodeStream func(r io.Reader, emit func(Delta)) (Response, error)
	decodeJSON   func(b []byte) (Response, error)
}

// complete runs ex with retries.
func (c *client) complete(ctx context.Context, ex exchange, stream func(Delta)) (Response, error) {
	start := c.clock.Now()
	emitted := false
	emit := func(d Delta) {
		emitted = true
		if stream != nil {
			stream(d)
		}
	}
	for n := 1; ; n++ {
		resp, err := c.try(ctx, ex, emit)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("%s: call abandoned: %w", c.provider, ctx.Err())
		}
		err = c.scrub(err)
		if !retryable(err) {
			return Response{}, err
		}
		if n >= c.retry.MaxAttempts {
			return Response{}, fmt.Errorf("%s: giving up after %s: %w", c.provider, attempts(n), err)
		}
		wait := c.retry.backoff(n, err)
		if elapsed := c.clock.Now().Sub(start); elapsed+wait > c.retry.MaxElapsed {
			return Response{}, fmt.Errorf("%s: giving up after %s: waiting %s more would pass the %s retry budget: %w",
				c.provider, attempts(n), wait.Round(time.Millisecond), c.retry.MaxElapsed, err)
		}
		c.log.Warn("model call failed; retrying", "provider", c.provider, "attempt", n,
			"wait", wait, "err", err.Error())
		if emitted && stream != nil {
			stream(Delta{Kind: DeltaReset})
		}
		emitted = false
		if err := c.clock.Sleep(ctx, wait); err != nil {
			return Response{}, fmt.Errorf("%s: call abandoned: %w", c.provider, err)
		}
	}
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// try makes one attempt.
func (c *client) try(ctx context.Context, ex exchange, emit func(Delta)) (Response, error) {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	actx, cancelTimeout := context.WithTimeoutCause(actx, c.attempt,
		&timeoutError{what: "attempt timed out", after: c.attempt})
	defer cancelTimeout()
	idle := time.AfterFunc(c.idle, func() {
		cancel(&timeoutError{what: "no data from the provider", after: c.idle})
	})
	defer idle.Stop()

	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.baseURL+ex.path, bytes.NewReader(ex.body))
	if err != nil {
		return Response{}, fmt.Errorf("%s: build request: %w", c.provider, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream, application/json")
	req.Header.Set("User-Agent", "airlock")
	ex.header(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return Response{}, c.attemptError(actx, fmt.Errorf("%s: send request: %w", c.provider, err))
	}
	defer resp.Body.Close()
	idle.Reset(c.idle)
	reqID := cleanMessage(resp.Header.Get(c.requestIDHd))
	body := &watchedBody{r: resp.Body, left: c.maxBody, touch: func() { idle.Reset(c.idle) }}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Response{}, c.attemptError(actx, c.statusError(resp, body, reqID))
	}

	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var out Response
	switch mt {
	case "text/event-stream":
		out, err = ex.decodeStream(body, emit)
	case "application/json", "":
		var b []byte
		if b, err = io.ReadAll(body); err == nil {
			out, err = ex.decodeJSON(b)
		}
	default:
		err = fmt.Errorf("unexpected content type %q", cleanMessage(mt))
	}
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			ae.Provider = c.provider
			if ae.RequestID == "" {
				ae.RequestID = reqID
			}
			c.redactAPIError(ae)
			return Response{}, ae
		}
		return Response{}, c.attemptError(actx, fmt.Errorf("%s: read reply: %w", c.provider, err))
	}
	out.ProviderRequestID = reqID
	return out, nil
}

// attemptError turns an error caused by the attempt's own deadline or idle
// watchdog into that timeout, so it reads well and is retried.
func (c *client) attemptError(actx context.Context, err error) error {
	var te *timeoutError
	if cause := context.Cause(actx); errors.As(cause, &te) {
		return fmt.Errorf("%s: %w", c.provider, te)
	}
	return err
}

// statusError builds the APIError of a non-2xx response.
func (c *client) statusError(resp *http.Response, body io.Reader, reqID string) error {
	b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	e := &APIError{
		Provider:   c.provider,
		StatusCode: resp.StatusCode,
		RequestID:  reqID,
		RetryAfter: parseRetryAfter(resp.Header.Get("retry-after-ms"), resp.Header.Get("Retry-After"), c.clock.Now()),
		Retryable:  statusRetryable(resp.StatusCode),
	}
	// The providers' SDKs obey x-should-retry; here it may only forbid a
	// retry, never allow one the status rules out.
	if strings.EqualFold(resp.Header.Get("x-should-retry"), "false") {
		e.Retryable = false
	}
	e.parseErrorBody(bytes.TrimSpace(b))
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	c.redactAPIError(e)
	return e
}

// redactAPIError cleans every text field of e that came from the provider
// and scrubs the key from it: a server may echo what it was sent.
func (c *client) redactAPIError(e *APIError) {
	for _, f := range []*string{&e.Message, &e.Type, &e.Code, &e.RequestID} {
		*f = c.redact.String(cleanMessage(*f))
	}
}

// scrub guarantees that err's text holds no part of the key.
func (c *client) scrub(err error) error {
	s := err.Error()
	if r := c.redact.String(s); r != s {
		return &scrubbedError{msg: r}
	}
	return err
}

// retryable reports whether repeating the request that failed with err may
// succeed.
func retryable(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Retryable
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var te *timeoutError
	switch {
	case errors.As(err, &te),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF):
		return true
	}
	// HTTP/2 stream resets and GOAWAY frames reach us as unexported
	// net/http types; their text is the only handle on them.
	msg := err.Error()
	return strings.Contains(msg, "http2: server sent GOAWAY") ||
		strings.Contains(msg, "stream error: stream ID") ||
		strings.Contains(msg, "http2: client connection lost")
}

// watchedBody counts and bounds a response body and tells the idle watchdog
// about every byte that arrives.
type watchedBody struct {
	r     io.Reader
	left  int64
	touch func()
}

func (w *watchedBody) Read(p []byte) (int, error) {
	if w.left <= 0 {
		// At the limit: only the end of the body is acceptable now.
		var one [1]byte
		n, err := w.r.Read(one[:])
		if n > 0 {
			return 0, errBodyTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > w.left {
		p = p[:w.left]
	}
	n, err := w.r.Read(p)
	w.left -= int64(n)
	if n > 0 {
		w.touch()
	}
	return n, err
}
