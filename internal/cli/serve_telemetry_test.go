package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// syncLog is a log sink read after the writer is done, written from the
// server's goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeTelemetry: airlock serve with telemetry.otlp_endpoint sends a
// run's spans and the API's to an OTLP/HTTP collector by the time it shuts
// down; /metrics (admin only) has the run's metrics with the Go runtime's;
// its log is JSON lines with request, tenant and run ids, and no secret
// the host knows.
func TestServeTelemetry(t *testing.T) {
	home, exe := serveHome(t, "alh-")

	var mu sync.Mutex
	var spans []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					spans = append(spans, s.GetName())
				}
			}
		}
	}))
	defer collector.Close()
	cfg := filepath.Join(home, "serve.yaml")
	if err := os.WriteFile(cfg, []byte("telemetry:\n  otlp_endpoint: "+collector.URL+"\n  service_name: airlock-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	if code := airlockIn(t, ctx, home, exe, io.Discard, "tenants", "create", "acme"); code != 0 {
		t.Fatalf("tenants create: %d", code)
	}
	var keyOut, adminOut bytes.Buffer
	airlockIn(t, ctx, home, exe, &keyOut, "keys", "create", "--tenant", "acme", "--name", "ci")
	airlockIn(t, ctx, home, exe, &adminOut, "keys", "create", "--tenant", "acme", "--name", "ops", "--scope", "admin")
	key, admin := strings.TrimSpace(keyOut.String()), strings.TrimSpace(adminOut.String())
	const secretKey = "sk-ant-test-0123456789abcdefghij"

	serveCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	logs := &syncLog{}
	done := make(chan int, 1)
	go func() {
		env := &cli.Env{
			Env: sandboxcli.Env{Ctx: serveCtx, Stdin: strings.NewReader(""), Stdout: pw, Stderr: logs, Home: home, Executor: exe},
			Getenv: func(k string) string {
				if k == "ANTHROPIC_API_KEY" {
					return secretKey
				}
				return ""
			},
		}
		code := cli.Main(env, []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--workers", "1", "--log-level", "debug"})
		pw.Close()
		done <- code
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		cancel()
		t.Fatalf("airlock serve exited with %d before listening: %s", <-done, logs.String())
	}
	m := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`).FindStringSubmatch(sc.Text())
	if m == nil {
		cancel()
		t.Fatalf("airlock serve said %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	base := m[1]

	script := "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo hi > out.txt\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	st, b := call(t, "POST", base+"/v1/runs", key, map[string]any{"task": "write " + secretKey, "script": script})
	var run apiRun
	if st != http.StatusCreated || json.Unmarshal(b, &run) != nil {
		t.Fatalf("create = %d %s", st, b)
	}
	waitRun(t, base, key, run.ID, "completed")
	if st, _ := call(t, "GET", base+"/metrics", key, nil); st != http.StatusForbidden {
		t.Errorf("/metrics without admin = %d", st)
	}
	st, metrics := call(t, "GET", base+"/metrics", admin, nil)
	if st != http.StatusOK {
		t.Fatalf("/metrics = %d", st)
	}
	for _, want := range []string{
		`airlock_runs_finished_total{status="completed"} 1`,
		`airlock_tool_duration_seconds_count{tool="run_command"} 1`,
		`airlock_sandboxes{origin="run"} 0`,
		`airlock_runs{status="queued"} 0`,
		`airlock_store_operation_duration_seconds_count{op="Append",outcome="ok"}`,
		`airlock_http_request_duration_seconds_count{code="201",route="POST /v1/runs"} 1`,
		`go_goroutines `,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("airlock serve exited %d: %s", code, logs.String())
	}
	mu.Lock()
	got := strings.Join(spans, "|")
	mu.Unlock()
	for _, want := range []string{"run", "step", "execute_tool run_command", "sandbox.exec", "POST /v1/runs", "GET /v1/runs/{id}"} {
		if !strings.Contains("|"+got+"|", "|"+want+"|") {
			t.Errorf("the collector got no %q span; got %s", want, got)
		}
	}
	out := logs.String()
	if strings.Contains(out, secretKey) {
		t.Error("a secret reached the log")
	}
	var named bool
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON", line)
		}
		if rec["run_id"] == run.ID && rec["tenant"] == "acme" && rec["request_id"] != nil && rec["trace_id"] != nil {
			named = true
		}
	}
	if !named {
		t.Errorf("no log line names the run with its tenant, request and trace ids:\n%s", out)
	}
}
