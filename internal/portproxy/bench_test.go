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
// request, as the data plane's) against the same GET straight to the
// server, alternated in blocks within one run, so that the ratio is
// judged under one load. The server is a Go one on loopback (the
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
	rl := &portproxy.Relay{
		Sandbox: &loopback{ports: map[int]string{80: addr}}, Port: 80,
		Limits: &policy.Ports{}, Counters: &portproxy.Counters{},
		Refuse: func(w http.ResponseWriter, f portproxy.Refusal) { http.Error(w, f.Message, f.Status) },
	}
	front := httptest.NewServer(rl)
	defer front.Close()
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
	var direct, relayed []time.Duration
	const block = 50
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if (i/block)%2 == 0 {
			direct = append(direct, get(srv.URL+"/"))
		} else {
			relayed = append(relayed, get(front.URL+"/"))
		}
	}
	b.StopTimer()
	if len(direct) == 0 || len(relayed) == 0 {
		return
	}
	p50 := func(xs []time.Duration) time.Duration { slices.Sort(xs); return xs[len(xs)/2] }
	d, r := p50(direct), p50(relayed)
	b.ReportMetric(float64(d.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(r.Microseconds()), "relayed-p50-µs")
	b.ReportMetric(float64(r)/float64(d), "ratio")
}
