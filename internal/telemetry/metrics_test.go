package telemetry_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/storetest"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// sample is one gathered sample: its value for counters, gauges and
// untyped metrics, its count for histograms.
func sample(t *testing.T, g prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// labelValues returns every value label takes in family name.
func labelValues(t *testing.T, g prometheus.Gatherer, name, label string) []string {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out = append(out, lp.GetValue())
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestMetricsFromEvents: a run's events count into the metrics with the
// labels and values they record.
func TestMetricsFromEvents(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0.Add(2 * time.Second)
	var mu sync.Mutex
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	tel, err := telemetry.New(telemetry.Options{Redactor: newRedactor(), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	reg := tel.Registry()
	evs := fullRun(t, t0).events()
	var pendingAt int
	for i, ev := range evs {
		if ev.Type == event.TypeApprovalRequested {
			pendingAt = i
		}
	}
	for _, ev := range evs[:pendingAt+1] {
		tel.Event(ev)
	}
	// Mid-run: an approval pending.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_approvals_pending", nil, 1},
		{"airlock_step_duration_seconds", nil, 1},
	} {
		if got, _ := sample(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("mid-run %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// An approval past its expiry no longer counts as pending.
	mu.Lock()
	now = t0.Add(2 * time.Hour)
	mu.Unlock()
	if got, _ := sample(t, reg, "airlock_approvals_pending"); got != 0 {
		t.Errorf("expired approval: airlock_approvals_pending = %v, want 0", got)
	}
	mu.Lock()
	now = t0.Add(2 * time.Second)
	mu.Unlock()
	for _, ev := range evs[pendingAt+1:] {
		tel.Event(ev)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_runs_created_total", nil, 1},
		{"airlock_runs_finished_total", []string{"status", "completed"}, 1},
		{"airlock_run_duration_seconds", []string{"status", "completed"}, 1},
		{"airlock_step_duration_seconds", nil, 3},
		{"airlock_model_call_duration_seconds", []string{"provider", "anthropic", "model", "claude-test"}, 3},
		{"airlock_model_tokens_total", []string{"model", "claude-test", "kind", "input"}, 300},
		{"airlock_model_tokens_total", []string{"model", "claude-test", "kind", "output"}, 60},
		{"airlock_tool_duration_seconds", []string{"tool", "run_command"}, 2},
		{"airlock_tool_duration_seconds", []string{"tool", "finish"}, 1},
		{"airlock_tool_calls_total", []string{"tool", "run_command", "outcome", "exited"}, 2},
		{"airlock_sandbox_exec_duration_seconds", []string{"tool", "run_command"}, 2},
		{"airlock_sandbox_create_duration_seconds", nil, 1},
		{"airlock_egress_decisions_total", []string{"decision", "allowed"}, 1},
		{"airlock_egress_bytes_total", []string{"direction", "in"}, 1000},
		{"airlock_egress_bytes_total", []string{"direction", "out"}, 200},
		{"airlock_approvals_requested_total", nil, 1},
		{"airlock_approvals_pending", nil, 0},
		{"airlock_approval_wait_seconds", []string{"decision", "approved"}, 1},
		{"airlock_credits_spent_total", []string{"source", "model"}, 0.0045},
		{"airlock_credits_spent_total", []string{"source", "llm_gateway"}, 0.00025},
		{"airlock_llm_gateway_calls_total", []string{"api", "openai.chat", "outcome", "ok"}, 1},
		{"airlock_llm_gateway_tokens_total", []string{"kind", "input"}, 7},
		{"airlock_verifications_total", []string{"result", "passed"}, 1},
	} {
		got, ok := sample(t, reg, c.name, c.labels...)
		if !ok || fmt.Sprintf("%.6f", got) != fmt.Sprintf("%.6f", c.want) {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// The approval waited 5s: in the 5s bucket, not the 1s one.
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == "airlock_approval_wait_seconds" {
			if s := f.GetMetric()[0].GetHistogram().GetSampleSum(); s != 5 {
				t.Errorf("approval wait sum %v, want 5", s)
			}
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := sample(t, reg, name); !ok {
			t.Errorf("%s missing: no Go or process collector", name)
		}
	}
}

// TestMetricLabelsBounded: label values a model or tenant chooses are
// scrubbed, made valid UTF-8, and capped, the rest counted as "other";
// values from closed sets outside the set count as "other".
func TestMetricLabelsBounded(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.New(telemetry.Options{Redactor: newRedactor()})
	if err != nil {
		t.Fatal(err)
	}
	l := newRunLog(t, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	l.add(0, event.RunCreated{Tenant: "acme", Task: "t", Model: "m"})
	l.add(0, event.ToolFinished{Step: 1, CallID: "c", Tool: "leak " + secretValue, Outcome: "denied"})
	l.add(0, event.ToolFinished{Step: 1, CallID: "c", Tool: "bad \xff utf8", Outcome: "denied"})
	for i := range 100 {
		l.add(0, event.ToolFinished{Step: 1, CallID: "c", Tool: fmt.Sprintf("tool%03d", i), Outcome: "denied"})
	}
	l.add(0, event.EgressDecision{Decision: "maybe " + secretValue, Method: "GET", Host: "h", Port: 1})
	for _, ev := range l.events() {
		tel.Event(ev)
	}
	reg := tel.Registry()
	tools := labelValues(t, reg, "airlock_tool_duration_seconds", "tool")
	if len(tools) != 65 {
		t.Errorf("%d tool label values, want 64 and other", len(tools))
	}
	var other, redacted bool
	for _, v := range tools {
		other = other || v == "other"
		redacted = redacted || v == "leak [redacted]"
		if strings.Contains(v, secretValue) || !utf8.ValidString(v) {
			t.Errorf("tool label %q", v)
		}
	}
	if !other || !redacted {
		t.Errorf("tool labels %q: want one scrubbed and an other", tools)
	}
	if got := labelValues(t, reg, "airlock_egress_decisions_total", "decision"); len(got) != 1 || got[0] != "other" {
		t.Errorf("egress decision labels %q, want [other]", got)
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == "acme" || strings.HasPrefix(lp.GetValue(), event.RunIDPrefix) {
					t.Errorf("%s has label %s=%q: no tenant or run is a label", f.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

// TestStoreTimed: the timing decorator is a complete store (the
// conformance suite passes through it), and each call it passes on is
// counted under its method and outcome.
func TestStoreTimed(t *testing.T) {
	t.Parallel()
	m := telemetry.NewMetrics(nil, nil)
	open := func(t testing.TB, path string, r store.Redactor, now func() time.Time) store.Store {
		t.Helper()
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Redactor: r, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return m.WrapStore(s)
	}
	path := func(s store.Store) string { return s.(*telemetry.Store).Unwrap().(*sqlite.Store).Path() }
	storetest.Run(t, storetest.Factory{
		New: func(t testing.TB, r store.Redactor) store.Store {
			return open(t, filepath.Join(t.TempDir(), "airlock.db"), r, nil)
		},
		Reopen: func(t *testing.T, s store.Store) store.Store { return open(t, path(s), store.NoRedaction, nil) },
		NewAt: func(t *testing.T, now func() time.Time) store.Store {
			return open(t, filepath.Join(t.TempDir(), "airlock.db"), store.NoRedaction, now)
		},
	})
	reg := m.Registry()
	for _, c := range [][]string{
		{"op", "CreateRun", "outcome", "ok"},
		{"op", "GetRun", "outcome", "not_found"},
		{"op", "Append", "outcome", "conflict"},
		{"op", "AcquireLease", "outcome", "leased"},
		{"op", "Close", "outcome", "ok"},
	} {
		if n, _ := sample(t, reg, "airlock_store_operation_duration_seconds", c...); n < 1 {
			t.Errorf("airlock_store_operation_duration_seconds%v counted %v calls, want some", c, n)
		}
	}
}
