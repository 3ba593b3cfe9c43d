package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/airlockrun/airlock/internal/host"
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
	h, err := host.New(hostConfig(env, hostOptions{timeline: tl}))
	if err != nil {
		return err
	}
	defer h.Close()
	ctx, cut, stop := signalled(env)
	defer stop()
	o := host.WorkOptions{
		Concurrency: c.Concurrency, Poll: c.Poll, Once: c.Once, ShutdownTimeout: c.ShutdownTimeout,
		Ended: func(e host.DriveEnd) {
			switch {
			case e.HandedBack:
				fmt.Fprintf(env.Stdout, "%s handed back (%s)\n", shortID(e.RunID), e.Status)
			case e.Skipped:
			case e.Err != nil:
				fmt.Fprintf(env.Stderr, "airlock: worker: run %s: %v\n", e.RunID, e.Err)
			default:
				fmt.Fprintf(env.Stdout, "%s %s\n", shortID(e.RunID), e.Status)
			}
		},
		Failed: func(err error) { fmt.Fprintf(env.Stderr, "airlock: worker: %v\n", err) },
	}
	fmt.Fprintf(env.Stdout, "worker %s: driving up to %d runs\n", hostName(), c.Concurrency)
	return hostError(h.Work(ctx, o, cut))
}

func hostName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", h, os.Getpid())
}
