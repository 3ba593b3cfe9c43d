package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// The event channel: a unix stream socket at execproto.EventSocket that any
// process of the sandbox may write lines to, for the host to take over an
// events stream. A socket rather than a FIFO: each writer has its own
// connection, so lines of two writers never interleave (a FIFO splits
// writes above PIPE_BUF) and a writer that floods or never ends its line
// holds only its own connection; a FIFO with no reader blocks its writers'
// open, and one writer can fill the pipe for all. Nothing needs to change in
// the sandbox's confinement: seccomp allows AF_UNIX sockets, Landlock does
// not restrict connecting to a socket by path, and connecting writes nothing
// to the read-only file system the socket lives on.
//
// The executor frames lines and bounds them (execproto's limits), nothing
// more: whether a line means anything is the host's decision.

// eventHub queues lines from the sandbox's connections for the host.
type eventHub struct {
	wake chan struct{} // capacity 1: lines or drops arrived

	mu      sync.Mutex
	queue   [][]byte             // guarded by mu: at most MaxEventQueue lines
	bytes   int                  // guarded by mu: of the lines in queue, at most MaxEventQueueBytes
	drops   execproto.EventDrops // guarded by mu
	conns   int                  // guarded by mu: open connections
	tokens  float64              // guarded by mu: the rate limiter's bucket
	last    time.Time            // guarded by mu: when tokens was filled
	serving bool                 // guarded by mu: an events stream is running
}

func newEventHub() *eventHub {
	return &eventHub{wake: make(chan struct{}, 1), tokens: execproto.EventBurst, last: time.Now()}
}

func (h *eventHub) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// put queues one line, or counts it as dropped.
func (h *eventHub) put(line []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	defer h.signal()
	now := time.Now()
	h.tokens = min(execproto.EventBurst, h.tokens+now.Sub(h.last).Seconds()*execproto.EventRate)
	h.last = now
	if h.tokens < 1 {
		h.drops.Rate++
		return
	}
	h.tokens--
	if len(h.queue) >= execproto.MaxEventQueue || h.bytes+len(line) > execproto.MaxEventQueueBytes {
		h.drops.Queue++
		return
	}
	h.queue = append(h.queue, line)
	h.bytes += len(line)
}

func (h *eventHub) dropOversize() {
	h.mu.Lock()
	h.drops.Oversize++
	h.mu.Unlock()
	h.signal()
}

// next takes the oldest queued line, if any, and returns it with the drop
// counts.
func (h *eventHub) next() (line []byte, drops execproto.EventDrops, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return nil, h.drops, false
	}
	line = h.queue[0]
	h.queue[0] = nil
	h.queue = h.queue[1:]
	h.bytes -= len(line)
	return line, h.drops, true
}

// listenEvents binds the event socket and makes its directory read-only. It
// runs after pivot_root and before Landlock, which would refuse the bind.
// Every user of the sandbox may connect (mode 0666): everything in the
// sandbox is one principal to the host, and what a line says is never
// trusted.
func (e *executor) listenEvents() error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("event socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: execproto.EventSocket}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("bind event socket: %w", err)
	}
	if err := unix.Chmod(execproto.EventSocket, 0o666); err != nil {
		unix.Close(fd)
		return fmt.Errorf("event socket: %w", err)
	}
	// The backlog is well above the connection limit: the executor accepts
	// the ones over it only to close them, and gVisor refuses a blocking
	// connect with EAGAIN while the backlog is full (Linux makes it wait).
	if err := unix.Listen(fd, 4*execproto.MaxEventConns); err != nil {
		unix.Close(fd)
		return fmt.Errorf("listen on event socket: %w", err)
	}
	if e.setup.GVisor && !podInner {
		// gVisor cannot remount it read-only (a pod's executor can: its
		// mount namespace is its own): nobody owns it instead, so
		// commands, root included, without capabilities, cannot replace
		// the socket (as the generated /etc there).
		if err := unix.Chown(runDir, nobodyID, nobodyID); err != nil {
			unix.Close(fd)
			return fmt.Errorf("%s: %w", runDir, err)
		}
	} else if err := unix.Mount("", runDir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		unix.Close(fd)
		return fmt.Errorf("read-only %s: %w", runDir, err)
	}
	e.events = newEventHub()
	ln := os.NewFile(uintptr(fd), "events")
	rc, err := ln.SyscallConn()
	if err != nil {
		ln.Close()
		return err
	}
	go acceptLoop(rc, e.acceptEvent)
	return nil
}

// acceptEvent takes one connection to the event socket, or closes it
// when the sandbox already has its most.
func (e *executor) acceptEvent(nfd int) {
	h := e.events
	h.mu.Lock()
	full := h.conns >= execproto.MaxEventConns
	if full {
		h.drops.Conns++
	} else {
		h.conns++
	}
	h.mu.Unlock()
	if full {
		unix.Close(nfd)
		h.signal()
		return
	}
	go h.read(os.NewFile(uintptr(nfd), "event-conn"))
}

// read splits one connection into lines until it ends. A line without its
// newline at the end of the connection counts as a line.
func (h *eventHub) read(c *os.File) {
	defer func() {
		c.Close()
		h.mu.Lock()
		h.conns--
		h.mu.Unlock()
	}()
	r := bufio.NewReaderSize(c, execproto.MaxEventLine+1)
	long := false // in the middle of a line too long to keep
	for {
		b, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if !long {
				long = true
				h.dropOversize()
			}
			continue
		case long:
			long = err != nil // the rest of the long line, until its end
		case len(b) > 0:
			line := b
			if line[len(line)-1] == '\n' {
				line = line[:len(line)-1]
			}
			if len(line) > execproto.MaxEventLine {
				h.dropOversize()
			} else if len(line) > 0 {
				h.put(append([]byte(nil), line...))
			}
		}
		if err != nil {
			return
		}
	}
}

// events carries out an events request: it hands the host what the
// sandbox's processes wrote to the event socket until the host cancels the
// stream, or closes its stdin to drain it (what is queued is sent, then the
// stream ends). It waits for the host's credit, never for the writers: while it
// waits, lines queue in the hub and what does not fit is dropped.
func (s *stream) events() execproto.Result {
	h := s.e.events
	if h == nil {
		return errResult(fmt.Errorf("events: the sandbox has no event socket: %w", syscall.ENOTSUP))
	}
	h.mu.Lock()
	busy := h.serving
	h.serving = true
	h.mu.Unlock()
	if busy {
		return errResult(fmt.Errorf("events: another events stream is running: %w", syscall.EBUSY))
	}
	defer func() {
		h.mu.Lock()
		h.serving = false
		h.mu.Unlock()
	}()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.stop:
		case <-done:
		}
		s.out.Close() // a send waiting for credit gives up
		s.errc.Close()
		s.stdin.Close() // and so does the wait for a drain below
	}()
	// The host closing its stdin asks for a drain: what is queued, then
	// the end of the stream.
	drain := make(chan struct{})
	go func() {
		for {
			if _, ok := s.stdin.Get(); !ok {
				close(drain)
				return
			}
		}
	}()
	var sent execproto.EventDrops
	for {
		last := false
		select {
		case <-s.stop:
			return execproto.Result{}
		case <-h.wake:
		case <-drain:
			last = true
		}
		// One line at a time: what waits for the host's credit is one
		// line, the rest stays in the bounded queue.
		for {
			line, drops, ok := h.next()
			// The counts first: a host that has seen a line has
			// seen every drop counted before it was taken.
			if drops != sent {
				b, err := json.Marshal(drops)
				if err != nil {
					return errResult(err)
				}
				if err := s.sendWhole(execproto.Stderr, s.errc, b); err != nil {
					if ok {
						h.requeue([][]byte{line})
					}
					return execproto.Result{}
				}
				sent = drops
			}
			if !ok {
				break
			}
			if err := s.sendWhole(execproto.Stdout, s.out, line); err != nil {
				h.requeue([][]byte{line})
				return execproto.Result{}
			}
		}
		if last {
			return execproto.Result{}
		}
	}
}

// requeue puts lines an events stream could not send back at the head of
// the queue for the next stream, dropping what then does not fit.
func (h *eventHub) requeue(lines [][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := append(lines, h.queue...)
	h.queue, h.bytes = nil, 0
	for i, l := range q {
		if len(h.queue) >= execproto.MaxEventQueue || h.bytes+len(l) > execproto.MaxEventQueueBytes {
			h.drops.Queue += int64(len(q) - i)
			break
		}
		h.queue = append(h.queue, l)
		h.bytes += len(l)
	}
}

// sendWhole sends b in one data frame on channel c, waiting for the credit
// of the whole frame, so that a frame boundary is a line boundary.
func (s *stream) sendWhole(c byte, credit *execproto.Credit, b []byte) error {
	for got := 0; got < len(b); {
		n, err := credit.Take(len(b) - got)
		if err != nil {
			return err
		}
		got += n
	}
	return s.e.w.Write(execproto.DataFrame(s.id, c, b))
}
