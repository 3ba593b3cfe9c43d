package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sse"
)

// ErrStream reports a stream that broke the API's contract (a gap in the
// sequence, another run's event, a malformed frame); it is not resumed.
var ErrStream = errors.New("client: malformed event stream")

// defaultRetry is the wait before a reconnection until the server says
// another (its "retry:" field).
const defaultRetry = 2 * time.Second

// maxRetry bounds the wait a server may ask for.
const maxRetry = time.Minute

// Follow calls fn with each event of run id after seq after, in order,
// each once, as the server appends them, until the run is final and its
// last event was delivered; it then returns how the stream ended. A
// stream that breaks (the server restarts, a proxy drops it, it stays
// silent past Options.StreamIdle) is resumed with Last-Event-ID, so
// nothing is skipped or repeated; after Options.Reconnects attempts in a
// row that deliver no event, Follow gives up. An error of fn, or an API
// error other than rate_limited or unavailable, ends Follow at once.
func (c *Client) Follow(ctx context.Context, id string, after int64, fn func(event.Event) error) (api.StreamEnd, error) {
	f := &follower{c: c, id: id, last: after, fn: fn, retry: defaultRetry}
	failures := 0
	for {
		end, done, err := f.once(ctx)
		switch {
		case done:
			return end, nil
		case ctx.Err() != nil:
			return api.StreamEnd{}, ctx.Err()
		case !resumable(err):
			return api.StreamEnd{}, err
		}
		if f.progressed {
			failures = 0
		}
		failures++
		if c.o.Reconnects < 0 || failures > c.o.Reconnects {
			return api.StreamEnd{}, fmt.Errorf("client: events of %s: gave up after %d attempts: %w", id, failures, err)
		}
		wait := f.retry
		var ae *Error
		if errors.As(err, &ae) && ae.RetryAfter > 0 {
			wait = min(ae.RetryAfter, maxRetry)
		}
		if err := sleep(ctx, wait); err != nil {
			return api.StreamEnd{}, err
		}
	}
}

// resumable reports whether a stream attempt's error is worth another
// attempt: the connection's, or the server's being busy or away.
func resumable(err error) bool {
	var ae *Error
	var fe fnError
	switch {
	case errors.Is(err, ErrStream), errors.As(err, &fe):
		return false
	case errors.As(err, &ae):
		return ae.Code == api.CodeRateLimited || ae.Code == api.CodeUnavailable
	}
	return true
}

// fnError carries the error of Follow's callback.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }
func (e fnError) Unwrap() error { return e.err }

// follower is one Follow's state across reconnections.
type follower struct {
	c     *Client
	id    string
	last  int64
	fn    func(event.Event) error
	retry time.Duration
	// progressed says the last attempt delivered an event.
	progressed bool
}

// once runs one connection: done when the stream ended as it should.
func (f *follower) once(ctx context.Context) (api.StreamEnd, bool, error) {
	f.progressed = false
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	q := request{
		method: http.MethodGet, path: "/v1/runs/" + seg(f.id) + "/events/stream", long: true,
		header: http.Header{"Accept": {"text/event-stream"}, "Cache-Control": {"no-store"}},
	}
	if f.last > 0 {
		q.header.Set("Last-Event-ID", strconv.FormatInt(f.last, 10))
	}
	resp, done, err := f.c.send(ctx, q)
	if err != nil {
		return api.StreamEnd{}, false, err
	}
	defer done()
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return api.StreamEnd{LastSeq: f.last}, true, nil
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return api.StreamEnd{}, false, fmt.Errorf("%w: %s answered %q, not text/event-stream", ErrStream, f.id, clipText(mt, 60))
	}
	// A silent connection is dropped after StreamIdle: the server sends
	// keepalives, so silence means the connection is gone.
	idle := newIdleTimer(f.c.o.StreamIdle, func() { cancel(errIdle) })
	defer idle.stop()
	r := sse.NewReader(&touchReader{r: resp.Body, touch: idle.reset}, event.MaxEncodedSize+1024)
	for {
		m, err := r.Next()
		if d, ok := r.Retry(); ok {
			f.retry = min(d, maxRetry)
		}
		if err != nil {
			if errors.Is(context.Cause(ctx), errIdle) {
				err = errIdle
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the stream ended without its end
			}
			if errors.Is(err, sse.ErrTooLarge) {
				err = fmt.Errorf("%w: %w", ErrStream, err)
			}
			return api.StreamEnd{}, false, fmt.Errorf("client: events of %s: %w", f.id, transportErr(err))
		}
		if m.Data == "" {
			continue
		}
		if m.Type == "end" {
			var end api.StreamEnd
			if err := json.Unmarshal([]byte(m.Data), &end); err != nil || !end.Status.Valid() || end.LastSeq != f.last {
				return api.StreamEnd{}, false, fmt.Errorf("%w: %s: malformed end %q", ErrStream, f.id, clipText(m.Data, 200))
			}
			return end, true, nil
		}
		ev, err := event.Decode([]byte(m.Data))
		if err != nil {
			return api.StreamEnd{}, false, fmt.Errorf("%w: %s: %w", ErrStream, f.id, err)
		}
		switch {
		case ev.RunID != f.id:
			return api.StreamEnd{}, false, fmt.Errorf("%w: %s: an event of another run", ErrStream, f.id)
		case m.ID != "" && m.ID != strconv.FormatInt(ev.Seq, 10):
			return api.StreamEnd{}, false, fmt.Errorf("%w: %s: id %q of event %d", ErrStream, f.id, clipText(m.ID, 30), ev.Seq)
		case ev.Seq <= f.last:
			continue // sent before the reconnection already
		case ev.Seq != f.last+1:
			return api.StreamEnd{}, false, fmt.Errorf("%w: %s: event %d after %d", ErrStream, f.id, ev.Seq, f.last)
		}
		if err := f.fn(ev); err != nil {
			return api.StreamEnd{}, false, fnError{err}
		}
		f.last, f.progressed = ev.Seq, true
	}
}

// errIdle ends a stream that stayed silent too long.
var errIdle = errors.New("the stream stayed silent too long")

// idleTimer calls fire once after d without a reset.
type idleTimer struct {
	mu sync.Mutex
	// t is the timer, nil once stopped (guarded by mu).
	t *time.Timer
	d time.Duration
}

func newIdleTimer(d time.Duration, fire func()) *idleTimer {
	return &idleTimer{t: time.AfterFunc(d, fire), d: d}
}

func (t *idleTimer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.t != nil {
		t.t.Reset(t.d)
	}
}

func (t *idleTimer) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
}

// touchReader calls touch after every read that returned bytes.
type touchReader struct {
	r     io.Reader
	touch func()
}

func (t *touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.touch()
	}
	return n, err
}
