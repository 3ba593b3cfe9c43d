package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
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
	Concurrency int           `help:"Most runs driven at once." default:"2"`
	Poll        time.Duration `help:"How often the store is asked for runs." default:"1s"`
	Once        bool          `help:"Drive what is there, then exit when nothing is left to drive."`
}

// Run drives runs until SIGINT or SIGTERM; the runs it was driving stay
// resumable by any worker.
func (c *WorkerCmd) Run(env *Env) error {
	if c.Concurrency < 1 || c.Poll <= 0 {
		return usageError{errors.New("--concurrency and --poll must be positive")}
	}
	tl := newTimeline(env.Stdout, false, true)
	h, err := openHost(env, hostOptions{timeline: tl})
	if err != nil {
		return err
	}
	defer h.close()
	ctx, cancel := context.WithCancelCause(env.Ctx)
	defer cancel(nil)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, unix.SIGINT, unix.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			cancel(errDetached)
		case <-ctx.Done():
		}
	}()
	fmt.Fprintf(env.Stdout, "worker %s: driving up to %d runs\n", hostName(), c.Concurrency)
	w := newWorkers(h.eng, h.store, c.Concurrency, c.Poll)
	w.once = c.Once
	w.ended = func(id string, o engine.Outcome, err error) {
		switch {
		case err == nil:
			fmt.Fprintf(env.Stdout, "%s %s\n", shortID(id), o.Status)
		case errors.Is(err, engine.ErrBusy), errors.Is(err, engine.ErrFinal), ctx.Err() != nil:
		default:
			fmt.Fprintf(env.Stderr, "airlock: worker: run %s: %v\n", id, err)
		}
	}
	w.failed = func(err error) { fmt.Fprintf(env.Stderr, "airlock: worker: %v\n", err) }
	return w.run(ctx)
}

// workers drives a store's queued and unfinished runs, and the paused runs
// it is asked to resume, up to max at once: the loop of airlock worker
// and of airlock serve. A run is driven by one worker at a time, across
// processes too (the engine's locks and leases).
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
	// driving holds the runs driven now, resumes the paused runs asked to
	// resume that wait for a slot, oldest first (both guarded by mu).
	driving map[string]bool
	resumes []string
}

func newWorkers(eng *engine.Engine, st store.Store, max int, poll time.Duration) *workers {
	return &workers{eng: eng, st: st, max: max, poll: poll, wake: make(chan struct{}, 1), driving: map[string]bool{}}
}

// resume asks the workers to resume paused run id as soon as a slot is
// free. The request lives in memory: should the process stop first, the
// run stays paused.
func (w *workers) resume(id string) {
	w.mu.Lock()
	if !slices.Contains(w.resumes, id) {
		w.resumes = append(w.resumes, id)
	}
	w.mu.Unlock()
	w.signal()
}

func (w *workers) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run drives runs until ctx ends, then waits for the drives it started,
// which ctx's end detaches from their runs (they stay resumable). With
// once, it returns as soon as nothing is left to drive.
func (w *workers) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(id string, resume bool) {
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
			var o engine.Outcome
			var err error
			if resume {
				o, err = w.eng.Resume(ctx, id)
				if errors.Is(err, engine.ErrBusy) {
					// The drive that paused it, in another process, has
					// not let go yet: try again at the next poll.
					if r, gerr := w.st.GetRun(ctx, id); gerr == nil && r.Status == event.StatusPaused {
						select {
						case <-ctx.Done():
							return
						case <-time.After(w.poll):
						}
						w.mu.Lock()
						w.resumes = append(w.resumes, id)
						w.mu.Unlock()
						return
					}
				}
			} else {
				o, err = w.eng.Drive(ctx, id)
			}
			if w.ended != nil {
				w.ended(id, o, err)
			}
		}()
	}
	for {
		started := 0
		w.mu.Lock()
		var waiting []string
		for _, id := range w.resumes {
			// A run still driven (by the drive its pause is ending) is
			// resumed once that drive let go.
			if w.driving[id] || len(w.driving) >= w.max || ctx.Err() != nil {
				waiting = append(waiting, id)
				continue
			}
			start(id, true)
			started++
		}
		w.resumes = waiting
		w.mu.Unlock()
		runs, err := store.Unfinished(ctx, w.st)
		if err != nil && ctx.Err() == nil && w.failed != nil {
			w.failed(err)
		}
		for _, r := range runs {
			w.mu.Lock()
			busy, full := w.driving[r.ID], len(w.driving) >= w.max
			w.mu.Unlock()
			if busy || full || ctx.Err() != nil {
				continue
			}
			if r.Status != event.StatusQueued && w.eng.Driven(r.ID) {
				continue
			}
			w.mu.Lock()
			start(r.ID, false)
			w.mu.Unlock()
			started++
		}
		w.mu.Lock()
		idle := len(w.driving) == 0 && len(w.resumes) == 0
		w.mu.Unlock()
		if w.once && idle && started == 0 {
			return nil
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
