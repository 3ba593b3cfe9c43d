package e2b

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"
)

func TestMetricRing(t *testing.T) {
	var r metricRing
	if got := r.between(0, 0); got == nil || len(got) != 0 {
		t.Errorf("between on an empty ring = %v, want an empty list", got)
	}
	t0 := time.Unix(1, 0)
	if !r.stale(t0, time.Second) {
		t.Error("an empty ring is not stale")
	}
	const n = metricRingSize + 10
	for i := int64(1); i <= n; i++ {
		r.add(sandboxMetric{TimestampUnix: i}, time.Unix(i, 0))
	}
	if r.stale(time.Unix(n, 0), time.Second) || !r.stale(time.Unix(n+1, 0), time.Second) {
		t.Error("stale: want fresh within the interval after the newest sample, stale after")
	}
	all := r.between(0, 0)
	if len(all) != metricRingSize || all[0].TimestampUnix != 11 || all[len(all)-1].TimestampUnix != n {
		t.Fatalf("ring holds %d samples from %d to %d, want the last %d", len(all), all[0].TimestampUnix, all[len(all)-1].TimestampUnix, metricRingSize)
	}
	for i := 1; i < len(all); i++ {
		if all[i].TimestampUnix != all[i-1].TimestampUnix+1 {
			t.Fatalf("samples out of order at %d: %d after %d", i, all[i].TimestampUnix, all[i-1].TimestampUnix)
		}
	}
	tests := []struct {
		start, end int64
		want       int
	}{
		{0, 0, metricRingSize},
		{100, 0, n - 99},
		{0, 100, 90},
		{100, 100, 1},
		{1, 10, 0},
		{n + 1, 0, 0},
	}
	for _, tt := range tests {
		if got := r.between(tt.start, tt.end); len(got) != tt.want {
			t.Errorf("between(%d, %d) = %d samples, want %d", tt.start, tt.end, len(got), tt.want)
		}
	}
}

func TestParseMetricsRange(t *testing.T) {
	tests := []struct {
		query      string
		start, end int64
		err        bool
	}{
		{"", 0, 0, false},
		{"start=10", 10, 0, false},
		{"end=20", 0, 20, false},
		{"start=10&end=20", 10, 20, false},
		{"start=20&end=20", 20, 20, false},
		{"start=21&end=20", 0, 0, true},
		{"start=-1", 0, 0, true},
		{"start=1.5", 0, 0, true},
		{"end=99999999999999999999", 0, 0, true},
		{"start=x", 0, 0, true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/sandboxes/x/metrics?"+tt.query, nil)
		start, end, err := parseMetricsRange(r)
		if (err != nil) != tt.err || start != tt.start || end != tt.end {
			t.Errorf("parseMetricsRange(%q) = %d, %d, %v; want %d, %d, error %t", tt.query, start, end, err, tt.start, tt.end, tt.err)
		}
	}
}

// FuzzMetricsRange: a query string, whatever it holds, gives a range with
// start <= end (when both are set) or a 400.
func FuzzMetricsRange(f *testing.F) {
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest("GET", "/m", nil)
		r.URL.RawQuery = query
		start, end, err := parseMetricsRange(r)
		if err != nil {
			if pe := (*publicError)(nil); !errors.As(err, &pe) || pe.status != 400 {
				t.Fatalf("parseMetricsRange(%q) = %v, want a 400", query, err)
			}
			return
		}
		if start < 0 || end < 0 || (start != 0 && end != 0 && start > end) {
			t.Fatalf("parseMetricsRange(%q) = %d, %d", query, start, end)
		}
	})
}

func TestEventName(t *testing.T) {
	tests := []struct{ root, path, want string }{
		{"/workspace/w", "/workspace/w/a", "a"},
		{"/workspace/w", "/workspace/w/d/e/f", "d/e/f"},
		{"/workspace/w", "/workspace/w", "."},
		{"/", "/etc/x", "etc/x"},
		{"/", "/", "."},
	}
	for _, tt := range tests {
		if got := eventName(tt.root, tt.path); got != tt.want {
			t.Errorf("eventName(%q, %q) = %q, want %q", tt.root, tt.path, got, tt.want)
		}
	}
}
