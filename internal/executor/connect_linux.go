package executor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// connect relays a TCP connection to the request's port on the sandbox's
// loopback (execproto.OpConnect): it dials, closes the Stderr channel to say
// the connection is up, then copies Stdin to the socket and the socket to
// Stdout until both directions are done, the connection breaks, or the host
// cancels.
//
// The executor is PID 1 in the sandbox's network namespace, which has only
// loopback, and it dials only 127.0.0.1 and ::1: a port number can never
// name an address outside the sandbox. The socket is the executor's own:
// it is made after setup, under the executor's seccomp filter, and no
// command inherits it (close-on-exec), so the commands' Landlock and
// seccomp rules are as they were.
func (s *stream) connect() execproto.Result {
	if !s.e.acquireConnect() {
		return execproto.Result{ExitCode: -1, Error: fmt.Sprintf("connect: %d connections already open", execproto.MaxConnects), Errno: "EMFILE"}
	}
	defer s.e.releaseConnect()
	sock, err := s.dialLoopback(s.req.Port)
	if err != nil {
		return errResult(err)
	}
	defer sock.Close()
	return s.relay(sock)
}

// relay says the connection is up (a Close of Stderr) and relays sock to
// the host: Stdin to the socket, the socket to Stdout, until both
// directions are done, the connection breaks, or the host cancels.
//
// When the host sent data with the opening (an early connect, which reads
// nothing until it has written its request), the notice that the
// connection is up waits for the first thing the stream sends and goes
// out in the same write: the host's side wakes once for the answer, not
// once more before it. A host that sent nothing yet (Connect waits for
// the notice) gets it at once.
func (s *stream) relay(sock *os.File) execproto.Result {
	var upHeld atomic.Bool
	if s.stdin.Pending() {
		upHeld.Store(true)
		// Whatever ends the relay, the notice goes before the result.
		defer func() {
			if upHeld.Swap(false) {
				_ = s.e.w.Write(execproto.CloseFrame(s.id, execproto.Stderr))
			}
		}()
	} else if err := s.e.w.Write(execproto.CloseFrame(s.id, execproto.Stderr)); err != nil {
		return errResult(err)
	}
	// broken is closed when the connection broke (a read or write error
	// other than EOF): the other direction stops too.
	broken := make(chan struct{})
	var breakOnce sync.Once
	breakConn := func() { breakOnce.Do(func() { close(broken) }) }
	var discard atomic.Bool // set once the host has closed: what the socket sends is dropped
	// both is closed by the second pump to end (a count, not a goroutine
	// that waits for the two: one wake-up less a connection).
	both := make(chan struct{})
	var pumps atomic.Int32
	pumps.Store(2)
	pumpDone := func() {
		if pumps.Add(-1) == 0 {
			close(both)
		}
	}
	go func() {
		defer pumpDone()
		if !s.socketToHost(sock, &discard, &upHeld) {
			breakConn()
		}
	}()
	go func() {
		defer pumpDone()
		if !s.hostToSocket(sock) {
			breakConn()
		}
	}()
	select {
	case <-both:
		return execproto.Result{}
	case <-broken:
	case <-s.stop:
		if s.stdinClosed() {
			// The host closed the connection as a TCP socket closes:
			// what it wrote is still written, then the server reads EOF.
			// What the server sends meanwhile is read and dropped until
			// its EOF, since closing a socket with unread data resets
			// the connection and may drop what was still to be sent.
			// closeGrace bounds both, as for a server that never reads
			// or never closes.
			discard.Store(true)
			s.out.Close()
			grace := time.Now().Add(closeGrace)
			_ = sock.SetWriteDeadline(grace)
			_ = sock.SetReadDeadline(grace)
			select {
			case <-both:
				return execproto.Result{}
			case <-broken:
			}
		}
	}
	// Unblock both pumps: a read or write of the socket, a wait for the
	// host's credit, a wait for the host's data.
	sock.Close()
	s.out.Close()
	s.stdin.Close()
	<-both
	return execproto.Result{}
}

// closeGrace bounds how long a connect stream the host closed still writes
// what the host sent before, and waits for the server's EOF.
const closeGrace = 5 * time.Second

// stdinClosed reports whether the host closed the stream's Stdin.
func (s *stream) stdinClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stdinDone
}

// acquireConnect counts one more connect stream, unless MaxConnects are open.
func (e *executor) acquireConnect() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.connects >= execproto.MaxConnects {
		return false
	}
	e.connects++
	return true
}

func (e *executor) releaseConnect() {
	e.mu.Lock()
	e.connects--
	e.mu.Unlock()
}

// dialLoopback connects to port on 127.0.0.1, or on ::1 when nothing
// listens on the IPv4 one (a server bound to ::1 alone). The socket is
// non-blocking, in the runtime poller, so closing it interrupts a Read or
// Write; a host cancel interrupts the dial.
func (s *stream) dialLoopback(port int) (*os.File, error) {
	f, err := s.dial(unix.AF_INET, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	if !errors.Is(err, unix.ECONNREFUSED) {
		return f, err
	}
	f6, err6 := s.dial(unix.AF_INET6, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}})
	if err6 != nil {
		return nil, err // the IPv4 refusal says it best (there may be no IPv6)
	}
	return f6, nil
}

// dial makes a TCP connection to sa with raw system calls (startProxy says
// why not package net).
func (s *stream) dial(family int, sa unix.Sockaddr) (*os.File, error) {
	// Protocol 0 is IPPROTO_TCP, never MPTCP (startProxy).
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("connect: socket: %w", err)
	}
	err = unix.Connect(fd, sa)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		return nil, fmt.Errorf("connect to port %d: %w", s.req.Port, err)
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	f := os.NewFile(uintptr(fd), "connect")
	if err == nil {
		return f, nil
	}
	// In progress: wait until the socket is writable, then ask how the
	// connect ended. A cancel closes the socket, which ends the wait;
	// but a cancel after the host closed Stdin is a close, and what the
	// host sent with the opening (an early connect) is still to be
	// written: the dial gets closeGrace to end first.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-s.stop:
			if s.stdinClosed() {
				t := time.NewTimer(closeGrace)
				defer t.Stop()
				select {
				case <-t.C:
				case <-stop:
					return
				}
			}
			f.Close()
		case <-stop:
		}
	}()
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("connect to port %d: %w", s.req.Port, err)
	}
	var soErr int
	var gerr error
	werr := rc.Write(func(fd uintptr) bool {
		// As package net does: in progress until SO_ERROR says how it
		// ended or the socket has a peer. The first call comes before
		// any wait, so a connect done by now is seen.
		soErr, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case gerr != nil:
			return true
		case soErr == 0:
			_, perr := unix.Getpeername(int(fd))
			return !errors.Is(perr, unix.ENOTCONN)
		case unix.Errno(soErr) == unix.EINPROGRESS || unix.Errno(soErr) == unix.EALREADY || unix.Errno(soErr) == unix.EINTR:
			return false
		}
		return true
	})
	switch {
	case werr != nil:
		f.Close()
		return nil, fmt.Errorf("connect to port %d: cancelled", s.req.Port)
	case gerr != nil:
		f.Close()
		return nil, fmt.Errorf("connect to port %d: %w", s.req.Port, gerr)
	case soErr != 0:
		f.Close()
		return nil, fmt.Errorf("connect to port %d: %w", s.req.Port, unix.Errno(soErr))
	}
	return f, nil
}

// relayBuffers hold what a connect stream read from its socket while it
// sends it: a connection holds one only between a read and the host's
// credit for it, so a thousand idle connections hold none.
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, execproto.MaxChunkSize); return &b }}

// socketToHost sends what the socket reads as Stdout data, then a Close of
// Stdout at its EOF; the up notice, while upHeld, goes in the same write
// as the first of them. A read that fills less than a frame is followed
// by another at once, so that an answer and the server's close that came
// with it (an HTTP server that closes after answering) are one write to
// the host. It reports false when the connection broke (or the relay was
// stopped) rather than ended.
func (s *stream) socketToHost(sock *os.File, discard, upHeld *atomic.Bool) bool {
	rc, err := sock.SyscallConn()
	if err != nil {
		return false
	}
	up := []execproto.Frame{execproto.CloseFrame(s.id, execproto.Stderr)}
	eofFrame := []execproto.Frame{execproto.CloseFrame(s.id, execproto.Stdout)}
	// send sends p (maybe none) and the EOF when eof, after the up
	// notice if it is still held.
	send := func(p []byte, eof bool) error {
		var before, after []execproto.Frame
		held := upHeld.Swap(false)
		if held {
			before = up
		}
		if eof {
			after = eofFrame
		}
		err := s.e.w.SendDataBetween(s.id, execproto.Stdout, s.out, s.chunk, before, p, after)
		if err != nil && held && errors.Is(err, execproto.ErrClosed) {
			upHeld.Store(true) // the credit's close: nothing was written
		}
		return err
	}
	for {
		var buf *[]byte
		var n int
		var rerr error
		eof := false
		err := rc.Read(func(fd uintptr) bool {
			buf = relayBuffers.Get().(*[]byte)
			n, rerr = unix.Read(int(fd), (*buf)[:s.chunk])
			if errors.Is(rerr, unix.EAGAIN) {
				relayBuffers.Put(buf)
				buf = nil
				return false
			}
			if rerr == nil && n > 0 && n < s.chunk {
				m, merr := unix.Read(int(fd), (*buf)[n:s.chunk])
				switch {
				case merr == nil && m == 0:
					eof = true
				case merr == nil:
					n += m
				}
				// Another error (EAGAIN: nothing more yet) is the next
				// read's to see.
			}
			return true
		})
		if err != nil {
			return false // closed under it
		}
		if rerr != nil || n <= 0 {
			relayBuffers.Put(buf)
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				return false
			}
			if discard.Load() {
				return true
			}
			return send(nil, true) == nil
		}
		if discard.Load() {
			relayBuffers.Put(buf)
			if eof {
				return true
			}
			continue
		}
		err = send((*buf)[:n], eof)
		relayBuffers.Put(buf)
		if err != nil && !discard.Load() {
			return false
		}
		if eof {
			return err == nil || discard.Load()
		}
	}
}

// hostToSocket writes the host's Stdin data to the socket, and shuts the
// socket's write side when the host closes Stdin. It reports false when a
// write failed (the connection is broken) or the relay was stopped. What
// it wrote is acknowledged once that is a quarter of the window, not
// chunk by chunk: the host may send three quarters more meanwhile, and a
// request costs no frame back of its own.
func (s *stream) hostToSocket(sock *os.File) bool {
	window, _ := s.req.Flow()
	ackAt, written := max(int(window)/4, 1), 0
	for {
		c, ok := s.stdin.Get()
		if !ok {
			break
		}
		if _, err := sock.Write(c.Data); err != nil {
			return false
		}
		if written += len(c.Data); written >= ackAt {
			_ = s.e.w.Write(execproto.AckFrame(s.id, execproto.Stdin, uint32(written)))
			written = 0
		}
	}
	if !s.stdinClosed() {
		return false // stopped, not closed by the host
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Shutdown(int(fd), unix.SHUT_WR) }); err != nil || serr != nil {
		return false
	}
	return true
}
