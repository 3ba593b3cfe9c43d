package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/policy"
)

// waitFor polls cond; tests that need the proxy to reach a state (a
// connection accepted) wait for it instead of sleeping a fixed time.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestHeaderLimit(t *testing.T) {
	w := newWorld(t, func(c *egress.Config) { c.Limits.MaxHeaderBytes = 1024 })
	small := "GET http://open.test/ HTTP/1.1\r\nHost: open.test\r\nX-Pad: " + strings.Repeat("a", 500) + "\r\n\r\n"
	big := "GET http://open.test/ HTTP/1.1\r\nHost: open.test\r\nX-Pad: " + strings.Repeat("a", 2000) + "\r\n\r\n"
	c := w.h.dial(t)
	if resp := rawRequest(t, c, bufio.NewReader(c), small); resp.StatusCode != 200 {
		t.Fatalf("request under the limit = %d %q", resp.StatusCode, reasonOf(resp))
	}
	c = w.h.dial(t)
	resp := rawRequest(t, c, bufio.NewReader(c), big)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || reasonOf(resp) != "limit:request_header" {
		t.Fatalf("request over the limit = %d %q", resp.StatusCode, reasonOf(resp))
	}
	if n := len(w.plain.requests()); n != 1 {
		t.Errorf("upstream got %d requests, want 1", n)
	}
}

func TestMaxConns(t *testing.T) {
	w := newWorld(t, func(c *egress.Config) { c.Limits.MaxConns = 2 })
	a, b := w.h.dial(t), w.h.dial(t)
	waitFor(t, "two open connections", func() bool { return w.h.p.Stats().Conns == 2 })
	c := w.h.dial(t)
	resp := rawRequest(t, c, bufio.NewReader(c), "GET http://open.test/ HTTP/1.1\r\nHost: open.test\r\n\r\n")
	if resp.StatusCode != 403 || reasonOf(resp) != "limit:conns" {
		t.Fatalf("third connection = %d %q, want 403 limit:conns", resp.StatusCode, reasonOf(resp))
	}
	a.Close()
	waitFor(t, "a free slot", func() bool { return w.h.p.Stats().Conns < 2 })
	d := w.h.dial(t)
	if resp := rawRequest(t, d, bufio.NewReader(d), "GET http://open.test/ HTTP/1.1\r\nHost: open.test\r\n\r\n"); resp.StatusCode != 200 {
		t.Fatalf("connection after one closed = %d %q", resp.StatusCode, reasonOf(resp))
	}
	_ = b // held open: it occupies the second slot
	r := w.h.audit.waitRecords(t, 1)[0]
	if r.Reason != "limit:conns" || r.Decision != egress.DecisionDenied || r.Host != "open.test" {
		t.Errorf("record = %+v", r)
	}
	if len(w.plain.requests()) != 1 {
		t.Errorf("upstream got %d requests, want 1", len(w.plain.requests()))
	}
}

func TestTimeouts(t *testing.T) {
	t.Run("idle connection", func(t *testing.T) {
		w := newWorld(t, func(c *egress.Config) { c.Limits.IdleTimeout = 50 * time.Millisecond })
		c := w.h.dial(t)
		if !isClosed(c, 10*time.Second) {
			t.Fatal("an idle connection was not closed")
		}
	})
	t.Run("idle tunnel", func(t *testing.T) {
		w := newWorld(t, func(c *egress.Config) { c.Limits.IdleTimeout = 50 * time.Millisecond })
		resp, c, br := w.h.connect(t, "tunnel.test:443")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: "tunnel.test", RootCAs: w.pki.pool})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("handshake through the tunnel: %v", err)
		}
		if !isClosed(tc, 10*time.Second) {
			t.Fatal("an idle tunnel was not closed")
		}
	})
	t.Run("total", func(t *testing.T) {
		w := newWorld(t, func(c *egress.Config) { c.Limits.TotalTimeout = 50 * time.Millisecond })
		resp, c, br := w.h.connect(t, "tunnel.test:443")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: "tunnel.test", RootCAs: w.pki.pool})
		_ = tc.Handshake() // may already race the total timeout
		if !isClosed(tc, 10*time.Second) {
			t.Fatal("a tunnel outlived TotalTimeout")
		}
	})
}

func TestBytes(t *testing.T) {
	const n = 100_000
	w := newWorld(t, nil)
	c := w.h.client(w.pki.pool)
	_, body := get(t, c, "http://open.test/big?n=100000")
	_, body2 := get(t, c, "https://tunnel.test/big?n=100000")
	if len(body) != n || len(body2) != n {
		t.Fatalf("bodies of %d and %d bytes, want %d", len(body), len(body2), n)
	}
	c.CloseIdleConnections()
	recs := w.h.audit.waitRecords(t, 2)
	var sum int64
	for _, r := range recs {
		if r.BytesIn < n || r.BytesOut == 0 {
			t.Errorf("record %s %s counts %d in, %d out; want at least %d in", r.Method, r.Host, r.BytesIn, r.BytesOut, n)
		}
		sum += r.BytesIn
	}
	if st := w.h.p.Stats(); st.BytesIn != sum {
		t.Errorf("Stats.BytesIn = %d, records sum to %d", st.BytesIn, sum)
	}

	t.Run("budget", func(t *testing.T) {
		w := newWorld(t, func(c *egress.Config) { c.Limits.MaxBytesIn = 10_000 })
		c := w.h.client(nil)
		resp, err := c.Get("http://open.test/big?n=100000")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Fatal("a response beyond MaxBytesIn arrived whole")
		}
		resp, _ = get(t, w.h.client(nil), "http://open.test/")
		if resp.StatusCode != 403 || reasonOf(resp) != "limit:bytes_in" {
			t.Errorf("request after the budget = %d %q", resp.StatusCode, reasonOf(resp))
		}
	})
}

// approver is a test Approver: it answers from a table, or holds the
// request until ctx ends when the host is "hold.test".
type approver struct {
	answers  map[string]bool
	mu       sync.Mutex
	asked    []policy.Request
	canceled chan struct{}
}

func (a *approver) Ask(ctx context.Context, id bridge.Identity, r policy.Request) (bool, error) {
	a.mu.Lock()
	a.asked = append(a.asked, r)
	a.mu.Unlock()
	if id.Sandbox != "sb-1" {
		return false, errors.New("wrong identity")
	}
	if r.Host == "hold.test" {
		<-ctx.Done()
		close(a.canceled)
		return false, ctx.Err()
	}
	return a.answers[r.Host], nil
}

func TestAsk(t *testing.T) {
	pki := newPKI(t)
	up := newUpstream(t, pki)
	doc := fmtPolicy(`
network:
  default: ask
  resolve:
    - {host: "yes.test:80", to: "%[1]s"}
    - {host: "no.test:80", to: "%[1]s"}
  allow:
    - {host: listed.test, ports: [80]}
`, up.addr())
	t.Run("approver", func(t *testing.T) {
		ap := &approver{answers: map[string]bool{"yes.test": true}, canceled: make(chan struct{})}
		h := start(t, egress.Config{Policy: mustPolicy(t, doc), Approver: ap})
		c := h.client(nil)
		if resp, _ := get(t, c, "http://yes.test/x"); resp.StatusCode != 200 {
			t.Errorf("approved request = %d %q", resp.StatusCode, reasonOf(resp))
		}
		if resp, _ := get(t, c, "http://no.test/x"); resp.StatusCode != 403 || reasonOf(resp) != "policy:ask_rejected" {
			t.Errorf("rejected request = %d %q", resp.StatusCode, reasonOf(resp))
		}
		// A listed host with a wrong port is denied outright, not asked.
		if resp, _ := get(t, c, "http://listed.test:81/"); resp.StatusCode != 403 || reasonOf(resp) != "policy:port" {
			t.Errorf("listed host, wrong port = %d %q", resp.StatusCode, reasonOf(resp))
		}
		// The sandbox gives up while the request is held: the approver's
		// context ends.
		raw := h.dial(t)
		if _, err := io.WriteString(raw, "CONNECT hold.test:443 HTTP/1.1\r\nHost: hold.test:443\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the request to be asked", func() bool {
			ap.mu.Lock()
			defer ap.mu.Unlock()
			return len(ap.asked) == 3
		})
		raw.Close()
		select {
		case <-ap.canceled:
		case <-time.After(10 * time.Second):
			t.Fatal("the approver's context was not canceled when the sandbox went away")
		}
		c.CloseIdleConnections()
		recs := h.audit.waitRecords(t, 4)
		decisions := map[string]string{}
		for _, r := range recs {
			decisions[r.Host] = r.Decision + " " + r.Reason
		}
		if decisions["yes.test"] != "asked approved" || decisions["no.test"] != "denied policy:ask_rejected" || decisions["hold.test"] != "denied policy:ask_failed" {
			t.Errorf("decisions = %v", decisions)
		}
	})
	t.Run("no approver", func(t *testing.T) {
		h := start(t, egress.Config{Policy: mustPolicy(t, doc)})
		resp, _ := get(t, h.client(nil), "http://yes.test/x")
		if resp.StatusCode != 403 || reasonOf(resp) != "policy:ask_unavailable" {
			t.Errorf("ask without approver = %d %q", resp.StatusCode, reasonOf(resp))
		}
	})
	if n := len(up.requests()); n != 1 {
		t.Errorf("upstream got %d requests, want the 1 approved", n)
	}
}

func TestClose(t *testing.T) {
	w := newWorld(t, nil)
	resp, c, br := w.h.connect(t, "tunnel.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d", resp.StatusCode)
	}
	tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: "tunnel.test", RootCAs: w.pki.pool})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := w.h.p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-w.h.done
	if w.h.serveErr != nil {
		t.Errorf("Serve after Close = %v, want nil", w.h.serveErr)
	}
	if !isClosed(tc, 10*time.Second) {
		t.Error("a tunnel survived Close")
	}
	if st := w.h.p.Stats(); st.Conns != 0 {
		t.Errorf("Stats.Conns = %d after Close", st.Conns)
	}
	// Close waits for everything the proxy started. A connection's
	// goroutine may still be returning from the wg.Done that released
	// Close: give such a one a moment to be gone.
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		left = proxyGoroutines()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, g := range left {
		t.Errorf("goroutine still in the proxy after Close:\n%s", g)
	}
}

// proxyGoroutines returns the stacks of goroutines running the proxy's code.
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	var in []string
	for g := range strings.SplitSeq(stacks, "\n\n") {
		if strings.Contains(g, "internal/egress.(*") || strings.Contains(g, "internal/egress.copyHalf") {
			in = append(in, g)
		}
	}
	return in
}

func TestBytesOutBudget(t *testing.T) {
	w := newWorld(t, func(c *egress.Config) { c.Limits.MaxBytesOut = 10_000 })
	c := w.h.dial(t)
	br := bufio.NewReader(c)
	body := strings.Repeat("u", 50_000)
	_, _ = io.WriteString(c, "POST http://open.test/up HTTP/1.1\r\nHost: open.test\r\nContent-Length: 50000\r\n\r\n"+body)
	if resp, err := http.ReadResponse(br, nil); err == nil && (resp.StatusCode != 403 || reasonOf(resp) != "limit:bytes_out") {
		t.Fatalf("upload beyond MaxBytesOut = %d %q, want 403 limit:bytes_out", resp.StatusCode, reasonOf(resp))
	}
	resp, _ := get(t, w.h.client(nil), "http://open.test/")
	if resp.StatusCode != 403 || reasonOf(resp) != "limit:bytes_out" {
		t.Errorf("request after the budget = %d %q", resp.StatusCode, reasonOf(resp))
	}
}

// TestTunnelBudgets cuts untouched tunnels once a byte budget is spent, in
// either direction, and keeps the counts within one copy buffer of it.
func TestTunnelBudgets(t *testing.T) {
	const limit = 100_000
	t.Run("in", func(t *testing.T) {
		w := newWorld(t, func(c *egress.Config) { c.Limits.MaxBytesIn = limit })
		resp, err := w.h.client(w.pki.pool).Get("https://tunnel.test/big?n=1000000")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Fatal("a download beyond MaxBytesIn arrived whole through a tunnel")
		}
		waitFor(t, "the tunnel to end", func() bool { return w.h.p.Stats().Conns == 0 })
		if got := w.h.p.Stats().BytesIn; got < limit || got > limit+32<<10 {
			t.Errorf("Stats.BytesIn = %d, want within a buffer of %d", got, limit)
		}
	})
	t.Run("out", func(t *testing.T) {
		pki := newPKI(t)
		addr := tlsService(t, pki, "bulk.test", sink)
		h := start(t, egress.Config{
			Policy: mustPolicy(t, fmtPolicy(`
network:
  resolve: [{host: "bulk.test:443", to: "%s"}]
  allow: [{host: bulk.test, ports: [443]}]
`, addr)),
			Limits: egress.Limits{MaxBytesOut: limit},
		})
		tc := openTunnel(t, h, "bulk.test:443", "bulk.test", pki)
		defer tc.Close()
		_ = tc.SetDeadline(time.Now().Add(30 * time.Second))
		_, err := tc.Write(make([]byte, 1<<20))
		if err == nil {
			_, err = io.ReadFull(tc, make([]byte, 1))
		}
		if err == nil {
			t.Fatal("an upload beyond MaxBytesOut went through a tunnel")
		}
		waitFor(t, "the tunnel to end", func() bool { return h.p.Stats().Conns == 0 })
		if got := h.p.Stats().BytesOut; got < limit || got > limit+32<<10 {
			t.Errorf("Stats.BytesOut = %d, want within a buffer of %d", got, limit)
		}
	})
}
