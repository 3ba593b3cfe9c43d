package e2b

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// A sandbox's record is a run record of kind store.KindSandbox: its own
// append-only, hash-chained log in the store, which holds what was done
// in the sandbox (sandbox.op), what it used (sandbox.usage), and its life
// (sandbox.created, sandbox.provisioned, run.paused, run.resumed,
// sandbox.destroyed or sandbox.lost). Its status is running while the
// sandbox lives, paused while it is paused, and final once it is gone.
// The Server is the only writer of the records of the sandboxes it runs.

// flushDelay is how long the flusher lets operations gather before it
// appends them, when the last flush is flushEvery or longer ago: an
// operation on a quiet server is in its sandbox's log 5 ms later.
const flushDelay = 5 * time.Millisecond

// flushEvery is the least time between the starts of two flushes: while
// operations keep coming (a preview URL's requests, hundreds a second),
// the flusher appends them in one commit (and one fsync) per flushEvery,
// not one per flushDelay. A commit costs about as much CPU as the
// requests of its 5 ms did on a 2-core machine (docs/benchmarks.md); what
// a crash can lose is what the flusher holds: at most this long's
// operations under load (their audit lines are written already), 5 ms's
// on a quiet server.
const flushEvery = 50 * time.Millisecond

// maxQueued bounds the operations waiting for a flush, per sandbox. Past
// it, operations are counted, not kept, and the count is recorded.
const maxQueued = 4096

// record appends to one sandbox's log.
type record struct {
	runID string
	st    store.Log
	wake  func() // tells the flusher there is work

	// mu is held while appending: the log has one writer at a time, and
	// events keep the order they were added or committed in.
	mu sync.Mutex
	// next is guarded by mu: the seq the next append takes.
	next int64

	qmu sync.Mutex
	// queue is guarded by qmu: operations not yet appended.
	queue []event.Event
	// dropped is guarded by qmu: operations left out because the queue
	// was full.
	dropped int64
}

// add queues p, which happened at t, for the next flush.
func (r *record) add(p event.Payload, t time.Time) {
	d, err := event.New(p)
	if err != nil {
		return // the payloads are this package's structs: cannot happen
	}
	d.Time = t.UTC()
	r.qmu.Lock()
	if len(r.queue) < maxQueued {
		r.queue = append(r.queue, d)
	} else {
		r.dropped++
	}
	r.qmu.Unlock()
	r.wake()
}

// pending reports whether operations wait for a flush.
func (r *record) pending() bool {
	r.qmu.Lock()
	defer r.qmu.Unlock()
	return len(r.queue) > 0 || r.dropped > 0
}

// flush appends the queued operations.
func (r *record) flush(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.appendLocked(ctx, "", "", nil)
	return err
}

// commit appends the queued operations, then ps, in one transaction that
// also moves the record from status from to to (none when to is empty),
// and returns ps as stored. Nothing is written when it fails.
func (r *record) commit(ctx context.Context, from, to event.Status, ps ...event.Payload) ([]event.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appendLocked(ctx, from, to, ps)
}

// appendLocked is flush and commit. Preconditions: r.mu held.
func (r *record) appendLocked(ctx context.Context, from, to event.Status, ps []event.Payload) ([]event.Event, error) {
	own := make([]event.Event, 0, len(ps))
	for _, p := range ps {
		d, err := event.New(p)
		if err != nil {
			return nil, err
		}
		own = append(own, d)
	}
	r.qmu.Lock()
	queued, dropped := r.queue, r.dropped
	r.queue, r.dropped = nil, 0
	r.qmu.Unlock()
	if dropped > 0 {
		d, _ := event.New(event.SandboxOp{
			Op: "audit.dropped", Outcome: "limited", Count: dropped,
			Detail: "operations came faster than the log took them",
		})
		queued = append(queued, d)
	}
	drafts := append(queued, own...)
	if len(drafts) == 0 {
		return nil, nil
	}
	var (
		stored []event.Event
		err    error
	)
	for attempt := 0; ; attempt++ {
		if to == "" {
			stored, err = r.st.Append(ctx, r.runID, r.next, drafts)
		} else {
			_, stored, err = r.st.AppendStatus(ctx, r.runID, r.next, from, to, drafts)
		}
		var ce *store.AppendConflictError
		if errors.As(err, &ce) && attempt == 0 {
			// Only this Server writes the log; a conflict means a write
			// it thought failed did commit. Go on from the log's tail.
			r.next = ce.Got
			continue
		}
		break
	}
	if err != nil {
		if !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			// Kept for the next flush: the store may be back by then.
			r.qmu.Lock()
			r.queue = append(queued[:len(queued):len(queued)], r.queue...)
			if n := len(r.queue) - maxQueued; n > 0 {
				r.queue = r.queue[:maxQueued]
				r.dropped += int64(n)
			}
			r.qmu.Unlock()
		}
		return nil, fmt.Errorf("e2b: record %s: %w", r.runID, err)
	}
	r.next += int64(len(stored))
	return stored[len(queued):], nil
}

// runFlusher appends queued operations of every sandbox a little after
// they were added (flushDelay), and no sooner than flushEvery after the
// last flush began, until ctx ends.
func (s *Server) runFlusher(ctx context.Context) {
	t := time.NewTimer(flushDelay)
	t.Stop()
	var last time.Time // the last flush's start (monotonic)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.flushWake:
		}
		t.Reset(flushWait(time.Since(last)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		last = time.Now()
		s.flushAll(ctx)
	}
}

// flushWait is how long the flusher waits before a flush when the last
// one began since ago: flushDelay, or longer so that two flushes begin
// flushEvery apart.
func flushWait(since time.Duration) time.Duration {
	return max(flushDelay, flushEvery-since)
}

// wakeFlusher tells the flusher that operations wait.
func (s *Server) wakeFlusher() {
	select {
	case s.flushWake <- struct{}{}:
	default:
	}
}

// flushAll appends every sandbox's queued operations.
func (s *Server) flushAll(ctx context.Context) {
	for _, b := range s.all() {
		if !b.rec.pending() {
			continue
		}
		if err := b.rec.flush(ctx); err != nil {
			s.log.Warn("e2b: append operations", "sandbox_id", b.id, "err", err)
		}
	}
}

// all returns every sandbox the Server has.
func (s *Server) all() []*box {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		out = append(out, b)
	}
	return out
}
