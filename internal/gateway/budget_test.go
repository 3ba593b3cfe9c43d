package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
)

// TestBudgetBeforeCall: once a budget is spent, calls are refused before
// anything goes upstream, with the provider's quota error, and reported
// so that the host can write budget.exhausted.
func TestBudgetBeforeCall(t *testing.T) {
	tests := []struct {
		name    string
		tokens  int64 // llm.max_tokens
		credits int64 // llm.max_credits
		grant   int64 // the tenant's credits, micro; 0: not metered
		seed    gateway.Totals
		budget  string
	}{
		// The first call (82+17 tokens, 300 micro-credits) spends each.
		{"tokens", 99, 0, 0, gateway.Totals{}, "llm_tokens"},
		{"credits", 0, 1, 0, gateway.Totals{MicroCredits: 999_800}, "llm_credits"},
		{"tenant balance", 0, 0, 250, gateway.Totals{}, "tenant_credits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOptions{cfg: func(c *gateway.Config) {
				c.Spent = func(context.Context, bridge.Identity) (gateway.Totals, error) { return tt.seed, nil }
			}})
			pol := allowAll()
			pol.MaxTokens, pol.MaxCredits = tt.tokens, tt.credits
			if tt.grant > 0 {
				e.grant("acme", tt.grant)
			}
			run := e.newRun("acme", pol)
			sb := e.sandbox("acme", run, "sb-1")
			body := `{"model":"gpt-4o-mini","messages":[]}`
			status, _, b := sb.post(t, gateway.KindOpenAI, chatPath, body)
			if status != 200 {
				t.Fatalf("first call = %d %s", status, b)
			}
			if c := e.waitCalls(1)[0]; c.Event.CostMicroCredits != 300 || c.Exhausted != nil {
				t.Fatalf("first call recorded %+v", c)
			}
			for _, kind := range []string{gateway.KindOpenAI, gateway.KindAnthropic} {
				before := len(e.up.requests())
				n := len(e.recorded())
				path, req := chatPath, body
				if kind == gateway.KindAnthropic {
					path, req = messagesPath, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[]}`
				}
				status, h, b := sb.post(t, kind, path, req)
				want := http.StatusTooManyRequests
				if kind == gateway.KindAnthropic {
					want = http.StatusPaymentRequired
				}
				if status != want || h.Get("X-Should-Retry") != "false" {
					t.Fatalf("%s call after the budget = %d (x-should-retry %q) %s", kind, status, h.Get("X-Should-Retry"), b)
				}
				typ, code := errorShape(t, kind, b)
				if kind == gateway.KindOpenAI && (typ != "insufficient_quota" || code != "insufficient_quota") || kind == gateway.KindAnthropic && typ != "billing_error" {
					t.Errorf("error %s/%s", typ, code)
				}
				if len(e.up.requests()) != before {
					t.Error("a call past the budget reached the upstream")
				}
				c := e.waitCalls(n + 1)[n]
				if c.Event.Outcome != event.LLMOutcomeBudgetExhausted || c.Event.Budget != tt.budget || c.Exhausted == nil || c.Exhausted.Budget != tt.budget {
					t.Errorf("recorded %+v, exhausted %+v", c.Event, c.Exhausted)
				}
			}
			// count_tokens is free: it still works.
			if status, _, b := sb.post(t, gateway.KindAnthropic, countPath, `{"model":"claude-sonnet-4-5","messages":[]}`); status != 200 {
				t.Errorf("count_tokens after the budget = %d %s", status, b)
			}
		})
	}
}

// TestBudgetMidStream: a stream that runs the run's budget out is ended
// with the provider's error event, which the SDK raises; the call is
// recorded as budget_exhausted with its estimated usage, and debited.
func TestBudgetMidStream(t *testing.T) {
	for _, kind := range []string{gateway.KindOpenAI, gateway.KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.grant("acme", 1_000_000_000)
			pol := allowAll()
			pol.MaxTokens = 300
			run := e.newRun("acme", pol)
			sb := e.sandbox("acme", run, "sb-1")
			path, body := chatPath, `{"model":"endless","stream":true,"messages":[{"role":"user","content":"go on"}]}`
			if kind == gateway.KindAnthropic {
				path, body = messagesPath, `{"model":"endless","stream":true,"max_tokens":100000,"messages":[{"role":"user","content":"go on"}]}`
			}
			status, _, b := sb.post(t, kind, path, body)
			if status != 200 {
				t.Fatalf("status %d: %s", status, b)
			}
			// The last event is the error; nothing follows it.
			events := strings.Split(strings.TrimSpace(b), "\n\n")
			last := events[len(events)-1]
			if kind == gateway.KindOpenAI {
				if !strings.HasPrefix(last, `data: {"error":{"message":"airlock gateway: this run's LLM token budget`) || !strings.Contains(last, `"code":"insufficient_quota"`) {
					t.Errorf("last event %q", last)
				}
			} else if !strings.HasPrefix(last, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"billing_error\"") {
				t.Errorf("last event %q", last)
			}
			if len(events) > 400 || strings.Contains(b, "[DONE]") || strings.Contains(b, "message_stop") {
				t.Errorf("the stream went on for %d events", len(events))
			}
			// The request's output bound was lowered to what the budget left.
			req := e.up.requests()[0].Body
			field := "max_completion_tokens"
			if kind == gateway.KindAnthropic {
				field = "max_tokens"
			}
			if n, _ := req[field].(float64); n <= 0 || n >= 300 {
				t.Errorf("upstream got %s = %v, want a bound below the budget", field, req[field])
			}
			c := e.waitCalls(1)[0]
			settle(t, e)
			ev := c.Event
			if ev.Outcome != event.LLMOutcomeBudgetExhausted || ev.Budget != "llm_tokens" || c.Exhausted == nil ||
				c.Exhausted.Limit != 300 || c.Exhausted.Used <= 300 {
				t.Errorf("recorded %+v exhausted %+v", ev, c.Exhausted)
			}
			if kind == gateway.KindOpenAI && !ev.UsageEstimated {
				t.Error("usage of a cut chat stream is not marked estimated")
			}
			if kind == gateway.KindAnthropic && ev.Usage.InputTokens != 10 {
				t.Errorf("anthropic input tokens = %d, want the 10 message_start reported", ev.Usage.InputTokens)
			}
			ds := e.debits("acme")
			if len(ds) != 1 || ds[0].Amount != ev.CostMicroCredits || ev.CostMicroCredits <= 0 {
				t.Errorf("debits %+v for a call that cost %d", ds, ev.CostMicroCredits)
			}
			// The next call is refused before it starts.
			if status, _, b := sb.post(t, kind, path, body); status == 200 {
				t.Errorf("a call after the cut = %d %.200s", status, b)
			}
		})
	}
}

// settle waits until every finished call is recorded and debited; calls
// after it are recorded before their answer ends.
func settle(t testing.TB, e *env) {
	t.Helper()
	if err := e.gw.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetSDKError: airlock's own clients raise the cut as the
// provider's error.
func TestBudgetSDKError(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := allowAll()
	pol.MaxTokens = 300
	run := e.newRun("acme", pol)
	sb := e.sandbox("acme", run, "sb-1")
	chat, err := model.NewOpenAIChat("endless", model.Options{
		Key: secret.NewValue([]byte(sb.token)), BaseURL: base + "/llm/openai/v1",
		HTTPClient: sb.client(), Retry: model.RetryPolicy{MaxAttempts: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = chat.Complete(t.Context(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "go"}}}}}, func(model.Delta) {})
	var ae *model.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, "token budget") {
		t.Errorf("chat cut by the budget = %v, want an APIError about the budget", err)
	}
}

// TestSpentSeeds: a run's totals start from Config.Spent (a host that
// restarted), so a spent budget stays spent.
func TestSpentSeeds(t *testing.T) {
	e := newEnv(t, envOptions{cfg: func(c *gateway.Config) {
		c.Spent = func(_ context.Context, id bridge.Identity) (gateway.Totals, error) {
			return gateway.Totals{Tokens: 1000, MicroCredits: 5}, nil
		}
	}})
	pol := allowAll()
	pol.MaxTokens = 1000
	run := e.newRun("acme", pol)
	sb := e.sandbox("acme", run, "sb-1")
	if status, _, b := sb.post(t, gateway.KindOpenAI, chatPath, `{"model":"gpt-4o-mini","messages":[]}`); status != 429 {
		t.Errorf("a call of a seeded spent run = %d %s", status, b)
	}
	if got := e.gw.Totals("acme", run); got != (gateway.Totals{Tokens: 1000, MicroCredits: 5}) {
		t.Errorf("Totals = %+v", got)
	}
	e.gw.EndRun("acme", run)
	if got := e.gw.Totals("acme", run); got != (gateway.Totals{}) {
		t.Errorf("Totals after EndRun = %+v", got)
	}
}

// TestStreamFlushedPerEvent: the sandbox reads each event while the
// upstream is still writing the next: the endless stream's first event
// arrives before its last is sent.
func TestStreamFlushedPerEvent(t *testing.T) {
	e := newEnv(t, envOptions{})
	run := e.newRun("acme", allowAll())
	sb := e.sandbox("acme", run, "sb-1")
	e.up.endless = 1 << 20 // far more than fits any buffer
	req, _ := http.NewRequest("POST", base+chatPath, strings.NewReader(`{"model":"endless","stream":true,"messages":[]}`))
	req.Header.Set("Authorization", "Bearer "+sb.token)
	resp, err := sb.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, `data: {"id":"c"`) {
		t.Fatalf("first line %q, %v", line, err)
	}
	// Hang up: the gateway stops, records the call as cancelled, and
	// debits nothing (the tenant is not metered) but counts its estimate.
	resp.Body.Close()
	c := e.waitCalls(1)[0]
	if c.Event.Outcome != event.LLMOutcomeCancelled || !c.Event.UsageEstimated || c.Event.Usage.OutputTokens == 0 {
		t.Errorf("recorded %+v", c.Event)
	}
	if got := e.gw.Totals("acme", run); got.Tokens == 0 {
		t.Errorf("Totals after a cancelled stream = %+v", got)
	}
}

// TestBrokenStream: an upstream that stops before its last event gets the
// stream ended with an error the SDK raises.
func TestBrokenStream(t *testing.T) {
	e := newEnv(t, envOptions{})
	run := e.newRun("acme", allowAll())
	sb := e.sandbox("acme", run, "sb-1")
	status, _, b := sb.post(t, gateway.KindOpenAI, chatPath, `{"model":"broken","stream":true,"messages":[]}`)
	if status != 200 || !strings.HasSuffix(b, "data: {\"error\":{\"message\":\"airlock gateway: the upstream's stream broke off\",\"type\":\"api_error\",\"param\":null,\"code\":\"upstream_stream_broken\"}}\n\n") {
		t.Errorf("broken stream = %d %q", status, b)
	}
	c := e.waitCalls(1)[0]
	if c.Event.Outcome != event.LLMOutcomeUpstreamError || c.Event.Reason != "stream_broken" || !c.Event.UsageEstimated {
		t.Errorf("recorded %+v", c.Event)
	}
	// A whole answer without usage is estimated too.
	if status, _, b := sb.post(t, gateway.KindOpenAI, chatPath, `{"model":"no-usage","messages":[]}`); status != 200 {
		t.Fatalf("no-usage = %d %s", status, b)
	}
	c = e.waitCalls(2)[1]
	if c.Event.Outcome != event.LLMOutcomeOK || !c.Event.UsageEstimated || c.Event.Usage.OutputTokens == 0 {
		t.Errorf("recorded %+v", c.Event)
	}
}

// flakyLedger fails debits while down is set, as a store that went away
// between a call's record and its debit would.
type flakyLedger struct {
	credit.Ledger
	down atomic.Bool
}

func (f *flakyLedger) AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error) {
	if e.Kind == store.LedgerDebit && f.down.Load() {
		return store.LedgerEntry{}, errors.New("the ledger is down")
	}
	return f.Ledger.AddLedgerEntry(ctx, e)
}

// TestDebitRetried: a call whose debit fails is not lost: the debit is
// owed and made with the tenant's next one, once each.
func TestDebitRetried(t *testing.T) {
	var fl *flakyLedger
	e := newEnv(t, envOptions{cfg: func(c *gateway.Config) {
		fl = &flakyLedger{Ledger: c.Ledger}
		c.Ledger = fl
	}})
	e.grant("acme", 1_000_000_000)
	run := e.newRun("acme", allowAll())
	sb := e.sandbox("acme", run, "sb-1")
	body := `{"model":"gpt-4o-mini","messages":[]}`
	fl.down.Store(true)
	if status, _, b := sb.post(t, gateway.KindOpenAI, chatPath, body); status != 200 {
		t.Fatalf("call = %d %s", status, b)
	}
	settle(t, e) // its debit was tried, and failed; calls from here on are recorded before they end
	if ds := e.debits("acme"); len(ds) != 0 {
		t.Fatalf("debits through a ledger that is down: %+v", ds)
	}
	fl.down.Store(false)
	if status, _, b := sb.post(t, gateway.KindOpenAI, chatPath, body); status != 200 {
		t.Fatalf("call = %d %s", status, b)
	}
	calls := e.waitCalls(2)
	ds := e.debits("acme")
	if len(ds) != 2 || ds[0].Seq == ds[1].Seq {
		t.Fatalf("debits = %+v, want one for each of the two calls", ds)
	}
	for i, d := range ds {
		if d.Amount != calls[i].Event.CostMicroCredits || d.RunID != run {
			t.Errorf("debit %+v, want %d for run %s", d, calls[i].Event.CostMicroCredits, run)
		}
	}
}

// TestUnpricedModel: a call of a model the host does not price is refused
// before it goes upstream when its cost must be counted (a metered tenant,
// llm.max_credits), and free otherwise; a call that is never billed
// (count_tokens) goes through either way.
func TestUnpricedModel(t *testing.T) {
	tests := []struct {
		name    string
		tenant  string
		grant   int64 // 0: not metered
		credits int64 // llm.max_credits
		refused bool
	}{
		{"metered", "paying", 1_000_000, 0, true},
		{"credit budget", "capped", 0, 5, true},
		{"neither", "free", 0, 0, false},
	}
	e := newEnv(t, envOptions{cfg: func(c *gateway.Config) { c.Prices = price.Table{"openai": prices["openai"]} }})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.grant > 0 {
				e.grant(tt.tenant, tt.grant)
			}
			pol := allowAll()
			pol.MaxCredits = tt.credits
			sb := e.sandbox(tt.tenant, e.newRun(tt.tenant, pol), "sb-1")
			before, n := len(e.up.requests()), len(e.recorded())
			status, _, b := sb.post(t, gateway.KindAnthropic, messagesPath, `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[]}`)
			c := e.waitCalls(n + 1)[n]
			if !tt.refused {
				if status != 200 || c.Event.Outcome != event.LLMOutcomeOK || c.Event.CostMicroCredits != 0 {
					t.Fatalf("call = %d %s, recorded %+v; want 200, free", status, b, c.Event)
				}
				return
			}
			if typ, code := errorShape(t, gateway.KindAnthropic, b); status != 403 || typ != "permission_error" {
				t.Errorf("call = %d %s/%s %s, want 403 permission_error", status, typ, code, b)
			}
			if c.Event.Outcome != event.LLMOutcomeRefused || c.Event.Reason != "model_not_priced" {
				t.Errorf("recorded %+v, want refused for model_not_priced", c.Event)
			}
			if len(e.up.requests()) != before {
				t.Error("a call of an unpriced model reached the upstream")
			}
			if status, _, b := sb.post(t, gateway.KindAnthropic, countPath, `{"model":"claude-sonnet-4-5","messages":[]}`); status != 200 {
				t.Errorf("count_tokens = %d %s, want 200: it is never billed", status, b)
			}
		})
	}
	settle(t, e)
	for _, tenant := range []string{"paying", "capped", "free"} {
		if ds := e.debits(tenant); len(ds) != 0 {
			t.Errorf("%s was debited %+v", tenant, ds)
		}
	}
}
