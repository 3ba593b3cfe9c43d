package sandbox

import (
	"context"
	"time"
)

// watchDrainTimeout bounds the drain of a sandbox's event channel when
// the watch stops.
const watchDrainTimeout = 10 * time.Second

// EventSink takes what a sandbox writes to its event channel
// (report.Log: it validates, caps and keeps it). An interface, so that
// this package, which the sandbox front end links, does not link the
// validation and the secret scanner behind it.
type EventSink interface {
	// Line takes one line the sandbox wrote, at now.
	Line(line []byte, now time.Time)
	// Executor takes the executor's drop counts.
	Executor(oversize, rate, queue, conns int64)
}

// WatchEvents feeds what sb's processes write to its event channel into
// log, in a goroutine of its own,
// until stop is called: stop drains the channel (what commands that have
// ended wrote is kept) and waits for the goroutine. Stopping the watch
// does not end the log: a sandbox's log outlives one boot (an E2B
// sandbox's pause and resume watch two boots into one log), and its owner
// ends it when the sandbox is gone. For a sandbox that is not an
// EventSource, or whose executor refuses the stream, nothing is watched
// (stop does nothing). It is for sandboxes outside runs (a run's driver
// records its sandboxes' events itself); one stream runs per sandbox at a
// time.
func WatchEvents(ctx context.Context, sb Sandbox, log EventSink) (stop func()) {
	src, ok := sb.(EventSource)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lines, drain, err := src.Events(ctx)
	if err != nil {
		cancel()
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l := range lines {
			if l.Drops != nil {
				log.Executor(l.Drops.Oversize, l.Drops.Rate, l.Drops.Queue, l.Drops.Conns)
				continue
			}
			log.Line(l.Line, time.Now())
		}
	}()
	return func() {
		drain()
		select {
		case <-done:
		case <-time.After(watchDrainTimeout):
			cancel()
			<-done
		}
		cancel()
	}
}
