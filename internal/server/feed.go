package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Feed carries a run's new events to its event streams. This process's
// engine publishes each event as it commits (wire Publish to
// engine.Options.OnEvents); for every run that has streams, one poller per
// process publishes what other processes append. The feed keeps each
// watched run's latest events, each encoded once as a server-sent event,
// and wakes the run's streams (at most one wake-up pending per stream, so a
// slow stream never holds up the engine or grows a buffer). A woken stream
// takes what follows its last seq from the feed, and reads the store, the
// source of truth, only when the feed does not hold exactly that (a
// resume, a gap): a thousand streams of one run cost one store read per
// poll, not a thousand.
type Feed struct {
	mu sync.Mutex
	// runs holds each watched run's streams and latest events (guarded by
	// mu).
	runs map[string]*feedRun
}

type feedRun struct {
	subs map[chan struct{}]struct{} // guarded by Feed.mu
	// recent is the run's latest events, contiguous and in order. A stored
	// slice is never changed (Publish stores a new one, under Feed.mu), so
	// a thousand woken streams read it at once without taking a lock,
	// which they would otherwise be handed one by one.
	recent atomic.Pointer[[]feedEvent]
	// stopPoll ends the run's poller; nil when none runs (guarded by
	// Feed.mu).
	stopPoll context.CancelFunc
}

// events returns the run's latest events.
func (fr *feedRun) events() []feedEvent {
	if r := fr.recent.Load(); r != nil {
		return *r
	}
	return nil
}

// since returns the events that follow seq after; see Feed.since.
func (fr *feedRun) since(after int64) ([]feedEvent, bool) {
	r := fr.events()
	// Seqs start at 1: r[0].ev.Seq-1 cannot wrap around, after+1 could.
	if len(r) == 0 || r[0].ev.Seq-1 > after {
		return nil, false
	}
	if r[len(r)-1].ev.Seq <= after {
		return nil, true
	}
	return r[after+1-r[0].ev.Seq:], true
}

// feedEvent is an event and its server-sent-event frame.
type feedEvent struct {
	ev    event.Event
	frame []byte
	// at is when the committed event reached the feed.
	at time.Time
}

// feedKeep is how many of a watched run's latest events the feed keeps.
const feedKeep = 64

// NewFeed returns an empty feed.
func NewFeed() *Feed {
	return &Feed{runs: map[string]*feedRun{}}
}

// sseFrame encodes ev as a server-sent event: its seq as the id, its type
// as the event name, its JSON as data.
func sseFrame(ev event.Event) ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(make([]byte, 0, len(b)+64), "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, b), nil
}

// since returns the events of run runID that follow seq after, when the
// feed holds all of them from after+1 on, contiguously; none, and true,
// when the feed reaches after but holds nothing beyond it (a stream that
// read ahead from the store waits for the next wake-up instead of reading
// the store again).
func (f *Feed) since(runID string, after int64) ([]feedEvent, bool) {
	f.mu.Lock()
	fr := f.runs[runID]
	f.mu.Unlock()
	if fr == nil {
		return nil, false
	}
	return fr.since(after)
}

// last returns the seq of the latest event the feed holds of runID, or 0.
func (f *Feed) last(runID string) int64 {
	f.mu.Lock()
	fr := f.runs[runID]
	f.mu.Unlock()
	if fr == nil {
		return 0
	}
	if r := fr.events(); len(r) > 0 {
		return r[len(r)-1].ev.Seq
	}
	return 0
}

// Publish hands evs, one run's events in order (a batch the engine
// appended, or what a poller read), to the streams of their run, waking
// each stream once for all of them. It never blocks. Events the feed holds
// already (the engine's and the poller's copies of one commit) are
// dropped.
func (f *Feed) Publish(evs []event.Event) {
	if len(evs) == 0 {
		return
	}
	runID := evs[0].RunID
	f.mu.Lock()
	fr := f.runs[runID]
	f.mu.Unlock()
	if fr == nil {
		return
	}
	// Frames are encoded outside the lock: the engine's commit path waits
	// for this.
	held := fr.events()
	at := time.Now()
	add := make([]feedEvent, 0, len(evs))
	for _, ev := range evs {
		if ev.RunID != runID || len(held) > 0 && ev.Seq <= held[len(held)-1].ev.Seq {
			continue
		}
		frame, err := sseFrame(ev)
		if err != nil {
			break // a stream that finds the feed short reads the store
		}
		add = append(add, feedEvent{ev: ev, frame: frame, at: at})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fr = f.runs[runID]; fr == nil {
		return
	}
	r := fr.events()
	grew := false
	for _, fe := range add {
		n := len(r)
		if n > 0 && fe.ev.Seq <= r[n-1].ev.Seq {
			continue
		}
		if n > 0 && r[n-1].ev.Seq+1 != fe.ev.Seq {
			r = nil // not contiguous: start again
		}
		// A new slice each time: one that was stored is never changed.
		r = append(slices.Clip(r[max(0, len(r)+1-feedKeep):]), fe)
		grew = true
	}
	if !grew {
		return
	}
	fr.recent.Store(&r)
	for ch := range fr.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// subscription is one stream's hold on a run's feed.
type subscription struct {
	// wake receives a wake-up after the run's log grew.
	wake <-chan struct{}
	fr   *feedRun
	stop func()
}

// since returns what follows seq after when the feed holds all of it (see
// Feed.since); it takes no lock.
func (s *subscription) since(after int64) ([]feedEvent, bool) { return s.fr.since(after) }

// subscribe subscribes a stream to run runID's feed; the subscription's
// stop ends it. The first stream of a run starts its poller, which reads
// st every poll for events that another process appended; the last one to
// leave stops it.
func (f *Feed) subscribe(runID string, st store.RunLog, poll time.Duration) *subscription {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	fr := f.runs[runID]
	if fr == nil {
		fr = &feedRun{subs: map[chan struct{}]struct{}{}}
		f.runs[runID] = fr
	}
	fr.subs[ch] = struct{}{}
	if fr.stopPoll == nil && st != nil {
		ctx, cancel := context.WithCancel(context.Background())
		fr.stopPoll = cancel
		go f.poll(ctx, runID, st, poll)
	}
	return &subscription{wake: ch, fr: fr, stop: func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(fr.subs, ch)
		if len(fr.subs) == 0 && f.runs[runID] == fr {
			if fr.stopPoll != nil {
				fr.stopPoll()
			}
			delete(f.runs, runID)
		}
	}}
}

// poll publishes the events of runID that st holds beyond what the feed
// does, every interval, until ctx ends.
func (f *Feed) poll(ctx context.Context, runID string, st store.RunLog, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for first := true; ; first = false {
		// The first poll is at once: it fills the feed with the run's
		// latest events, which the streams that join later start from.
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		for {
			after := f.last(runID)
			r, err := st.GetRun(ctx, runID)
			if err != nil || r.LastSeq <= after {
				break
			}
			if after == 0 || r.LastSeq-after > feedKeep {
				// Only the latest are worth holding: a stream further
				// behind reads the store itself.
				after = max(after, r.LastSeq-feedKeep)
			}
			evs, err := st.Events(ctx, runID, after+1, feedKeep)
			if err != nil || len(evs) == 0 {
				break
			}
			f.Publish(evs)
			if len(evs) < feedKeep {
				break
			}
		}
	}
}

// finalStatus returns the status a run's final lifecycle event ends it in.
func finalStatus(ev event.Event) (event.Status, bool) {
	switch ev.Type {
	case event.TypeRunCompleted:
		return event.StatusCompleted, true
	case event.TypeRunCancelled:
		return event.StatusCancelled, true
	case event.TypeRunFailed:
		p, err := ev.Unpack()
		if f, ok := p.(*event.RunFailed); err == nil && ok && f.Status.Final() {
			return f.Status, true
		}
		return event.StatusFailed, true
	}
	return "", false
}
