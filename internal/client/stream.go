package client

import (
	"bufio"
	"bytes"
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
	q := request{method: http.MethodGet, path: "/v1/runs/" + seg(f.id) + "/events/stream", long: true,
		header: http.Header{"Accept": {"text/event-stream"}, "Cache-Control": {"no-store"}}}
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
	r := newSSEReader(&touchReader{r: resp.Body, touch: idle.reset}, event.MaxEncodedSize+1024)
	for {
		m, err := r.next()
		if err != nil {
			if errors.Is(context.Cause(ctx), errIdle) {
				err = errIdle
			}
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the stream ended without its end
			}
			return api.StreamEnd{}, false, fmt.Errorf("client: events of %s: %w", f.id, transportErr(err))
		}
		if m.retry >= 0 {
			f.retry = min(time.Duration(m.retry)*time.Millisecond, maxRetry)
		}
		if len(m.data) == 0 {
			continue // only a retry: or an id
		}
		if m.name == "end" {
			var end api.StreamEnd
			if err := json.Unmarshal(m.data, &end); err != nil || !end.Status.Valid() || end.LastSeq != f.last {
				return api.StreamEnd{}, false, fmt.Errorf("%w: %s: malformed end %q", ErrStream, f.id, clipText(string(m.data), 200))
			}
			return end, true, nil
		}
		ev, err := event.Decode(m.data)
		if err != nil {
			return api.StreamEnd{}, false, fmt.Errorf("%w: %s: %w", ErrStream, f.id, err)
		}
		switch {
		case ev.RunID != f.id:
			return api.StreamEnd{}, false, fmt.Errorf("%w: %s: an event of another run", ErrStream, f.id)
		case m.id != "" && m.id != strconv.FormatInt(ev.Seq, 10):
			return api.StreamEnd{}, false, fmt.Errorf("%w: %s: id %q of event %d", ErrStream, f.id, clipText(m.id, 30), ev.Seq)
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

// sseMessage is one dispatched server-sent event.
type sseMessage struct {
	// id is the event's "id:" field when it had one, else "".
	id   string
	name string
	data []byte
	// retry is the "retry:" field in milliseconds, or -1.
	retry int
}

// sseReader reads server-sent events (the WHATWG HTML "event stream"
// format): lines end with LF, CR or CRLF; "field: value" lines build an
// event that a blank line dispatches; lines starting with ':' are
// comments. Every line and every event's data are bounded by max bytes.
type sseReader struct {
	sc    *bufio.Scanner
	max   int
	first bool
}

func newSSEReader(r io.Reader, max int) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), max+2)
	sc.Split(scanLines)
	return &sseReader{sc: sc, max: max, first: true}
}

// scanLines splits at LF, CR or CRLF, keeping no terminator. A final line
// without its terminator is dropped, as the format says (it is an
// incomplete event).
func scanLines(data []byte, atEOF bool) (int, []byte, error) {
	i := bytes.IndexAny(data, "\r\n")
	switch {
	case i < 0:
		return 0, nil, nil // need more; at EOF: an unterminated line
	case data[i] == '\n':
		return i + 1, data[:i], nil
	case i+1 < len(data):
		if data[i+1] == '\n' {
			return i + 2, data[:i], nil
		}
		return i + 1, data[:i], nil
	case atEOF:
		return i + 1, data[:i], nil
	}
	return 0, nil, nil // a CR at the end of the buffer: is a LF next?
}

// next returns the next dispatched event; io.EOF when the stream ends.
func (s *sseReader) next() (sseMessage, error) {
	m := sseMessage{retry: -1}
	var data []byte
	hasData := false
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if s.first {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
			s.first = false
		}
		if len(line) == 0 {
			if hasData || m.retry >= 0 || m.id != "" {
				if hasData {
					m.data = bytes.TrimSuffix(data, []byte("\n"))
				}
				return m, nil
			}
			m.name = ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, ok := bytes.Cut(line, []byte(":"))
		if ok {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			m.name = string(value)
		case "data":
			if len(data)+len(value)+1 > s.max {
				return m, fmt.Errorf("%w: an event's data is over %d bytes", ErrStream, s.max)
			}
			data = append(data, value...)
			data = append(data, '\n')
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				m.id = string(value)
			}
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 && allDigits(value) {
				m.retry = n
			}
		}
	}
	if err := s.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return m, fmt.Errorf("%w: a line is over %d bytes", ErrStream, s.max)
		}
		return m, err
	}
	return m, io.EOF
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}
