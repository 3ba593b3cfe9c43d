package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/secret/token"
)

const (
	chatPath       = "/llm/openai/v1/chat/completions"
	responsesPath  = "/llm/openai/v1/responses"
	embeddingsPath = "/llm/openai/v1/embeddings"
	messagesPath   = "/llm/anthropic/v1/messages"
	countPath      = "/llm/anthropic/v1/messages/count_tokens"
	localChatPath  = "/llm/local/v1/chat/completions"
)

// TestCalls sends a call of every kind through a real proxy socket and
// checks what the sandbox got, what the upstream got, what was recorded
// and what was debited: the upstream's reported usage, priced.
func TestCalls(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.grant("acme", 1_000_000_000)
	run := e.newRun("acme", allowAll())
	sb := e.sandbox("acme", run, "sb-1")
	tests := []struct {
		name, kind, path, body string
		// wantBody is in the sandbox's answer; wantNot is not.
		wantBody, wantNot string
		spec              string
		usage             event.Usage
		stream            bool
	}{
		{
			"chat", gateway.KindOpenAI, chatPath, `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`,
			`"name": "run_command"`, "", "openai:gpt-4o-mini",
			event.Usage{InputTokens: 82, OutputTokens: 17},
			false,
		},
		{
			"chat stream", gateway.KindOpenAI, chatPath, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"data: [DONE]", `"choices":[],"usage"`, "openai:gpt-4o-mini",
			event.Usage{InputTokens: 181, OutputTokens: 43, CacheReadTokens: 128},
			true,
		},
		{
			"chat stream with usage", gateway.KindOpenAI, chatPath, `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
			`"choices":[],"usage":{"prompt_tokens":181`, "", "openai:gpt-4o-mini",
			event.Usage{InputTokens: 181, OutputTokens: 43, CacheReadTokens: 128},
			true,
		},
		{
			"responses", gateway.KindOpenAI, responsesPath, `{"model":"gpt-4.1","input":"fix it"}`,
			`"Done: the sign is fixed."`, "", "openai:gpt-4.1",
			event.Usage{InputTokens: 328, OutputTokens: 52},
			false,
		},
		{
			"responses stream", gateway.KindOpenAI, responsesPath, `{"model":"gpt-4.1","input":"fix it","stream":true}`,
			"event: response.completed\n", "", "openai:gpt-4.1",
			event.Usage{InputTokens: 1200, OutputTokens: 150, CacheReadTokens: 1024},
			true,
		},
		{
			"embeddings", gateway.KindOpenAI, embeddingsPath, `{"model":"text-embedding-3-small","input":"hello"}`,
			`"embedding":[0.0023064255`, "", "openai:text-embedding-3-small",
			event.Usage{InputTokens: 8},
			false,
		},
		{
			"messages", gateway.KindAnthropic, messagesPath, `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`,
			`"name": "edit_file"`, "", "anthropic:claude-sonnet-4-5",
			event.Usage{InputTokens: 2095, OutputTokens: 503},
			false,
		},
		{
			"messages stream", gateway.KindAnthropic, messagesPath, `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[]}`,
			"event: message_stop\n", "", "anthropic:claude-sonnet-4-5",
			event.Usage{InputTokens: 2572, OutputTokens: 89, CacheReadTokens: 2000, CacheWriteTokens: 100},
			true,
		},
		{
			"count tokens", gateway.KindAnthropic, countPath, `{"model":"claude-sonnet-4-5","messages":[]}`,
			`{"input_tokens":2095}`, "", "anthropic:claude-sonnet-4-5",
			event.Usage{},
			false,
		},
		{
			"mapped to a local server", gateway.KindOpenAI, chatPath, `{"model":"fast","messages":[]}`,
			`"name": "run_command"`, "", "local:llama3",
			event.Usage{InputTokens: 82, OutputTokens: 17},
			false,
		},
		{
			"local server addressed directly", gateway.KindOpenAI, localChatPath, `{"model":"qwen3","stream":true,"messages":[]}`,
			"data: [DONE]", "", "local:qwen3",
			event.Usage{InputTokens: 181, OutputTokens: 43, CacheReadTokens: 128},
			true,
		},
	}
	var wantTotal int64
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, body := sb.post(t, tt.kind, tt.path, tt.body)
			if status != 200 {
				t.Fatalf("POST %s = %d %s", tt.path, status, body)
			}
			if !strings.Contains(body, tt.wantBody) || tt.wantNot != "" && strings.Contains(body, tt.wantNot) {
				t.Errorf("answer lacks %q or has %q:\n%s", tt.wantBody, tt.wantNot, body)
			}
			if tt.stream && h.Get("Content-Type") != "text/event-stream; charset=utf-8" {
				t.Errorf("stream Content-Type = %q", h.Get("Content-Type"))
			}
			noSecrets(t, "the sandbox's answer", body)
			noSecrets(t, "the sandbox's answer headers", strings.Join(h.Values("X-Request-Id"), ""))
			c := e.waitCalls(i + 1)[i]
			ev := c.Event
			up, m, _ := strings.Cut(tt.spec, ":")
			if ev.Outcome != event.LLMOutcomeOK || ev.Status != 200 || ev.Upstream != up || ev.UpstreamModel != m ||
				ev.Sandbox != "sb-1" || ev.Stream != tt.stream || ev.Usage != tt.usage || ev.UsageEstimated || c.Exhausted != nil {
				t.Errorf("recorded %+v", c)
			}
			cost, err := prices.Cost(tt.spec, tt.usage)
			if err != nil {
				t.Fatal(err)
			}
			if tt.usage == (event.Usage{}) {
				cost = 0
			}
			if ev.CostMicroCredits != cost {
				t.Errorf("cost = %d, want %d", ev.CostMicroCredits, cost)
			}
			wantTotal += cost
		})
	}
	// The upstream saw the real keys (it refuses anything else) and never
	// the sandbox's token; the sandbox's own auth headers stayed behind.
	reqs := e.up.requests()
	if len(reqs) != len(tests) {
		t.Fatalf("upstream got %d requests, want %d", len(reqs), len(tests))
	}
	for _, r := range reqs {
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, sb.token) {
					t.Errorf("upstream %s got the sandbox's token in %s", r.Path, k)
				}
			}
		}
		if strings.HasPrefix(r.Path, "/local/") && (r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "") {
			t.Errorf("the keyless upstream got auth headers %v", r.Header)
		}
		if strings.HasPrefix(r.Path, "/anthropic/") && r.Header.Get("Authorization") != "" {
			t.Errorf("Anthropic got an Authorization header")
		}
		if r.Body["stream"] == true && strings.HasSuffix(r.Path, "/chat/completions") {
			if so, _ := r.Body["stream_options"].(map[string]any); so["include_usage"] != true {
				t.Errorf("a chat stream went upstream without include_usage: %v", r.Body)
			}
		}
	}
	if m := reqs[len(reqs)-2].Body["model"]; m != "llama3" {
		t.Errorf("the mapped call went upstream with model %v, want llama3", m)
	}
	// The ledger: one debit per priced call, each naming its llm.call.
	settle(t, e)
	ds := e.debits("acme")
	var sum int64
	evs, err := e.store.Events(context.Background(), run, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		sum += d.Amount
		if d.RunID != run || d.Seq < 1 || d.Seq > int64(len(evs)) || evs[d.Seq-1].Type != event.TypeLLMCall {
			t.Errorf("debit %+v does not name an llm.call of the run", d)
			continue
		}
		p, _ := evs[d.Seq-1].Unpack()
		if c := p.(*event.LLMCall); c.CostMicroCredits != d.Amount {
			t.Errorf("debit %d for seq %d, whose call cost %d", d.Amount, d.Seq, c.CostMicroCredits)
		}
	}
	if sum != wantTotal || len(ds) != len(tests)-1 {
		t.Errorf("%d debits summing to %d, want %d summing to %d", len(ds), sum, len(tests)-1, wantTotal)
	}
	if got := e.gw.Totals("acme", run); got.MicroCredits != wantTotal {
		t.Errorf("Totals = %+v, want %d micro-credits", got, wantTotal)
	}
	bal, err := e.store.Balance(context.Background(), "acme")
	if err != nil || bal != 1_000_000_000-wantTotal {
		t.Errorf("Balance = %d, %v; want %d", bal, err, 1_000_000_000-wantTotal)
	}
	// The proxy audited each call as a local request.
	if n := strings.Count(sb.audit.String(), `"local":true`); n != len(tests) {
		t.Errorf("%d local audit records, want %d:\n%s", n, len(tests), sb.audit.String())
	}
}

// TestModelClients drives the gateway with airlock's own provider clients
// (internal/model), which decode each provider's stream strictly, tool
// calls included: what they decode through the gateway is what the
// fixtures hold.
func TestModelClients(t *testing.T) {
	e := newEnv(t, envOptions{})
	run := e.newRun("acme", allowAll())
	sb := e.sandbox("acme", run, "sb-1")
	opts := func(path string) model.Options {
		return model.Options{
			Key: secret.NewValue([]byte(sb.token)), BaseURL: base + path, HTTPClient: sb.client(),
			Retry: model.RetryPolicy{MaxAttempts: 1},
		}
	}
	req := model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "run the tests"}}}},
		Tools:    []model.ToolSpec{{Name: "run_command", Schema: json.RawMessage(`{"type":"object"}`)}},
	}
	chat, err := model.NewOpenAIChat("gpt-4o-mini", opts("/llm/openai/v1"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := chat.Complete(t.Context(), req, func(model.Delta) {})
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].Name != "run_command" || string(resp.ToolCalls[0].Args) != `{"command":"go test ./..."}` ||
		resp.Usage.InputTokens != 181 || resp.Usage.OutputTokens != 43 {
		t.Errorf("chat through the gateway = %+v", resp)
	}
	ant, err := model.NewAnthropic("claude-sonnet-4-5", opts("/llm/anthropic"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = ant.Complete(t.Context(), req, func(model.Delta) {})
	if err != nil {
		t.Fatalf("anthropic: %v", err)
	}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].Name != "run_command" || resp.Text != "Okay, let's run the tests first." ||
		resp.Usage.OutputTokens != 89 {
		t.Errorf("anthropic through the gateway = %+v", resp)
	}
	rs, err := model.NewOpenAIResponses("gpt-4.1", opts("/llm/openai/v1"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err = rs.Complete(t.Context(), req, func(model.Delta) {})
	if err != nil {
		t.Fatalf("responses: %v", err)
	}
	if len(resp.ToolCalls) == 0 || resp.Usage.OutputTokens != 150 {
		t.Errorf("responses through the gateway = %+v", resp)
	}
	// The same clients get the gateway's refusal as a provider error.
	e.mu.Lock()
	e.policies[run] = &policy.LLM{Enabled: true, Models: []string{"other"}}
	e.mu.Unlock()
	_, err = chat.Complete(t.Context(), req, func(model.Delta) {})
	var ae *model.APIError
	if !errors.As(err, &ae) || ae.StatusCode != 403 || ae.Code != "model_not_allowed" {
		t.Errorf("a refused chat = %v, want a 403 model_not_allowed APIError", err)
	}
	_, err = ant.Complete(t.Context(), req, func(model.Delta) {})
	if !errors.As(err, &ae) || ae.StatusCode != 403 || ae.Type != "permission_error" {
		t.Errorf("a refused anthropic call = %v, want a 403 permission_error APIError", err)
	}
}

// errorShape decodes a gateway error in kind's shape and returns its type
// and code (OpenAI) or type (Anthropic).
func errorShape(t testing.TB, kind, body string) (typ, code string) {
	t.Helper()
	if kind == gateway.KindAnthropic {
		var v struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.Type != "error" || v.Error.Type == "" || v.Error.Message == "" {
			t.Fatalf("not an Anthropic error: %s", body)
		}
		return v.Error.Type, ""
	}
	var v struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error == nil || v.Error.Message == "" {
		t.Fatalf("not an OpenAI error: %s", body)
	}
	return v.Error.Type, v.Error.Code
}

// TestTokenRefusals: a token that is not this sandbox's, for this run and
// tenant and purpose, live and unrevoked, gets 401 in the provider's
// shape; nothing reaches the upstream and nothing is recorded.
func TestTokenRefusals(t *testing.T) {
	e := newEnv(t, envOptions{})
	run := e.newRun("acme", allowAll())
	other := e.newRun("acme", allowAll())
	foreign := e.newRun("globex", allowAll())
	sb := e.sandbox("acme", run, "sb-1")
	sb2 := e.sandbox("acme", run, "sb-2")
	sbOther := e.sandbox("acme", other, "sb-1")
	sbForeign := e.sandbox("globex", foreign, "sb-1")
	purpose, err := e.tokens.Issue(token.Scope{Tenant: "acme", Run: run, Sandbox: "sb-1", Purpose: "tools"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	short, err := e.tokens.Issue(token.Scope{Tenant: "acme", Run: run, Sandbox: "sb-1", Purpose: gateway.Purpose}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	revokedRun := e.newRun("acme", allowAll())
	sbRevoked := e.sandbox("acme", revokedRun, "sb-9")
	e.tokens.RevokeRun("acme", revokedRun)
	e.clock.Advance(2 * time.Minute) // short has expired
	tests := []struct {
		name string
		on   *sandbox
		tok  string
	}{
		{"no token", sb, ""},
		{"malformed", sb, "sk-not-a-token"},
		{"unknown", sb, token.Prefix + strings.Repeat("A", 43)},
		{"another sandbox's", sb, sb2.token},
		{"another run's", sb, sbOther.token},
		{"another tenant's", sb, sbForeign.token},
		{"another purpose", sb, purpose},
		{"expired", sb, short},
		{"revoked with its run", sbRevoked, sbRevoked.token},
	}
	for _, tt := range tests {
		for _, kind := range []string{gateway.KindOpenAI, gateway.KindAnthropic} {
			t.Run(tt.name+"/"+kind, func(t *testing.T) {
				path := chatPath
				if kind == gateway.KindAnthropic {
					path = messagesPath
				}
				status, h, body := tt.on.postToken(t, kind, path, `{"model":"gpt-4o-mini","max_tokens":5,"messages":[]}`, tt.tok)
				if status != http.StatusUnauthorized || h.Get("X-Should-Retry") != "false" {
					t.Fatalf("status %d (x-should-retry %q), want 401: %s", status, h.Get("X-Should-Retry"), body)
				}
				typ, code := errorShape(t, kind, body)
				if kind == gateway.KindAnthropic && typ != "authentication_error" || kind == gateway.KindOpenAI && code != "invalid_api_key" {
					t.Errorf("error %s/%s: %s", typ, code, body)
				}
				if tt.tok != "" && strings.Contains(body, tt.tok) {
					t.Error("the error echoes the token")
				}
			})
		}
	}
	if n := len(e.up.requests()); n != 0 {
		t.Errorf("%d refused calls reached the upstream", n)
	}
	if n := len(e.recorded()); n != 0 {
		t.Errorf("%d unauthenticated calls were recorded", n)
	}
	// The right token on its own socket works.
	if status, _, body := sb2.post(t, gateway.KindOpenAI, chatPath, `{"model":"gpt-4o-mini","messages":[]}`); status != 200 {
		t.Errorf("sb-2 with its own token = %d %s", status, body)
	}
}

// TestPolicyRefusals: calls the run's policy refuses get the provider's
// error, are recorded as refused, and reach no upstream.
func TestPolicyRefusals(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name       string
		pol        *policy.LLM
		kind, path string
		body       string
		status     int
		typ, code  string
		reason     string // recorded; "" when nothing is recorded
	}{
		{"no llm section", nil, gateway.KindOpenAI, chatPath, `{"model":"gpt-4o"}`, 403, "permission_error", "gateway_disabled", ""},
		{"disabled", &policy.LLM{Models: []string{"*"}}, gateway.KindAnthropic, messagesPath, `{"model":"x"}`, 403, "permission_error", "", ""},
		{
			"model not allowed", &policy.LLM{Enabled: true, Models: []string{"gpt-4o*"}}, gateway.KindOpenAI, chatPath,
			`{"model":"gpt-4.1","messages":[]}`, 403, "permission_error", "model_not_allowed", "model_not_allowed",
		},
		{
			"alias is not the model", &policy.LLM{Enabled: true, Models: []string{"fast"}, Map: policy.ModelMap{"fast": "openai:o3"}}, gateway.KindOpenAI, chatPath,
			`{"model":"fast","messages":[]}`, 403, "permission_error", "model_not_allowed", "model_not_allowed",
		},
		{
			"model of another API", &policy.LLM{Enabled: true, Models: []string{"*"}, Map: policy.ModelMap{"c": "anthropic:claude"}}, gateway.KindOpenAI, chatPath,
			`{"model":"c","messages":[]}`, 400, "invalid_request_error", "model_wrong_api", "wrong_api",
		},
		{
			"upstream not configured", &policy.LLM{Enabled: true, Models: []string{"*"}, Map: policy.ModelMap{"c": "azure:gpt"}}, gateway.KindOpenAI, chatPath,
			`{"model":"c","messages":[]}`, 502, "api_error", "upstream_not_configured", "upstream_not_configured",
		},
		{"not JSON", allowAll(), gateway.KindOpenAI, chatPath, `{"model":`, 400, "invalid_request_error", "invalid_request", ""},
		{"no model", allowAll(), gateway.KindAnthropic, messagesPath, `{"messages":[]}`, 400, "invalid_request_error", "", ""},
		{"model not a string", allowAll(), gateway.KindOpenAI, chatPath, `{"model":7}`, 400, "invalid_request_error", "invalid_request", ""},
		{"bad max tokens", allowAll(), gateway.KindAnthropic, messagesPath, `{"model":"c","max_tokens":-1}`, 400, "invalid_request_error", "", ""},
		{"stream of embeddings", allowAll(), gateway.KindOpenAI, embeddingsPath, `{"model":"e","stream":true}`, 400, "invalid_request_error", "invalid_request", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.recorded())
			run := e.newRun("acme", tt.pol)
			sb := e.sandbox("acme", run, "sb-1")
			status, _, body := sb.post(t, tt.kind, tt.path, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			typ, code := errorShape(t, tt.kind, body)
			if typ != tt.typ || tt.code != "" && code != tt.code {
				t.Errorf("error %s/%s, want %s/%s: %s", typ, code, tt.typ, tt.code, body)
			}
			if tt.reason == "" {
				if n := len(e.recorded()); n != before {
					t.Errorf("%d calls recorded, want none", n-before)
				}
				return
			}
			c := e.waitCalls(before + 1)[before]
			if c.Event.Outcome != event.LLMOutcomeRefused || c.Event.Reason != tt.reason || c.Event.Status != tt.status || c.Event.Usage != (event.Usage{}) {
				t.Errorf("recorded %+v", c.Event)
			}
		})
	}
	if n := len(e.up.requests()); n != 0 {
		t.Errorf("%d refused calls reached the upstream", n)
	}
}

func TestEndpoints(t *testing.T) {
	e := newEnv(t, envOptions{cfg: func(c *gateway.Config) { c.MaxRequestBytes = 1 << 10 }})
	run := e.newRun("acme", allowAll())
	sb := e.sandbox("acme", run, "sb-1")
	tests := []struct {
		name, method, path string
		status             int
	}{
		{"unknown upstream", "POST", "/llm/nope/v1/chat/completions", 404},
		{"unknown endpoint", "POST", "/llm/openai/v1/completions", 404},
		{"anthropic path on openai", "POST", "/llm/openai/v1/messages", 404},
		{"not under /llm", "POST", "/v1/chat/completions", 404},
		{"GET a POST endpoint", "GET", chatPath, 405},
		{"POST the models", "POST", "/llm/openai/v1/models", 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(`{"model":"m"}`))
			req.Header.Set("Authorization", "Bearer "+sb.token)
			resp, err := sb.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
			}
		})
	}
	status, _, body := sb.post(t, gateway.KindOpenAI, chatPath, `{"model":"m","pad":"`+strings.Repeat("x", 2000)+`"}`)
	if status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over MaxRequestBytes = %d %s", status, body)
	}
	// Served without the proxy, the gateway knows no sandbox.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", chatPath, strings.NewReader(`{"model":"m"}`))
	req.Header.Set("Authorization", "Bearer "+sb.token)
	e.gw.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("a request without the proxy's identity = %d %s", rec.Code, rec.Body)
	}
}

func TestModels(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := &policy.LLM{
		Enabled: true, Models: []string{"gpt-4o-mini", "gpt-4o*", "claude-sonnet-4-5", "local:*", "anthropic:claude-haiku-4-5"},
		Map: policy.ModelMap{"fast": "local:llama3", "smart": "anthropic:claude-sonnet-4-5", "blocked": "openai:o3"},
	}
	run := e.newRun("acme", pol)
	sb := e.sandbox("acme", run, "sb-1")
	get := func(path, kind string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if kind == gateway.KindAnthropic {
			req.Header.Set("X-Api-Key", sb.token)
		} else {
			req.Header.Set("Authorization", "Bearer "+sb.token)
		}
		resp, err := sb.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get("/llm/openai/v1/models", gateway.KindOpenAI)
	want := `{"object":"list","data":[` +
		`{"id":"claude-sonnet-4-5","object":"model","created":0,"owned_by":"airlock"},` +
		`{"id":"fast","object":"model","created":0,"owned_by":"airlock"},` +
		`{"id":"gpt-4o-mini","object":"model","created":0,"owned_by":"airlock"}]}`
	// The allowlist does not say which upstream serves a bare name: a
	// sandbox may ask for claude-sonnet-4-5 at the openai upstream (an
	// OpenAI-compatible server could serve it), so it is listed there.
	if status != 200 || body != want {
		t.Errorf("openai models = %d %s\nwant %s", status, body, want)
	}
	status, body = get("/llm/anthropic/v1/models", gateway.KindAnthropic)
	want = `{"data":[` +
		`{"type":"model","id":"claude-haiku-4-5","display_name":"claude-haiku-4-5","created_at":"1970-01-01T00:00:00Z"},` +
		`{"type":"model","id":"claude-sonnet-4-5","display_name":"claude-sonnet-4-5","created_at":"1970-01-01T00:00:00Z"},` +
		`{"type":"model","id":"gpt-4o-mini","display_name":"gpt-4o-mini","created_at":"1970-01-01T00:00:00Z"},` +
		`{"type":"model","id":"smart","display_name":"smart","created_at":"1970-01-01T00:00:00Z"}],` +
		`"has_more":false,"first_id":"claude-haiku-4-5","last_id":"smart"}`
	if status != 200 || body != want {
		t.Errorf("anthropic models = %d %s\nwant %s", status, body, want)
	}
	if status, body = get("/llm/openai/v1/models/fast", gateway.KindOpenAI); status != 200 || !strings.Contains(body, `"id":"fast"`) {
		t.Errorf("GET models/fast = %d %s", status, body)
	}
	if status, body = get("/llm/openai/v1/models/blocked", gateway.KindOpenAI); status != 404 || !strings.Contains(body, "model_not_found") {
		t.Errorf("GET models/blocked = %d %s", status, body)
	}
	if n := len(e.up.requests()); n != 0 {
		t.Errorf("listing models sent %d requests upstream", n)
	}
}

// TestRateLimit: the run's calls per minute are bounded, across its
// sandboxes; a refusal says when to come back and is not recorded.
func TestRateLimit(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := allowAll()
	pol.MaxRequestsPerMinute = 2
	run := e.newRun("acme", pol)
	sb1, sb2 := e.sandbox("acme", run, "sb-1"), e.sandbox("acme", run, "sb-2")
	body := `{"model":"gpt-4o-mini","messages":[]}`
	for i, sb := range []*sandbox{sb1, sb2} {
		if status, _, b := sb.post(t, gateway.KindOpenAI, chatPath, body); status != 200 {
			t.Fatalf("call %d = %d %s", i, status, b)
		}
		e.clock.Advance(10 * time.Second)
	}
	status, h, b := sb1.post(t, gateway.KindAnthropic, messagesPath, `{"model":"claude","max_tokens":5}`)
	if status != http.StatusTooManyRequests || h.Get("Retry-After") != "40" || h.Get("X-Should-Retry") != "" {
		t.Fatalf("third call in a minute = %d Retry-After %q x-should-retry %q: %s", status, h.Get("Retry-After"), h.Get("X-Should-Retry"), b)
	}
	if typ, _ := errorShape(t, gateway.KindAnthropic, b); typ != "rate_limit_error" {
		t.Errorf("error type %s", typ)
	}
	e.clock.Advance(41 * time.Second)
	if status, _, b := sb2.post(t, gateway.KindOpenAI, chatPath, body); status != 200 {
		t.Fatalf("a call after the minute = %d %s", status, b)
	}
	if n := len(e.waitCalls(3)); n != 3 {
		t.Errorf("%d calls recorded, want 3 (the refusal is not)", n)
	}
	if n := len(e.up.requests()); n != 3 {
		t.Errorf("upstream got %d calls, want 3", n)
	}
}

// TestKeyNeverReachesSandbox: an upstream that quotes its key in an error
// is scrubbed; events and logged bodies hold neither key nor token.
func TestKeyNeverReachesSandbox(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := allowAll()
	pol.LogBodies = true
	run := e.newRun("acme", pol)
	sb := e.sandbox("acme", run, "sb-1")
	status, _, body := sb.post(t, gateway.KindOpenAI, chatPath, `{"model":"echo-key","messages":[{"role":"user","content":"my token is `+sb.token+`"}]}`)
	if status != 400 || !strings.Contains(body, "Incorrect API key provided: Bearer [redacted].") {
		t.Errorf("upstream error through the gateway = %d %s", status, body)
	}
	noSecrets(t, "the error", body)
	e.waitCalls(1) // calls are recorded in the background: keep their order
	status, _, body = sb.post(t, gateway.KindAnthropic, messagesPath, `{"model":"echo-key","max_tokens":3}`)
	if status != 400 || !strings.Contains(body, "[redacted]") {
		t.Errorf("anthropic upstream error = %d %s", status, body)
	}
	noSecrets(t, "the error", body)
	e.waitCalls(2)
	if status, _, body = sb.post(t, gateway.KindOpenAI, chatPath, `{"model":"gpt-4o-mini","stream":true,"messages":[]}`); status != 200 {
		t.Fatalf("stream = %d %s", status, body)
	}
	cs := e.waitCalls(3)
	if cs[0].Event.Outcome != event.LLMOutcomeUpstreamError || cs[0].Event.Reason != "upstream_status" || cs[0].Event.CostMicroCredits != 0 {
		t.Errorf("recorded %+v", cs[0].Event)
	}
	if !strings.Contains(cs[2].Event.RequestBody, `"stream":true`) || !strings.Contains(cs[2].Event.ResponseBody, "run_command") {
		t.Errorf("logged bodies: %q / %q", cs[2].Event.RequestBody, cs[2].Event.ResponseBody)
	}
	evs, err := e.store.Events(context.Background(), run, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		noSecrets(t, "an event", string(ev.Payload))
		if strings.Contains(string(ev.Payload), sb.token) {
			t.Errorf("an event holds the sandbox's token: %s", ev.Payload)
		}
	}
	if !strings.Contains(string(evs[0].Payload), "my token is [redacted]") {
		t.Errorf("the logged request body of the first call: %s", evs[0].Payload)
	}
}

func TestConfig(t *testing.T) {
	ok := gateway.Config{
		Tokens:    token.NewStore(nil),
		Upstreams: map[string]gateway.Upstream{"openai": {Kind: gateway.KindOpenAI, BaseURL: "https://api.openai.com/v1"}},
		Policy:    func(context.Context, egressIdentity) (*policy.LLM, error) { return nil, nil },
		Record:    func(context.Context, egressIdentity, gateway.Call) (int64, error) { return 1, nil },
	}
	if g, err := gateway.New(ok); err != nil {
		t.Fatalf("New(valid) = %v", err)
	} else {
		g.Close()
	}
	tests := []struct {
		name string
		mod  func(*gateway.Config)
		want string
	}{
		{"no tokens", func(c *gateway.Config) { c.Tokens = nil }, "Tokens is required"},
		{"no policy", func(c *gateway.Config) { c.Policy = nil }, "Policy is required"},
		{"no record", func(c *gateway.Config) { c.Record = nil }, "Record is required"},
		{"no upstream", func(c *gateway.Config) { c.Upstreams = nil }, "at least one upstream"},
		{"bad name", func(c *gateway.Config) {
			c.Upstreams = map[string]gateway.Upstream{"Open AI": {Kind: gateway.KindOpenAI, BaseURL: "http://x"}}
		}, `upstream name "Open AI"`},
		{"bad kind", func(c *gateway.Config) {
			c.Upstreams = map[string]gateway.Upstream{"x": {Kind: "gemini", BaseURL: "http://x"}}
		}, `kind "gemini"`},
		{"URL with a password", func(c *gateway.Config) {
			c.Upstreams = map[string]gateway.Upstream{"x": {Kind: gateway.KindOpenAI, BaseURL: "https://u:hunter2@x/v1"}}
		}, "base URL is not"},
		{"URL with a query", func(c *gateway.Config) {
			c.Upstreams = map[string]gateway.Upstream{"x": {Kind: gateway.KindOpenAI, BaseURL: "https://x/v1?key=k"}}
		}, "base URL is not"},
		{"negative price", func(c *gateway.Config) { c.Prices = map[string]priceT{"x": {Input: -1}} }, "negative"},
	}
	for _, tt := range tests {
		cfg := ok
		tt.mod(&cfg)
		_, err := gateway.New(cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want an error with %q", tt.name, err, tt.want)
		}
		if err != nil && (strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "key=k")) {
			t.Errorf("%s: the error shows the URL: %v", tt.name, err)
		}
	}
}
