package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/param"
	"github.com/airlockrun/airlock/internal/store"
)

// The whole-number parameters of the API: package param checks each
// against its bounds (a seq past int64 is refused, not wrapped around).
var (
	afterParam       = param.Int{Name: "after", Max: math.MaxInt64}
	lastEventIDParam = param.Int{Name: "Last-Event-ID", Max: math.MaxInt64}
	pageParam        = param.Int{Name: "limit", Min: 1, Max: store.MaxPage, Default: 100}
	runsPageParam    = param.Int{Name: "limit", Min: 1, Max: maxPage, Default: defaultPage}
)

// parseParam reads a client's value of p; a refused one is a bad request
// whose message names p's bounds.
func parseParam(p param.Int, v string) (int64, error) {
	n, err := p.Parse(v)
	if err != nil {
		return 0, badRequest("%s", err.Error())
	}
	return n, nil
}

func (s *Server) events(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	after, err := parseParam(afterParam, q.Get("after"))
	if err != nil {
		return err
	}
	n, err := parseParam(pageParam, q.Get("limit"))
	if err != nil {
		return err
	}
	limit := int(n)
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	// Nothing follows the run's last seq (as the stream knows): a client
	// at or past it, up to the largest seq, gets an empty page, and
	// after+1 is never computed where it would wrap around.
	var evs []event.Event
	if after < run.LastSeq {
		if evs, err = c.view.Events(r.Context(), run.ID, after+1, limit); err != nil {
			return err
		}
	}
	page := api.EventPage{Events: evs, NextAfter: after}
	if page.Events == nil {
		page.Events = []event.Event{}
	}
	if n := len(page.Events); n > 0 {
		page.NextAfter = page.Events[n-1].Seq
	}
	if len(evs) == limit {
		next, err := c.view.Events(r.Context(), run.ID, page.NextAfter+1, 1)
		if err != nil {
			return err
		}
		page.More = len(next) > 0
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// streamPage is how many events a stream reads from the store at a time.
const streamPage = 256

// stream sends a run's events as server-sent events: each has the event's
// seq as its id, its type as its event name and its JSON as data. It
// starts after Last-Event-ID (a reconnection) or ?after=, so nothing is
// sent twice or skipped; it ends with an "end" event when the run is final
// and everything was sent. A stream of a final run with nothing left to
// send answers 204, which tells an EventSource to stop reconnecting.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *call) error {
	after, err := streamAfter(r)
	if err != nil {
		return err
	}
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	if !s.takeStream(c.p.KeyID) {
		return &apiError{code: api.CodeRateLimited, msg: fmt.Sprintf("this key has %d event streams open already", s.cfg.MaxStreams), retryAfter: 5}
	}
	defer s.dropStream(c.p.KeyID)
	// Subscribe before the first read: an append between the read and the
	// subscription would otherwise wait for the poll.
	sub := s.o.Feed.subscribe(run.ID, s.o.Store, s.cfg.StreamPoll)
	defer sub.stop()
	es := &eventStream{s: s, c: c, runID: run.ID, sub: sub, subscribed: time.Now(), after: after}
	if run.Status.Final() && after >= run.LastSeq {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	s.metrics.streams.Add(1)
	defer s.metrics.streams.Add(-1)
	// A stream outlives its request's authentication: it ends once its
	// key is revoked (revoke.go).
	revoked, session, release := s.watch.hold(c.p, c.session)
	defer release()
	return es.serve(r.Context(), w, revoked, session)
}

// streamAfter returns the seq a stream starts after: Last-Event-ID when the
// client reconnects, else ?after=.
func streamAfter(r *http.Request) (int64, error) {
	after, err := parseParam(afterParam, r.URL.Query().Get("after"))
	if err != nil {
		return 0, err
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		return parseParam(lastEventIDParam, id)
	}
	return after, nil
}

// eventStream is one open event stream of a run (Server.stream): where it
// is in the run's events, and how it writes to its client.
type eventStream struct {
	s          *Server
	c          *call
	runID      string
	sub        *subscription
	subscribed time.Time // when sub began: events after it are live
	rc         *http.ResponseController
	bw         *streamBuffer
	deadline   time.Time // the write deadline set last
	// after is the seq of the last event sent (or the one the stream
	// started after).
	after int64
	// end, once set, is the final status the stream ends with, once every
	// event up to it went out.
	end event.Status
}

// serve answers with the stream and sends the run's events as they come,
// until the run's end was sent, the client leaves, the server closes, or
// the stream's key is revoked.
func (es *eventStream) serve(ctx context.Context, w http.ResponseWriter, revoked, session <-chan struct{}) error {
	if err := es.open(w); err != nil {
		return err
	}
	defer es.bw.release()
	fmt.Fprintf(es.bw, "retry: %d\n\n", 2000)
	if err := es.flush(); err != nil {
		return nil // the client went away
	}
	keepalive := time.NewTicker(es.s.cfg.Keepalive)
	defer keepalive.Stop()
	if err := es.catchUp(ctx); err != nil || es.end != "" {
		if es.end != "" {
			es.finish()
		}
		return ignoreGone(err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-es.s.closing:
			return nil
		case <-revoked:
			es.c.log.Info("event stream ended: its key was revoked")
			return nil
		case <-session:
			es.c.log.Info("event stream ended: its ui session ended")
			return nil
		case <-es.sub.wake:
			if err := es.catchUp(ctx); err != nil {
				return ignoreGone(err)
			}
		case <-keepalive.C:
			fmt.Fprint(es.bw, ": keepalive\n\n")
			if err := es.flush(); err != nil {
				return nil
			}
		}
		if es.end != "" {
			es.finish()
			return nil
		}
	}
}

// open answers 200 with an event stream. A stream lives long: no read
// deadline (its expiry would end the stream), and a write deadline per
// flush instead of per request.
func (es *eventStream) open(w http.ResponseWriter) error {
	es.rc = http.NewResponseController(w)
	if err := es.rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	es.bw = &streamBuffer{w: w}
	return nil
}

// flush sends what is buffered to the client.
func (es *eventStream) flush() error {
	// A client that does not read within the write timeout (half of it at
	// least: the deadline moves only once half is gone, which spares a
	// timer update per event) is dropped: it holds no more than this
	// buffer and the socket's.
	if now := time.Now(); es.deadline.Sub(now) < es.s.cfg.WriteTimeout/2 {
		es.deadline = now.Add(es.s.cfg.WriteTimeout)
		if err := es.rc.SetWriteDeadline(es.deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
	}
	if err := es.bw.Flush(); err != nil {
		return err
	}
	return es.rc.Flush()
}

// finish sends the "end" event, with the final status and the last seq.
func (es *eventStream) finish() {
	b, _ := json.Marshal(api.StreamEnd{Status: es.end, LastSeq: es.after})
	fmt.Fprintf(es.bw, "event: end\ndata: %s\n\n", b)
	_ = es.flush()
}

// catchUp sends what follows es.after: from the feed when it holds all of
// it (at the first read, when another stream of the run is open), else
// from the store.
func (es *eventStream) catchUp(ctx context.Context) error {
	ok, err := es.fromFeed()
	if !ok {
		err = es.fromStore(ctx)
	}
	return err
}

// fromStore sends what follows es.after from the store, page by page,
// and notes whether the run is final and all of it sent.
func (es *eventStream) fromStore(ctx context.Context) error {
	for {
		cur, err := es.c.view.GetRun(ctx, es.runID)
		if err != nil {
			return streamErr(ctx, err)
		}
		var evs []event.Event
		if cur.LastSeq > es.after {
			if evs, err = es.c.view.Events(ctx, es.runID, es.after+1, streamPage); err != nil {
				return streamErr(ctx, err)
			}
		}
		for _, ev := range evs {
			frame, err := sseFrame(ev)
			if err != nil {
				return err
			}
			es.bw.Write(frame)
			es.after = ev.Seq
			// The run may have ended after cur was read: its final event
			// says so (no later wake-up would).
			if st, ok := finalStatus(ev); ok {
				es.end = st
			}
		}
		es.s.metrics.streamed.Add(float64(len(evs)))
		if len(evs) > 0 {
			if err := es.flush(); err != nil {
				return errClientGone
			}
		}
		if len(evs) == streamPage {
			continue
		}
		// cur was read before the events: when it is final, its LastSeq
		// is the end of what a final run's driver wrote.
		if cur.Status.Final() && es.after >= cur.LastSeq {
			es.end = cur.Status
		}
		return nil
	}
}

// fromFeed sends what the feed holds after es.after, when it holds all of
// it (possibly nothing new); false sends the stream to the store.
func (es *eventStream) fromFeed() (bool, error) {
	evs, ok := es.sub.since(es.after)
	if !ok {
		return false, nil
	}
	if len(evs) == 0 {
		return true, nil
	}
	for _, fe := range evs {
		es.bw.Write(fe.frame)
		es.after = fe.ev.Seq
		if st, ok := finalStatus(fe.ev); ok {
			es.end = st
		}
	}
	es.s.metrics.streamed.Add(float64(len(evs)))
	if err := es.flush(); err != nil {
		return true, errClientGone
	}
	now := time.Now()
	for _, fe := range evs {
		if fe.at.After(es.subscribed) { // live, not caught up on
			es.s.metrics.delivery.Observe(now.Sub(fe.at).Seconds())
		}
	}
	return true, nil
}

// streamBuffers hold what a stream writes between two flushes. A stream
// borrows one only while it writes: a thousand idle subscribers hold none
// (each held 32 KiB for its life before).
var streamBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// streamBuffer is a buffered writer on w whose buffer comes from
// streamBuffers at the first write after a flush and goes back at the flush.
type streamBuffer struct {
	w  io.Writer
	bw *bufio.Writer
}

func (b *streamBuffer) Write(p []byte) (int, error) {
	if b.bw == nil {
		b.bw = streamBuffers.Get().(*bufio.Writer)
		b.bw.Reset(b.w)
	}
	return b.bw.Write(p)
}

// Flush writes what is buffered to w and gives the buffer back.
func (b *streamBuffer) Flush() error {
	if b.bw == nil {
		return nil
	}
	err := b.bw.Flush()
	b.release()
	return err
}

// release gives the buffer back, dropping what it holds.
func (b *streamBuffer) release() {
	if b.bw != nil {
		b.bw.Reset(nil)
		streamBuffers.Put(b.bw)
		b.bw = nil
	}
}

// errClientGone: a stream's client stopped reading; nothing to log.
var errClientGone = errors.New("server: stream client gone")

func ignoreGone(err error) error {
	if errors.Is(err, errClientGone) {
		return nil
	}
	return err
}

// streamErr is the error of a stream's store read: none when the client
// left (the read was cancelled), else the error, for the log.
func streamErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// takeStream counts a new stream of key; false when the key has
// Config.MaxStreams open already.
func (s *Server) takeStream(key string) bool {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams[key] >= s.cfg.MaxStreams {
		return false
	}
	s.streams[key]++
	return true
}

func (s *Server) dropStream(key string) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.streams[key]--; s.streams[key] <= 0 {
		delete(s.streams, key)
	}
}
