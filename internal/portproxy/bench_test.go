package portproxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/portproxy"
)

// BenchmarkRelay: a GET through the relay (a fresh upstream connection a
// request, as the data plane's), by its fast path and by its proxy path,
// against the same GET straight to the server, alternated in blocks
// within one run, so that the ratios are judged under one load
// (fast-cost/proxy-cost: what the fast path adds over direct, as a share
// of what the proxy path adds). The server is a Go one on loopback (the
// sandbox's Connect is benchmarked in internal/sandbox/linux): this is
// the relay's own cost, for -cpuprofile and -benchmem.
//
//	go test -run '^$' -bench Relay -benchtime 2000x ./internal/portproxy/
func BenchmarkRelay(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	relay := func(proxyOnly bool) *httptest.Server {
		rl := &portproxy.Relay{
			Sandbox: &loopback{ports: map[int]string{80: addr}}, Port: 80,
			Limits: &policy.Ports{}, Counters: &portproxy.Counters{},
			Refuse: func(w http.ResponseWriter, f portproxy.Refusal) { http.Error(w, f.Message, f.Status) },
		}
		if proxyOnly {
			portproxy.ProxyOnly(rl)
		}
		return httptest.NewServer(rl)
	}
	fast, proxy := relay(false), relay(true)
	defer fast.Close()
	defer proxy.Close()
	// A fresh client connection a request, both ways, as bench/ports.sh.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(url string) time.Duration {
		t0 := time.Now()
		res, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("GET %s = %d", url, res.StatusCode)
		}
		return time.Since(t0)
	}
	// Direct, the fast path, the proxy path (what every request took
	// before the fast path), in turn.
	urls := []string{srv.URL + "/", fast.URL + "/", proxy.URL + "/"}
	times := make([][]time.Duration, len(urls))
	const block = 50
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := (i / block) % len(urls)
		times[k] = append(times[k], get(urls[k]))
	}
	b.StopTimer()
	for _, ts := range times {
		if len(ts) == 0 {
			return
		}
	}
	p50 := func(xs []time.Duration) time.Duration { slices.Sort(xs); return xs[len(xs)/2] }
	d, f, p := p50(times[0]), p50(times[1]), p50(times[2])
	b.ReportMetric(float64(d.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(f.Microseconds()), "fast-p50-µs")
	b.ReportMetric(float64(p.Microseconds()), "proxy-p50-µs")
	b.ReportMetric(float64(f)/float64(d), "fast/direct")
	b.ReportMetric(float64(p)/float64(d), "proxy/direct")
	b.ReportMetric(float64(f-d)/float64(p-d), "fast-cost/proxy-cost")
}
