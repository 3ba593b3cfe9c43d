package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Feed tells event streams that a run's log grew, as soon as this
// process's engine appends: wire Publish to engine.Options.OnEvent. A
// stream gets a wake-up (at most one pending per stream), so a slow stream
// never holds up the engine or grows a buffer. The feed also keeps the
// latest events of each watched run, in order: a woken stream takes what
// follows its last seq from there, so that a thousand streams of one run
// do not read the store a thousand times per event; it reads the store,
// the source of truth, whenever the feed does not hold exactly what
// follows (a resume, another process's events, a gap) and for the run's
// lifecycle events.
type Feed struct {
	mu sync.Mutex
	// subs holds each run's streams' wake channels; recent the latest
	// events published for a run that has streams (both guarded by mu).
	subs   map[string]map[chan struct{}]struct{}
	recent map[string][]event.Event
}

// feedKeep is how many of a watched run's latest events the feed keeps.
const feedKeep = 64

// NewFeed returns an empty feed.
func NewFeed() *Feed {
	return &Feed{subs: map[string]map[chan struct{}]struct{}{}, recent: map[string][]event.Event{}}
}

// since returns the events of run runID that follow seq after, when the
// feed holds all of them from after+1 on, contiguously.
func (f *Feed) since(runID string, after int64) ([]event.Event, bool) {
	if f == nil {
		return nil, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.recent[runID]
	if len(r) == 0 || r[0].Seq > after+1 || r[len(r)-1].Seq <= after {
		return nil, false
	}
	i := int(after + 1 - r[0].Seq)
	return slices.Clone(r[i:]), true
}

// Publish wakes the streams of ev's run. It never blocks.
func (f *Feed) Publish(ev event.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs[ev.RunID]) > 0 {
		r := f.recent[ev.RunID]
		if n := len(r); n > 0 && r[n-1].Seq+1 != ev.Seq {
			r = r[:0] // not contiguous: start again
		}
		r = append(r, ev)
		if len(r) > feedKeep {
			r = slices.Delete(r, 0, len(r)-feedKeep)
		}
		f.recent[ev.RunID] = r
	}
	for ch := range f.subs[ev.RunID] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// subscribe returns a channel that receives a wake-up after run runID's
// log grew, and the function that ends the subscription.
func (f *Feed) subscribe(runID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	if f == nil {
		return ch, func() {}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs[runID] == nil {
		f.subs[runID] = map[chan struct{}]struct{}{}
	}
	f.subs[runID][ch] = struct{}{}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs[runID], ch)
		if len(f.subs[runID]) == 0 {
			delete(f.subs, runID)
			delete(f.recent, runID)
		}
	}
}

// EventPage is the body of GET /v1/runs/{id}/events.
type EventPage struct {
	Events []event.Event `json:"events"`
	// NextAfter is the ?after= of the next page: the last seq returned
	// (or the one asked for, when none was).
	NextAfter int64 `json:"next_after"`
	// More says the log had more events than this page.
	More bool `json:"more"`
}

// parseSeq reads a sequence number given by a client (?after=,
// Last-Event-ID): 0 or more.
func parseSeq(what, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("%s %q: want a sequence number, 0 or more", what, clipText(v, 30))
	}
	return n, nil
}

func (s *Server) events(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	after, err := parseSeq("after", q.Get("after"))
	if err != nil {
		return err
	}
	limit, err := parseLimit(q.Get("limit"), 100, store.MaxPage)
	if err != nil {
		return err
	}
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	evs, err := c.view.Events(r.Context(), run.ID, after+1, limit)
	if err != nil {
		return err
	}
	page := EventPage{Events: evs, NextAfter: after}
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

// StreamEnd is the data of the "end" event a stream sends last, once the
// run is final and every event up to its last was sent.
type StreamEnd struct {
	Status  event.Status `json:"status"`
	LastSeq int64        `json:"last_seq"`
}

// stream sends a run's events as server-sent events: each has the event's
// seq as its id, its type as its event name and its JSON as data. It
// starts after Last-Event-ID (a reconnection) or ?after=, so nothing is
// sent twice or skipped; it ends with an "end" event when the run is final
// and everything was sent. A stream of a final run with nothing left to
// send answers 204, which tells an EventSource to stop reconnecting.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *call) error {
	after, err := parseSeq("after", r.URL.Query().Get("after"))
	if err != nil {
		return err
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if after, err = parseSeq("Last-Event-ID", id); err != nil {
			return err
		}
	}
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	if !s.takeStream(c.p.KeyID) {
		return &apiError{code: CodeRateLimited, msg: fmt.Sprintf("this key has %d event streams open already", s.cfg.MaxStreams), retryAfter: 5}
	}
	defer s.dropStream(c.p.KeyID)
	// Subscribe before the first read: an append between the read and the
	// subscription would otherwise wait for the poll.
	wake, unsubscribe := s.o.Feed.subscribe(run.ID)
	defer unsubscribe()
	if run.Status.Final() && after >= run.LastSeq {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	s.metrics.streams.Add(1)
	defer s.metrics.streams.Add(-1)

	ctx := r.Context()
	rc := http.NewResponseController(w)
	// A stream lives long: no read deadline (its expiry would end the
	// stream), and a write deadline per flush instead of per request.
	if err := rc.SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	flush := func() error {
		// A client that does not read within the write timeout is
		// dropped: it holds no more than this buffer and the socket's.
		if err := rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}
	fmt.Fprintf(bw, "retry: %d\n\n", 2000)
	if err := flush(); err != nil {
		return nil // the client went away
	}
	poll := time.NewTicker(s.cfg.StreamPoll)
	defer poll.Stop()
	keepalive := time.NewTicker(s.cfg.Keepalive)
	defer keepalive.Stop()
	write := func(evs []event.Event) error {
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			fmt.Fprintf(bw, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b)
			after = ev.Seq
		}
		s.metrics.streamed.Add(float64(len(evs)))
		return nil
	}
	fromFeed := false
	for {
		for !fromFeed {
			cur, err := c.view.GetRun(ctx, run.ID)
			if err != nil {
				return streamErr(ctx, err)
			}
			var evs []event.Event
			if cur.LastSeq > after {
				if evs, err = c.view.Events(ctx, run.ID, after+1, streamPage); err != nil {
					return streamErr(ctx, err)
				}
			}
			if err := write(evs); err != nil {
				return err
			}
			if len(evs) > 0 {
				if err := flush(); err != nil {
					return nil
				}
			}
			if len(evs) == streamPage {
				continue
			}
			// cur was read before the events: when it is final, its
			// LastSeq is the end of what a final run's driver wrote.
			if cur.Status.Final() && after >= cur.LastSeq {
				b, _ := json.Marshal(StreamEnd{Status: cur.Status, LastSeq: after})
				fmt.Fprintf(bw, "event: end\ndata: %s\n\n", b)
				_ = flush()
				return nil
			}
			break
		}
		fromFeed = false
		select {
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		case <-wake:
			// What follows, from the feed when it holds exactly that and
			// no lifecycle event (whose status the store read checks).
			evs, ok := s.o.Feed.since(run.ID, after)
			if ok && !slices.ContainsFunc(evs, func(e event.Event) bool { return strings.HasPrefix(string(e.Type), "run.") }) {
				if err := write(evs); err != nil {
					return err
				}
				if err := flush(); err != nil {
					return nil
				}
				fromFeed = true
			}
		case <-poll.C:
		case <-keepalive.C:
			fmt.Fprint(bw, ": keepalive\n\n")
			if err := flush(); err != nil {
				return nil
			}
		}
	}
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
