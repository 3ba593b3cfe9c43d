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
	var mu sync.Mutex
	driving := map[string]bool{}
	// wake asks for the store again at once when a slot frees.
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	fmt.Fprintf(env.Stdout, "worker %s: driving up to %d runs\n", hostName(), c.Concurrency)
	for {
		runs, err := store.Unfinished(ctx, h.store)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(env.Stderr, "airlock: worker: %v\n", err)
		}
		started := 0
		for _, r := range runs {
			mu.Lock()
			busy, full := driving[r.ID], len(driving) >= c.Concurrency
			mu.Unlock()
			if busy || full || ctx.Err() != nil {
				continue
			}
			if r.Status != event.StatusQueued && h.eng.Driven(r.ID) {
				continue
			}
			mu.Lock()
			driving[r.ID] = true
			mu.Unlock()
			started++
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(driving, id)
					mu.Unlock()
					select {
					case wake <- struct{}{}:
					default:
					}
				}()
				o, err := h.eng.Drive(ctx, id)
				switch {
				case err == nil:
					fmt.Fprintf(env.Stdout, "%s %s\n", shortID(id), o.Status)
				case errors.Is(err, engine.ErrBusy), errors.Is(err, engine.ErrFinal), ctx.Err() != nil:
				default:
					fmt.Fprintf(env.Stderr, "airlock: worker: run %s: %v\n", id, err)
				}
			}(r.ID)
		}
		mu.Lock()
		idle := len(driving) == 0
		mu.Unlock()
		if c.Once && idle && started == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-time.After(c.Poll):
		}
	}
}

func hostName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", h, os.Getpid())
}
