package e2b_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/e2b"
)

// metric is a SandboxMetric as the SDK reads it.
type metric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      *int64  `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

func (h *harness) metrics(tenant, id, query string) ([]metric, response) {
	h.t.Helper()
	res := h.api(tenant, "GET", "/sandboxes/"+id+"/metrics"+query, nil)
	var ms []metric
	if res.status == 200 {
		if err := json.Unmarshal(res.body, &ms); err != nil {
			h.t.Fatalf("metrics %s: %v", res, err)
		}
	}
	return ms, res
}

// plausible fails t unless m could describe a sandbox with the default
// policy's limits.
func plausible(t *testing.T, m metric) {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, m.Timestamp)
	switch {
	case err != nil || ts.Unix() != m.TimestampUnix:
		t.Errorf("timestamp %q does not parse to timestampUnix %d (%v)", m.Timestamp, m.TimestampUnix, err)
	case m.CPUCount < 1, m.CPUUsedPct < 0, m.CPUUsedPct > 100:
		t.Errorf("cpu: %+v", m)
	case m.MemTotal <= 0, m.MemUsed <= 0, m.MemUsed > m.MemTotal, m.MemCache == nil:
		t.Errorf("memory: %+v", m)
	case m.DiskTotal <= 0, m.DiskUsed < 0, m.DiskUsed > m.DiskTotal:
		t.Errorf("disk: %+v", m)
	}
}

func TestMetrics(t *testing.T) {
	clk := clock.NewFake(time.Now().Add(time.Minute).Truncate(time.Second))
	// The test takes every sample itself (on demand, SampleMetrics), by
	// the fake clock. The sampler the harness's Server.Run starts ticks on
	// the real clock: at its default 5s it added a sample of its own to a
	// run that took 9s under load (3 samples where the test made 2). The
	// longest interval keeps it out of the test.
	h := newHarness(t, harnessOptions{clock: clk, config: e2b.Config{MetricsInterval: 10 * time.Minute}})
	s := h.create("alpha", nil)

	// Not sampled yet: sampled on demand.
	ms, res := h.metrics("alpha", s.ID, "")
	if res.status != 200 || len(ms) != 1 {
		t.Fatalf("metrics = %s, want one sample", res)
	}
	first := ms[0]
	plausible(t, first)

	// Busy, then sampled after 5s (by the clock): CPU use shows, and so
	// do 8 MiB more on disk.
	h.run(s, "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; head -c 8388608 /dev/zero > /tmp/fill")
	clk.Advance(5 * time.Second)
	h.srv.SampleMetrics(t.Context())
	ms, _ = h.metrics("alpha", s.ID, "")
	if len(ms) != 2 {
		t.Fatalf("%d samples after a sampling pass, want 2", len(ms))
	}
	second := ms[1]
	plausible(t, second)
	if second.TimestampUnix != first.TimestampUnix+5 || second.CPUUsedPct <= 0 {
		t.Errorf("second sample %+v, want 5s after the first %+v, with CPU use", second, first)
	}
	if second.DiskUsed < first.DiskUsed+7<<20 {
		t.Errorf("disk used %d after writing 8 MiB, was %d", second.DiskUsed, first.DiskUsed)
	}

	tests := []struct {
		query  string
		status int
		n      int
	}{
		{"", 200, 2},
		{fmt.Sprintf("?start=%d", second.TimestampUnix), 200, 1},
		{fmt.Sprintf("?end=%d", first.TimestampUnix), 200, 1},
		{fmt.Sprintf("?start=%d&end=%d", first.TimestampUnix, second.TimestampUnix), 200, 2},
		{fmt.Sprintf("?start=%d", second.TimestampUnix+1), 200, 0},
		{"?start=yesterday", 400, 0},
		{"?end=-1", 400, 0},
		{"?end=%2B5", 400, 0},
		{"?start=9223372036854775807", 400, 0},
		{"?start=9223372036854775808", 400, 0},
		{"?start=&end=", 200, 2},
		{fmt.Sprintf("?start=%d&end=%d", second.TimestampUnix, first.TimestampUnix), 400, 0},
	}
	for _, tt := range tests {
		ms, res := h.metrics("alpha", s.ID, tt.query)
		if res.status != tt.status || len(ms) != tt.n {
			t.Errorf("metrics%s = %s, want %d with %d samples", tt.query, res, tt.status, tt.n)
		}
		if tt.status == 400 && !strings.Contains(string(res.body), `"code":400`) {
			t.Errorf("metrics%s: body %s lacks code 400", tt.query, res.body)
		}
	}

	// Another tenant's sandbox, and an unknown one: the JSON 404.
	for _, id := range []string{s.ID, "sb-000000000000"} {
		if _, res := h.metrics("beta", id, ""); res.status != 404 || !strings.Contains(string(res.body), `"code":404`) {
			t.Errorf("beta's metrics of %s = %s, want 404 with code 404", id, res)
		}
	}

	// envd's own: one fresh sample, snake_case.
	res = h.do("GET", h.envdURL+"/metrics", envdHeaders(s), nil)
	var em map[string]float64
	if err := json.Unmarshal(res.body, &em); res.status != 200 || err != nil || em["mem_total"] <= 0 || em["cpu_count"] < 1 ||
		em["disk_total"] <= 0 || em["ts"] != float64(clk.Now().Unix()) || em["mem_used_mib"] != float64(int64(em["mem_used"])>>20) {
		t.Errorf("envd /metrics = %s", res)
	}
	if ms, _ := h.metrics("alpha", s.ID, ""); len(ms) != 2 {
		t.Errorf("envd's sample went into the ring: %d samples", len(ms))
	}

	// Paused: no boot, no samples.
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	if ms, res := h.metrics("alpha", s.ID, ""); res.status != 200 || len(ms) != 0 {
		t.Errorf("metrics of a paused sandbox = %s, want []", res)
	}
}

// TestMetricsSampler: the sampler samples every running sandbox on its own,
// each MetricsInterval, until its context ends.
func TestMetricsSampler(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{MetricsInterval: time.Second}})
	a, b := h.create("alpha", nil), h.create("beta", nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.srv.RunMetrics(ctx)
	}()
	waitFor(t, "two samples of each sandbox", func() bool {
		ma, _ := h.metrics("alpha", a.ID, "")
		mb, _ := h.metrics("beta", b.ID, "")
		return len(ma) >= 2 && len(mb) >= 2
	})
	cancel()
	<-done
	ms, _ := h.metrics("alpha", a.ID, "")
	for i, m := range ms {
		plausible(t, m)
		if i > 0 && m.TimestampUnix < ms[i-1].TimestampUnix {
			t.Errorf("samples out of order: %+v", ms)
		}
	}
}
