package execconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/airlockrun/airlock/internal/execproto"
)

// stream is the host's view of one request.
type stream struct {
	c     *Conn
	id    uint32
	in    *execproto.Credit // send window of stdin
	chunk int               // the largest data payload of a frame (Request.Flow)

	// out queues output for the writer goroutine.
	out     *execproto.Inbox
	writers sync.WaitGroup

	// up, if set, is called by the connection's reader when the executor
	// closes the Stderr channel: a connect stream's dial is up.
	up func()
	// detached streams (connect) have no writer goroutine: their
	// consumer takes the output from out itself (portConn.Read), returns
	// the credit for it, and sees the close of Stdout in order with the
	// data; finish returns at once, never waiting for the consumer, and
	// what it did not take is dropped with the stream.
	detached bool
	// opening is the stream's Open frame when its sending was left to
	// the caller (outputs.hold).
	opening execproto.Frame

	once   sync.Once
	result execproto.Result
	err    error
	done   chan struct{} // closed once result/err are set and output is written
}

// newStream starts the stream of req. Its flow control is the request's
// (validated by the caller), which the host chose: an executor cannot make
// the host buffer more than that window per channel.
func newStream(c *Conn, id uint32, req *execproto.Request, o *outputs) *stream {
	window, chunk := req.Flow()
	s := &stream{
		c: c, id: id, in: execproto.NewCredit(window), chunk: chunk,
		out:  execproto.NewInbox(window),
		done: make(chan struct{}),
		up:   o.up, detached: o.detached,
	}
	if s.detached {
		return s
	}
	s.writers.Add(1)
	go s.write(o.stdout, o.stderr, o.closed)
	return s
}

// outputs says where a stream's output goes.
type outputs struct {
	stdout, stderr io.Writer // nil discards
	// detached: no writer goroutine, and up is called at the close of
	// Stderr (a connect stream).
	detached bool
	up       func()
	// hold: the opening is not sent but kept in the stream's opening,
	// for its caller to send.
	hold bool
	// closed, if set, is called by the writer goroutine at the close of
	// an output channel, after the channel's data is written.
	closed func(ch byte)
}

// write hands output to the caller's writers and returns credit as they
// accept it, so a slow consumer slows the command, not the host's memory.
func (s *stream) write(stdout, stderr io.Writer, closed func(ch byte)) {
	defer s.writers.Done()
	for {
		c, ok := s.out.Get()
		if !ok {
			return
		}
		if c.Close {
			if closed != nil {
				closed(c.Channel)
			}
			continue
		}
		w := stdout
		if c.Channel == execproto.Stderr {
			w = stderr
		}
		if w != nil {
			_, _ = w.Write(c.Data) // a failing writer must not stall the command
		}
		_ = s.c.w.Write(execproto.AckFrame(s.id, c.Channel, uint32(len(c.Data))))
	}
}

func (s *stream) deliver(ch byte, p []byte) error {
	if err := s.out.Put(ch, p); err != nil {
		return fmt.Errorf("%w: %w", execproto.ErrFrame, err)
	}
	return nil
}

// closeOutput queues the end of output channel ch after its data; a
// detached stream's close of Stderr (its dial is up) is told at once.
func (s *stream) closeOutput(ch byte) error {
	if s.up != nil && ch == execproto.Stderr {
		s.up()
	}
	if err := s.out.PutClose(ch); err != nil {
		return fmt.Errorf("%w: %w", execproto.ErrFrame, err)
	}
	return nil
}

func (s *stream) finish(r execproto.Result, err error) {
	s.once.Do(func() {
		s.result, s.err = r, err
		s.in.Close()
		if s.detached {
			// done before the Inbox's close: a consumer that finds
			// the Inbox ended finds done closed.
			close(s.done)
			s.out.Close()
			return
		}
		s.out.Close()
		s.writers.Wait()
		close(s.done)
	})
}

func (s *stream) fail(err error) {
	s.finish(execproto.Result{Outcome: execproto.OutcomeLost, ExitCode: -1}, err)
}

// wait returns the stream's result once it ended and its output is written.
// If ctx ends first, the request is cancelled and wait keeps waiting for the
// executor to confirm, which it does promptly.
func (s *stream) wait(ctx context.Context) (execproto.Result, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		_ = s.send(execproto.Frame{Type: execproto.TCancel, Stream: s.id})
		select {
		case <-s.done:
		case <-s.c.done:
			<-s.done
		}
	}
	return s.result, s.err
}

func (s *stream) send(f execproto.Frame) error { return s.c.w.Write(f) }

// sendInput copies r to the stream's stdin channel, then closes it. A
// reader that writes itself out (io.WriterTo: a checkpoint's tar stream)
// writes straight into the channel's frames, with no copy into a buffer
// here; but not a file, whose WriteTo writes 32 KiB at a time where a
// read here takes a whole frame's worth.
func (s *stream) sendInput(r io.Reader) error {
	if wt, ok := r.(io.WriterTo); ok {
		if _, file := r.(*os.File); !file {
			_, err := wt.WriteTo(inputWriter{s})
			_ = s.send(execproto.CloseFrame(s.id, execproto.Stdin))
			return err
		}
	}
	buf := make([]byte, s.chunk)
	var err error
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err = s.c.w.SendData(s.id, execproto.Stdin, s.in, s.chunk, buf[:n]); err != nil {
				break
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				err = rerr
			}
			break
		}
	}
	_ = s.send(execproto.CloseFrame(s.id, execproto.Stdin))
	return err
}

// inputWriter writes to a stream's stdin channel, in frames of at most the
// stream's chunk size, waiting for credit.
type inputWriter struct{ s *stream }

func (w inputWriter) Write(p []byte) (int, error) {
	if err := w.s.c.w.SendData(w.s.id, execproto.Stdin, w.s.in, w.s.chunk, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
