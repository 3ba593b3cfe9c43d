package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errSNIMismatch fails an inspected handshake whose SNI names another host.
var errSNIMismatch = errors.New("egress: SNI does not match the CONNECT host")

// inspect serves a CONNECT to an inspected host: the proxy answers 200 and
// becomes the server. A tunnel that starts with a TLS handshake is
// terminated with a leaf for the CONNECT host signed by the per-run CA;
// anything else is read as plain HTTP. Either way every request inside is
// decided and forwarded on its own, to the CONNECT host only. The tunnel
// itself makes a record only when it fails before carrying a request.
func (s *session) inspect(ctx context.Context, host string, port int, rec Record, m meter) {
	rec.Inspected = true
	_, _ = s.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := s.bw.Flush(); err != nil {
		return
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(s.p.lim.IdleTimeout))
	first, err := s.br.Peek(1)
	if err != nil {
		rec.Decision, rec.Reason, rec.Status = DecisionDenied, "no_client_hello", http.StatusOK
		s.finish(&rec, m)
		return
	}
	raw := &bufConn{Conn: s.conn, r: s.br}
	if first[0] != 0x16 { // not a TLS handshake record: plain HTTP inside
		newSession(s.p, s.mc, raw, &tunnelTarget{host: host, port: port}).serve(ctx)
		return
	}
	var sniBad atomic.Bool
	tc := tls.Server(raw, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			// The leaf is for the CONNECT host whatever the SNI says; a
			// different non-empty SNI is refused so the client gets a
			// clear failure instead of a certificate for another name.
			if !sniMatches(h.ServerName, host, true) {
				sniBad.Store(true)
				return nil, errSNIMismatch
			}
			return s.p.ca.leaf(host)
		},
	})
	_ = tc.SetDeadline(time.Now().Add(s.p.lim.IdleTimeout))
	if err := tc.HandshakeContext(ctx); err != nil {
		rec.Decision, rec.Reason, rec.Status = DecisionDenied, "tls_handshake", http.StatusOK
		if sniBad.Load() {
			rec.Reason = "sni_mismatch"
		}
		s.finish(&rec, m)
		return
	}
	_ = tc.SetDeadline(time.Time{})
	newSession(s.p, s.mc, tc, &tunnelTarget{host: host, port: port, tls: true}).serve(ctx)
	_ = tc.Close()
}

// relay copies bytes both ways between the sandbox (reading through s.br,
// which may hold bytes already sent) and up until both directions end, the
// tunnel idles for IdleTimeout, or ctx ends. A direction that ends cleanly
// half-closes its destination so the other can finish.
//
// Past the bytes s.br holds, each direction reads the bare connections, not
// the wrappers, with large buffers that a tunnel only holds while bytes are
// in flight (see tunnelHalf.copy); counting, budgets and idleness are kept
// by the tunnel halves, as meteredConn and activity would keep them.
func (s *session) relay(ctx context.Context, up net.Conn) {
	closeBoth := func() {
		_ = s.conn.Close()
		_ = up.Close()
	}
	idle := newIdleTimer(s.p.lim.IdleTimeout, closeBoth)
	defer idle.stop()
	defer afterFunc(ctx, closeBoth)()

	// Bytes the sandbox sent after its ClientHello were read (and
	// counted) with the request head; they go first.
	if n := s.br.Buffered(); n > 0 {
		b, _ := s.br.Peek(n)
		_ = up.SetWriteDeadline(time.Now().Add(s.p.lim.IdleTimeout))
		if _, err := up.Write(b); err != nil {
			closeBoth()
			return
		}
		_ = up.SetWriteDeadline(time.Time{})
		_, _ = s.br.Discard(n)
	}
	sandbox := s.mc.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		copyHalf(&tunnelHalf{dst: up, src: sandbox, idle: idle, left: s.p.outLeft, countRead: s.mc.addOut}, closeBoth)
	}()
	copyHalf(&tunnelHalf{dst: sandbox, src: up, idle: idle, left: s.p.inLeft, countWrite: s.mc.addIn}, closeBoth)
	wg.Wait()
}

// tunnelHalf is one direction of a tunnel. The sandbox's side is the one
// metered: bytes count as they are read from it (countRead) or written to
// it (countWrite), where meteredConn counts them outside tunnels.
type tunnelHalf struct {
	dst, src net.Conn
	idle     *idleTimer // touched by every read that returns bytes
	// left bounds the next read by the byte budget of this direction; its
	// error ends the tunnel.
	left                  func() (int64, error)
	countRead, countWrite func(n int)
}

// tunnelBufSize is the buffer of a tunnel read. Large reads take all a
// socket holds at once (a unix socket queues about 200 KiB), so a busy
// tunnel makes few system calls and wake-ups per byte.
const tunnelBufSize = 256 << 10

// tunnelPool holds tunnel buffers. A tunnel borrows one only while bytes are
// in flight, so idle tunnels (a thousand may be open) hold none.
var tunnelPool = sync.Pool{New: func() any { b := make([]byte, tunnelBufSize); return &b }}

// copyPool holds the buffers that copy response bodies.
var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyHalf copies h.src to h.dst. On EOF it half-closes dst; on any error
// it closes both ends so the other direction stops too.
func copyHalf(h *tunnelHalf, closeBoth func()) {
	if err := h.copy(); err != nil {
		closeBoth()
		return
	}
	if cw, ok := h.dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	closeBoth()
}

// copy copies until EOF of h.src (nil) or an error.
func (h *tunnelHalf) copy() error {
	read := h.reader()
	for {
		left, err := h.left()
		if err != nil {
			return err
		}
		bp, n, rerr := read(int(min(tunnelBufSize, left)))
		if n > 0 {
			h.idle.touch()
			if h.countRead != nil {
				h.countRead(n)
			}
			w, werr := h.dst.Write((*bp)[:n])
			if h.countWrite != nil {
				h.countWrite(w)
			}
			if werr != nil {
				rerr = werr
			}
		}
		if bp != nil {
			tunnelPool.Put(bp)
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// readFunc reads at most limit bytes into a buffer from tunnelPool, which
// the caller puts back. It may return a nil buffer when it read nothing.
type readFunc func(limit int) (buf *[]byte, n int, err error)

// heldRead is the plain readFunc: it holds its buffer while it waits.
func (h *tunnelHalf) heldRead(limit int) (*[]byte, int, error) {
	bp := tunnelPool.Get().(*[]byte)
	n, err := h.src.Read((*bp)[:limit])
	return bp, n, err
}

// idleTimer calls fire once nothing has touched it for d. Touching is one
// atomic store; the timer re-arms itself for the remaining time instead of
// being reset on every read.
type idleTimer struct {
	d    time.Duration
	fire func()
	last atomic.Int64 // UnixNano of the last touch

	mu sync.Mutex
	// stopped and t are guarded by mu.
	stopped bool
	t       *time.Timer
}

func newIdleTimer(d time.Duration, fire func()) *idleTimer {
	it := &idleTimer{d: d, fire: fire}
	it.touch()
	it.mu.Lock()
	it.t = time.AfterFunc(d, it.check)
	it.mu.Unlock()
	return it
}

func (it *idleTimer) touch() { it.last.Store(time.Now().UnixNano()) }

func (it *idleTimer) check() {
	it.mu.Lock()
	if it.stopped {
		it.mu.Unlock()
		return
	}
	since := time.Since(time.Unix(0, it.last.Load()))
	if since < it.d {
		it.t.Reset(it.d - since)
		it.mu.Unlock()
		return
	}
	it.stopped = true
	it.mu.Unlock()
	it.fire()
}

func (it *idleTimer) stop() {
	it.mu.Lock()
	defer it.mu.Unlock()
	it.stopped = true
	it.t.Stop()
}
