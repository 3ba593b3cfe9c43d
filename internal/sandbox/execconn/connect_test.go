package execconn_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// frames reads the host's frames until the connection closes.
func (p *peer) frames() <-chan execproto.Frame {
	ch := make(chan execproto.Frame, 64)
	go func() {
		defer close(ch)
		for {
			f, err := execproto.ReadFrame(p.conn)
			if err != nil {
				return
			}
			ch <- f
		}
	}()
	return ch
}

// next returns the next frame that is not an ack.
func next(t *testing.T, ch <-chan execproto.Frame) execproto.Frame {
	t.Helper()
	for {
		select {
		case f, ok := <-ch:
			if !ok {
				t.Fatal("the host closed the connection")
			}
			if f.Type != execproto.TAck {
				return f
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no frame from the host")
		}
	}
}

// connectOpened answers the connect request the host sent on ch: it checks
// the request and says the connection is up (a close of stderr).
func connectOpened(t *testing.T, p *peer, ch <-chan execproto.Frame, up bool) uint32 {
	t.Helper()
	f := next(t, ch)
	var req execproto.Request
	if f.Type != execproto.TOpen || execproto.DecodeMessage(f.Payload, &req) != nil || req.Op != execproto.OpConnect || req.Port != 8080 {
		t.Fatalf("want a connect request for port 8080, got %s %s", f.Type, f.Payload)
	}
	if w, c := req.Flow(); w != execproto.BulkWindow || c != execproto.BulkChunkSize {
		t.Errorf("connect request's Flow() = %d, %d; want the bulk window", w, c)
	}
	if up {
		if err := p.w.Write(execproto.CloseFrame(f.Stream, execproto.Stderr)); err != nil {
			t.Fatal(err)
		}
	}
	return f.Stream
}

type connected struct {
	conn net.Conn
	err  error
}

// scripted is a Conn and its scripted executor (peer), with the frames the
// host sends it, and a Connect to port 8080 in flight whose request the
// executor has read (stream id), answered as up when startConnect was
// asked to. Both ends close when the test ends.
type scripted struct {
	c   *execconn.Conn
	p   *peer
	ch  <-chan execproto.Frame
	id  uint32
	res <-chan connected
}

func startConnect(t *testing.T, ctx context.Context, up bool) *scripted {
	t.Helper()
	c, p := dialPeer(t)
	t.Cleanup(func() {
		p.conn.Close()
		c.Close()
	})
	ch := p.frames()
	res := make(chan connected, 1)
	go func() {
		conn, err := c.Connect(ctx, "sb-test", 8080)
		res <- connected{conn, err}
	}()
	return &scripted{c: c, p: p, ch: ch, id: connectOpened(t, p, ch, up), res: res}
}

// conn returns the connection Connect opened (closed when the test ends).
func (s *scripted) conn(t *testing.T) net.Conn {
	t.Helper()
	r := <-s.res
	if r.err != nil {
		t.Fatalf("Connect = %v", r.err)
	}
	t.Cleanup(func() { r.conn.Close() })
	return r.conn
}

// TestConnectUnreadOutput: a connection whose output nobody reads holds up
// only itself: the executor's connection goes on serving other requests
// after the connect stream ended with its window of output unread, and the
// output is still there to read.
func TestConnectUnreadOutput(t *testing.T) {
	s := startConnect(t, context.Background(), true)
	c, p, ch, id, conn := s.c, s.p, s.ch, s.id, s.conn(t)
	window := int(execproto.BulkWindow)
	for sent := 0; sent < window; sent += execproto.BulkChunkSize {
		if err := p.w.Write(execproto.DataFrame(id, execproto.Stdout, make([]byte, execproto.BulkChunkSize))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.w.Write(execproto.CloseFrame(id, execproto.Stdout)); err != nil {
		t.Fatal(err)
	}
	p.result(id, execproto.Result{})

	du := make(chan error, 1)
	go func() {
		_, err := c.DiskUsage(context.Background())
		du <- err
	}()
	f := next(t, ch)
	if f.Type != execproto.TOpen {
		t.Fatalf("want the disk usage request, got %s", f.Type)
	}
	p.result(f.Stream, execproto.Result{Disk: &execproto.DiskUsage{Used: 1, Total: 2}})
	select {
	case err := <-du:
		if err != nil {
			t.Fatalf("DiskUsage = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DiskUsage waits: the unread connection holds up the executor's connection")
	}
	n, err := io.Copy(io.Discard, conn)
	if err != nil || n != int64(window) {
		t.Errorf("read %d bytes, %v; want %d, EOF", n, err, window)
	}
}

// TestConnectBeyondWindow: an executor that sends more than the window on a
// connect stream breaks the protocol: the connection ends, and the conn
// reports the sandbox lost.
func TestConnectBeyondWindow(t *testing.T) {
	s := startConnect(t, context.Background(), true)
	c, p, id, conn := s.c, s.p, s.id, s.conn(t)
	// The window, a chunk the conn holds for Read, and a byte more.
	for sent := 0; sent <= int(execproto.BulkWindow); sent += execproto.BulkChunkSize {
		if err := p.w.Write(execproto.DataFrame(id, execproto.Stdout, make([]byte, execproto.BulkChunkSize))); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.w.Write(execproto.DataFrame(id, execproto.Stdout, []byte{1})); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if !errors.Is(c.Err(), execproto.ErrFrame) {
		t.Errorf("connection ended with %v, want ErrFrame", c.Err())
	}
	if _, err := io.Copy(io.Discard, conn); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("reading the conn = %v, want ErrLost", err)
	}
}

// TestConnectRefused: the executor's ECONNREFUSED is sandbox.ErrPortClosed;
// another failure is not.
func TestConnectRefused(t *testing.T) {
	for _, tt := range []struct {
		errno  string
		closed bool
	}{{"ECONNREFUSED", true}, {"EMFILE", false}, {"", false}} {
		t.Run(tt.errno, func(t *testing.T) {
			s := startConnect(t, context.Background(), false)
			s.p.result(s.id, execproto.Result{ExitCode: -1, Error: "connect to port 8080: refused or not", Errno: tt.errno})
			r := <-s.res
			if r.err == nil || errors.Is(r.err, sandbox.ErrPortClosed) != tt.closed {
				t.Errorf("Connect = %v, %v; want an error, ErrPortClosed: %t", r.conn, r.err, tt.closed)
			}
		})
	}
}

// TestConnectCancelDial: a context that ends during the dial aborts it (a
// cancel with no close of stdin before it); Connect returns its error.
func TestConnectCancelDial(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := startConnect(t, ctx, false)
	cancel()
	if f := next(t, s.ch); f.Type != execproto.TCancel || f.Stream != s.id {
		t.Errorf("after the context ended, the host sent %s on stream %d, want a cancel on %d", f.Type, f.Stream, s.id)
	}
	s.p.result(s.id, execproto.Result{ExitCode: -1, Error: "cancelled"})
	if r := <-s.res; !errors.Is(r.err, context.Canceled) {
		t.Errorf("Connect = %v, %v; want context.Canceled", r.conn, r.err)
	}
}

// TestConnectWriteClose: written bytes go out as stdin data; CloseWrite is
// a close of stdin; Close after it is a cancel; Write after either fails.
func TestConnectWriteClose(t *testing.T) {
	s := startConnect(t, context.Background(), true)
	p, ch, id := s.p, s.ch, s.id
	conn := s.conn(t)
	if _, err := conn.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if f := next(t, ch); f.Type != execproto.TData || string(f.Payload) != "\x00hello" {
		t.Errorf("Write sent %s %q, want stdin data %q", f.Type, f.Payload, "hello")
	}
	if err := conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if f := next(t, ch); f.Type != execproto.TClose || f.Payload[0] != execproto.Stdin {
		t.Errorf("CloseWrite sent %s %v, want a close of stdin", f.Type, f.Payload)
	}
	if _, err := conn.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("Write after CloseWrite = %v, want EPIPE", err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if f := next(t, ch); f.Type != execproto.TCancel {
		t.Errorf("Close sent %s, want a cancel", f.Type)
	}
	if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close = %v, want net.ErrClosed", err)
	}
	if err := conn.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close = %v, want net.ErrClosed", err)
	}
	p.result(id, execproto.Result{})
}

// TestConnectEarly: ConnectEarly returns before the executor answers, and
// what is written goes out right behind the opening; how the executor
// then answers (up, a refusal, another failure, a stream that ends
// without either, the connection lost) is what the conn's Read says, a
// failed dial as a DialError.
func TestConnectEarly(t *testing.T) {
	for _, tt := range []struct {
		name string
		// answer is the executor's answer to the stream's opening.
		answer func(p *peer, id uint32)
		// want checks the error of the first Read; data is what it read.
		want func(data []byte, err error) string
	}{
		{"up", func(p *peer, id uint32) {
			_ = p.w.Write(execproto.CloseFrame(id, execproto.Stderr))
			_ = p.w.Write(execproto.DataFrame(id, execproto.Stdout, []byte("HTTP/1.1 200 OK\r\n")))
		}, func(data []byte, err error) string {
			if err != nil || string(data) != "HTTP/1.1 200 OK\r\n" {
				return "want the server's answer"
			}
			return ""
		}},
		{"refused", func(p *peer, id uint32) {
			p.result(id, execproto.Result{ExitCode: -1, Error: "connect to port 8080: connection refused", Errno: "ECONNREFUSED"})
		}, func(_ []byte, err error) string {
			if !errors.Is(sandbox.DialError(err), sandbox.ErrPortClosed) {
				return "want a DialError wrapping ErrPortClosed"
			}
			return ""
		}},
		{"other failure", func(p *peer, id uint32) {
			p.result(id, execproto.Result{ExitCode: -1, Error: "connect: 1024 connections already open", Errno: "EMFILE"})
		}, func(_ []byte, err error) string {
			if de := sandbox.DialError(err); de == nil || errors.Is(de, sandbox.ErrPortClosed) || !strings.Contains(de.Error(), "1024 connections") {
				return "want a DialError with the executor's reason, not ErrPortClosed"
			}
			return ""
		}},
		{"ended without either", func(p *peer, id uint32) {
			p.result(id, execproto.Result{})
		}, func(_ []byte, err error) string {
			if !errors.Is(sandbox.DialError(err), execproto.ErrFrame) {
				return "want a DialError wrapping ErrFrame"
			}
			return ""
		}},
		{"lost", func(p *peer, _ uint32) {
			p.conn.Close()
		}, func(_ []byte, err error) string {
			if !errors.Is(err, sandbox.ErrLost) {
				return "want ErrLost"
			}
			return ""
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, p := dialPeer(t)
			t.Cleanup(func() {
				p.conn.Close()
				c.Close()
			})
			ch := p.frames()
			conn, err := c.ConnectEarly("sb-test", 8080)
			if err != nil {
				t.Fatalf("ConnectEarly = %v", err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
				t.Fatalf("Write before the executor answered = %v", err)
			}
			id := connectOpened(t, p, ch, false)
			if f := next(t, ch); f.Type != execproto.TData || f.Stream != id || string(f.Payload) != "\x00GET / HTTP/1.1\r\n\r\n" {
				t.Fatalf("after the opening the host sent %s %q on stream %d, want the written bytes on %d", f.Type, f.Payload, f.Stream, id)
			}
			tt.answer(p, id)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 100)
			n, err := conn.Read(buf)
			if msg := tt.want(buf[:n], err); msg != "" {
				t.Errorf("Read = %q, %v: %s", buf[:n], err, msg)
			}
		})
	}
}

// TestConnectEarlyRefusedWriting: a Write waiting for credit when the
// executor refuses the dial returns the DialError, not EPIPE. The
// result closes the stream's credit before its writer ends the stream:
// a Write woken in between must wait for the end that says why (the
// closed-port 502 lost that race in CI).
func TestConnectEarlyRefusedWriting(t *testing.T) {
	for range 200 {
		c, p := dialPeer(t)
		ch := p.frames()
		conn, err := c.ConnectEarly("sb-test", 8080)
		if err != nil {
			t.Fatalf("ConnectEarly = %v", err)
		}
		werr := make(chan error, 1)
		go func() {
			// More than the window: the Write waits for credit.
			_, err := conn.Write(make([]byte, execproto.BulkWindow+1))
			werr <- err
		}()
		id := connectOpened(t, p, ch, false)
		for sent := 0; sent < execproto.BulkWindow; {
			f := next(t, ch)
			if f.Type == execproto.TData && f.Stream == id {
				sent += len(f.Payload) - 1
			}
		}
		p.result(id, execproto.Result{ExitCode: -1, Error: "connect to port 8080: connection refused", Errno: "ECONNREFUSED"})
		if err := <-werr; !errors.Is(sandbox.DialError(err), sandbox.ErrPortClosed) {
			t.Fatalf("Write waiting for credit at the refusal = %v, want a DialError wrapping ErrPortClosed", err)
		}
		conn.Close()
		p.conn.Close()
		c.Close()
	}
}

// TestConnectCredit: a connect stream gives the executor credit for what
// Read returned once that is a quarter of the window, in one frame, and
// not a frame per chunk (a request's answer costs no acknowledgement of
// its own). An ack is sent by the Read that crossed the quarter, before
// it returns, so whatever the conn writes next follows it.
func TestConnectCredit(t *testing.T) {
	s := startConnect(t, context.Background(), true)
	p, ch, id, conn := s.p, s.ch, s.id, s.conn(t)
	const chunk = 64 << 10
	quarter := int(execproto.BulkWindow) / 4
	buf := make([]byte, chunk)
	frame := func() execproto.Frame {
		t.Helper()
		select {
		case f, ok := <-ch:
			if !ok {
				t.Fatal("the host closed the connection")
			}
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no frame from the host")
		}
		return execproto.Frame{}
	}
	for _, tt := range []struct {
		name   string
		chunks int // sent and read before the conn writes a byte
		ack    int // the credit that must come before that byte, 0 for none
	}{
		{"below a quarter", quarter/chunk - 1, 0},
		{"the quarter reached", 1, quarter},
		{"a chunk more", 1, 0},
		{"the next quarter", quarter/chunk - 1, quarter},
	} {
		for range tt.chunks {
			if err := p.w.Write(execproto.DataFrame(id, execproto.Stdout, make([]byte, chunk))); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(conn, buf); err != nil {
				t.Fatalf("%s: read: %v", tt.name, err)
			}
		}
		if _, err := conn.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		f := frame()
		if tt.ack > 0 {
			c, n := execproto.AckCredit(f)
			if f.Type != execproto.TAck || f.Stream != id || c != execproto.Stdout || int(n) != tt.ack {
				t.Fatalf("%s: got %s on stream %d, want an ack of %d bytes of stdout", tt.name, f.Type, f.Stream, tt.ack)
			}
			f = frame()
		}
		if f.Type != execproto.TData || f.Stream != id || string(f.Payload) != "\x00x" {
			t.Fatalf("%s: got %s %q on stream %d, want the conn's byte (and no ack before it)", tt.name, f.Type, f.Payload, f.Stream)
		}
	}
}

// TestConnectEarlyHeldOpening: ConnectEarly's opening waits for the
// conn's first use and goes in the same write as it; whichever use comes
// first — a Write, a Read (a server that speaks first), a CloseWrite, a
// Close, or a Read and a Write at once (an HTTP transport's two loops) —
// the executor sees the opening before anything else of the stream.
func TestConnectEarlyHeldOpening(t *testing.T) {
	for _, tt := range []struct {
		name string
		use  func(conn net.Conn)
		// want are the types of the stream's first frames after the
		// opening.
		want []execproto.Type
	}{
		{"write", func(conn net.Conn) { _, _ = conn.Write([]byte("GET")) }, []execproto.Type{execproto.TData}},
		{"read", func(conn net.Conn) {
			go func() { _, _ = conn.Read(make([]byte, 1)) }()
		}, nil},
		{"read and write at once", func(conn net.Conn) {
			go func() { _, _ = conn.Read(make([]byte, 1)) }()
			_, _ = conn.Write([]byte("GET"))
		}, []execproto.Type{execproto.TData}},
		{"close write", func(conn net.Conn) { _ = conn.(interface{ CloseWrite() error }).CloseWrite() }, []execproto.Type{execproto.TClose}},
		{"close", func(conn net.Conn) { _ = conn.Close() }, []execproto.Type{execproto.TClose, execproto.TCancel}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, p := dialPeer(t)
			t.Cleanup(func() {
				p.conn.Close()
				c.Close()
			})
			ch := p.frames()
			for range 50 {
				conn, err := c.ConnectEarly("sb-test", 8080)
				if err != nil {
					t.Fatal(err)
				}
				tt.use(conn)
				f := next(t, ch)
				if f.Type != execproto.TOpen {
					t.Fatalf("the stream's first frame is %s, want its opening", f.Type)
				}
				for _, want := range tt.want {
					if g := next(t, ch); g.Type != want || g.Stream != f.Stream {
						t.Fatalf("after the opening: %s on stream %d, want %s on %d", g.Type, g.Stream, want, f.Stream)
					}
				}
				conn.Close()
				// What the close sends, when the use did not: drained
				// before the next round's opening.
				if tt.name != "close" {
					for g := next(t, ch); g.Type != execproto.TCancel; g = next(t, ch) {
					}
				}
				p.result(f.Stream, execproto.Result{})
			}
		})
	}
}
