package portproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/portproxy"
)

// scripted is a sandbox's server that answers each request (one a
// connection, as the relay sends them) with answer(request), recording
// the bytes each connection carried to it.
type scripted struct {
	ln     net.Listener
	answer func(req *http.Request) string

	wg    sync.WaitGroup // the connections being served
	mu    sync.Mutex
	conns [][]byte // what each connection carried, whole
	held  int      // connections the relay did not close within 10 s
}

func startScripted(t testing.TB, answer func(req *http.Request) string) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{ln: ln, answer: answer}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	return s
}

func (s *scripted) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	var got bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &got))
	req, err := http.ReadRequest(br)
	if err == nil {
		_, _ = io.Copy(io.Discard, req.Body)
		a := s.answer(req)
		if a == reset {
			// A server killed mid-request: the kernel resets its
			// connections.
			_ = c.(*net.TCPConn).SetLinger(0)
			s.mu.Lock()
			s.conns = append(s.conns, got.Bytes())
			s.mu.Unlock()
			return
		}
		_, _ = io.WriteString(c, a)
		if cw, ok := c.(*net.TCPConn); ok {
			_ = cw.CloseWrite()
		}
		// Whatever else comes on the connection is recorded: the relay
		// sends one request a connection and then closes it.
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, br); errors.Is(err, os.ErrDeadlineExceeded) {
			s.mu.Lock()
			s.held++ // the relay kept the connection open after the exchange
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.conns = append(s.conns, got.Bytes())
	s.mu.Unlock()
}

// requests parses what every connection carried: each must be exactly
// one request, framed one way, with nothing after it.
func (s *scripted) check(t *testing.T) {
	t.Helper()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held > 0 {
		t.Errorf("%d connections to the server left open after their exchange", s.held)
	}
	for i, raw := range s.conns {
		br := bufio.NewReader(bytes.NewReader(raw))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Errorf("connection %d carried %q: %v", i, raw, err)
			continue
		}
		if req.Header.Get("Content-Length") != "" && len(req.TransferEncoding) > 0 {
			t.Errorf("connection %d: a request with both Content-Length and Transfer-Encoding: %q", i, raw)
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if rest, _ := io.ReadAll(br); len(rest) > 0 {
			t.Errorf("connection %d: %q after the request", i, rest)
		}
	}
}

// reset is the answer that resets the connection instead.
const reset = "RESET"

const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"

// TestRelayAdversarial: a client and a sandbox's server that each try to
// desynchronise the relay, on both paths (the fast one for requests
// without a body or upgrade, httputil.ReverseProxy's). After each case
// the same client connection sends a second request, which must get the
// server's own answer to it, never bytes of the first exchange.
func TestRelayAdversarial(t *testing.T) {
	tests := []struct {
		name string
		// request is what the client writes first, raw.
		request string
		// answer is the server's to the first request.
		answer string
		// status is what the client must get; body, when set, its body.
		status int
		body   string
		// says is in the refusal's message, when set.
		says string
		// hints is how many informational answers come first.
		hints int
		// reached: whether the server may see the request at all.
		reached bool
	}{
		{
			name: "request with conflicting Content-Length and Transfer-Encoding",
			// The front reads it chunked (RFC 9112, 6.3): the server must
			// get it one way, chunked or with a length, never both.
			request: "POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			answer:  "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst",
			status:  200, body: "first", reached: true,
		},
		{
			name:    "answer to HEAD with a body and a second answer behind it",
			request: "HEAD /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + smuggled,
			status:  200, body: "", reached: true,
		},
		{
			name:    "answer with conflicting Content-Length and Transfer-Encoding",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + smuggled,
			status:  200, body: "hello", reached: true,
		},
		{
			name:    "101 nobody asked for",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n" + smuggled,
			status:  502, says: "switched protocols when the request asked for no upgrade", reached: true,
		},
		{
			name:    "server that keeps sending after its answer",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + strings.Repeat(smuggled, 1000),
			status:  200, body: "hello", reached: true,
		},
		{
			name:    "answer with a giant header",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\nContent-Length: 5\r\n\r\nhello",
			status:  502, says: "header", reached: true,
		},
		{
			name:    "request with a giant header",
			request: "GET /first HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n",
			status:  431,
		},
		{
			name:    "informational answers before the answer",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			status:  200, body: "hello", hints: 1, reached: true,
		},
		{
			name:    "too many informational answers",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n", 50) + "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			status:  502, says: "more than 5 informational answers", hints: 6, reached: true, // the sixth relayed, then the end
		},
		{
			// A server that died with the request in its backlog, or
			// closed it unanswered: the refusal says so, where "did not
			// answer" would read as a slow server.
			name:    "server closes without answering",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "",
			status:  502, says: "closed the connection before it answered", reached: true,
		},
		{
			name:    "server resets the connection",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  reset,
			status:  502, says: "reset the connection before it answered", reached: true,
		},
		{
			name:    "answer that is not HTTP",
			request: "GET /first HTTP/1.1\r\nHost: x\r\n\r\n",
			answer:  "SSH-2.0-OpenSSH_9.2\r\n",
			status:  502, says: "not HTTP/1.1", reached: true,
		},
	}
	for _, path := range []string{"fast", "proxy"} {
		for _, tc := range tests {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				srv := startScripted(t, func(req *http.Request) string {
					if req.URL.Path == "/second" {
						return "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"
					}
					return tc.answer
				})
				rl := &portproxy.Relay{
					Sandbox: &loopback{ports: map[int]string{80: srv.ln.Addr().String()}}, Port: 80,
					Limits: &policy.Ports{}, Counters: &portproxy.Counters{},
					Refuse: func(w http.ResponseWriter, f portproxy.Refusal) { http.Error(w, f.Message, f.Status) },
				}
				if path == "proxy" {
					portproxy.ProxyOnly(rl)
				}
				front := httptest.NewServer(rl)
				defer front.Close()
				c, err := net.Dial("tcp", front.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				br := bufio.NewReader(c)
				go func() { _, _ = io.WriteString(c, tc.request) }()
				method := strings.Fields(tc.request)[0]
				var res *http.Response
				hints := 0
				for {
					res, err = http.ReadResponse(br, &http.Request{Method: method})
					if err != nil {
						t.Fatalf("first answer: %v", err)
					}
					if res.StatusCode >= 200 {
						break
					}
					hints++
					if res.StatusCode != 103 || res.Header.Get("Link") != "</a.css>" {
						t.Errorf("informational answer %d %v, want 103 with its Link", res.StatusCode, res.Header)
					}
				}
				if hints != tc.hints {
					t.Errorf("%d informational answers, want %d", hints, tc.hints)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.status || tc.status == 200 && string(body) != tc.body {
					t.Errorf("first answer %d %.200q, want %d %q", res.StatusCode, body, tc.status, tc.body)
				}
				if !strings.Contains(string(body), tc.says) {
					t.Errorf("first answer %d %.200q, want it to say %q", res.StatusCode, body, tc.says)
				}
				if strings.Contains(string(body), "smuggled") {
					t.Errorf("the server's extra answer reached the client: %.200q", body)
				}
				if res.StatusCode == 200 && res.Header.Get("Connection") != "close" && !res.Close {
					// The client's connection lives on: its next request
					// gets the next answer, the server's own.
					fmt.Fprintf(c, "GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
					res2, err := http.ReadResponse(br, &http.Request{Method: "GET"})
					if err != nil {
						t.Fatalf("second answer: %v", err)
					}
					b2, _ := io.ReadAll(res2.Body)
					res2.Body.Close()
					if res2.StatusCode != 200 || string(b2) != "second" {
						t.Errorf("second answer %d %.200q, want 200 \"second\"", res2.StatusCode, b2)
					}
				}
				c.Close()
				front.Close() // waits for the handlers, so the server has its records
				srv.ln.Close()
				if !tc.reached {
					srv.wg.Wait()
					srv.mu.Lock()
					n := len(srv.conns)
					srv.mu.Unlock()
					if n > 0 {
						t.Errorf("the server got %d connections for a request the front refuses", n)
					}
				}
				srv.check(t)
			})
		}
	}
}

// TestRelayCanceled: a request whose server never answers ends when its
// context does (the client gone, or the caller's cancel: MCP's revoked
// exposure), on both paths, closing its connection to the server.
func TestRelayCanceled(t *testing.T) {
	for _, path := range []string{"fast", "proxy"} {
		t.Run(path, func(t *testing.T) {
			got := make(chan struct{}, 1)
			hold := make(chan struct{})
			defer close(hold)
			srv := startScripted(t, func(*http.Request) string {
				got <- struct{}{}
				<-hold
				return ""
			})
			rl := &portproxy.Relay{
				Sandbox: &loopback{ports: map[int]string{80: srv.ln.Addr().String()}}, Port: 80,
				Limits: &policy.Ports{}, Counters: &portproxy.Counters{},
			}
			if path == "proxy" {
				portproxy.ProxyOnly(rl)
			}
			f := serve(t, rl)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", f.url+"/never", nil)
			errc := make(chan error, 1)
			go func() {
				res, err := http.DefaultClient.Do(req)
				if err == nil {
					res.Body.Close()
				}
				errc <- err
			}()
			<-got
			cancel()
			if err := <-errc; err == nil {
				t.Error("the request was answered; want it cancelled")
			}
			var res []portproxy.Result
			for len(res) == 0 {
				time.Sleep(time.Millisecond)
				res = f.results()
			}
			if res[0].Outcome != portproxy.Canceled || rl.Counters.Open() != 0 {
				t.Errorf("result %+v, %d open; want %s and none open", res[0], rl.Counters.Open(), portproxy.Canceled)
			}
		})
	}
}

// TestRelayStreamHeader: an answer whose body comes later (events, a long
// poll) reaches the client as its header is sent, on both paths.
func TestRelayStreamHeader(t *testing.T) {
	for _, path := range []string{"fast", "proxy"} {
		t.Run(path, func(t *testing.T) {
			body := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(200)
				http.NewResponseController(w).Flush()
				<-body
				_, _ = io.WriteString(w, "later")
			}))
			defer srv.Close()
			rl := &portproxy.Relay{
				Sandbox: &loopback{ports: map[int]string{80: srv.Listener.Addr().String()}}, Port: 80,
				Limits: &policy.Ports{}, Counters: &portproxy.Counters{},
			}
			if path == "proxy" {
				portproxy.ProxyOnly(rl)
			}
			f := serve(t, rl)
			type answer struct {
				res *http.Response
				err error
			}
			got := make(chan answer, 1)
			go func() {
				res, err := http.Get(f.url + "/events")
				got <- answer{res, err}
			}()
			select {
			case a := <-got:
				close(body)
				if a.err != nil {
					t.Fatal(a.err)
				}
				b, _ := io.ReadAll(a.res.Body)
				a.res.Body.Close()
				if string(b) != "later" {
					t.Errorf("body %q, want \"later\"", b)
				}
			case <-time.After(30 * time.Second):
				close(body)
				t.Fatal("the answer's header did not reach the client before its body")
			}
		})
	}
}
