package host

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// workers drives a store's queued and unfinished runs up to max at once:
// the loop of airlock worker and of airlock serve. A run is driven by one
// worker at a time, across processes too (the engine's locks and leases).
// A paused run asked to resume is queued in the store (engine.QueueResume),
// so whichever worker of whichever process looks next takes it.
type workers struct {
	eng  *engine.Engine
	st   store.Store
	max  int
	poll time.Duration
	// once makes run return when nothing is left to drive.
	once bool
	// ended, when not nil, is told how each drive ended; failed of an
	// error listing the store's runs.
	ended  func(id string, o engine.Outcome, err error)
	failed func(error)
	// wake asks the loop to look again at once (a slot freed, a resume).
	wake chan struct{}

	mu sync.Mutex
	// driving holds the runs driven now; draining is set by drain (both
	// guarded by mu).
	driving  map[string]bool
	draining bool
}

func newWorkers(eng *engine.Engine, st store.Store, limit int, poll time.Duration) *workers {
	return &workers{eng: eng, st: st, max: limit, poll: poll, wake: make(chan struct{}, 1), driving: map[string]bool{}}
}

// queued tells the workers that a run was queued (a resume request): they
// look at the store at once rather than at the next poll.
func (w *workers) queued() { w.signal() }

func (w *workers) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// drain makes the workers take no more runs and their engine hand the
// runs it drives back at their next step boundary (engine.Drain); run
// returns once every drive ended.
func (w *workers) drain() {
	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
	w.eng.Drain()
	w.signal()
}

// run drives runs until ctx ends, or drain was called and the drives in
// flight ended, and waits for the drives it started; ctx's end cuts them
// short (their runs stay resumable). With once, it returns as soon as
// nothing is left to drive.
func (w *workers) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	// Preconditions: w.mu held.
	start := func(id string) {
		w.driving[id] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				w.mu.Lock()
				delete(w.driving, id)
				w.mu.Unlock()
				w.signal()
			}()
			o, err := w.eng.Drive(ctx, id)
			if w.ended != nil {
				w.ended(id, o, err)
			}
		}()
	}
	for {
		w.mu.Lock()
		draining, idle := w.draining, len(w.driving) == 0
		w.mu.Unlock()
		if draining && idle {
			return nil
		}
		started := 0
		if !draining {
			runs, err := store.Unfinished(ctx, w.st)
			if err != nil && ctx.Err() == nil && w.failed != nil {
				w.failed(err)
			}
			for _, r := range runs {
				w.mu.Lock()
				busy, full := w.driving[r.ID], len(w.driving) >= w.max || w.draining
				w.mu.Unlock()
				if busy || full || ctx.Err() != nil {
					continue
				}
				if r.Status != event.StatusQueued && w.eng.Driven(r.ID) {
					continue
				}
				w.mu.Lock()
				start(r.ID)
				w.mu.Unlock()
				started++
			}
			w.mu.Lock()
			idle = len(w.driving) == 0
			w.mu.Unlock()
			if w.once && idle && started == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		case <-time.After(w.poll):
		}
	}
}

// WorkOptions configure Work.
type WorkOptions struct {
	// Concurrency is the most runs driven at once (at least 1).
	Concurrency int
	// Poll is how often the store is asked for runs.
	Poll time.Duration
	// Once makes Work return when nothing is left to drive.
	Once bool
	// ShutdownTimeout is how long, once ctx ends, the steps in flight may
	// finish before their runs are handed back as they are.
	ShutdownTimeout time.Duration
	// Ended, when not nil, is told how each drive ended.
	Ended func(DriveEnd)
	// Failed, when not nil, is told of an error listing the store's runs.
	Failed func(error)
}

// DriveEnd is how one drive of a run ended.
type DriveEnd struct {
	RunID  string
	Status event.Status
	// HandedBack says the run was left unfinished for any worker to
	// resume: this host drained (Cut says whether its step in flight was
	// cut short rather than finished).
	HandedBack, Cut bool
	// Skipped says another process drives the run, or it had ended: this
	// drive did nothing.
	Skipped bool
	// Err is why the drive failed; nil for the ends above.
	Err error
}

// errCut ends the drives in flight without ending their runs: the
// shutdown timeout passed, or the caller cut the drain short.
var errCut = errors.New("cut: the run is handed back as it is")

// Work drives the store's queued and unfinished runs, up to
// o.Concurrency at once, until ctx ends; then it drains: it takes no more
// runs, lets each step in flight finish (up to o.ShutdownTimeout, or until
// cut is closed) and hands every run it drove back, resumable at once by
// any worker. Several hosts may work on one store: a run is driven by one
// of them at a time (the engine's locks and leases).
func (h *Host) Work(ctx context.Context, o WorkOptions, cut <-chan struct{}) error {
	if o.Concurrency < 1 || o.Poll <= 0 || o.ShutdownTimeout < 0 {
		return &InputError{Err: errors.New("concurrency and poll must be positive, the shutdown timeout not negative")}
	}
	rs, err := h.run()
	if err != nil {
		return err
	}
	h.GC()
	w := newWorkers(rs.eng, rs.store, o.Concurrency, o.Poll)
	w.once = o.Once
	return h.work(ctx, w, o, cut)
}

// work runs w as Work describes.
func (h *Host) work(ctx context.Context, w *workers, o WorkOptions, cut <-chan struct{}) error {
	// The drives' context outlives ctx's end, which drains; stop cuts
	// them short.
	dctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stop(nil)
	w.ended = func(id string, oc engine.Outcome, err error) {
		if o.Ended == nil {
			return
		}
		e := DriveEnd{RunID: id, Status: oc.Status}
		switch {
		case err == nil:
		case errors.Is(err, engine.ErrDrained), errors.Is(err, errCut):
			e.HandedBack, e.Cut = true, errors.Is(err, errCut)
		case errors.Is(err, engine.ErrBusy), errors.Is(err, engine.ErrFinal), errors.Is(err, context.Canceled), dctx.Err() != nil:
			e.Skipped = true
		default:
			e.Err = err
		}
		o.Ended(e)
	}
	w.failed = o.Failed
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-dctx.Done():
			return
		}
		w.drain()
		t := time.NewTimer(o.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-cut:
		case <-t.C:
		case <-dctx.Done():
			return
		}
		stop(errCut)
	}()
	err := w.run(dctx)
	stop(nil)
	<-done
	return err
}
