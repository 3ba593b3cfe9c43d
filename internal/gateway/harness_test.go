package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/secret/token"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// The real provider keys of the test host. They must reach the upstream
// and never the sandbox side.
const (
	openaiKey    = "sk-proj-REALopenaiKEY-0123456789abcdef"
	anthropicKey = "sk-ant-api03-REALanthropicKEY-0123456789"
)

// fixture reads a wire-format fixture of the model package's tests: the
// exact bytes the providers send.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "model", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// seen is one request an upstream got.
type seen struct {
	Path   string
	Header http.Header
	Body   map[string]any
}

// upstream is a local server speaking the providers' exact wire formats:
// /openai/v1/... (OpenAI, key openaiKey), /local/v1/... (an
// OpenAI-compatible server without a key) and /anthropic/v1/...
// (Anthropic, key anthropicKey). What it answers depends on the model:
//
//	endless     a chat or messages stream of many deltas that ignores any
//	            output bound (for budgets cut mid-stream)
//	echo-key    an error that quotes the key it was sent
//	broken      a chat stream that stops without its last event
//	no-usage    a whole chat completion without usage
//	anything else: the fixtures of internal/model/testdata
type upstream struct {
	t   testing.TB
	srv *httptest.Server
	// endless is how many deltas an endless stream sends.
	endless int

	mu sync.Mutex
	// reqs is guarded by mu.
	reqs []seen
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{t: t, endless: 5000}
	u.srv = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs...)
}

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	u.mu.Lock()
	u.reqs = append(u.reqs, seen{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	u.mu.Unlock()
	prefix, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	wantAuth := map[string][2]string{
		"openai":    {"Authorization", "Bearer " + openaiKey},
		"anthropic": {"X-Api-Key", anthropicKey},
		"local":     {"Authorization", ""},
	}[prefix]
	if got := r.Header.Get(wantAuth[0]); got != wantAuth[1] {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`)
		return
	}
	model, _ := body["model"].(string)
	stream, _ := body["stream"].(bool)
	if model == "echo-key" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s.","type":"invalid_request_error","code":"invalid_api_key"}}`, wantAuth[1])
		return
	}
	switch rest {
	case "v1/chat/completions":
		switch {
		case model == "endless" && stream:
			u.endlessChat(w)
		case model == "broken" && stream:
			sse(w)
			b := fixture(u.t, "chat/text.sse")
			_, _ = w.Write(b[:bytes.LastIndex(b, []byte("data: {"))])
		case model == "no-usage":
			w.Header().Set("Content-Type", "application/json")
			b := fixture(u.t, "chat/completion.json")
			_, _ = w.Write(b[:bytes.Index(b, []byte(`,
  "usage"`))])
			fmt.Fprint(w, "}")
		case stream:
			sse(w)
			b := fixture(u.t, "chat/tool_calls.sse")
			if so, _ := body["stream_options"].(map[string]any); so["include_usage"] != true {
				// Like OpenAI: no usage chunk unless asked.
				i := bytes.Index(b, []byte(`data: {"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741570283,"model":"gpt-4.1-2025-04-14","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[],"usage"`))
				j := bytes.Index(b, []byte("data: [DONE]"))
				b = append(append([]byte(nil), b[:i]...), b[j:]...)
			}
			_, _ = w.Write(b)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(fixture(u.t, "chat/completion.json"))
		}
	case "v1/responses":
		if stream {
			sse(w)
			_, _ = w.Write(fixture(u.t, "responses/function_call.sse"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(fixture(u.t, "responses/response.json"))
	case "v1/embeddings":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0023064255,-0.009327292]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`)
	case "v1/messages":
		if r.Header.Get("Anthropic-Version") == "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"type":"error","error":{"type":"invalid_request_error","message":"anthropic-version: header is required"}}`)
			return
		}
		switch {
		case model == "endless" && stream:
			u.endlessMessages(w)
		case stream:
			sse(w)
			_, _ = w.Write(fixture(u.t, "anthropic/tool_use.sse"))
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(fixture(u.t, "anthropic/message.json"))
		}
	case "v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"input_tokens":2095}`)
	default:
		http.NotFound(w, r)
	}
}

func sse(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("X-Request-Id", "req_123")
}

// endlessChat streams many one-token deltas, flushed one by one, then its
// usage; it stops when the gateway goes away.
func (u *upstream) endlessChat(w http.ResponseWriter) {
	sse(w)
	f := w.(http.Flusher)
	for i := range u.endless {
		if _, err := fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"endless\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}]}\n\n", i%10); err != nil {
			return
		}
		f.Flush()
	}
	fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"endless\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", u.endless, u.endless+10)
}

func (u *upstream) endlessMessages(w http.ResponseWriter) {
	sse(w)
	f := w.(http.Flusher)
	fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"endless\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
	fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range u.endless {
		if _, err := fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok%d \"}}\n\n", i%10); err != nil {
			return
		}
		f.Flush()
	}
	fmt.Fprintf(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":%d}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", u.endless)
}

type (
	egressIdentity = bridge.Identity
	priceT         = price.Price
)

// prices of the test host, in micro-credits per million tokens.
var prices = price.Table{
	"openai":    {Input: 2_000_000, Output: 8_000_000, CacheRead: 500_000},
	"anthropic": {Input: 3_000_000, Output: 15_000_000, CacheRead: 300_000, CacheWrite: 3_750_000},
	"local":     {Input: 100_000, Output: 200_000},
}

// sandbox is one sandbox's view: its proxy socket and its token.
type sandbox struct {
	id    bridge.Identity
	sock  string
	token string
	proxy *egress.Proxy
	audit *auditLog
}

// env is one host: a token store, a SQLite store with runs and a ledger,
// a Gateway over a local upstream, and the sandboxes' egress proxies,
// each on its own unix socket with the Gateway as its Local handler.
type env struct {
	t      testing.TB
	clock  *clock.Fake
	tokens *token.Store
	store  *sqlite.Store
	up     *upstream
	gw     *gateway.Gateway
	red    *secret.Redactor

	mu sync.Mutex
	// policies (by run) and calls are guarded by mu.
	policies map[string]*policy.LLM
	calls    []gateway.Call
}

// envOptions change an env before its Gateway is built.
type envOptions struct {
	cfg func(*gateway.Config)
}

func newEnv(t testing.TB, opt envOptions) *env {
	t.Helper()
	e := &env{t: t, clock: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)), policies: map[string]*policy.LLM{}, red: secret.NewRedactor()}
	e.tokens = token.NewStore(e.clock.Now)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.store = st
	e.up = newUpstream(t)
	key := func(k string) func(context.Context) (secret.Value, error) {
		return func(context.Context) (secret.Value, error) { return secret.NewValue([]byte(k)), nil }
	}
	cfg := gateway.Config{
		Tokens: e.tokens,
		Upstreams: map[string]gateway.Upstream{
			"openai":    {Kind: gateway.KindOpenAI, BaseURL: e.up.srv.URL + "/openai/v1", Key: key(openaiKey)},
			"anthropic": {Kind: gateway.KindAnthropic, BaseURL: e.up.srv.URL + "/anthropic", Key: key(anthropicKey)},
			"local":     {Kind: gateway.KindOpenAI, BaseURL: e.up.srv.URL + "/local/v1/"},
		},
		Policy: func(_ context.Context, id bridge.Identity) (*policy.LLM, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.policies[id.Run], nil
		},
		Prices:   prices,
		Ledger:   st,
		Record:   e.record,
		Redactor: e.red,
		Now:      e.clock.Now,
		Logger:   nil,
	}
	if opt.cfg != nil {
		opt.cfg(&cfg)
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	t.Cleanup(func() { gw.Close() })
	e.gw = gw
	return e
}

// record is Config.Record: it appends the call's events to the run's log
// and returns the seq of the llm.call event.
func (e *env) record(ctx context.Context, id bridge.Identity, c gateway.Call) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	run, err := e.store.GetRun(ctx, id.Run)
	if err != nil {
		return 0, err
	}
	d, err := event.New(c.Event)
	if err != nil {
		return 0, err
	}
	drafts := []event.Event{d}
	if c.Exhausted != nil {
		x, err := event.New(*c.Exhausted)
		if err != nil {
			return 0, err
		}
		drafts = append(drafts, x)
	}
	evs, err := e.store.Append(ctx, id.Run, run.LastSeq+1, drafts)
	if err != nil {
		return 0, err
	}
	e.calls = append(e.calls, c)
	return evs[0].Seq, nil
}

func (e *env) recorded() []gateway.Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]gateway.Call(nil), e.calls...)
}

// lastCall waits for the n-th recorded call (recording follows the
// answer) and returns it.
func (e *env) waitCalls(n int) []gateway.Call {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs := e.recorded()
		if len(cs) >= n {
			return cs
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d calls recorded, want %d", len(cs), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// newRun creates a run of tenant with the llm policy pol.
func (e *env) newRun(tenant string, pol *policy.LLM) string {
	e.t.Helper()
	id := event.NewRunID(time.Now())
	if _, err := e.store.CreateRun(context.Background(), store.Run{ID: id, Tenant: tenant, Status: event.StatusRunning}); err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.policies[id] = pol
	e.mu.Unlock()
	return id
}

// sandbox starts the egress proxy of a sandbox of run (its Local handler
// the Gateway) and issues its token.
func (e *env) sandbox(tenant, run, name string) *sandbox {
	e.t.Helper()
	s := &sandbox{id: bridge.Identity{Tenant: tenant, Run: run, Sandbox: name}, audit: &auditLog{}}
	tok, err := e.tokens.Issue(token.Scope{Tenant: tenant, Run: run, Sandbox: name, Purpose: gateway.Purpose}, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	s.token = tok
	e.red.Add(secret.NewValue([]byte(tok)))
	p, err := egress.New(egress.Config{Identity: s.id, Policy: &policy.Default().Network, Audit: egress.NewJSONLSink(s.audit), Local: e.gw})
	if err != nil {
		e.t.Fatal(err)
	}
	s.proxy = p
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		e.t.Fatal(err)
	}
	s.sock = filepath.Join(dir, "s")
	l, err := net.Listen("unix", s.sock)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(l) }()
	e.t.Cleanup(func() {
		_ = p.Close()
		if err := <-done; err != nil {
			e.t.Errorf("Serve: %v", err)
		}
		os.RemoveAll(dir)
	})
	return s
}

// client is an HTTP client in the sandbox: it reaches 127.0.0.1:3128,
// which is the proxy socket.
func (s *sandbox) client() *http.Client {
	return &http.Client{Transport: s.transport(), Timeout: 60 * time.Second}
}

func (s *sandbox) transport() *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", s.sock)
		},
		MaxIdleConnsPerHost: 16,
	}
}

const base = "http://127.0.0.1:3128"

// post sends body to path with the sandbox's token in the header an SDK
// of kind uses, and returns the status, headers and body.
func (s *sandbox) post(t testing.TB, kind, path, body string) (int, http.Header, string) {
	t.Helper()
	return s.postToken(t, kind, path, body, s.token)
}

func (s *sandbox) postToken(t testing.TB, kind, path, body, tok string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if kind == gateway.KindAnthropic {
		req.Header.Set("X-Api-Key", tok)
		req.Header.Set("Anthropic-Version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", path, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// auditLog collects the proxy's audit records.
type auditLog struct {
	mu sync.Mutex
	// buf is guarded by mu.
	buf bytes.Buffer
}

func (a *auditLog) Write(b []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.Write(b)
}

func (a *auditLog) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.String()
}

// allowAll is an llm policy for most tests.
func allowAll() *policy.LLM {
	return &policy.LLM{Enabled: true, Models: []string{"*"}, Map: policy.ModelMap{"fast": "local:llama3"}}
}

// grant makes tenant metered with micro credits.
func (e *env) grant(tenant string, micro int64) {
	e.t.Helper()
	if _, err := e.store.AddLedgerEntry(context.Background(), store.LedgerEntry{Tenant: tenant, Kind: store.LedgerGrant, Amount: micro}); err != nil {
		e.t.Fatal(err)
	}
}

// debits returns the tenant's debits.
func (e *env) debits(tenant string) []store.LedgerEntry {
	e.t.Helper()
	es, err := e.store.LedgerEntries(context.Background(), tenant, 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []store.LedgerEntry
	for _, x := range es {
		if x.Kind == store.LedgerDebit {
			out = append(out, x)
		}
	}
	return out
}

// noSecrets fails t when s holds a provider key.
func noSecrets(t testing.TB, what, s string) {
	t.Helper()
	for _, k := range []string{openaiKey, anthropicKey} {
		if strings.Contains(s, k) {
			t.Errorf("%s holds a provider key:\n%s", what, s)
		}
	}
}
