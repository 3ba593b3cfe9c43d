package sandboxtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// connectServer is a TCP server run with python3 inside a sandbox: python3
// connectServer MODE PORT ADDR listens on ADDR:PORT, prints "ready", and
// serves each connection on a thread:
//
//   - echo sends back what it reads, and shuts its write side at EOF;
//   - count reads to EOF, then answers "BYTES SHA256\n" (an answer after the
//     client's half-close);
//   - hold reads and discards until EOF;
//   - record reads to EOF, then appends "BYTES SHA256\n" to /tmp/record
//     (what the server got, seen after the client is gone);
//   - http is an HTTP/1.1 server answering "hello from PATH".
const connectServer = `
import hashlib, socket, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode, port, addr = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET

if mode == "http":
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            body = ("hello from " + self.path).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    class S(ThreadingHTTPServer):
        address_family = fam
    srv = S((addr, port), H)
    print("ready", flush=True)
    srv.serve_forever()

def echo(c):
    while True:
        b = c.recv(262144)
        if not b:
            break
        c.sendall(b)
    c.shutdown(socket.SHUT_WR)

def count(c):
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(262144)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.sendall(("%d %s\n" % (n, h.hexdigest())).encode())

def hold(c):
    while c.recv(262144):
        pass

def record(c):
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(262144)
        if not b:
            break
        h.update(b)
        n += len(b)
    with open("/tmp/record", "a") as f:
        f.write("%d %s\n" % (n, h.hexdigest()))

def serve(c):
    try:
        globals()[mode](c)
    except OSError:
        pass
    finally:
        c.close()

s = socket.socket(fam, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if fam == socket.AF_INET6:
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
s.bind((addr, port))
s.listen(1024)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// readyWriter closes ready at the first "ready" line written to it.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer // guarded by mu
	ready chan struct{}
	once  sync.Once
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), "ready\n") {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

// startServer runs connectServer in sb (mode, port, addr) until the test
// ends, and returns once it listens.
func startServer(t *testing.T, sb sandbox.Sandbox, mode string, port int, addr string) {
	t.Helper()
	if _, _, r := sh(t, sb, "command -v python3"); r.ExitCode != 0 {
		t.Skip("python3 is not in the sandbox")
	}
	ctx, cancel := context.WithCancel(context.Background())
	path := "/tmp/connect-server.py"
	if err := sb.WriteFile(opCtx(t), path, strings.NewReader(connectServer), 0o644); err != nil {
		t.Fatalf("WriteFile(%s) = %v", path, err)
	}
	out := &readyWriter{ready: make(chan struct{})}
	var errb SyncBuffer
	p, err := sb.Start(ctx, sandbox.Command{Argv: []string{"python3", path, mode, strconv.Itoa(port), addr}, Stdout: out, Stderr: &errb})
	if err != nil {
		cancel()
		t.Fatalf("start the server: %v", err)
	}
	exited := make(chan sandbox.Result, 1)
	go func() {
		r, _ := p.Wait(ctx)
		exited <- r
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	select {
	case <-out.ready:
	case r := <-exited:
		t.Fatalf("server %s on %s:%d exited before it listened: %+v, stderr %q", mode, addr, port, r, errb.String())
	case <-time.After(opTimeout):
		t.Fatalf("server %s on %s:%d not ready within %v", mode, addr, port, opTimeout)
	}
}

// getPaths GETs each path from connectServer's http mode through tr,
// whose DialContext reaches it (by way, for messages), checks each
// answer ("hello from PATH"), and returns how many connections tr dialed.
func getPaths(t *testing.T, way string, tr *http.Transport, paths ...string) int32 {
	t.Helper()
	var dials atomic.Int32
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	client := &http.Client{Timeout: opTimeout, Transport: tr}
	defer client.CloseIdleConnections()
	for _, p := range paths {
		resp, err := client.Get("http://sandbox" + p)
		if err != nil {
			t.Fatalf("GET %s through %s: %v", p, way, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "hello from "+p {
			t.Errorf("GET %s = %d %q, %v; want 200 %q", p, resp.StatusCode, body, err, "hello from "+p)
		}
	}
	return dials.Load()
}

// connector returns sb as a sandbox.Connector, or fails the test.
func connector(t *testing.T, sb sandbox.Sandbox) sandbox.Connector {
	t.Helper()
	c, ok := sb.(sandbox.Connector)
	if !ok {
		t.Fatalf("%T does not implement sandbox.Connector", sb)
	}
	return c
}

// dial connects to port of sb and closes the conn when the test ends.
func dial(t testing.TB, c sandbox.Connector, port int) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := c.Connect(ctx, port)
	if err != nil {
		t.Fatalf("Connect(%d) = %v", port, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// closeWrite half-closes conn, which every Connector's conn supports.
func closeWrite(t testing.TB, conn net.Conn) {
	t.Helper()
	hc, ok := conn.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite", conn)
	}
	if err := hc.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite = %v", err)
	}
}

// echoRoundTrip sends msg on a new connection to an echo server at port,
// half-closes, and checks that exactly msg comes back before EOF.
func echoRoundTrip(t testing.TB, c sandbox.Connector, port int, msg []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	conn, err := c.Connect(ctx, port)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(opTimeout))
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Write(msg)
		if err == nil {
			err = conn.(interface{ CloseWrite() error }).CloseWrite()
		}
		errc <- err
	}()
	got, rerr := io.ReadAll(conn)
	if err := <-errc; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if rerr != nil {
		return fmt.Errorf("read: %w", rerr)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo of %d bytes came back as %d bytes that differ", len(msg), len(got))
	}
	return nil
}

// testConnect checks sandbox.Connector: connections from the host to TCP
// ports inside the sandbox, relayed by the backend; every backend's
// sandboxes implement it.
func (s *suite) testConnect(t *testing.T) {
	t.Run("HTTP", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		startServer(t, sb, "http", 8080, "127.0.0.1")
		c := connector(t, sb)
		n := getPaths(t, "Connect", &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.Connect(ctx, 8080) },
		}, "/one", "/two")
		if n != 1 {
			t.Errorf("two requests took %d connections, want 1 (kept alive)", n)
		}
	})

	t.Run("BindAddresses", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		c := connector(t, sb)
		for i, addr := range []string{"0.0.0.0", "127.0.0.1", "::1"} {
			port := 9001 + i
			if addr == "::1" {
				if _, _, r := sh(t, sb, `python3 -c 'import socket; s = socket.socket(socket.AF_INET6); s.bind(("::1", 0))'`); r.ExitCode != 0 {
					t.Log("no IPv6 loopback in the sandbox: ::1 not checked")
					continue
				}
			}
			startServer(t, sb, "echo", port, addr)
			if err := echoRoundTrip(t, c, port, []byte("to "+addr)); err != nil {
				t.Errorf("server bound to %s: %v", addr, err)
			}
		}
	})

	t.Run("LargeBothWays", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		startServer(t, sb, "echo", 8000, "127.0.0.1")
		conn := dial(t, connector(t, sb), 8000)
		size := int64(50 << 20)
		if testing.Short() {
			size = 8 << 20
		}
		sent := sha256.New()
		src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1}), size), sent)
		errc := make(chan error, 1)
		go func() {
			_, err := io.Copy(conn, src)
			if err == nil {
				err = conn.(interface{ CloseWrite() error }).CloseWrite()
			}
			errc <- err
		}()
		got := sha256.New()
		n, err := io.Copy(got, conn)
		if werr := <-errc; werr != nil {
			t.Fatalf("writing %d bytes: %v", size, werr)
		}
		if err != nil || n != size {
			t.Fatalf("read back %d bytes, %v; want %d, EOF", n, err, size)
		}
		if !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
			t.Errorf("the %d bytes read back differ from those sent", size)
		}
	})

	t.Run("HalfClose", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		startServer(t, sb, "count", 8000, "127.0.0.1")
		conn := dial(t, connector(t, sb), 8000)
		msg := bytes.Repeat([]byte("half-close "), 100_000)
		if _, err := conn.Write(msg); err != nil {
			t.Fatalf("Write = %v", err)
		}
		closeWrite(t, conn)
		if _, err := conn.Write([]byte("late")); err == nil {
			t.Error("Write after CloseWrite = nil, want an error")
		}
		// The server answers only after it read EOF: the answer proves
		// the half-close reached it while its own side stayed open.
		got, err := io.ReadAll(conn)
		sum := sha256.Sum256(msg)
		want := fmt.Sprintf("%d %s\n", len(msg), hex.EncodeToString(sum[:]))
		if err != nil || string(got) != want {
			t.Errorf("answer after the half-close = %q, %v; want %q", got, err, want)
		}
	})

	t.Run("Early", s.testConnectEarly)

	t.Run("PortClosed", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		c := connector(t, sb)
		for _, port := range []int{1, 8000, 65535} {
			conn, err := c.Connect(opCtx(t), port)
			if !errors.Is(err, sandbox.ErrPortClosed) {
				t.Errorf("Connect(%d) with nothing listening = %v, %v; want ErrPortClosed", port, conn, err)
			}
		}
		for _, port := range []int{0, -1, 65536} {
			if conn, err := c.Connect(opCtx(t), port); err == nil || errors.Is(err, sandbox.ErrPortClosed) {
				t.Errorf("Connect(%d) = %v, %v; want an error other than ErrPortClosed", port, conn, err)
			}
		}
	})

	t.Run("NotTheHost", func(t *testing.T) {
		t.Parallel()
		// A server on the host's loopback: a Connect to its port must
		// reach the sandbox's loopback, where nothing listens, never it.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				accepted <- struct{}{}
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		sb := s.create(t, sandbox.Spec{})
		if conn, err := connector(t, sb).Connect(opCtx(t), port); !errors.Is(err, sandbox.ErrPortClosed) {
			t.Errorf("Connect(%d), a port only the host listens on = %v, %v; want ErrPortClosed", port, conn, err)
		}
		// The host's server is reachable (the check above is not vacuous)
		// and was not reached before.
		select {
		case <-accepted:
			t.Fatalf("the host's server on port %d was reached through the sandbox", port)
		default:
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("the host's own server is not reachable: %v", err)
		}
		c.Close()
		<-accepted
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		startServer(t, sb, "echo", 8000, "127.0.0.1")
		c := connector(t, sb)
		const n = 200
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				msg := bytes.Repeat([]byte{byte(i)}, 1000+i*100)
				if err := echoRoundTrip(t, c, 8000, msg); err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("Deadlines", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		startServer(t, sb, "echo", 8000, "127.0.0.1")
		conn := dial(t, connector(t, sb), 8000)
		if err := conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		var ne net.Error
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Read past its deadline = %v, want os.ErrDeadlineExceeded, a timeout", err)
		}
		// Cleared, the conn works on.
		if err := conn.SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte("still here")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "still here" {
			t.Errorf("echo after a timeout = %q, %v", buf, err)
		}
		if got := conn.RemoteAddr().String(); got != sb.ID()+":8000" {
			t.Errorf("RemoteAddr() = %q, want %q", got, sb.ID()+":8000")
		}
	})

	t.Run("NetConn", func(t *testing.T) {
		t.Parallel()
		// nettest's conformance of net.Conn, on a pipe whose far end is in
		// this process: the sandbox's egress forwarder (127.0.0.1:3128
		// inside) reaches a unix socket here.
		sockPath := filepath.Join(shortTempDir(t), "far.sock")
		ln, err := net.Listen("unix", sockPath)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		sb := s.create(t, sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: sockPath})
		c := connector(t, sb)
		nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
			c1, err = c.Connect(opCtx(t), 3128)
			if err != nil {
				return nil, nil, nil, err
			}
			c2, err = ln.Accept()
			if err != nil {
				c1.Close()
				return nil, nil, nil, err
			}
			return c1, c2, func() { c1.Close(); c2.Close() }, nil
		})
	})

	t.Run("Destroyed", func(t *testing.T) {
		t.Parallel()
		sb := Create(t, s.newBackend(t), sandbox.Spec{})
		startServer(t, sb, "hold", 8000, "127.0.0.1")
		c := connector(t, sb)
		conns := []net.Conn{dial(t, c, 8000), dial(t, c, 8000), dial(t, c, 8000)}
		read := make(chan error, 1)
		go func() {
			_, err := conns[0].Read(make([]byte, 1))
			read <- err
		}()
		if _, err := conns[1].Write(make([]byte, 1<<20)); err != nil {
			t.Fatalf("Write = %v", err)
		}
		if err := sb.Destroy(opCtx(t)); err != nil {
			t.Fatalf("Destroy = %v", err)
		}
		select {
		case err := <-read:
			if !errors.Is(err, sandbox.ErrLost) {
				t.Errorf("a Read waiting when the sandbox was destroyed = %v, want ErrLost", err)
			}
		case <-time.After(hangBound):
			t.Fatalf("a Read waiting when the sandbox was destroyed still waits after %v", hangBound)
		}
		if _, err := conns[2].Read(make([]byte, 1)); !errors.Is(err, sandbox.ErrLost) {
			t.Errorf("Read after Destroy = %v, want ErrLost", err)
		}
		if _, err := conns[2].Write([]byte("x")); !errors.Is(err, sandbox.ErrLost) {
			t.Errorf("Write after Destroy = %v, want ErrLost", err)
		}
		if _, err := c.Connect(opCtx(t), 8000); !errors.Is(err, sandbox.ErrLost) {
			t.Errorf("Connect after Destroy = %v, want ErrLost", err)
		}
	})
}

// StartEchoServer runs an echo server (connectServer's echo mode) on
// 127.0.0.1:port in sb until the test ends.
func StartEchoServer(t *testing.T, sb sandbox.Sandbox, port int) {
	t.Helper()
	startServer(t, sb, "echo", port, "127.0.0.1")
}

// StartHTTPServer runs an HTTP/1.1 server (connectServer's http mode,
// which answers GET PATH with "hello from PATH") on 127.0.0.1:port in sb
// until the test ends: for tests of what reaches a sandbox's ports.
func StartHTTPServer(t *testing.T, sb sandbox.Sandbox, port int) {
	t.Helper()
	startServer(t, sb, "http", port, "127.0.0.1")
}

// testConnectEarly checks sandbox.EarlyConnector, where a backend has it:
// what is written before the executor's dial reaches the server, a
// failed dial is the first Read's or Write's error (DialError), and a
// Close right after the writes still delivers them.
func (s *suite) testConnectEarly(t *testing.T) {
	t.Parallel()
	sb := s.create(t, sandbox.Spec{})
	ec, ok := sb.(sandbox.EarlyConnector)
	if !ok {
		t.Skipf("%T has no ConnectEarly", sb)
	}
	startServer(t, sb, "http", 8080, "127.0.0.1")
	startServer(t, sb, "echo", 8000, "127.0.0.1")
	startServer(t, sb, "record", 8001, "127.0.0.1")
	early := func(t *testing.T, port int) net.Conn {
		t.Helper()
		conn, err := ec.ConnectEarly(port)
		if err != nil {
			t.Fatalf("ConnectEarly(%d) = %v", port, err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(opTimeout))
		return conn
	}
	sum := func(b []byte) string {
		h := sha256.Sum256(b)
		return fmt.Sprintf("%d %s", len(b), hex.EncodeToString(h[:]))
	}
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"HTTP", func(t *testing.T) {
			// As the data plane uses it: a connection a request, the
			// request written before the dial is known to be done.
			n := getPaths(t, "ConnectEarly", &http.Transport{
				DisableKeepAlives: true,
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return sandbox.ConnectEarly(ctx, ec, 8080)
				},
			}, "/one", "/two", "/three")
			if n != 3 {
				t.Errorf("three requests took %d connections, want 3", n)
			}
		}},
		{"MoreThanTheWindow", func(t *testing.T) {
			// Twice the stream's window written at once: the first
			// window waits in the executor for its dial, the rest for
			// its credit, and all of it comes back in order.
			msg := make([]byte, 2*(2<<20)+12345) // execproto.BulkWindow is 2 MiB
			_, _ = rand.NewChaCha8([32]byte{7}).Read(msg)
			conn := early(t, 8000)
			errc := make(chan error, 1)
			go func() {
				_, err := conn.Write(msg)
				if err == nil {
					err = conn.(interface{ CloseWrite() error }).CloseWrite()
				}
				errc <- err
			}()
			got, err := io.ReadAll(conn)
			if werr := <-errc; werr != nil {
				t.Fatalf("Write = %v", werr)
			}
			if err != nil || sum(got) != sum(msg) {
				t.Errorf("echo = %s, %v; want %s", sum(got), err, sum(msg))
			}
		}},
		{"CloseRightAfter", func(t *testing.T) {
			// Write, then Close at once, likely before the dial is
			// done: a close, not an abort, so the server still gets
			// every byte and EOF (it records what it got).
			var want []string
			for i := range 5 {
				msg := bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1))
				conn, err := ec.ConnectEarly(8001)
				if err != nil {
					t.Fatalf("ConnectEarly = %v", err)
				}
				if _, err := conn.Write(msg); err != nil {
					t.Fatalf("Write = %v", err)
				}
				if err := conn.Close(); err != nil {
					t.Fatalf("Close = %v", err)
				}
				want = append(want, sum(msg))
			}
			slices.Sort(want)
			var got []string
			for deadline := time.Now().Add(opTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				out, _, _ := sh(t, sb, "cat /tmp/record 2>/dev/null")
				got = strings.FieldsFunc(out, func(r rune) bool { return r == '\n' })
				if len(got) >= len(want) {
					break
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("the server recorded %q, want %q", got, want)
			}
		}},
		{"PortClosed", func(t *testing.T) {
			conn := early(t, 8002)
			// The write may be taken before the refusal is known.
			_, werr := conn.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
			n, rerr := conn.Read(make([]byte, 10))
			for _, err := range []error{werr, rerr} {
				if err != nil && !errors.Is(sandbox.DialError(err), sandbox.ErrPortClosed) {
					t.Errorf("an error of a conn whose dial was refused = %v; want a DialError wrapping ErrPortClosed", err)
				}
			}
			if rerr == nil {
				t.Errorf("Read with nothing listening = %d bytes, nil; want an error", n)
			}
		}},
		{"PortClosedHTTP", func(t *testing.T) {
			// What the data plane sees: the transport's error still
			// says the dial was refused.
			tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return sandbox.ConnectEarly(ctx, ec, 8002)
			}}
			req, _ := http.NewRequestWithContext(opCtx(t), "GET", "http://sandbox/", nil)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("RoundTrip with nothing listening = %d, nil; want an error", resp.StatusCode)
			}
			if de := sandbox.DialError(err); !errors.Is(de, sandbox.ErrPortClosed) {
				t.Errorf("RoundTrip = %v, DialError %v; want one wrapping ErrPortClosed", err, de)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}
