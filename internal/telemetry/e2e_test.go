package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/telemetry"
)

var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// decideByPolicy is the engine's policy hook, as the host's.
func decideByPolicy(_ context.Context, q engine.PolicyQuery) event.PolicyDecision {
	doc := policy.Default()
	if len(q.Run.Policy) > 0 {
		var err error
		if doc, err = policy.Parse(q.Run.Policy); err != nil {
			return event.PolicyDecision{Decision: event.DecisionDeny, Rule: "policy", Reason: "does not load"}
		}
	}
	return engine.DecideTool(doc, q)
}

const (
	e2eScript = `turns:
  - tool_calls:
      - name: run_command
        args: {command: "sleep 0.02; echo OUTPUT-MARKER ` + secretValue + `; git push ARG-MARKER || echo pushed"}
  - tool_calls:
      - name: finish
        args: {summary: "SUMMARY-MARKER"}
`
	e2ePolicy = `tools:
  run_command:
    rules:
      - when: args.command.contains("git push")
        action: ask
        reason: pushing needs a person
`
)

// syncBuffer is a log sink tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeEndToEnd wires the telemetry as airlock serve does (the store
// timed, the engine's events fed in, the API's registry and HTTP spans,
// the redacting log) around a real SQLite store, engine and sandbox; a
// scripted run created through the API waits for an approval given
// through the API and completes; then /metrics, scraped through the API
// with an admin key, counts it, and its spans and the API's are in the
// exporter, without a secret, an argument or an output anywhere.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	red := newRedactor()
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.New(telemetry.Options{SpanExporter: exp, Redactor: red})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: red})
	if err != nil {
		t.Fatal(err)
	}
	st := tel.WrapStore(raw)
	defer st.Close()
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	backend, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run")})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	feed := server.NewFeed()
	eng, err := engine.New(engine.Options{
		Store: st, Blobs: bl, Backend: tel.Metrics().Sandboxes(telemetry.OriginRun, backend), LockDir: filepath.Join(dir, "locks"),
		Poll: 20 * time.Millisecond, Policy: decideByPolicy, OnEvents: func(evs []event.Event) {
			feed.Publish(evs)
			for _, ev := range evs {
				tel.Event(ev)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tel.UseStore(st); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeys(st, nil)
	key := func(scopes ...string) string {
		k, _, err := keys.Create(ctx, "acme", "test", scopes, auth.FormatAirlock)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	writer, approver, admin := key("runs:read", "runs:write"), key("approvals"), key("admin")
	logs := &syncBuffer{}
	logger := slog.New(telemetry.NewRedactingHandler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}), red))
	srv, err := server.New(server.Options{
		Store: st, Blobs: bl, Engine: eng, Auth: keys, Feed: feed, Logger: logger,
		Metrics: tel.Registry(), Config: server.Config{Rate: 1e6, Burst: 1e6},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	hs.Handler = tel.HTTP(hs.Handler)
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = hs
	ts.Start()
	defer ts.Close()

	call := func(want int, method, path, key string, body any, out any) []byte {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, ts.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	var run api.Run
	call(http.StatusCreated, "POST", "/v1/runs", writer, map[string]any{
		"task": "TASK-MARKER " + secretValue, "script": e2eScript,
		"policy_document": e2ePolicy,
	}, &run)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := eng.Drive(ctx, run.ID); err != nil {
			t.Errorf("Drive: %v", err)
		}
	}()
	var approval api.Approval
	for deadline := time.Now().Add(60 * time.Second); approval.ID == ""; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no approval in a minute")
		}
		var as struct{ Approvals []api.Approval }
		call(http.StatusOK, "GET", "/v1/approvals", approver, nil, &as)
		if len(as.Approvals) > 0 {
			approval = as.Approvals[0]
		}
	}
	if n, _ := sample(t, tel.Registry(), "airlock_approvals_pending"); n != 1 {
		t.Errorf("airlock_approvals_pending = %v while one waits", n)
	}
	call(http.StatusOK, "POST", "/v1/approvals/"+approval.ID+"/approve", approver, nil, nil)
	wg.Wait()
	call(http.StatusOK, "GET", "/v1/runs/"+run.ID, writer, nil, &run)
	if run.Status != event.StatusCompleted {
		t.Fatalf("run %s is %s (%s), want completed", run.ID, run.Status, run.Reason)
	}

	// The metrics, as a scraper reads them.
	text := call(http.StatusOK, "GET", "/metrics", admin, nil, nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, text)
	}
	value := func(name string, labels ...string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
		return 0, false
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_runs_created_total", nil, 1},
		{"airlock_runs_finished_total", []string{"status", "completed"}, 1},
		{"airlock_runs", []string{"status", "queued"}, 0},
		{"airlock_runs", []string{"status", "running"}, 0},
		{"airlock_step_duration_seconds", nil, 2},
		{"airlock_model_call_duration_seconds", nil, 2},
		{"airlock_tool_duration_seconds", []string{"tool", "run_command"}, 1},
		{"airlock_tool_duration_seconds", []string{"tool", "finish"}, 1},
		{"airlock_tool_calls_total", []string{"tool", "run_command", "outcome", "exited"}, 1},
		{"airlock_sandbox_exec_duration_seconds", []string{"tool", "run_command"}, 1},
		{"airlock_sandbox_create_duration_seconds", nil, 1},
		{"airlock_sandboxes", []string{"origin", "run"}, 0},
		{"airlock_approvals_requested_total", nil, 1},
		{"airlock_approvals_pending", nil, 0},
		{"airlock_approval_wait_seconds", []string{"decision", "approved"}, 1},
		{"airlock_verifications_total", []string{"result", "passed"}, 1},
		{"airlock_http_requests_total", []string{"route", "POST /v1/runs", "code", "201"}, 1},
		{"airlock_http_request_duration_seconds", []string{"route", "POST /v1/approvals/{id}/approve", "code", "200"}, 1},
		{"airlock_api_runs_created_total", nil, 1},
	} {
		if got, ok := value(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, op := range []string{"CreateRunWith", "Append", "AppendStatus", "AcquireLease", "APIKeyByHash", "ListRuns"} {
		if n, _ := value("airlock_store_operation_duration_seconds", "op", op, "outcome", "ok"); n < 1 {
			t.Errorf("store calls of %s counted %v times", op, n)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	for _, leak := range append([]string{"acme", run.ID}, markers...) {
		if bytes.Contains(text, []byte(leak)) {
			t.Errorf("/metrics shows %q", leak)
		}
	}

	// The spans: the run's, and the API's.
	spans := exp.GetSpans()
	var runSpan tracetest.SpanStub
	for _, s := range named(spans, "run") {
		if v, _ := attr(s, "airlock.run.id"); v.AsString() == run.ID {
			runSpan = s
		}
	}
	if v, _ := attr(runSpan, "airlock.tenant"); v.AsString() != "acme" {
		t.Fatalf("no run span for %s with its tenant (spans: %d)", run.ID, len(spans))
	}
	for _, name := range []string{"step", "execute_tool run_command", "execute_tool finish", "sandbox.exec", "sandbox.provision", "approval.wait", "verification"} {
		got := named(spans, name)
		if len(got) == 0 {
			t.Errorf("no %s span", name)
		}
		for _, s := range got {
			if s.SpanContext.TraceID() != runSpan.SpanContext.TraceID() {
				t.Errorf("%s span outside the run's trace", name)
			}
		}
	}
	create := one(t, spans, "POST /v1/runs")
	for key, want := range map[string]any{"airlock.tenant": "acme", "http.response.status_code": int64(201)} {
		if v, _ := attr(create, key); v.AsInterface() != want {
			t.Errorf("POST /v1/runs span: %s = %v, want %v", key, v.String(), want)
		}
	}
	if v, _ := attr(create, "airlock.request_id"); !strings.HasPrefix(v.AsString(), "req_") {
		t.Errorf("POST /v1/runs span: request id %q", v.String())
	}
	approveSpan := one(t, spans, "POST /v1/approvals/{id}/approve")
	if v, _ := attr(approveSpan, "airlock.run.id"); v.AsString() != run.ID {
		t.Errorf("approval request's span names run %q, want %s", v.String(), run.ID)
	}
	if found := leaks(spans); len(found) > 0 {
		t.Errorf("spans carry what they must not: %q", found)
	}

	// The log: JSON lines with request, tenant, run and trace ids, and
	// no secret.
	out := logs.String()
	if strings.Contains(out, secretValue) {
		t.Errorf("the secret reached the log")
	}
	var sawRun bool
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec["run_id"] == run.ID && rec["tenant"] == "acme" && rec["request_id"] != nil && rec["trace_id"] != nil {
			sawRun = true
		}
	}
	if !sawRun {
		t.Errorf("no log line names the run with its tenant, request and trace ids:\n%s", out)
	}
}
