package egress_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
)

// localSeen is what the Local handler of a test saw.
type localSeen struct {
	id       bridge.Identity
	idOK     bool
	method   string
	path     string
	body     string
	bodyErr  error
	header   http.Header
	ctxEnded bool
}

// localHandler is a Local handler for tests. Paths:
//
//	/stream     writes "one\n", flushes, waits for release, writes "two\n"
//	/length     answers "sized" with a Content-Length
//	/empty      writes nothing
//	/wait       blocks until the request's context ends
//	/panic      panics
//	/noread     answers without reading the body
//	anything else: "local <method> <path> <body>"
type localHandler struct {
	calls   atomic.Int64
	release chan struct{}

	mu sync.Mutex
	// seen is guarded by mu.
	seen []localSeen
}

func newLocalHandler() *localHandler {
	return &localHandler{release: make(chan struct{})}
}

func (h *localHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Add(1)
	s := localSeen{method: r.Method, path: r.URL.Path, header: r.Header.Clone()}
	s.id, s.idOK = bridge.IdentityFrom(r.Context())
	if r.URL.Path != "/noread" {
		b, err := io.ReadAll(r.Body)
		s.body, s.bodyErr = string(b), err
	}
	defer func() {
		h.mu.Lock()
		h.seen = append(h.seen, s)
		h.mu.Unlock()
	}()
	switch r.URL.Path {
	case "/stream":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "one\n")
		w.(http.Flusher).Flush()
		<-h.release
		fmt.Fprint(w, "two\n")
	case "/length":
		w.Header().Set("Content-Length", "5")
		fmt.Fprint(w, "sized")
	case "/empty":
	case "/wait":
		<-r.Context().Done()
		s.ctxEnded = true
	case "/panic":
		panic("boom")
	default:
		fmt.Fprintf(w, "local %s %s %s", r.Method, r.URL.Path, s.body)
	}
}

func (h *localHandler) all() []localSeen {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]localSeen(nil), h.seen...)
}

// waitSeen waits until the handler has returned n times.
func (h *localHandler) waitSeen(t testing.TB, n int) []localSeen {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d local requests", n), func() bool { return len(h.all()) >= n })
	return h.all()
}

// localClient is an HTTP client of the sandbox's kind that talks to the
// proxy as a server (base URL http://127.0.0.1:3128), as an SDK does: its
// requests are origin-form.
func (h *harness) localClient() *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", h.sock)
		},
		MaxIdleConnsPerHost: 1,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

func TestLocal(t *testing.T) {
	lh := newLocalHandler()
	w := newWorld(t, func(c *egress.Config) { c.Local = lh })
	c := w.h.localClient()
	var conns atomic.Int64
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		conns.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", w.h.sock)
	}

	for i, path := range []string{"/llm/a", "/llm/b?x=1"} {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:3128"+path, strings.NewReader("body"+fmt.Sprint(i)))
		req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
		req.Header.Set("X-Keep", "yes")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		p, _, _ := strings.Cut(path, "?")
		if want := fmt.Sprintf("local POST %s body%d", p, i); resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("POST %s = %d %q, want 200 %q", path, resp.StatusCode, b, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("two requests took %d connections, want 1 (keep-alive)", n)
	}
	for _, s := range lh.waitSeen(t, 2) {
		if !s.idOK || s.id != (bridge.Identity{Tenant: "t1", Run: "run-1", Sandbox: "sb-1"}) {
			t.Errorf("IdentityFrom = %+v, %v; want the proxy's identity", s.id, s.idOK)
		}
		if s.header.Get("Proxy-Authorization") != "" || s.header.Get("X-Keep") != "yes" {
			t.Errorf("handler saw headers %v", s.header)
		}
	}
	if _, ok := bridge.IdentityFrom(context.Background()); ok {
		t.Error("IdentityFrom(context.Background()) = ok")
	}

	recs := w.h.audit.waitRecords(t, 2)
	for i, r := range recs {
		wantPath := []string{"/llm/a", "/llm/b"}[i]
		if !r.Local || r.Rule != "local" || r.Path != wantPath || r.Decision != egress.DecisionAllowed || r.Status != 200 ||
			r.Method != "POST" || r.BytesIn == 0 || r.BytesOut == 0 || r.Tenant != "t1" || r.Sandbox != "sb-1" {
			t.Errorf("record %d = %+v", i, r)
		}
	}

	// Absolute-form and CONNECT are the proxy's, not Local's.
	before := lh.calls.Load()
	for _, req := range []string{
		"GET http://nowhere.test/llm/a HTTP/1.1\r\nHost: nowhere.test\r\n\r\n",
		"CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n",
	} {
		conn := w.h.dial(t)
		resp := rawRequest(t, conn, bufio.NewReader(conn), req)
		if resp.StatusCode != 403 || reasonOf(resp) != "policy:no_rule" {
			t.Errorf("%q = %d %q, want 403 policy:no_rule", firstLine(req), resp.StatusCode, reasonOf(resp))
		}
	}
	// Inside an inspected tunnel, origin-form goes to the tunnel's host.
	resp, conn, br := w.h.connect(t, "api.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT api.test = %d", resp.StatusCode)
	}
	resp = rawRequest(t, conn, br, "GET /llm/a HTTP/1.1\r\nHost: api.test:443\r\n\r\n")
	if b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10)); strings.Contains(string(b), "local ") {
		t.Errorf("a request inside a tunnel reached Local: %d %q", resp.StatusCode, b)
	}
	if n := lh.calls.Load(); n != before {
		t.Errorf("Local got %d requests that were not origin-form outside a tunnel", n-before)
	}
}

// TestLocalStream: each Flush reaches the sandbox at once; the handler
// writes the second part only after the client has read the first.
func TestLocalStream(t *testing.T) {
	lh := newLocalHandler()
	w := newWorld(t, func(c *egress.Config) { c.Local = lh })
	resp, err := w.h.localClient().Get("http://127.0.0.1:3128/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("stream response header %v, transfer encoding %v", resp.Header, resp.TransferEncoding)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "one\n" {
		t.Fatalf("first part = %q, %v", line, err)
	}
	close(lh.release)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "two\n" {
		t.Fatalf("rest = %q, %v", rest, err)
	}
}

func TestLocalResponseShapes(t *testing.T) {
	lh := newLocalHandler()
	w := newWorld(t, func(c *egress.Config) { c.Local = lh })
	tests := []struct {
		name, req  string
		status     int
		body       string
		header     string // a header line the response must have
		connClosed bool
	}{
		{"content length", "GET /length HTTP/1.1\r\nHost: x\r\n\r\n", 200, "sized", "Content-Length: 5", false},
		{"nothing written", "GET /empty HTTP/1.1\r\nHost: x\r\n\r\n", 200, "", "Content-Length: 0", false},
		{"head", "HEAD /length HTTP/1.1\r\nHost: x\r\n\r\n", 200, "", "Content-Length: 5", false},
		{"http/1.0", "GET /plain HTTP/1.0\r\nHost: x\r\n\r\n", 200, "local GET /plain ", "Connection: close", true},
		{"connection close", "GET /plain HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200, "local GET /plain ", "Connection: close", true},
		{"body left unread", "POST /noread HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd", 200, "local POST /noread ", "", true},
		{"panic", "GET /panic HTTP/1.1\r\nHost: x\r\n\r\n", 500, "airlock: internal error\n", "Connection: close", true},
		{"expect continue", "POST /plain HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", 200, "local POST /plain hi", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := w.h.dial(t)
			br := bufio.NewReader(conn)
			if _, err := conn.Write([]byte(tt.req)); err != nil {
				t.Fatal(err)
			}
			method, _, _ := strings.Cut(tt.req, " ")
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err == nil && resp.StatusCode == http.StatusContinue {
				resp, err = http.ReadResponse(br, &http.Request{Method: method})
			}
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != tt.status || string(body) != tt.body {
				t.Fatalf("%q = %d %q (%v), want %d %q", firstLine(tt.req), resp.StatusCode, body, err, tt.status, tt.body)
			}
			if tt.header != "" {
				k, v, _ := strings.Cut(tt.header, ": ")
				got := resp.Header.Get(k)
				if k == "Connection" && resp.Close {
					got = "close"
				}
				if k == "Content-Length" && got == "" && resp.ContentLength >= 0 {
					got = fmt.Sprint(resp.ContentLength)
				}
				if got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if tt.connClosed {
				if !isClosed(readerConn{conn, br}, 10*time.Second) {
					t.Error("the connection stayed open")
				}
				return
			}
			// Still open: it carries another request.
			next := rawRequest(t, conn, br, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
			if b, _ := io.ReadAll(next.Body); next.StatusCode != 200 || string(b) != "local GET /next " {
				t.Errorf("next request on the connection = %d %q", next.StatusCode, b)
			}
		})
	}
	// The proxy still serves after a handler panicked.
	resp, err := w.h.localClient().Get("http://127.0.0.1:3128/after")
	if err != nil {
		t.Fatalf("GET after a panic: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET after a panic = %s, want 200", resp.Status)
	}
}

func TestLocalLimits(t *testing.T) {
	t.Run("header", func(t *testing.T) {
		lh := newLocalHandler()
		w := newWorld(t, func(c *egress.Config) { c.Local = lh; c.Limits.MaxHeaderBytes = 1024 })
		conn := w.h.dial(t)
		resp := rawRequest(t, conn, bufio.NewReader(conn), "GET /x HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("a", 2000)+"\r\n\r\n")
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || reasonOf(resp) != "limit:request_header" {
			t.Errorf("big header = %d %q", resp.StatusCode, reasonOf(resp))
		}
		if lh.calls.Load() != 0 {
			t.Error("a request over the header limit reached Local")
		}
	})
	t.Run("bytes out", func(t *testing.T) {
		lh := newLocalHandler()
		w := newWorld(t, func(c *egress.Config) { c.Local = lh; c.Limits.MaxBytesOut = 2000 })
		conn := w.h.dial(t)
		br := bufio.NewReader(conn)
		resp := rawRequest(t, conn, br, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1900\r\n\r\n"+strings.Repeat("b", 1900))
		_, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("request under the budget = %d", resp.StatusCode)
		}
		// This head takes the total past the budget.
		resp = rawRequest(t, conn, br, "GET /x HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("p", 100)+"\r\n\r\n")
		if resp.StatusCode != 403 || reasonOf(resp) != "limit:bytes_out" {
			t.Errorf("request after the budget = %d %q, want 403 limit:bytes_out", resp.StatusCode, reasonOf(resp))
		}
		if n := lh.calls.Load(); n != 1 {
			t.Errorf("Local got %d requests, want 1", n)
		}
	})
	t.Run("idle body", func(t *testing.T) {
		lh := newLocalHandler()
		w := newWorld(t, func(c *egress.Config) { c.Local = lh; c.Limits.IdleTimeout = 50 * time.Millisecond })
		conn := w.h.dial(t)
		if _, err := conn.Write([]byte("POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")); err != nil {
			t.Fatal(err)
		}
		s := lh.waitSeen(t, 1)[0]
		if s.bodyErr == nil || s.body != "abc" {
			t.Errorf("a stalled body read = %q, %v; want \"abc\" and an error", s.body, s.bodyErr)
		}
	})
	t.Run("total", func(t *testing.T) {
		lh := newLocalHandler()
		w := newWorld(t, func(c *egress.Config) { c.Local = lh; c.Limits.TotalTimeout = 100 * time.Millisecond })
		conn := w.h.dial(t)
		if _, err := conn.Write([]byte("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if s := lh.waitSeen(t, 1)[0]; !s.ctxEnded {
			t.Error("the handler's context did not end with TotalTimeout")
		}
		// Whatever was written before the close, the connection ends.
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Error("the connection outlived TotalTimeout")
		}
	})
	t.Run("close", func(t *testing.T) {
		lh := newLocalHandler()
		w := newWorld(t, func(c *egress.Config) { c.Local = lh })
		conn := w.h.dial(t)
		if _, err := conn.Write([]byte("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the request to reach Local", func() bool { return lh.calls.Load() == 1 })
		if err := w.h.p.Close(); err != nil {
			t.Fatal(err)
		}
		if s := lh.waitSeen(t, 1)[0]; !s.ctxEnded {
			t.Error("the handler's context did not end with Close")
		}
	})
}
