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
	// End says no line follows.
	End()
}

// WatchEvents feeds what sb's processes write to its event channel into
// log, in a goroutine of its own,
// until stop is called: stop drains the channel (what commands that have
// ended wrote is kept), waits for the goroutine, and ends the log. For a
// sandbox that is not an EventSource, or whose executor refuses the
// stream, the log is ended at once. It is for sandboxes outside runs (a
// run's driver records its sandboxes' events itself); one stream runs per
// sandbox.
func WatchEvents(ctx context.Context, sb Sandbox, log EventSink) (stop func()) {
	src, ok := sb.(EventSource)
	if !ok {
		log.End()
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	lines, drain, err := src.Events(ctx)
	if err != nil {
		cancel()
		log.End()
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
		log.End()
	}
}
