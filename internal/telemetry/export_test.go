package telemetry_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/airlockrun/airlock/internal/telemetry"
)

// collector is an OTLP/HTTP traces endpoint on loopback that keeps what
// it receives.
type collector struct {
	srv *httptest.Server

	mu sync.Mutex
	// posts counts requests; spans are the names of the spans received
	// (both guarded by mu).
	posts int
	spans []string
	attrs map[string]map[string]string // span name -> attribute -> value
	trace map[string]string            // span name -> trace id (hex)
	res   map[string]string
}

func newCollector(t *testing.T) *collector {
	c := &collector{attrs: map[string]map[string]string{}, trace: map[string]string{}, res: map[string]string{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.posts++
		c.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("collector got %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("collector: %v", err)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				c.res[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					c.spans = append(c.spans, s.GetName())
					c.trace[s.GetName()] = hex.EncodeToString(s.GetTraceId())
					a := map[string]string{}
					for _, kv := range s.GetAttributes() {
						a[kv.GetKey()] = kv.GetValue().GetStringValue()
					}
					c.attrs[s.GetName()] = a
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// TestOTLPExport: with an endpoint configured, a run's spans and an API
// request's span reach an OTLP/HTTP collector, with the service's name,
// by Shutdown.
func TestOTLPExport(t *testing.T) {
	t.Parallel()
	c := newCollector(t)
	tel, err := telemetry.New(telemetry.Options{
		Config:   telemetry.Config{OTLPEndpoint: c.srv.URL, ServiceName: "airlock-test"},
		Redactor: newRedactor(), Version: "v9",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Tracing() {
		t.Fatal("Tracing() = false with an endpoint")
	}
	l := fullRun(t, time.Now().Add(-time.Minute).Truncate(time.Millisecond))
	for _, ev := range l.events() {
		tel.Event(ev)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	api := httptest.NewServer(tel.HTTP(mux))
	defer api.Close()
	resp, err := http.Get(api.URL + "/v1/runs/" + l.runID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, want := range []string{
		"run", "step", "chat claude-test", "execute_tool run_command", "sandbox.exec", "egress.request",
		"approval.wait", "verification", "GET /v1/runs/{id}",
	} {
		if _, ok := c.attrs[want]; !ok {
			t.Errorf("collector did not get a %q span; got %q", want, c.spans)
		}
	}
	if got := c.attrs["run"]["airlock.run.id"]; got != l.runID {
		t.Errorf("run span's run id %q, want %s", got, l.runID)
	}
	if c.trace["step"] != c.trace["run"] {
		t.Errorf("step in trace %s, run in %s", c.trace["step"], c.trace["run"])
	}
	if got := c.attrs["GET /v1/runs/{id}"]["http.route"]; got != "GET /v1/runs/{id}" {
		t.Errorf("API span's http.route %q", got)
	}
	if c.res["service.name"] != "airlock-test" || c.res["service.version"] != "v9" {
		t.Errorf("resource %v", c.res)
	}
	for name, a := range c.attrs {
		for k, v := range a {
			for _, m := range markers {
				if strings.Contains(v, m) {
					t.Errorf("exported span %s: %s carries %q", name, k, m)
				}
			}
		}
	}
}

// TestNothingWhenUnconfigured: without an endpoint there are no traces:
// no exporter goroutine, the HTTP middleware is the handler itself, and
// nothing is sent, even with the standard environment variable set (only
// the serve command reads it).
func TestNothingWhenUnconfigured(t *testing.T) {
	c := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.srv.URL+"/v1/traces")
	tel, err := telemetry.New(telemetry.Options{Redactor: newRedactor()})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Tracing() {
		t.Error("Tracing() = true without an endpoint")
	}
	for _, ev := range fullRun(t, time.Now().Add(-time.Minute)).events() {
		tel.Event(ev)
	}
	h := http.NewServeMux()
	if got := tel.HTTP(h); got != http.Handler(h) {
		t.Errorf("HTTP(h) = %T, want h itself", got)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	if strings.Contains(stacks, "go.opentelemetry.io/") {
		t.Errorf("an OpenTelemetry goroutine runs without an endpoint:\n%s", stacks)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.posts != 0 {
		t.Errorf("the collector got %d posts", c.posts)
	}
	// Metrics still count.
	if n, _ := sample(t, tel.Registry(), "airlock_runs_finished_total", "status", "completed"); n != 1 {
		t.Errorf("runs finished %v, want 1", n)
	}
}

// TestConfig: the endpoint's forms and the problems Validate reports.
func TestConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		endpoint, want, err string
	}{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces", ""},
		{"https://collector.example:4318/", "https://collector.example:4318/v1/traces", ""},
		{"http://collector:4318/otlp/v1/traces", "http://collector:4318/otlp/v1/traces", ""},
		{"collector:4318", "", "want an http:// or https:// URL"},
		{"ftp://collector", "", "want an http:// or https:// URL"},
		{"http://", "", "want an http:// or https:// URL"},
		{"http://user:hunter2@[::1", "", "want an http"},
	} {
		c := telemetry.Config{OTLPEndpoint: tc.endpoint}
		got, err := c.TracesURL()
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("TracesURL(%q) = %q, %v; want %q, %q", tc.endpoint, got, err, tc.want, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("TracesURL(%q): error quotes the password: %v", tc.endpoint, err)
		}
		if verr := c.Validate(); (verr == nil) != (tc.err == "") {
			t.Errorf("Validate(%q) = %v", tc.endpoint, verr)
		}
	}
	if err := (telemetry.Config{ServiceName: "a\nb"}).Validate(); err == nil {
		t.Error("Validate accepts a service name with a newline")
	}
	if got := (telemetry.Config{}).WithDefaults().ServiceName; got != telemetry.DefaultServiceName {
		t.Errorf("default service name %q", got)
	}
}
