package portproxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/portproxy"
	"github.com/airlockrun/airlock/internal/portproxy/portproxytest"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// loopback is a sandbox.Connector whose ports are servers on this
// machine's loopback: the relay's side of the exchange is the same, and
// the sandboxes' own Connect is tested with each backend.
type loopback struct {
	ports map[int]string // port → the server's address
	err   error          // what Connect fails with, when set
}

func (l *loopback) Connect(ctx context.Context, port int) (net.Conn, error) {
	if l.err != nil {
		return nil, l.err
	}
	addr, ok := l.ports[port]
	if !ok {
		return nil, fmt.Errorf("connect %d: %w", port, sandbox.ErrPortClosed)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// front serves rl on a listener of its own, recording each Result.
type front struct {
	url string
	mu  sync.Mutex
	got []portproxy.Result
}

func serve(t *testing.T, rl *portproxy.Relay) *front {
	t.Helper()
	f := &front{}
	rl.Refuse = func(w http.ResponseWriter, r portproxy.Refusal) {
		http.Error(w, r.Outcome+": "+r.Message, r.Status)
	}
	rl.Done = func(res portproxy.Result) {
		f.mu.Lock()
		f.got = append(f.got, res)
		f.mu.Unlock()
	}
	srv := httptest.NewServer(rl)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *front) results() []portproxy.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]portproxy.Result(nil), f.got...)
}

func get(t *testing.T, url string, hd ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hd); i += 2 {
		req.Header.Set(hd[i], hd[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestRelay: what reaches the sandbox's server, and what the caller is
// told, request by request, on both paths (the fast one for requests
// without a body or upgrade, httputil.ReverseProxy's).
func TestRelay(t *testing.T) {
	addr := portproxytest.Start(t)
	tests := []struct {
		name     string
		conn     *loopback
		limits   policy.Ports
		path     string
		status   int
		outcome  string
		contains []string
		absent   []string
	}{
		{
			name: "answered, routing stripped, host kept", conn: &loopback{ports: map[int]string{80: addr}}, path: "/echo",
			status: 200, outcome: portproxy.OK, contains: []string{"host=client.example"}, absent: []string{"Secret-Route"},
		},
		{
			// The client's hop-by-hop and forwarding headers stop here;
			// the server sees this hop's.
			name: "hop-by-hop and forwarding headers", conn: &loopback{ports: map[int]string{80: addr}}, path: "/echo?a=1;b=2",
			status: 200, outcome: portproxy.OK,
			contains: []string{"X-Forwarded-For: 127.0.0.1\n", "X-Forwarded-Host: client.example", "X-Forwarded-Proto: http", "Te: trailers", "Connection: close", "Kept: yes"},
			absent:   []string{"X-Hop", "Proxy-Authorization", "Forwarded: for=6.6.6.6", "6.6.6.6", "evil.example", "User-Agent", "Keep-Alive", "a=1;b=2"},
		},
		{
			name: "nothing listens", conn: &loopback{ports: map[int]string{}}, path: "/echo",
			status: 502, outcome: portproxy.Closed, contains: []string{"nothing in the sandbox listens on port 80"},
		},
		{
			name: "sandbox gone", conn: &loopback{err: fmt.Errorf("connect: %w", sandbox.ErrLost)}, path: "/echo",
			status: 502, outcome: portproxy.Lost, contains: []string{"the sandbox has ended"},
		},
		{
			name: "connection bound cuts a large answer", conn: &loopback{ports: map[int]string{80: addr}}, limits: policy.Ports{MaxConnectionBytes: 300 << 10}, path: "/big",
			status: 200, outcome: portproxy.Limited,
		},
		{
			name: "budget spent at once", conn: &loopback{ports: map[int]string{80: addr}}, limits: policy.Ports{MaxBytes: 1}, path: "/echo",
			status: 502, outcome: portproxy.Limited, contains: []string{"traffic limit"},
		},
	}
	for _, relayPath := range []string{"fast", "proxy"} {
		for _, tc := range tests {
			t.Run(relayPath+"/"+tc.name, func(t *testing.T) {
				rl := &portproxy.Relay{
					Sandbox: tc.conn, Port: 80, Limits: &tc.limits, Counters: &portproxy.Counters{},
					Strip: []string{"Secret-Route"},
				}
				if relayPath == "proxy" {
					portproxy.ProxyOnly(rl)
				}
				f := serve(t, rl)
				req, _ := http.NewRequest("GET", f.url+tc.path, nil)
				req.Host = "client.example"
				req.Header.Set("Secret-Route", "sb-1")
				req.Header.Set("Connection", "X-Hop")
				req.Header.Set("X-Hop", "1")
				req.Header.Set("Keep-Alive", "timeout=5")
				req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
				req.Header.Set("Forwarded", "for=6.6.6.6")
				req.Header.Set("X-Forwarded-For", "6.6.6.6")
				req.Header.Set("X-Forwarded-Host", "evil.example")
				req.Header.Set("Te", "trailers")
				req.Header.Set("Kept", "yes")
				req.Header.Set("User-Agent", "")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != tc.status {
					t.Errorf("GET %s = %d %.300q, want %d", tc.path, res.StatusCode, b, tc.status)
				}
				for _, want := range tc.contains {
					if !strings.Contains(string(b), want) {
						t.Errorf("GET %s = %.400q, want %q in it", tc.path, b, want)
					}
				}
				for _, not := range tc.absent {
					if strings.Contains(string(b), not) {
						t.Errorf("GET %s = %.400q, want no %q in it", tc.path, b, not)
					}
				}
				if tc.path == "/big" && len(b) >= 400<<10 {
					t.Errorf("GET /big = %d bytes through a 300K bound", len(b))
				}
				got := f.results()
				for len(got) == 0 {
					// The handler records its result once the exchange ends,
					// which the client may see first.
					time.Sleep(time.Millisecond)
					got = f.results()
				}
				if len(got) != 1 || got[0].Outcome != tc.outcome || !strings.Contains(got[0].Detail, "port 80 from ") {
					t.Fatalf("results = %+v, want one %s", got, tc.outcome)
				}
				// The meter: what the server got and sent, both counted.
				if r := got[0]; tc.outcome == portproxy.OK && (r.In < 100 || r.Out < int64(len(b)) || rl.Counters.Bytes() != r.In+r.Out) {
					t.Errorf("account %d in, %d out, sandbox's counter %d, for an answer of %d bytes", r.In, r.Out, rl.Counters.Bytes(), len(b))
				}
			})
		}
	}
}

// TestRelayBounds: max_connections counts a sandbox's open requests over
// all its ports, and a spent max_bytes refuses new ones; the counters
// say what is open and what was carried.
func TestRelayBounds(t *testing.T) {
	addr := portproxytest.Start(t)
	conn := &loopback{ports: map[int]string{80: addr, 81: addr}}
	limits := policy.Ports{MaxConnections: 2, MaxBytes: 64 << 10}
	ctr := &portproxy.Counters{}
	fronts := map[int]*front{}
	for _, port := range []int{80, 81} {
		fronts[port] = serve(t, &portproxy.Relay{Sandbox: conn, Port: port, Limits: &limits, Counters: ctr})
	}
	// Two requests held open, one on each port: their bodies never end.
	var held []net.Conn
	for _, port := range []int{80, 81} {
		c, err := net.Dial("tcp", strings.TrimPrefix(fronts[port].url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	}
	for ctr.Open() < 2 {
		time.Sleep(time.Millisecond)
	}
	if byPort := ctr.OpenByPort(); byPort[80] != 1 || byPort[81] != 1 {
		t.Errorf("OpenByPort = %v, want one on each port", byPort)
	}
	if status, body := get(t, fronts[80].url+"/echo"); status != 429 || !strings.Contains(body, "max_connections: 2") {
		t.Errorf("a third request = %d %q, want 429 naming max_connections", status, body)
	}
	for _, c := range held {
		c.Close()
	}
	for ctr.Open() > 0 {
		time.Sleep(time.Millisecond)
	}
	// The 64K budget: requests go through until it is spent, then none.
	refused := false
	for i := 0; i < 1000 && !refused; i++ {
		status, body := get(t, fronts[81].url+"/echo", "Pad", strings.Repeat("p", 4<<10))
		refused = status == 429 && strings.Contains(body, "max_bytes")
	}
	if !refused || ctr.Bytes() < 64<<10 {
		t.Errorf("after %d bytes, refused %v: want a 429 naming max_bytes once 64K is spent", ctr.Bytes(), refused)
	}
	if len(ctr.OpenByPort()) != 0 {
		t.Errorf("OpenByPort = %v after every request ended, want none", ctr.OpenByPort())
	}
}

// TestTokenOK: only the token itself opens, and an empty one nothing.
func TestTokenOK(t *testing.T) {
	for i, tc := range []struct {
		got, want string
		ok        bool
	}{
		{"abc", "abc", true}, {"abd", "abc", false}, {"", "abc", false}, {"", "", false}, {"abc", "", false}, {"abcd", "abc", false},
	} {
		if got := portproxy.TokenOK(tc.got, tc.want); got != tc.ok {
			t.Errorf("%d: TokenOK(%q, %q) = %v, want %v", i, tc.got, tc.want, got, tc.ok)
		}
	}
}
