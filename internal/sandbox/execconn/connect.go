package execconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Connect opens a connect stream to port on the sandbox's loopback and
// returns it as a net.Conn once the executor has dialled (sandbox.Connector
// says what the conn does). ctx bounds only the dial. sandboxID names the
// sandbox in the conn's RemoteAddr.
//
// The stream uses the bulk window and chunk size: a connection carries
// whatever the server sends, an HTTP body or a file, at memory speed.
func (c *Conn) Connect(ctx context.Context, sandboxID string, port int) (net.Conn, error) {
	pc, err := c.openConnect(sandboxID, port, false)
	if err != nil {
		return nil, err
	}
	return pc.waitUp(ctx)
}

// ConnectEarly is Connect without the wait for the executor's dial
// (sandbox.EarlyConnector): it returns once the stream's opening is sent,
// and what is written to the conn from then on follows the opening at
// once, in the same stream's flow control, so that a request's first
// bytes cost no round trip through the executor before they leave the
// host. The executor holds them until its dial is done and then writes
// them to the socket. A failed dial is the error of the conn's Read or
// Write: a *net.OpError whose Op is "dial", wrapping what Connect would
// have returned (sandbox.ErrPortClosed when nothing listens).
//
// The opening itself waits for the conn's first use (a Write, a Read, a
// CloseWrite or Close) and goes in the same write as what that sends: a
// request and the opening before it are one write to the executor, and
// one wake-up of it.
func (c *Conn) ConnectEarly(sandboxID string, port int) (net.Conn, error) {
	pc, err := c.openConnect(sandboxID, port, true)
	if err != nil {
		return nil, err
	}
	return pc, nil
}

// openConnect sends the opening of a connect stream to port, or holds it
// for the conn's first use.
func (c *Conn) openConnect(sandboxID string, port int, hold bool) (*portConn, error) {
	req := execproto.Request{Op: execproto.OpConnect, Port: port, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}
	return c.openRelay(&req, sandbox.PortAddr{Sandbox: sandboxID, Port: port}, fmt.Sprintf("connect to port %d", port), hold)
}

// Egress opens an egress stream (execproto.OpEgress) and returns it as a
// net.Conn once a command in the sandbox has connected to its proxy
// address: the conn is that command's connection, to be relayed to the
// host's egress proxy. ctx bounds the wait, which lasts until a command
// connects; its end cancels the stream. The conn's RemoteAddr names the
// sandbox (port 0).
func (c *Conn) Egress(ctx context.Context, sandboxID string) (net.Conn, error) {
	req := execproto.Request{Op: execproto.OpEgress, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}
	pc, err := c.openRelay(&req, sandbox.PortAddr{Sandbox: sandboxID}, "egress", false)
	if err != nil {
		return nil, err
	}
	return pc.waitUp(ctx)
}

// openRelay sends the opening of a stream that relays one connection
// (connect or egress), or holds it for the conn's first use; what names
// it in errors.
func (c *Conn) openRelay(req *execproto.Request, remote sandbox.PortAddr, what string, hold bool) (*portConn, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	window, _ := req.Flow()
	pc := &portConn{
		remote: remote, what: what,
		up: make(chan struct{}), closing: make(chan struct{}),
		rdl: newDeadline(), wdl: newDeadline(),
		credit: newStdoutCredit(window),
	}
	s, err := c.openOutputs(req, &outputs{detached: true, hold: hold, up: func() { pc.upOnce.Do(func() { close(pc.up) }) }})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	pc.s = s
	if hold {
		pc.opening = &s.opening
		pc.held.Store(true)
	}
	return pc, nil
}

// sendHeld sends the stream's opening, if it is still held, and fs after
// it in the same write; it reports whether it did (and so sent fs).
func (pc *portConn) sendHeld(fs ...execproto.Frame) (bool, error) {
	if !pc.held.Load() {
		return false, nil
	}
	pc.openMu.Lock()
	defer pc.openMu.Unlock()
	if pc.opening == nil {
		return false, nil
	}
	err := pc.s.c.w.WriteFrames(append([]execproto.Frame{*pc.opening}, fs...)...)
	// Only once the opening is written: a Write that finds held false
	// sends at once, and its data must follow the opening.
	pc.opening = nil
	pc.held.Store(false)
	return true, err
}

// writeHeld sends the stream's opening, if it is still held, with the
// first frame of b's data in the same write; it returns how much of b
// went, and false when the opening was sent already. Called with
// writeMu held.
func (pc *portConn) writeHeld(b []byte) (int, bool, error) {
	if !pc.held.Load() || len(b) == 0 {
		return 0, false, nil
	}
	pc.openMu.Lock()
	defer pc.openMu.Unlock()
	if pc.opening == nil {
		return 0, false, nil
	}
	s := pc.s
	// Nothing was sent on the stream yet: the whole window is there.
	n, err := s.in.TakeUntil(min(len(b), s.chunk), pc.wdl.wait())
	if err != nil {
		return 0, true, err
	}
	err = s.c.w.WriteFrames(*pc.opening, execproto.DataFrame(s.id, execproto.Stdin, b[:n]))
	pc.opening = nil
	pc.held.Store(false) // after the write, as in sendHeld
	return n, true, err
}

// waitUp returns pc once the executor says its connection is up, or why
// it is not; ctx bounds the wait, and its end cancels the stream.
func (pc *portConn) waitUp(ctx context.Context) (net.Conn, error) {
	s := pc.s
	select {
	case <-pc.up:
		return pc, nil
	case <-s.done:
	case <-ctx.Done():
		// An abort: the cancel comes before any close of stdin.
		pc.closeOnce.Do(func() { close(pc.closing) })
		_ = s.send(execproto.Frame{Type: execproto.TCancel, Stream: s.id})
		return nil, fmt.Errorf("%s: %w", pc.what, ctx.Err())
	}
	if isClosed(pc.up) {
		return pc, nil // up, and already over: what it sent is still to be read
	}
	return nil, pc.dialErr()
}

// dialErr says why a stream that ended before the executor's dial
// succeeded failed: the error Connect returns.
func (pc *portConn) dialErr() error {
	switch r := pc.s.result; {
	case pc.s.err != nil:
		return fmt.Errorf("%s: %w", pc.what, pc.s.err)
	case r.Errno == "ECONNREFUSED":
		return fmt.Errorf("%s: %w", pc.what, sandbox.ErrPortClosed)
	case r.Error != "":
		return fmt.Errorf("%s: %s", pc.what, r.Error)
	}
	return fmt.Errorf("%s: %w: the stream ended before the connection was up", pc.what, execproto.ErrFrame)
}

// failedDial reports whether the stream ended without the executor's
// dial succeeding (only a ConnectEarly conn sees it: Connect returns no
// such conn).
func (pc *portConn) failedDial() bool { return isClosed(pc.s.done) && !isClosed(pc.up) }

// dialOpErr is dialErr as a conn's Read or Write returns it.
func (pc *portConn) dialOpErr() error {
	return &net.OpError{Op: "dial", Net: pc.remote.Network(), Source: pc.LocalAddr(), Addr: pc.remote, Err: pc.dialErr()}
}

// portConn is a connect stream as a net.Conn. What the server sends is
// queued by the connection's reader in the stream's Inbox, which holds at
// most the stream's window, and Read takes it from there itself: no
// goroutine between the two, so a chunk costs one wake-up (the reader's
// hand-off to Read), not three. Read returns the credit for what it took
// once a quarter of the window is taken (not a frame per chunk: a
// request and its answer cost no acknowledgement each). Write sends on
// the stream's stdin, waiting for credit.
type portConn struct {
	s      *stream // set once the stream is open, before Connect returns
	remote sandbox.PortAddr
	what   string // names the stream in errors: "connect to port N", "egress"

	up     chan struct{} // closed at the executor's close of stderr: the dial succeeded
	upOnce sync.Once

	// opening, while not nil, is the stream's opening not sent yet
	// (ConnectEarly's, until the conn's first use); held says so without
	// the lock, and turns false only once the opening is written, so that
	// nothing of the stream's can be written before it.
	opening *execproto.Frame // guarded by openMu
	openMu  sync.Mutex
	held    atomic.Bool

	// rest is what Read took from the Inbox and has not returned yet;
	// eof is set once Read took the close of Stdout (the server's EOF),
	// after all its data; credit is what Read returned and has not
	// given credit for. Guarded by readMu.
	rest   []byte
	eof    bool
	credit stdoutCredit

	closing   chan struct{} // closed by Close
	closeOnce sync.Once

	rdl, wdl *deadline

	readMu  sync.Mutex // serialises Reads
	writeMu sync.Mutex // serialises Writes and CloseWrite
	// wclosed is set by CloseWrite. Guarded by writeMu.
	wclosed bool
}

// Read reads what the server sent. It returns io.EOF once the server
// closed its side and everything before is read; an error wrapping
// sandbox.ErrLost when the sandbox went away; ECONNRESET when the relay
// broke (the server reset the connection).
func (pc *portConn) Read(b []byte) (int, error) {
	pc.readMu.Lock()
	defer pc.readMu.Unlock()
	switch {
	case isClosed(pc.closing):
		return 0, pc.opErr("read", net.ErrClosed)
	case isClosed(pc.rdl.wait()):
		return 0, pc.opErr("read", os.ErrDeadlineExceeded)
	}
	if len(b) == 0 {
		return 0, nil
	}
	// A read before any write (a server that speaks first) opens the
	// stream.
	if _, err := pc.sendHeld(); err != nil {
		return 0, pc.opErr("read", fmt.Errorf("%w: %w", sandbox.ErrLost, err))
	}
	out := pc.s.out
	for {
		if len(pc.rest) > 0 {
			n := copy(b, pc.rest)
			pc.rest = pc.rest[n:]
			pc.credit.took(pc.s, n)
			return n, nil
		}
		if pc.eof {
			if !isClosed(pc.up) {
				// An early conn's stream closed before its dial was
				// up: the dial failed, and the stream's end, just
				// behind, says why.
				if err := pc.awaitEnd("read", pc.rdl); err != nil {
					return 0, err
				}
				if pc.failedDial() {
					return 0, pc.dialOpErr()
				}
			}
			return 0, io.EOF
		}
		c, ok, ended := out.TryGet()
		switch {
		case ok && c.Close:
			pc.eof = pc.eof || c.Channel == execproto.Stdout
			continue
		case ok && c.Channel == execproto.Stdout:
			pc.rest = c.Data
			continue
		case ok:
			// Nothing but Stdout carries data on a relay: credit the
			// rest back and drop it.
			_ = pc.s.send(execproto.AckFrame(pc.s.id, c.Channel, uint32(len(c.Data))))
			continue
		case ended:
			// The stream ended (done is closed) and its output is all
			// taken.
			if pc.failedDial() {
				return 0, pc.dialOpErr()
			}
			return 0, pc.opErr("read", pc.endErr())
		}
		select {
		case <-out.Ready():
		case <-pc.closing:
			return 0, pc.opErr("read", net.ErrClosed)
		case <-pc.rdl.wait():
			return 0, pc.opErr("read", os.ErrDeadlineExceeded)
		}
	}
}

// stdoutCredit is what a reader of a stream's Stdout returned and has not
// given the executor credit for. The credit goes back once that is a
// quarter of the window: the executor may send three quarters more
// meanwhile, so it is never held up by it, and a small exchange costs no
// frame.
type stdoutCredit struct{ taken, every int }

func newStdoutCredit(window int64) stdoutCredit {
	return stdoutCredit{every: max(int(window)/4, 1)}
}

// took counts n bytes of s's Stdout returned by a Read, and sends their
// credit when it is due. Called under the reader's lock.
func (c *stdoutCredit) took(s *stream, n int) {
	c.taken += n
	if c.taken < c.every {
		return
	}
	_ = s.send(execproto.AckFrame(s.id, execproto.Stdout, uint32(c.taken)))
	c.taken = 0
}

// awaitEnd waits for the stream's end, which follows the close of one of
// its channels; it returns an error as op's only when the conn is closed
// or dl passes first.
func (pc *portConn) awaitEnd(op string, dl *deadline) error {
	select {
	case <-pc.s.done:
		return nil
	case <-pc.closing:
		return pc.opErr(op, net.ErrClosed)
	case <-dl.wait():
		return pc.opErr(op, os.ErrDeadlineExceeded)
	}
}

// endErr says why the stream ended when it ended without the server's EOF.
func (pc *portConn) endErr() error {
	if pc.s.err != nil {
		return pc.s.err
	}
	return syscall.ECONNRESET
}

// Write sends b to the server, waiting for the executor's credit; a write
// deadline that passes first returns how much was sent and
// os.ErrDeadlineExceeded.
func (pc *portConn) Write(b []byte) (int, error) {
	pc.writeMu.Lock()
	defer pc.writeMu.Unlock()
	switch {
	case isClosed(pc.closing):
		return 0, pc.opErr("write", net.ErrClosed)
	case pc.wclosed:
		return 0, pc.opErr("write", syscall.EPIPE)
	case isClosed(pc.wdl.wait()):
		return 0, pc.opErr("write", os.ErrDeadlineExceeded)
	}
	s := pc.s
	n, _, err := pc.writeHeld(b)
	if err == nil {
		var more int
		more, err = s.c.w.SendDataUntil(s.id, execproto.Stdin, s.in, s.chunk, b[n:], pc.wdl.wait())
		n += more
	} else {
		n = 0
	}
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, execproto.ErrStopped):
		return n, pc.opErr("write", os.ErrDeadlineExceeded)
	case isClosed(pc.closing):
		return n, pc.opErr("write", net.ErrClosed)
	case errors.Is(err, execproto.ErrClosed):
		// The stream ended: lost, or the connection was over, or (an
		// early conn's) it never was up. The executor's result closes
		// the stream's credit before the stream's writer ends it with
		// that result: wait for the end, which says why.
		if !isClosed(pc.up) {
			if err := pc.awaitEnd("write", pc.wdl); err != nil {
				return n, err
			}
		}
		if pc.failedDial() {
			return n, pc.dialOpErr()
		}
		if isClosed(s.done) && s.err != nil {
			return n, pc.opErr("write", s.err)
		}
		return n, pc.opErr("write", syscall.EPIPE)
	}
	return n, pc.opErr("write", fmt.Errorf("%w: %w", sandbox.ErrLost, err))
}

// CloseWrite shuts the write side: the server reads EOF once it has read
// everything written before, and may still answer.
func (pc *portConn) CloseWrite() error {
	pc.writeMu.Lock()
	defer pc.writeMu.Unlock()
	if isClosed(pc.closing) {
		return pc.opErr("close", net.ErrClosed)
	}
	if pc.wclosed {
		return nil
	}
	pc.wclosed = true
	f := execproto.CloseFrame(pc.s.id, execproto.Stdin)
	sent, err := pc.sendHeld(f)
	if !sent {
		err = pc.s.send(f)
	}
	if err != nil {
		return pc.opErr("close", fmt.Errorf("%w: %w", sandbox.ErrLost, err))
	}
	return nil
}

// Close closes the connection as closing a TCP socket does: what was
// written is still delivered, then the server reads EOF; what the server
// sends from now on is dropped. Blocked Reads and Writes return
// net.ErrClosed. The executor gives the delivery a few seconds
// (executor.closeGrace) and then closes the socket in any case.
func (pc *portConn) Close() error {
	first := false
	pc.closeOnce.Do(func() {
		first = true
		close(pc.closing)
		pc.s.in.Close() // wakes a Write waiting for credit
	})
	if !first {
		return pc.opErr("close", net.ErrClosed)
	}
	if isClosed(pc.s.done) {
		return nil
	}
	// After any Write in flight, which the credit's close ends: the close
	// of stdin must follow the data. A cancel after the close of stdin is
	// a close, not an abort. Both (and a held opening) go in one write.
	pc.writeMu.Lock()
	defer pc.writeMu.Unlock()
	fs := make([]execproto.Frame, 0, 2)
	if !pc.wclosed {
		pc.wclosed = true
		fs = append(fs, execproto.CloseFrame(pc.s.id, execproto.Stdin))
	}
	fs = append(fs, execproto.Frame{Type: execproto.TCancel, Stream: pc.s.id})
	if sent, _ := pc.sendHeld(fs...); !sent {
		_ = pc.s.c.w.WriteFrames(fs...)
	}
	return nil
}

// LocalAddr is the host's end: no address of its own.
func (pc *portConn) LocalAddr() net.Addr { return sandbox.PortAddr{} }

// RemoteAddr names the sandbox and the port.
func (pc *portConn) RemoteAddr() net.Addr { return pc.remote }

// SetDeadline sets both deadlines.
func (pc *portConn) SetDeadline(t time.Time) error {
	if isClosed(pc.closing) {
		return pc.opErr("set deadline", net.ErrClosed)
	}
	pc.rdl.set(t)
	pc.wdl.set(t)
	return nil
}

// SetReadDeadline bounds Reads (a zero t: no bound), waiting ones too.
func (pc *portConn) SetReadDeadline(t time.Time) error {
	if isClosed(pc.closing) {
		return pc.opErr("set deadline", net.ErrClosed)
	}
	pc.rdl.set(t)
	return nil
}

// SetWriteDeadline bounds Writes (a zero t: no bound), waiting ones too.
func (pc *portConn) SetWriteDeadline(t time.Time) error {
	if isClosed(pc.closing) {
		return pc.opErr("set deadline", net.ErrClosed)
	}
	pc.wdl.set(t)
	return nil
}

// opErr wraps err as net.Conn errors are, so errors.Is(err,
// os.ErrDeadlineExceeded) and net.Error's Timeout work.
func (pc *portConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: pc.remote.Network(), Source: pc.LocalAddr(), Addr: pc.remote, Err: err}
}

// deadline is net.Pipe's: a channel closed when the time set passes, which
// a set before that moves.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer   // guarded by mu
	cancel chan struct{} // guarded by mu: closed when the deadline passes
}

func newDeadline() *deadline { return &deadline{cancel: make(chan struct{})} }

// set moves the deadline to t; a zero t removes it.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.cancel // the timer's function is closing it: wait
	}
	d.timer = nil
	closed := isClosed(d.cancel)
	if t.IsZero() {
		if closed {
			d.cancel = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.cancel = make(chan struct{})
		}
		c := d.cancel
		d.timer = time.AfterFunc(dur, func() { close(c) })
		return
	}
	if !closed {
		close(d.cancel)
	}
}

// wait returns a channel closed when the deadline passes.
func (d *deadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cancel
}
