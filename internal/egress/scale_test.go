package egress_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"

	"github.com/airlockrun/airlock/internal/egress"
)

// tlsService is a TLS server on loopback that runs fn on every connection.
func tlsService(t testing.TB, pki *testPKI, name string, fn func(net.Conn)) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", pki.serverConfig(t, name))
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				fn(c)
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

func echo(c net.Conn) { _, _ = io.Copy(c, c) }

// openTunnel CONNECTs to target through h and completes TLS with name.
func openTunnel(t testing.TB, h *harness, target, name string, pki *testPKI) *tls.Conn {
	t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: name, RootCAs: pki.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake through tunnel: %v", err)
	}
	return tc
}

// TestManyTunnels holds 1,000 CONNECT tunnels open at once, each with a
// live TLS session to the upstream, and uses every one of them.
func TestManyTunnels(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 1,000 tunnels; skipped with -short")
	}
	const n = 1000
	// Per tunnel: client, proxy side, proxy upstream and server side.
	need := uint64(4*n + 512)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if rl.Cur < need {
		rl.Cur = min(need, rl.Max)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
		if rl.Cur < need {
			t.Skipf("RLIMIT_NOFILE %d is below the %d descriptors this test needs", rl.Cur, need)
		}
	}
	pki := newPKI(t)
	addr := tlsService(t, pki, "echo.test", echo)
	h := start(t, egress.Config{
		Policy: mustPolicy(t, fmtPolicy(`
network:
  resolve: [{host: "echo.test:443", to: "%s"}]
  allow: [{host: echo.test, ports: [443]}]
`, addr)),
		Limits: egress.Limits{MaxConns: n + 10},
	})

	tunnels := make([]*tls.Conn, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				tunnels[i] = openTunnel(t, h, "echo.test:443", "echo.test", pki)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		return
	}
	if got := h.p.Stats().Conns; got != n {
		t.Fatalf("Stats.Conns = %d with %d tunnels open", got, n)
	}
	buf := make([]byte, 16)
	for i, tc := range tunnels {
		msg := fmt.Sprintf("ping %10d", i)
		if _, err := io.WriteString(tc, msg); err != nil {
			t.Fatalf("tunnel %d: write: %v", i, err)
		}
		if _, err := io.ReadFull(tc, buf[:len(msg)]); err != nil || string(buf[:len(msg)]) != msg {
			t.Fatalf("tunnel %d: echo %q, %v", i, buf[:len(msg)], err)
		}
	}
	for _, tc := range tunnels {
		tc.Close()
	}
	waitFor(t, "all tunnels to end", func() bool { return h.p.Stats().Conns == 0 })
	recs := h.audit.waitRecords(t, n)
	for _, r := range recs {
		if r.Decision != egress.DecisionAllowed || r.Method != "CONNECT" || r.BytesIn == 0 {
			t.Fatalf("record = %+v", r)
		}
	}
}

func benchWorld(b *testing.B) (*harness, *upstream) {
	pki := newPKI(b)
	up := newUpstream(b, pki)
	h := start(b, egress.Config{Policy: mustPolicy(b, fmtPolicy(`
network:
  resolve: [{host: "open.test:80", to: "%s"}]
  allow: [{host: open.test, ports: [80]}]
`, up.addr()))})
	return h, up
}

func benchGet(b *testing.B, c *http.Client, url string) {
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkProxyHTTP is one keep-alive GET through the proxy; compare with
// BenchmarkDirectHTTP to the same upstream.
func BenchmarkProxyHTTP(b *testing.B) {
	h, _ := benchWorld(b)
	benchGet(b, h.client(nil), "http://open.test/x")
}

func BenchmarkDirectHTTP(b *testing.B) {
	_, up := benchWorld(b)
	benchGet(b, &http.Client{Transport: &http.Transport{}}, "http://"+up.addr()+"/x")
}

// sink reads 1 MiB blocks and acknowledges each with one byte.
func sink(c net.Conn) {
	buf := make([]byte, 1<<20)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write([]byte{1}); err != nil {
			return
		}
	}
}

func benchBulk(b *testing.B, c net.Conn) {
	block := make([]byte, 1<<20)
	ack := make([]byte, 1)
	b.SetBytes(int64(len(block)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(block); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, ack); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConnectThroughput sends 1 MiB blocks through an untouched TLS
// tunnel; compare with BenchmarkDirectThroughput.
func BenchmarkConnectThroughput(b *testing.B) {
	pki := newPKI(b)
	addr := tlsService(b, pki, "bulk.test", sink)
	h := start(b, egress.Config{Policy: mustPolicy(b, fmtPolicy(`
network:
  resolve: [{host: "bulk.test:443", to: "%s"}]
  allow: [{host: bulk.test, ports: [443]}]
`, addr))})
	tc := openTunnel(b, h, "bulk.test:443", "bulk.test", pki)
	defer tc.Close()
	benchBulk(b, tc)
}

func BenchmarkDirectThroughput(b *testing.B) {
	pki := newPKI(b)
	addr := tlsService(b, pki, "bulk.test", sink)
	tc, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "bulk.test", RootCAs: pki.pool})
	if err != nil {
		b.Fatal(err)
	}
	defer tc.Close()
	benchBulk(b, tc)
}
