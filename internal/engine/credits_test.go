package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/store"
)

const loopScript = `
turns:
  - tool_calls: [{name: list_dir, args: {path: "."}}]
  - tool_calls: [{name: list_dir, args: {path: "."}}]
  - tool_calls: [{name: list_dir, args: {path: "."}}]
  - tool_calls: [{name: list_dir, args: {path: "."}}]
  - tool_calls: [{name: finish, args: {summary: done}}]
`

// TestCredits: a metered tenant is debited for every model turn, priced by
// the host's table and linked to the turn's event, and its runs stop when
// the balance is spent; an unmetered tenant is not charged.
func TestCredits(t *testing.T) {
	// 1,000 micro-credits per token in and out: a scripted turn of ~1,000
	// tokens costs about a credit.
	prices := price.Table{"script": {Input: 1_000_000_000, Output: 1_000_000_000}}
	h := newHarness(t, func(o *engine.Options) { o.Prices = prices })
	ctx := context.Background()

	// Unmetered: the cost is recorded, nothing is debited.
	o := h.run("free", loopScript, engine.Config{})
	if o.Status != event.StatusCompleted || o.Usage.CostMicroUSD <= 0 {
		t.Fatalf("unmetered run: %s, cost %d", o.Status, o.Usage.CostMicroUSD)
	}
	if es, _ := h.store.LedgerEntries(ctx, "local", 0, 10); len(es) != 0 {
		t.Errorf("an unmetered tenant got ledger entries: %+v", es)
	}

	// Metered with enough credits: every turn is debited once.
	if _, err := h.store.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "local", Kind: store.LedgerGrant, Amount: 1_000_000_000}); err != nil {
		t.Fatal(err)
	}
	o = h.run("paid", loopScript, engine.Config{})
	if o.Status != event.StatusCompleted {
		t.Fatalf("metered run: %s (%s)", o.Status, o.Reason)
	}
	es, err := h.store.LedgerEntries(ctx, "local", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var debited int64
	for _, e := range es {
		if e.Kind == store.LedgerDebit && e.RunID == o.RunID {
			debited += e.Amount
		}
	}
	if debited != o.Usage.CostMicroUSD || len(es) != 1+o.Steps {
		t.Errorf("debited %d for a cost of %d; %d entries for %d steps", debited, o.Usage.CostMicroUSD, len(es), o.Steps)
	}
	bal, _ := h.store.Balance(ctx, "local")
	if bal != 1_000_000_000-debited {
		t.Errorf("balance %d, want %d", bal, 1_000_000_000-debited)
	}

	// Spent: the next run stops at its next boundary.
	if _, err := h.store.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "other", Kind: store.LedgerGrant, Amount: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := h.eng.Create(ctx, engine.Request{Tenant: "other", Task: "broke", Config: engine.Config{Model: "script:t"}, Script: []byte(loopScript)})
	if err != nil {
		t.Fatal(err)
	}
	o, err = h.eng.Drive(ctxT(t, time.Minute), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "tenant_credits") || o.Steps != 1 {
		t.Errorf("a spent tenant: %s (%s) after %d steps", o.Status, o.Reason, o.Steps)
	}

	// The run's own credit budget.
	o = h.run("capped", loopScript, engine.Config{MaxCredits: 1})
	if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "budget_exhausted: credits") {
		t.Errorf("max credits: %s (%s)", o.Status, o.Reason)
	}
}

// TestUnpricedModel: a model without a price is refused, before it is
// called, for a metered tenant and for a run with a credit budget (fail
// closed: its cost could be neither debited nor counted); for anyone else
// it is free.
func TestUnpricedModel(t *testing.T) {
	tests := []struct {
		name    string
		tenant  string
		grant   int64 // 0: not metered
		credits int64 // the run's MaxCredits, micro
		refused bool
	}{
		{"metered", "paying", 1_000_000, 0, true},
		{"credit budget", "capped", 0, 1_000_000, true},
		{"neither", "free", 0, 0, false},
	}
	h := newHarness(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.grant > 0 {
				if _, err := h.store.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: tt.tenant, Kind: store.LedgerGrant, Amount: tt.grant}); err != nil {
					t.Fatal(err)
				}
			}
			r, err := h.eng.Create(ctx, engine.Request{
				Tenant: tt.tenant, Task: tt.name, Config: engine.Config{Model: "script:t", MaxCredits: tt.credits},
				Script: []byte(loopScript),
			})
			if err != nil {
				t.Fatal(err)
			}
			o, err := h.eng.Drive(ctxT(t, 2*time.Minute), r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.refused {
				if o.Status != event.StatusCompleted || o.Usage.CostMicroUSD != 0 {
					t.Errorf("%s (%s), cost %d; want completed for free", o.Status, o.Reason, o.Usage.CostMicroUSD)
				}
				return
			}
			if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "no price") {
				t.Errorf("%s (%s); want failed for no price", o.Status, o.Reason)
			}
			for _, e := range h.verifyLog(r.ID) {
				if e.Type == event.TypeModelRequest || e.Type == event.TypeModelResponse {
					t.Errorf("the log holds a %s: the model was called", e.Type)
				}
			}
		})
	}
}

// TestSettleGatewayCalls: a drive debits what its run's log records and
// the ledger lacks, the gateway's llm.call events as well as its own model
// turns (a gateway whose debit failed, a host that died before it), each
// once.
func TestSettleGatewayCalls(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) {
		o.Prices = price.Table{"script": {Input: 1_000_000_000, Output: 1_000_000_000}}
	})
	ctx := context.Background()
	if _, err := h.store.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "local", Kind: store.LedgerGrant, Amount: 1_000_000_000}); err != nil {
		t.Fatal(err)
	}
	r := h.start("settle", loopScript, engine.Config{})
	r, err := h.store.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	call, err := event.New(event.LLMCall{
		Sandbox: "main", API: "openai.chat", Model: "gpt", Upstream: "openai", UpstreamModel: "gpt",
		Usage: event.Usage{InputTokens: 10, OutputTokens: 5}, CostMicroCredits: 4321, Status: 200, Outcome: event.LLMOutcomeOK,
	})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := h.store.Append(ctx, r.ID, r.LastSeq+1, []event.Event{call})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Drive(ctxT(t, 2*time.Minute), r.ID); err != nil {
		t.Fatal(err)
	}
	es, err := h.store.LedgerEntries(ctx, "local", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Kind == store.LedgerDebit && e.Seq == stored[0].Seq {
			n++
			if e.Amount != 4321 || e.RunID != r.ID {
				t.Errorf("debit of the llm.call = %+v, want 4321 for %s", e, r.ID)
			}
		}
	}
	if n != 1 {
		t.Errorf("the llm.call at seq %d was debited %d times, want once; ledger %+v", stored[0].Seq, n, es)
	}
}
