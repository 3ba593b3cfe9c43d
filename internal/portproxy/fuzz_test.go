package portproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/portproxy"
)

// FuzzRelayAnswer: whatever a sandbox's server answers a GET with, the
// fast path gives the client what the proxy path gives it (the status,
// the body, or a cut answer), and neither breaks. Seeds: testdata/fuzz.
func FuzzRelayAnswer(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nraw",
		"HTTP/1.0 200 OK\r\n\r\nuntil the end",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 999 Odd\r\nConnection: X-A\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
		"garbage",
		"",
	} {
		f.Add([]byte(seed))
	}
	var mu sync.Mutex
	var answer []byte
	srv := startScripted(f, func(*http.Request) string {
		mu.Lock()
		defer mu.Unlock()
		return string(answer)
	})
	front := func(proxyOnly bool) *httptest.Server {
		rl := &portproxy.Relay{
			Sandbox: &loopback{ports: map[int]string{80: srv.ln.Addr().String()}}, Port: 80,
			Limits: &policy.Ports{}, Counters: &portproxy.Counters{},
			Refuse: func(w http.ResponseWriter, f portproxy.Refusal) { http.Error(w, f.Message, f.Status) },
		}
		if proxyOnly {
			portproxy.ProxyOnly(rl)
		}
		s := httptest.NewServer(rl)
		f.Cleanup(s.Close)
		return s
	}
	fast, proxy := front(false), front(true)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}, Timeout: 30 * time.Second}
	get := func(url string) (int, string, bool) {
		res, err := client.Get(url)
		if err != nil {
			return 0, "", false
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err == nil
	}
	f.Fuzz(func(t *testing.T, a []byte) {
		if string(a) == reset || len(a) > 64<<10 {
			return
		}
		mu.Lock()
		answer = a
		mu.Unlock()
		fs, fb, fok := get(fast.URL + "/")
		ps, pb, pok := get(proxy.URL + "/")
		// A cut answer is cut on both paths; when its header got out
		// first is a race on the proxy path (its flush timer against
		// the copy's abort), so only whole answers are compared.
		if fok != pok || fok && (fs != ps || fs != http.StatusBadGateway && fb != pb) {
			t.Errorf("answer %q: fast path %d %q (whole %v), proxy path %d %q (whole %v)", a, fs, fb, fok, ps, pb, pok)
		}
	})
}
