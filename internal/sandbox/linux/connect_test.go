package linux_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// peerRoleEnv makes the test binary, run inside a sandbox, one of the
// peers of the connect tests and benchmarks instead of running tests
// (peerRole): the same Go code on both ends of a comparison.
const peerRoleEnv = "AIRLOCK_TEST_PEER"

// serveEach listens on 127.0.0.1:port, prints "ready", and serves each
// connection with handle in a goroutine of its own, closing it after;
// it returns only when the listener fails.
func serveEach(port string, handle func(net.Conn)) int {
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready") //nolint:forbidigo // the peer answers its parent on stdout
	for {
		c, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// peerRole runs role and returns the exit status:
//
//   - http:PORT serves HTTP on 127.0.0.1:PORT: /hello answers "hello",
//     /bytes/N streams N bytes, /discard reads the body and answers its
//     length;
//   - hold:PORT accepts connections on 127.0.0.1:PORT and holds each open,
//     reading and dropping what comes, until its EOF;
//   - client:URL:N GETs URL N times on one kept-alive connection and prints
//     the median and mean round trip in nanoseconds.
//
// A server prints "ready" once it listens.
func peerRole(role string) int {
	kind, arg, _ := strings.Cut(role, ":")
	switch kind {
	case "http":
		ln, err := net.Listen("tcp", "127.0.0.1:"+arg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/hello", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
		mux.HandleFunc("/bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.ParseInt(r.PathValue("n"), 10, 64)
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			buf := make([]byte, 256<<10)
			for n > 0 {
				k := min(n, int64(len(buf)))
				if _, err := w.Write(buf[:k]); err != nil {
					return
				}
				n -= k
			}
		})
		mux.HandleFunc("/discard", func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.CopyBuffer(io.Discard, r.Body, make([]byte, 256<<10))
			fmt.Fprint(w, n)
		})
		fmt.Println("ready") //nolint:forbidigo // the peer answers its parent on stdout
		_ = http.Serve(ln, mux)
		return 1
	case "hold":
		return serveEach(arg, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	case "client":
		i := strings.LastIndexByte(arg, ':')
		url := arg[:i]
		n, _ := strconv.Atoi(arg[i+1:])
		c := &http.Client{}
		p50, mean, err := roundTrips(c, url, n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(p50.Nanoseconds(), mean.Nanoseconds()) //nolint:forbidigo // the peer answers its parent on stdout
		return 0
	}
	return echoRole(kind, arg)
}

// roundTrips GETs url n times with c and returns the median and mean time
// of one.
func roundTrips(c *http.Client, url string, n int) (p50, mean time.Duration, err error) {
	times := make([]time.Duration, 0, n)
	var total time.Duration
	for range n {
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			return 0, 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		d := time.Since(start)
		times = append(times, d)
		total += d
	}
	if n == 0 {
		return 0, 0, nil
	}
	slices.Sort(times)
	return times[n/2], total / time.Duration(n), nil
}

// peerSandbox makes a sandbox in which the test binary can run (mounted
// read-only at /peer), for peerRole.
func peerSandbox(tb testing.TB, b sandbox.Backend) sandbox.Sandbox {
	tb.Helper()
	bin := rootlessCopySelf(tb) // a world-readable copy
	spec := sandbox.Spec{Limits: sandbox.DefaultLimits, Mounts: []sandbox.Mount{{Source: filepath.Dir(bin), Target: "/peer", ReadOnly: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, spec)
	if err != nil {
		tb.Fatalf("Create = %v", err)
	}
	tb.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	return sb
}

// startPeer runs the test binary as role in sb until the test ends, and
// returns once it says it is ready.
func startPeer(tb testing.TB, sb sandbox.Sandbox, role string) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr sandboxtest.SyncBuffer
	p, err := sb.Start(ctx, sandbox.Command{
		Argv: []string{"/peer/linux.test"}, Env: []string{peerRoleEnv + "=" + role},
		Stdout: pw, Stderr: &stderr,
	})
	if err != nil {
		cancel()
		tb.Fatalf("start peer %s: %v", role, err)
	}
	done := make(chan struct{})
	go func() {
		_, _ = p.Wait(ctx)
		pw.Close()
		close(done)
	}()
	tb.Cleanup(func() { cancel(); <-done })
	line, err := bufio.NewReader(pr).ReadString('\n')
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if line != "ready\n" {
		tb.Fatalf("peer %s: %q, %v; stderr %q", role, line, err, stderr.String())
	}
}

// connectClient is an HTTP client whose every connection is a Connect to
// port of c.
func connectClient(c sandbox.Connector, port int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.Connect(ctx, port) },
	}}
}

// TestConnectMax: the executor relays at most execproto.MaxConnects
// connections at once; one more is refused, not ErrPortClosed, and a
// connection closed makes room again.
func TestConnectMax(t *testing.T) {
	sb := peerSandbox(t, benchBackendT(t))
	startPeer(t, sb, "hold:8000")
	c := sb.(sandbox.Connector)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conns := make([]net.Conn, 0, execproto.MaxConnects)
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	for range execproto.MaxConnects {
		cn, err := c.Connect(ctx, 8000)
		if err != nil {
			t.Fatalf("Connect #%d = %v", len(conns)+1, err)
		}
		conns = append(conns, cn)
	}
	cn, err := c.Connect(ctx, 8000)
	if err == nil || errors.Is(err, sandbox.ErrPortClosed) || !strings.Contains(err.Error(), "connections already open") {
		t.Fatalf("Connect beyond MaxConnects = %v, %v; want a refusal that says why", cn, err)
	}
	// A closed connection's stream ends once the executor has closed its
	// socket; until then it still counts.
	conns[0].Close()
	conns = conns[1:]
	deadline := time.Now().Add(30 * time.Second)
	for {
		cn, err = c.Connect(ctx, 8000)
		if err == nil {
			conns = append(conns, cn)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Connect after one of MaxConnects was closed = %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConnectDestroyLeaves: destroying a sandbox with connections open,
// some mid-transfer, leaves none of the host's relay goroutines behind.
func TestConnectDestroyLeaves(t *testing.T) {
	sb := peerSandbox(t, benchBackendT(t))
	startPeer(t, sb, "http:8000")
	c := sb.(sandbox.Connector)
	ctx := context.Background()
	var conns []net.Conn
	for range 5 {
		cn, err := c.Connect(ctx, 8000)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cn)
	}
	// Two downloads nobody reads, one upload that waits for credit.
	for _, cn := range conns[:2] {
		fmt.Fprintf(cn, "GET /bytes/%d HTTP/1.1\r\nHost: x\r\n\r\n", 64<<20)
	}
	go func() {
		fmt.Fprintf(conns[2], "POST /discard HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<40)
		_, _ = io.Copy(conns[2], zeros{})
	}()
	time.Sleep(100 * time.Millisecond) // let them fill their windows; no assertion depends on it
	if relayGoroutines() == 0 {
		t.Fatal("no goroutine of package execconn while connections are open: the probe below sees nothing")
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, cn := range conns {
		if _, err := io.Copy(io.Discard, cn); !errors.Is(err, sandbox.ErrLost) {
			t.Errorf("reading a connection of a destroyed sandbox: %v, want ErrLost", err)
		}
		cn.Close()
	}
	// The goroutines of the connections end with Destroy; the writer of
	// the upload returns once its Write fails.
	deadline := time.Now().Add(time.Minute)
	for relayGoroutines() > 0 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines of package execconn left after Destroy:\n%s", buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// relayGoroutines counts the goroutines running code of package execconn.
func relayGoroutines() int {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	n := 0
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "/sandbox/execconn.") {
			n++
		}
	}
	return n
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// benchBackendT is benchBackend for a test.
func benchBackendT(t *testing.T) *linux.Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create sandboxes")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// BenchmarkConnectHTTP is one HTTP round trip to a server in the sandbox
// through Connect, on a kept-alive connection: what a preview URL adds at
// the least. Compare with BenchmarkConnectHTTPInside.
func BenchmarkConnectHTTP(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "http:8000")
	c := connectClient(sb.(sandbox.Connector), 8000)
	defer c.CloseIdleConnections()
	if _, _, err := roundTrips(c, "http://sandbox/hello", 100); err != nil { // warm up
		b.Fatal(err)
	}
	b.ResetTimer()
	p50, _, err := roundTrips(c, "http://sandbox/hello", b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
}

// BenchmarkConnectHTTPFresh is one HTTP round trip through a connection
// of its own, as the data plane makes one a request: with Connect, which
// waits for the executor's dial before the request leaves ("connect"),
// and with ConnectEarly, whose request follows the stream's opening at
// once ("early"), alternating in blocks of 50 so that a change of the
// machine's load falls on both. An op is one request of each.
func BenchmarkConnectHTTPFresh(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "http:8000")
	ec := sb.(sandbox.EarlyConnector)
	client := func(dial func(ctx context.Context) (net.Conn, error)) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		}}
	}
	clients := []*http.Client{
		client(func(ctx context.Context) (net.Conn, error) { return ec.Connect(ctx, 8000) }),
		client(func(context.Context) (net.Conn, error) { return ec.ConnectEarly(8000) }),
	}
	times := [2][]time.Duration{}
	for _, c := range clients { // warm up
		if _, _, err := roundTrips(c, "http://sandbox/hello", 20); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(50, b.N-done)
		for i, c := range clients {
			for range k {
				start := time.Now()
				if _, _, err := roundTrips(c, "http://sandbox/hello", 1); err != nil {
					b.Fatal(err)
				}
				times[i] = append(times[i], time.Since(start))
			}
		}
		done += k
	}
	for i, name := range []string{"connect", "early"} {
		slices.Sort(times[i])
		b.ReportMetric(float64(times[i][len(times[i])/2].Microseconds()), name+"-p50-µs")
	}
}

// BenchmarkConnectHTTPInside is BenchmarkConnectHTTP's request made
// inside the sandbox, by the same Go client on the sandbox's loopback.
// ns/op includes the client's start, spread over b.N; p50-µs does not.
func BenchmarkConnectHTTPInside(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "http:8000")
	b.ResetTimer()
	var out, errb sandboxtest.SyncBuffer
	r, err := sandbox.Run(context.Background(), sb, sandbox.Command{
		Argv: []string{"/peer/linux.test"}, Env: []string{peerRoleEnv + "=client:http://127.0.0.1:8000/hello:" + strconv.Itoa(b.N+100)},
		Stdout: &out, Stderr: &errb,
	})
	if err != nil || r.ExitCode != 0 {
		b.Fatalf("client: %+v %v %s", r, err, errb.String())
	}
	var p50, mean int64
	if _, err := fmt.Sscan(out.String(), &p50, &mean); err != nil {
		b.Fatalf("client printed %q: %v", out.String(), err)
	}
	b.ReportMetric(float64(time.Duration(p50).Microseconds()), "p50-µs")
}

// BenchmarkConnectDownload is bytes/s from a server in the sandbox to the
// host through Connect (64 MiB a response).
func BenchmarkConnectDownload(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "http:8000")
	c := connectClient(sb.(sandbox.Connector), 8000)
	defer c.CloseIdleConnections()
	const size = 64 << 20
	b.SetBytes(size)
	buf := make([]byte, 256<<10)
	for b.Loop() {
		resp, err := c.Get("http://sandbox/bytes/" + strconv.Itoa(size))
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
		resp.Body.Close()
		if err != nil || n != size {
			b.Fatalf("read %d bytes, %v", n, err)
		}
	}
}

// BenchmarkConnectUpload is bytes/s from the host to a server in the
// sandbox through Connect (64 MiB a request).
func BenchmarkConnectUpload(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "http:8000")
	c := connectClient(sb.(sandbox.Connector), 8000)
	defer c.CloseIdleConnections()
	const size = 64 << 20
	b.SetBytes(size)
	for b.Loop() {
		resp, err := c.Post("http://sandbox/discard", "application/octet-stream", io.LimitReader(zeros{}, size))
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != strconv.Itoa(size) {
			b.Fatalf("server read %q, %v", body, err)
		}
	}
}
