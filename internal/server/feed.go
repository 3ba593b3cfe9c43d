package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Feed carries a run's new events to its event streams. This process's
// engine publishes each event as it commits (wire Publish to
// engine.Options.OnEvent); for every run that has streams, one poller per
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
	subs   map[chan struct{}]struct{}
	recent []feedEvent
	// stopPoll ends the run's poller; nil when none runs.
	stopPoll context.CancelFunc
}

// feedEvent is an event and its server-sent-event frame.
type feedEvent struct {
	ev    event.Event
	frame []byte
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
	defer f.mu.Unlock()
	fr := f.runs[runID]
	if fr == nil {
		return nil, false
	}
	r := fr.recent
	if len(r) == 0 || r[0].ev.Seq > after+1 {
		return nil, false
	}
	if r[len(r)-1].ev.Seq <= after {
		return nil, true
	}
	i := int(after + 1 - r[0].ev.Seq)
	return slices.Clone(r[i:]), true
}

// last returns the seq of the latest event the feed holds of runID, or 0.
func (f *Feed) last(runID string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fr := f.runs[runID]; fr != nil && len(fr.recent) > 0 {
		return fr.recent[len(fr.recent)-1].ev.Seq
	}
	return 0
}

// Publish hands ev to the streams of its run. It never blocks. An event
// the feed holds already (the engine's and the poller's copies of one
// commit) is dropped.
func (f *Feed) Publish(ev event.Event) {
	f.mu.Lock()
	fr := f.runs[ev.RunID]
	if fr == nil {
		f.mu.Unlock()
		return
	}
	r := fr.recent
	if n := len(r); n > 0 && ev.Seq <= r[n-1].ev.Seq {
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	frame, err := sseFrame(ev) // outside the lock: the engine's commit path waits for this
	if err != nil {
		return // a stream that finds the feed short reads the store
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fr = f.runs[ev.RunID]; fr == nil {
		return
	}
	r = fr.recent
	if n := len(r); n > 0 && ev.Seq <= r[n-1].ev.Seq {
		return
	} else if n > 0 && r[n-1].ev.Seq+1 != ev.Seq {
		r = r[:0] // not contiguous: start again
	}
	r = append(r, feedEvent{ev: ev, frame: frame})
	if len(r) > feedKeep {
		r = slices.Delete(r, 0, len(r)-feedKeep)
	}
	fr.recent = r
	for ch := range fr.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

// subscribe returns a channel that receives a wake-up after run runID's
// log grew, and the function that ends the subscription. The first stream
// of a run starts its poller, which reads st every poll for events that
// another process appended; the last one to leave stops it.
func (f *Feed) subscribe(runID string, st store.Store, poll time.Duration) (<-chan struct{}, func()) {
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
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(fr.subs, ch)
		if len(fr.subs) == 0 && f.runs[runID] == fr {
			if fr.stopPoll != nil {
				fr.stopPoll()
			}
			delete(f.runs, runID)
		}
	}
}

// poll publishes the events of runID that st holds beyond what the feed
// does, every interval, until ctx ends.
func (f *Feed) poll(ctx context.Context, runID string, st store.Store, interval time.Duration) {
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
			for _, ev := range evs {
				f.Publish(ev)
			}
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
