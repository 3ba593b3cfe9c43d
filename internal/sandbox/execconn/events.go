package execconn

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Events streams what the sandbox's processes write to its event socket
// (execproto.EventSocket): each line, and the executor's drop counts when
// they change. The channel is closed when ctx ends, the connection ends, or
// the executor refuses or ends the stream (another events stream is
// running: one runs at a time). The caller must read the channel until it
// is closed or cancel ctx; while it does not read, the executor queues and
// then drops lines, and the sandbox's writers never wait.
//
// Lines are bytes the sandbox chose: nothing here interprets them.
//
// drain asks the executor to send what it holds and end the stream: the
// channel is closed after the last line.
func (c *Conn) Events(ctx context.Context) (_ <-chan sandbox.EventLine, drain func(), _ error) {
	req := execproto.Request{Op: execproto.OpEvents}
	ectx, cancel := context.WithCancel(ctx)
	out := make(chan sandbox.EventLine)
	lines := &eventWriter{ctx: ectx, ending: c.ending, out: out}
	drops := &eventWriter{ctx: ectx, ending: c.ending, out: out, drops: true, cancel: cancel}
	s, err := c.open(&req, lines, drops)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("events: %w", err)
	}
	c.watchers.Add(1)
	go func() {
		defer c.watchers.Done()
		defer cancel()
		_, _ = s.wait(ectx)
		close(out)
	}()
	drain = func() { _ = s.send(execproto.CloseFrame(s.id, execproto.Stdin)) }
	return out, drain, nil
}

// eventWriter hands an events stream's data frames to the consumer: on
// Stdout each frame is one line, on Stderr an execproto.EventDrops, which
// the executor is trusted only to frame: a malformed one ends the stream.
type eventWriter struct {
	ctx    context.Context
	ending <-chan struct{}
	out    chan<- sandbox.EventLine
	drops  bool
	cancel func() // set when drops: ends the stream
	bad    bool
}

func (w *eventWriter) Write(p []byte) (int, error) {
	if w.bad {
		return len(p), nil
	}
	ev := sandbox.EventLine{}
	if w.drops {
		var d execproto.EventDrops
		if err := execproto.Decode(p, &d); err != nil || d.Validate() != nil {
			w.bad = true
			w.cancel()
			return len(p), nil
		}
		ev.Drops = &d
	} else {
		if len(p) > execproto.MaxEventLine {
			return len(p), nil
		}
		ev.Line = append([]byte(nil), p...)
	}
	select {
	case w.out <- ev:
	case <-w.ctx.Done():
	case <-w.ending:
	}
	return len(p), nil
}
