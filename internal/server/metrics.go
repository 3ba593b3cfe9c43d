package server

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// metrics are the API's few Prometheus counters, kept by hand: requests by
// route and status, errors by code, runs created, event streams open and
// events streamed. None has a tenant label: /metrics shows no tenant's
// business.
type metrics struct {
	requests labeled // "route\x00status"
	errors   labeled // code
	created  atomic.Int64
	streams  atomic.Int64
	streamed atomic.Int64
}

// labeled is a counter family with one or two labels.
type labeled struct {
	mu sync.Mutex
	// n holds the counts by label values (guarded by mu).
	n map[string]int64
}

func (l *labeled) add(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int64{}
	}
	l.n[key]++
}

func (l *labeled) snapshot() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.n))
	for k, v := range l.n {
		out[k] = v
	}
	return out
}

// write writes the metrics in the Prometheus text format, version 0.0.4.
func (m *metrics) write(w io.Writer) {
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("airlock_http_requests_total", "counter", "API requests by route pattern and status code.")
	req := m.requests.snapshot()
	for _, k := range slices.Sorted(maps.Keys(req)) {
		route, status, _ := strings.Cut(k, "\x00")
		fmt.Fprintf(w, "airlock_http_requests_total{route=%s,code=%s} %d\n", quoteLabel(route), quoteLabel(status), req[k])
	}
	family("airlock_api_errors_total", "counter", "API error responses by error code.")
	errs := m.errors.snapshot()
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		fmt.Fprintf(w, "airlock_api_errors_total{code=%s} %d\n", quoteLabel(k), errs[k])
	}
	family("airlock_api_runs_created_total", "counter", "Runs created through the API.")
	fmt.Fprintf(w, "airlock_api_runs_created_total %d\n", m.created.Load())
	family("airlock_api_event_streams", "gauge", "Event streams open now.")
	fmt.Fprintf(w, "airlock_api_event_streams %d\n", m.streams.Load())
	family("airlock_api_events_streamed_total", "counter", "Events sent on event streams.")
	fmt.Fprintf(w, "airlock_api_events_streamed_total %d\n", m.streamed.Load())
}

// quoteLabel quotes a label value as the text format wants: backslash,
// double quote and newline escaped.
func quoteLabel(s string) string {
	s = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
	return `"` + s + `"`
}
