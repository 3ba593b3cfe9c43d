package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
)

// podMux is the relay's side of many host connections (sessions) to one
// executor: every host that reaches the pod (through the API server's
// exec, so with the right to exec in it) may attach, at once or one after
// another, and the sandbox outlives any one of them (docs/kubernetes.md,
// "Many replicas").
//
// The protocol needs no change for it. Stream 0 is the connection's: the
// first session's hello and setup go to the executor, whose hello and
// ready the relay keeps; a later session's hello is answered with them
// (its setup is read and not applied: the sandbox keeps its creator's).
// Every other stream is opened by a host with an id of its choosing; the
// relay gives each one an id of its own towards the executor and rewrites
// the ids both ways, so hosts' ids never collide. Each stream ends with
// the executor's one Result, which frees its ids.
//
// A session that ends (its host closed the exec, died, or did not read for
// sessionWriteTimeout) leaves its streams behind: each is cancelled (its
// process tree killed) and its stdin closed, and the relay then stands in
// for the host, acknowledging the output the executor still sends, which
// the executor delivers whole however long the host takes, until the
// stream's Result.
type podMux struct {
	exec *os.File
	// ew writes to the executor; its Write is atomic.
	ew *execproto.Writer

	// hello and ready are the executor's answers to the first session's
	// handshake, given again to every later one.
	hello, ready execproto.Frame

	// changed is signalled (never blocking) when the number of sessions
	// changes.
	changed chan struct{}

	mu sync.Mutex
	// next is the last stream id given towards the executor. Guarded by mu.
	next uint32
	// routes maps an executor-side stream id to its session and the id the
	// session knows it by; a route whose session is gone is an orphan.
	// Guarded by mu.
	routes map[uint32]route
	// sessions are the live sessions. Guarded by mu.
	sessions map[*podSession]bool
}

// route is where an executor-side stream goes.
type route struct {
	s  *podSession
	id uint32
}

// podSession is one host's connection.
type podSession struct {
	c *os.File
	// wmu serialises writes to c.
	wmu sync.Mutex
	// ids maps the session's stream ids to the executor's. Guarded by the
	// mux's mu, as is dead.
	ids  map[uint32]uint32
	dead bool
}

// sessionWriteTimeout bounds how long a frame for a host may wait for the
// host to read: a host that takes longer is gone, and its session ends
// (its streams become orphans) rather than holding up every other
// session's frames.
const sessionWriteTimeout = 30 * time.Second

func newPodMux(exec *os.File) *podMux {
	return &podMux{exec: exec, ew: execproto.NewWriter(exec), routes: map[uint32]route{}, sessions: map[*podSession]bool{}, changed: make(chan struct{}, 1)}
}

// handshake relays the first session's hello and setup to the executor and
// the executor's hello and ready (or error) back, and keeps the answers.
// The executor's frames are read from er, which the mux's reader goes on
// with afterwards.
func (m *podMux) handshake(c *os.File, cr *bufio.Reader, er *bufio.Reader) error {
	for _, want := range []execproto.Type{execproto.THello, execproto.TSetup} {
		f, err := execproto.ReadFrame(cr)
		if err != nil {
			return fmt.Errorf("host's %s: %w", want, err)
		}
		if f.Type != want || f.Stream != 0 {
			return fmt.Errorf("host sent %s on stream %d, want %s", f.Type, f.Stream, want)
		}
		if err := m.ew.Write(f); err != nil {
			return fmt.Errorf("to the executor: %w", err)
		}
	}
	for _, want := range []execproto.Type{execproto.THello, execproto.TReady} {
		f, err := execproto.ReadFrame(er)
		if err != nil {
			return fmt.Errorf("executor's %s: %w", want, err)
		}
		if werr := execproto.WriteFrame(c, f); werr != nil {
			return fmt.Errorf("to the host: %w", werr)
		}
		if f.Type == execproto.TError {
			return errors.New("the executor refused the setup")
		}
		if f.Type != want || f.Stream != 0 {
			return fmt.Errorf("executor sent %s on stream %d, want %s", f.Type, f.Stream, want)
		}
		if want == execproto.THello {
			m.hello = f
		} else {
			m.ready = f
		}
	}
	return nil
}

// attach answers a later session's handshake with the kept hello and
// ready. A host of another protocol version is refused, as the executor
// would.
func (m *podMux) attach(c *os.File, cr *bufio.Reader) error {
	f, err := execproto.ReadFrame(cr)
	if err != nil {
		return fmt.Errorf("host's hello: %w", err)
	}
	var h execproto.Hello
	if f.Type != execproto.THello || f.Stream != 0 {
		return fmt.Errorf("host sent %s on stream %d, want hello", f.Type, f.Stream)
	}
	if err := execproto.DecodeMessage(f.Payload, &h); err != nil {
		return fmt.Errorf("host's hello: %w", err)
	}
	if h.Version != execproto.Version {
		msg := fmt.Sprintf("protocol version %d, executor speaks %d", h.Version, execproto.Version)
		if ef, err := execproto.MessageFrame(execproto.TError, 0, execproto.Error{Message: msg}); err == nil {
			_ = execproto.WriteFrame(c, ef)
		}
		return errors.New(msg)
	}
	// The setup is read and not applied: the sandbox was set up once, by
	// its creator.
	if f, err = execproto.ReadFrame(cr); err != nil {
		return fmt.Errorf("host's setup: %w", err)
	}
	if f.Type != execproto.TSetup || f.Stream != 0 {
		return fmt.Errorf("host sent %s on stream %d, want setup", f.Type, f.Stream)
	}
	if err := execproto.WriteFrame(c, m.hello); err != nil {
		return err
	}
	return execproto.WriteFrame(c, m.ready)
}

// addSession counts a session that shook hands.
func (m *podMux) addSession(c *os.File) *podSession {
	s := &podSession{c: c, ids: map[uint32]uint32{}}
	m.mu.Lock()
	m.sessions[s] = true
	m.mu.Unlock()
	m.notify()
	return s
}

func (m *podMux) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// live returns the number of live sessions.
func (m *podMux) live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// serveSession relays s's frames to the executor until s ends, then ends
// s (endSession).
func (m *podMux) serveSession(s *podSession, r *bufio.Reader) {
	defer m.endSession(s)
	for {
		f, err := execproto.ReadFrame(r)
		if err != nil {
			return
		}
		if f.Stream == 0 {
			continue // nothing for the connection after the handshake
		}
		m.mu.Lock()
		id, open := s.ids[f.Stream]
		if f.Type == execproto.TOpen {
			if open {
				m.mu.Unlock()
				return // a stream opened twice: a broken host
			}
			id = m.newID()
			s.ids[f.Stream] = id
			m.routes[id] = route{s: s, id: f.Stream}
			open = true
		}
		m.mu.Unlock()
		if !open {
			continue // a stream that ended (acks and stdin racing its result)
		}
		f.Stream = id
		if err := m.ew.Write(f); err != nil {
			return
		}
	}
}

// newID returns an executor-side stream id no stream holds.
// Preconditions: m.mu is held.
func (m *podMux) newID() uint32 {
	for {
		m.next++
		if _, used := m.routes[m.next]; m.next != 0 && !used {
			return m.next
		}
	}
}

// endSession closes s and orphans its streams: each is cancelled and its
// stdin closed, and the relay acknowledges what they still send.
func (m *podMux) endSession(s *podSession) {
	m.mu.Lock()
	if s.dead {
		m.mu.Unlock()
		return
	}
	s.dead = true
	delete(m.sessions, s)
	ids := make([]uint32, 0, len(s.ids))
	for _, id := range s.ids {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	s.c.Close()
	for _, id := range ids {
		_ = m.ew.Write(execproto.Frame{Type: execproto.TCancel, Stream: id})
		_ = m.ew.Write(execproto.CloseFrame(id, execproto.Stdin))
	}
	m.notify()
}

// readExecutor relays the executor's frames to their sessions until the
// executor's connection ends. An error on stream 0 (the executor's fatal
// one) goes to every session.
func (m *podMux) readExecutor(r *bufio.Reader) {
	for {
		f, err := execproto.ReadFrame(r)
		if err != nil {
			return
		}
		if f.Stream == 0 {
			if f.Type == execproto.TError {
				m.broadcast(f)
			}
			continue
		}
		m.mu.Lock()
		rt, ok := m.routes[f.Stream]
		dead := ok && rt.s.dead
		if ok && f.Type == execproto.TResult {
			delete(m.routes, f.Stream)
			delete(rt.s.ids, rt.id)
		}
		m.mu.Unlock()
		switch {
		case !ok:
		case dead:
			if f.Type == execproto.TData && len(f.Payload) > 1 {
				_ = m.ew.Write(execproto.AckFrame(f.Stream, f.Payload[0], uint32(len(f.Payload)-1)))
			}
		default:
			f.Stream = rt.id
			if err := m.toSession(rt.s, f); err != nil {
				m.endSession(rt.s)
			}
		}
	}
}

// toSession writes f to s, giving up after sessionWriteTimeout.
func (m *podMux) toSession(s *podSession, f execproto.Frame) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.c.SetWriteDeadline(time.Now().Add(sessionWriteTimeout))
	return execproto.WriteFrame(s.c, f)
}

// broadcast writes f to every live session.
func (m *podMux) broadcast(f execproto.Frame) {
	m.mu.Lock()
	all := make([]*podSession, 0, len(m.sessions))
	for s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		_ = m.toSession(s, f)
	}
}
