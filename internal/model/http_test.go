package model

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/secret"
)

const testKey = "sk-test-SECRETKEY-0123456789abcdef"

// recorded is one request the fake provider received.
type recorded struct {
	method, path string
	header       http.Header
	body         []byte
}

// step answers one attempt.
type step func(w http.ResponseWriter, r *http.Request)

// fakeProvider is a local HTTP server that answers attempt i with steps[i]
// (the last step repeats) and records every request.
type fakeProvider struct {
	*httptest.Server
	mu    sync.Mutex
	reqs  []recorded
	steps []step
}

func newFakeProvider(t *testing.T, steps ...step) *fakeProvider {
	t.Helper()
	fp := &fakeProvider{steps: steps}
	fp.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fp.mu.Lock()
		fp.reqs = append(fp.reqs, recorded{r.Method, r.URL.Path, r.Header.Clone(), body})
		i := min(len(fp.reqs), len(fp.steps)) - 1
		s := fp.steps[i]
		fp.mu.Unlock()
		s(w, r)
	}))
	t.Cleanup(fp.Close)
	return fp
}

func (fp *fakeProvider) requests() []recorded {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return append([]recorded(nil), fp.reqs...)
}

// serveFixture streams a testdata file: a .sse file event by event with a
// flush after each, a .json file whole.
func serveFixture(name string) step {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("request-id", "req_test123")
		w.Header().Set("x-request-id", "req_test123")
		if strings.HasSuffix(name, ".json") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		for _, ev := range strings.SplitAfter(string(b), "\n\n") {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}
}

// status answers with an HTTP error.
func status(code int, body string, header ...string) step {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

// hangUp closes the connection without an answer; with reset it sends a
// TCP RST instead of a FIN.
func hangUp(reset bool) step {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	}
}

// stall sends the headers (or not) and then nothing until the client
// leaves.
func stall(headers bool) step {
	return func(w http.ResponseWriter, r *http.Request) {
		if headers {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}
}

// fakeClock advances only when slept on, and records each sleep.
type fakeClock struct {
	*clock.Fake
	mu      sync.Mutex
	sleeps  []time.Duration // guarded by mu
	onSleep func()
}

func newFakeClock() *fakeClock {
	return &fakeClock{Fake: clock.NewFake(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))}
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	hook := c.onSleep
	c.mu.Unlock()
	c.Advance(d)
	if hook != nil {
		hook()
	}
	return ctx.Err()
}

func (c *fakeClock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// testLogger logs through t and into buf.
func testLogger(t *testing.T, buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(buf, tWriter{t}), nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

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

// testOptions points a provider at fp with a fake clock and a jitter that
// always picks the longest wait, so backoff is exact and instant.
func testOptions(t *testing.T, base string, clock *fakeClock, logs *syncBuffer) Options {
	if logs == nil {
		logs = &syncBuffer{}
	}
	return Options{
		Key:     secret.NewValue([]byte(testKey)),
		BaseURL: base,
		Clock:   clock,
		Logger:  testLogger(t, logs),
		Retry:   RetryPolicy{Jitter: func(d time.Duration) time.Duration { return d }},
	}
}

// sampleRequest is the conversation of the request goldens.
func sampleRequest() Request {
	temp := 0.2
	return Request{
		System: "You are a careful engineer.",
		Messages: []Message{
			{Role: RoleUser, Content: []Part{TextPart("Fix the failing test.")}},
			{Role: RoleAssistant, Content: []Part{
				TextPart("Let me run the tests."),
				ToolCallPart(ToolCall{ID: "call_1", Name: "run_command", Args: json.RawMessage(`{"command":"go test ./..."}`)}),
			}},
			{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: "call_1", Content: "FAIL: TestAdd", IsError: true})}},
			{Role: RoleUser, Content: []Part{TextPart("Keep going.")}},
		},
		Tools: []ToolSpec{{
			Name:        "run_command",
			Description: "Run a shell command.",
			Schema:      json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`),
		}},
		MaxTokens:   1024,
		Temperature: &temp,
	}
}

// TestWireFormat sends the sample conversation to each API through New
// and checks the request against its golden (path, headers, body) and the
// reply against the fixture's want file.
func TestWireFormat(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		v1      bool   // the base URL includes /v1
		noKey   bool   // send no key
		path    string // expected request path
		golden  string
		fixture string
		auth    map[string]string // expected headers
	}{
		{
			"anthropic stream", "anthropic:claude-sonnet-4-5", false, false, "/v1/messages", "anthropic/request.json", "anthropic/tool_use.sse",
			map[string]string{"X-Api-Key": testKey, "Anthropic-Version": "2023-06-01", "Authorization": ""},
		},
		{
			"anthropic json", "anthropic:claude-sonnet-4-5", false, false, "/v1/messages", "anthropic/request.json", "anthropic/message.json",
			map[string]string{"X-Api-Key": testKey},
		},
		{
			"openai stream", "openai:gpt-4.1", true, false, "/v1/chat/completions", "chat/request.json", "chat/tool_calls.sse",
			map[string]string{"Authorization": "Bearer " + testKey, "X-Api-Key": ""},
		},
		{
			"openai json", "openai:gpt-4.1", true, false, "/v1/chat/completions", "chat/request.json", "chat/completion.json",
			map[string]string{"Authorization": "Bearer " + testKey},
		},
		{
			"compatible no key", "openai-compatible:llama3.1:8b", true, true, "/v1/chat/completions", "chat/request_compat.json", "chat/ollama_tool.sse",
			map[string]string{"Authorization": ""},
		},
		{
			"compatible with key", "openai-compatible:llama3.1:8b", true, false, "/v1/chat/completions", "chat/request_compat.json", "chat/noindex_nodone.sse",
			map[string]string{"Authorization": "Bearer " + testKey},
		},
		{
			"responses stream", "openai-responses:gpt-5", true, false, "/v1/responses", "responses/request.json", "responses/function_call.sse",
			map[string]string{"Authorization": "Bearer " + testKey},
		},
		{
			"responses json", "openai-responses:gpt-5", true, false, "/v1/responses", "responses/request.json", "responses/response.json",
			map[string]string{"Authorization": "Bearer " + testKey},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := newFakeProvider(t, serveFixture(tt.fixture))
			base := fp.URL
			if tt.v1 {
				base += "/v1"
			}
			opts := testOptions(t, base, newFakeClock(), nil)
			if tt.noKey {
				opts.Key = secret.Value{}
			}
			p, err := New(tt.spec, opts)
			if err != nil {
				t.Fatal(err)
			}
			req := sampleRequest()
			var log deltaLog
			got, err := p.Complete(context.Background(), req, log.add)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}

			reqs := fp.requests()
			if len(reqs) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.method != http.MethodPost || r.path != tt.path {
				t.Errorf("request = %s %s, want POST %s", r.method, r.path, tt.path)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			for k, v := range tt.auth {
				if got := r.header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			wantBody, err := os.ReadFile(filepath.Join("testdata", tt.golden))
			if err != nil {
				t.Fatal(err)
			}
			var gotJSON, wantJSON any
			if err := json.Unmarshal(r.body, &gotJSON); err != nil {
				t.Fatalf("request body is not JSON: %v", err)
			}
			if err := json.Unmarshal(wantBody, &wantJSON); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotJSON, wantJSON) {
				t.Errorf("request body =\n%s\nwant (%s)\n%s", r.body, tt.golden, wantBody)
			}

			want := *readWant(t, filepath.Join("testdata", tt.fixture)).Response
			want.ProviderRequestID = "req_test123"
			if want.Usage == (Usage{}) {
				// The server reported none: the adapter estimates, and says so.
				if !got.Usage.Estimated || got.Usage.InputTokens != int64(EstimateTokens(req)) || got.Usage.OutputTokens <= 0 {
					t.Errorf("usage = %+v, want an estimate with input %d", got.Usage, EstimateTokens(req))
				}
				want.Usage = got.Usage
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Complete = %+v\nwant %+v", got, want)
			}
			if strings.HasSuffix(tt.fixture, ".sse") {
				log.check(t, got)
			}
			checkRoundTrip(t, got)
		})
	}
}

// TestRequestDefaults checks the model and max_tokens fallbacks and that
// an invalid conversation is refused before anything is sent.
func TestRequestDefaults(t *testing.T) {
	fp := newFakeProvider(t, serveFixture("anthropic/max_tokens.sse"))
	opts := testOptions(t, fp.URL, newFakeClock(), nil)
	opts.MaxTokens = 777
	p, err := NewAnthropic("claude-default", opts)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("hi")}}}}
	if _, err := p.Complete(context.Background(), req, nil); err != nil {
		t.Fatal(err)
	}
	var body struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
	}
	if err := json.Unmarshal(fp.requests()[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "claude-default" || body.MaxTokens != 777 {
		t.Errorf("sent model %q max_tokens %d, want claude-default 777", body.Model, body.MaxTokens)
	}

	bad := Request{Messages: []Message{{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: "nope"})}}}}
	if _, err := p.Complete(context.Background(), bad, nil); err == nil {
		t.Error("Complete of an orphan tool result succeeded")
	}
	if n := len(fp.requests()); n != 1 {
		t.Errorf("server saw %d requests, want the invalid one not sent", n)
	}
}
