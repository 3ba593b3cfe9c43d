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
	return WatchLines(ctx, sb, watchDrainTimeout, func(_ context.Context, lines <-chan EventLine) {
		for l := range lines {
			if l.Drops != nil {
				log.Executor(l.Drops.Oversize, l.Drops.Rate, l.Drops.Queue, l.Drops.Conns)
				continue
			}
			log.Line(l.Line, time.Now())
		}
	})
}

// WatchLines runs read over what sb's event channel carries, in a
// goroutine of its own, until stop is called: stop drains the channel
// (read gets what commands that have ended wrote, then the channel
// closes) and waits for read to return, at most drainTimeout before it
// cancels read's context and waits again. For a sandbox that is not an
// EventSource, or whose executor refuses the stream (gone, or too old),
// nothing is read and stop does nothing.
func WatchLines(ctx context.Context, sb Sandbox, drainTimeout time.Duration, read func(ctx context.Context, lines <-chan EventLine)) (stop func()) {
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
		read(ctx, lines)
	}()
	return func() {
		drain()
		select {
		case <-done:
		case <-time.After(drainTimeout):
			cancel()
			<-done
		}
		cancel()
	}
}
