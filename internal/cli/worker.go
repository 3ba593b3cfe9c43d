package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"golang.org/x/sys/unix"
)

// WorkerCmd is `airlock worker`: it drives the store's queued and
// unfinished runs until stopped. Several workers may share a store; a run
// is driven by one of them at a time.
type WorkerCmd struct {
	Concurrency     int           `help:"Most runs driven at once." default:"2"`
	Poll            time.Duration `help:"How often the store is asked for runs." default:"1s"`
	Once            bool          `help:"Drive what is there, then exit when nothing is left to drive."`
	ShutdownTimeout time.Duration `name:"shutdown-timeout" help:"On SIGINT or SIGTERM, how long the steps in flight may finish before their runs are handed back as they are (a second signal hands them back at once)." default:"30s"`
}

// Run drives runs until SIGINT or SIGTERM, then drains: it takes no more
// runs, lets each step in flight finish (up to --shutdown-timeout), and
// hands every run it drove back, resumable at once by any worker.
func (c *WorkerCmd) Run(env *Env) error {
	if c.Concurrency < 1 || c.Poll <= 0 || c.ShutdownTimeout < 0 {
		return usageError{Err: errors.New("--concurrency and --poll must be positive, --shutdown-timeout not negative")}
	}
	tl := newTimeline(env.Stdout, false, true)
	h, err := openHost(env, hostOptions{timeline: tl})
	if err != nil {
		return err
	}
	defer h.close()
	// The drives' context outlives env.Ctx's end, which drains like a
	// signal; cancel cuts them short.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(env.Ctx))
	defer cancel(nil)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, unix.SIGINT, unix.SIGTERM)
	defer signal.Stop(sig)
	w := newWorkers(h.eng, h.store, c.Concurrency, c.Poll)
	w.once = c.Once
	w.ended = func(id string, o engine.Outcome, err error) {
		switch {
		case err == nil:
			fmt.Fprintf(env.Stdout, "%s %s\n", shortID(id), o.Status)
		case errors.Is(err, engine.ErrDrained):
			fmt.Fprintf(env.Stdout, "%s handed back (%s)\n", shortID(id), o.Status)
		case errors.Is(err, engine.ErrBusy), errors.Is(err, engine.ErrFinal), ctx.Err() != nil:
		default:
			fmt.Fprintf(env.Stderr, "airlock: worker: run %s: %v\n", id, err)
		}
	}
	w.failed = func(err error) { fmt.Fprintf(env.Stderr, "airlock: worker: %v\n", err) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-sig:
		case <-env.Ctx.Done():
		case <-ctx.Done():
			return
		}
		w.drain()
		t := time.NewTimer(c.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-sig:
		case <-t.C:
		case <-ctx.Done():
			return
		}
		cancel(errDetached)
	}()
	fmt.Fprintf(env.Stdout, "worker %s: driving up to %d runs\n", hostName(), c.Concurrency)
	err = w.run(ctx)
	cancel(nil)
	<-done
	return err
}

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

func newWorkers(eng *engine.Engine, st store.Store, max int, poll time.Duration) *workers {
	return &workers{eng: eng, st: st, max: max, poll: poll, wake: make(chan struct{}, 1), driving: map[string]bool{}}
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

func hostName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", h, os.Getpid())
}
