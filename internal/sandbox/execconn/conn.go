// Package execconn is the host's side of the executor protocol: it performs
// the handshake, multiplexes concurrent requests over one connection, applies
// flow control in both directions, and turns every frame the executor sends —
// untrusted input — into validated results. Backends that run airlock-exec
// inside their sandboxes share it.
package execconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Conn is a connection to one executor.
type Conn struct {
	rw io.ReadWriteCloser
	w  *execproto.Writer

	// Ready is what the executor reported after setup.
	Ready execproto.Ready

	mu      sync.Mutex
	streams map[uint32]*stream // guarded by mu
	next    uint32             // guarded by mu: last stream ID used
	err     error              // guarded by mu: why the connection ended

	done    chan struct{} // closed when the reader stops
	ending  chan struct{} // closed when the reader stops, before the streams fail: output not taken by then is dropped
	readers sync.WaitGroup
	// watchers are the goroutines that close watch channels (Watch).
	watchers sync.WaitGroup
}

// Dial performs the handshake on rw: Hello both ways, Setup, Ready. On
// success it starts the reader goroutine; Close stops and waits for it.
func Dial(ctx context.Context, rw io.ReadWriteCloser, setup *execproto.Setup) (*Conn, error) {
	c := &Conn{rw: rw, w: execproto.NewWriter(rw), streams: map[uint32]*stream{}, done: make(chan struct{}), ending: make(chan struct{})}
	stop := context.AfterFunc(ctx, func() { rw.Close() })
	defer stop()
	// Hello and setup go out together: an executor of another version
	// refuses at the hello and never reads the setup, and the round trip
	// a reply to the hello would cost is off every sandbox's start.
	hello, err := execproto.MessageFrame(execproto.THello, 0, execproto.Hello{Version: execproto.Version})
	if err != nil {
		return nil, err
	}
	sf, err := execproto.MessageFrame(execproto.TSetup, 0, setup)
	if err != nil {
		return nil, err
	}
	if err := c.w.Write(hello); err != nil {
		return nil, refusal(rw, fmt.Errorf("send hello: %w", err))
	}
	if err := c.w.Write(sf); err != nil {
		return nil, refusal(rw, fmt.Errorf("send setup: %w", err))
	}
	var h execproto.Hello
	if err := expect(rw, execproto.THello, &h); err != nil {
		return nil, err
	}
	if h.Version != execproto.Version {
		return nil, fmt.Errorf("executor speaks protocol %d, host %d", h.Version, execproto.Version)
	}
	if err := expect(rw, execproto.TReady, &c.Ready); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	c.readers.Add(1)
	go c.read()
	return c, nil
}

// refusal is why the handshake failed when writing to the executor did
// (werr): an executor that refused (a bad id map, another version) sends
// its reason and exits, possibly before it read everything, so the write
// breaks; its reason, if it sent one, says more than the broken pipe.
func refusal(r io.Reader, werr error) error {
	for range 2 { // its hello, then the error in place of Ready
		f, err := execproto.ReadFrame(r)
		if err != nil {
			return werr
		}
		if f.Type == execproto.TError {
			var e execproto.Error
			if execproto.DecodeMessage(f.Payload, &e) == nil {
				return fmt.Errorf("executor: %s", e.Message)
			}
			return werr
		}
	}
	return werr
}

func expect(r io.Reader, t execproto.Type, v execproto.Decodable) error {
	f, err := execproto.ReadFrame(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("executor exited during %s", t)
		}
		return fmt.Errorf("read %s: %w", t, err)
	}
	if f.Type == execproto.TError {
		var e execproto.Error
		if err := execproto.DecodeMessage(f.Payload, &e); err != nil {
			return err
		}
		return fmt.Errorf("executor: %s", e.Message)
	}
	if f.Type != t {
		return fmt.Errorf("%w: got %s, want %s", execproto.ErrFrame, f.Type, t)
	}
	return execproto.DecodeMessage(f.Payload, v)
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended, once Done is closed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection and waits for its reader and for every watch
// channel to be closed.
func (c *Conn) Close() error {
	err := c.rw.Close()
	c.readers.Wait()
	c.watchers.Wait()
	return err
}

// readBuffer is the size of the connection's read buffer: a data chunk and
// its header fit.
const readBuffer = execproto.ChunkSize + execproto.HeaderSize

func (c *Conn) read() {
	defer c.readers.Done()
	var err error
	// Buffered: a frame's header and a small payload come in one read.
	r := bufio.NewReaderSize(c.rw, readBuffer)
	for {
		var f execproto.Frame
		f, err = execproto.ReadFrame(r)
		if err != nil {
			break
		}
		if err = c.dispatch(f); err != nil {
			break
		}
	}
	c.mu.Lock()
	if errors.Is(err, io.EOF) || errors.Is(err, execproto.ErrClosed) {
		err = sandbox.ErrLost
	} else {
		err = fmt.Errorf("%w: %w", sandbox.ErrLost, err)
	}
	c.err = err
	streams := c.streams
	c.streams = map[uint32]*stream{}
	c.mu.Unlock()
	close(c.ending)
	for _, s := range streams {
		s.fail(err)
	}
	close(c.done)
}

func (c *Conn) dispatch(f execproto.Frame) error {
	if f.Stream == 0 {
		if f.Type == execproto.TError {
			var e execproto.Error
			if err := execproto.DecodeMessage(f.Payload, &e); err != nil {
				return err
			}
			return fmt.Errorf("executor: %s", e.Message)
		}
		return fmt.Errorf("%w: unexpected %s on stream 0", execproto.ErrFrame, f.Type)
	}
	c.mu.Lock()
	s := c.streams[f.Stream]
	c.mu.Unlock()
	if s == nil {
		return nil // a stream the host already gave up on
	}
	switch f.Type {
	case execproto.TData:
		ch := f.Payload[0]
		if ch == execproto.Stdin {
			return fmt.Errorf("%w: stdin data from executor", execproto.ErrFrame)
		}
		return s.deliver(ch, f.Payload[1:])
	case execproto.TClose:
		ch := f.Payload[0]
		if ch == execproto.Stdin {
			return fmt.Errorf("%w: close of stdin from executor", execproto.ErrFrame)
		}
		return s.closeOutput(ch)
	case execproto.TAck:
		ch, n := execproto.AckCredit(f)
		if ch != execproto.Stdin {
			return fmt.Errorf("%w: ack for channel %d from executor", execproto.ErrFrame, ch)
		}
		return s.in.Add(n)
	case execproto.TResult:
		var r execproto.Result
		if err := execproto.DecodeMessage(f.Payload, &r); err != nil {
			return err
		}
		c.mu.Lock()
		delete(c.streams, f.Stream)
		c.mu.Unlock()
		s.finish(r, nil)
		return nil
	case execproto.TError:
		var e execproto.Error
		if err := execproto.DecodeMessage(f.Payload, &e); err != nil {
			return err
		}
		c.mu.Lock()
		delete(c.streams, f.Stream)
		c.mu.Unlock()
		s.finish(execproto.Result{}, errors.New(e.Message))
		return nil
	}
	return fmt.Errorf("%w: unexpected %s from executor", execproto.ErrFrame, f.Type)
}

// open starts a stream for req. Output channels go to the given writers (nil
// discards).
func (c *Conn) open(req *execproto.Request, stdout, stderr io.Writer) (*stream, error) {
	return c.openOutputs(req, &outputs{stdout: stdout, stderr: stderr})
}

// openOutputs is open with every choice of outputs.
func (c *Conn) openOutputs(req *execproto.Request, o *outputs) (*stream, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	id := c.next
	s := newStream(c, id, req, o)
	c.streams[id] = s
	c.mu.Unlock()
	f, err := execproto.MessageFrame(execproto.TOpen, id, req)
	if err == nil && o.hold {
		s.opening = f // the caller sends it (portConn.sendHeld)
		return s, nil
	}
	if err == nil {
		err = c.w.Write(f)
	}
	if err != nil {
		c.mu.Lock()
		delete(c.streams, id)
		c.mu.Unlock()
		s.fail(err)
		return nil, err
	}
	return s, nil
}
