package engine

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/tools"
)

// TestBudgetChecks holds each budget check to its budget: spent exactly
// when its limit is reached, named as budget.exhausted names it, with the
// limit and what was used; a zero limit is no budget. The checks run in
// the order of stepBudgets, and the first spent one is the run's end.
func TestBudgetChecks(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// rich has credits; broke had some and spent them on a run; poor has
	// no ledger, so is not metered.
	spentOn := event.NewRunID(time.Unix(1_000_000, 0))
	if _, err := st.CreateRun(ctx, store.Run{ID: spentOn, Tenant: "broke", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	charged, err := event.New(event.ModelResponse{Step: 1, Usage: event.Usage{CostMicroUSD: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, spentOn, 1, []event.Event{charged}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []store.LedgerEntry{
		{Tenant: "rich", Kind: store.LedgerGrant, Amount: 100, Note: "test"},
		{Tenant: "broke", Kind: store.LedgerGrant, Amount: 100, Note: "test"},
		{Tenant: "broke", Kind: store.LedgerDebit, Amount: 100, RunID: spentOn, Seq: 1, Note: "test"},
	} {
		if _, err := st.AddLedgerEntry(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Unix(1_000_000, 0)
	// newDriver returns a driver of a run with cfg that has used nothing.
	newDriver := func(cfg Config) *driver {
		e := &Engine{o: Options{Store: st, Now: func() time.Time { return now }}, meter: credit.New(st, nil)}
		s := newState("run_x", tools.Default(tools.Limits{}))
		s.cfg = cfg
		s.segStart, s.segStarted = now, true
		return &driver{e: e, run: store.Run{ID: "run_x", Tenant: "poor"}, cfg: cfg, st: s, sbs: map[string]*live{}}
	}
	exhausted := func(budget string, limit, used int64) spent {
		return spent{BudgetExhausted: event.BudgetExhausted{Budget: budget, Limit: limit, Used: used}}
	}
	cases := []struct {
		name  string
		check func(*driver, context.Context) (spent, error)
		cfg   Config
		use   func(d *driver)
		want  spent
	}{
		{"wall time left", (*driver).wallTimeSpent, Config{TimeoutMS: 1000}, func(d *driver) { d.st.segStart = now.Add(-999 * time.Millisecond) }, spent{}},
		{"wall time spent", (*driver).wallTimeSpent, Config{TimeoutMS: 1000}, func(d *driver) { d.st.active, d.st.segStart = 600*time.Millisecond, now.Add(-500*time.Millisecond) }, exhausted("wall_time", 1000, 1100)},
		{"no host channel budget spent", (*driver).hostChannelSpent, Config{}, func(*driver) {}, spent{}},
		{
			"host channel budget spent", (*driver).hostChannelSpent,
			Config{},
			func(d *driver) { d.st.spent = &event.BudgetExhausted{Budget: "llm_tokens", Limit: 10, Used: 12} },
			spent{BudgetExhausted: event.BudgetExhausted{Budget: "llm_tokens", Limit: 10, Used: 12}, recorded: true},
		},
		{"steps left", (*driver).stepsSpent, Config{MaxSteps: 3}, func(d *driver) { d.st.steps = 2 }, spent{}},
		{"steps spent", (*driver).stepsSpent, Config{MaxSteps: 3}, func(d *driver) { d.st.steps = 3 }, exhausted("steps", 3, 3)},
		{"no token budget", (*driver).tokensSpent, Config{}, func(d *driver) { d.st.usage.InputTokens = 1 << 40 }, spent{}},
		{"tokens left", (*driver).tokensSpent, Config{MaxTokens: 100}, func(d *driver) { d.st.usage.InputTokens, d.st.usage.OutputTokens = 60, 39 }, spent{}},
		{"tokens spent", (*driver).tokensSpent, Config{MaxTokens: 100}, func(d *driver) { d.st.usage.InputTokens, d.st.usage.OutputTokens = 60, 40 }, exhausted("tokens", 100, 100)},
		{"no sandbox CPU budget", (*driver).cpuSpent, Config{}, func(d *driver) { d.st.cpu["sb-a"] = 1 << 40 }, spent{}},
		{"sandbox CPU spent", (*driver).cpuSpent, Config{MaxSandboxCPUMS: 500}, func(d *driver) { d.st.cpu["sb-a"], d.st.cpu["sb-b"] = 300, 250 }, exhausted("sandbox_cpu", 500, 550)},
		{"no egress budget", (*driver).egressSpent, Config{}, func(d *driver) { d.st.egressBytes = 1 << 40 }, spent{}},
		{"egress left", (*driver).egressSpent, Config{MaxEgressBytes: 1000}, func(d *driver) { d.st.egressBytes = 999 }, spent{}},
		{"egress spent", (*driver).egressSpent, Config{MaxEgressBytes: 1000}, func(d *driver) { d.st.egressBytes = 1000 }, exhausted("egress_bytes", 1000, 1000)},
		{"unmetered, no credit budget", (*driver).creditsSpent, Config{}, func(d *driver) { d.st.usage.CostMicroUSD = 1 << 40 }, spent{}},
		{"run credits spent", (*driver).creditsSpent, Config{MaxCredits: 5}, func(d *driver) { d.st.usage.CostMicroUSD = 5 }, exhausted("credits", 5, 5)},
		{"tenant balance spent", (*driver).creditsSpent, Config{}, func(d *driver) { d.run.Tenant = "broke" }, exhausted("tenant_credits", 0, 0)},
		{"tenant balance left", (*driver).creditsSpent, Config{}, func(d *driver) { d.run.Tenant = "rich" }, spent{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(tc.cfg)
			tc.use(d)
			got, err := tc.check(d, ctx)
			if err != nil || got != tc.want {
				t.Errorf("check = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}

	var names []string
	for _, b := range stepBudgets {
		names = append(names, b.name)
	}
	if want := []string{"host_channel", "steps", "tokens", "sandbox_cpu", "egress_bytes", "credits"}; !slices.Equal(names, want) {
		t.Errorf("stepBudgets = %v, want %v", names, want)
	}
	// Every budget spent at once: each ends the run in turn as the ones
	// before it are lifted.
	d := newDriver(Config{MaxSteps: 1, MaxTokens: 1, MaxSandboxCPUMS: 1, MaxEgressBytes: 1, MaxCredits: 1})
	d.st.spent = &event.BudgetExhausted{Budget: "llm_tokens", Limit: 1, Used: 1}
	d.st.steps, d.st.usage, d.st.cpu["sb-a"], d.st.egressBytes = 1, event.Usage{InputTokens: 1, CostMicroUSD: 1}, 1, 1
	lift := []func(){
		func() { d.st.spent = nil },
		func() { d.cfg.MaxSteps = 10 },
		func() { d.cfg.MaxTokens = 0 },
		func() { d.cfg.MaxSandboxCPUMS = 0 },
		func() { d.cfg.MaxEgressBytes = 0 },
		func() { d.cfg.MaxCredits = 0 },
	}
	for i, want := range []string{"llm_tokens", "steps", "tokens", "sandbox_cpu", "egress_bytes", "credits", ""} {
		if i > 0 {
			lift[i-1]()
		}
		d.st.cfg = d.cfg // credits.go reads the run's config from the state
		got, err := d.budgetSpent(ctx)
		if err != nil || got.Budget != want {
			t.Errorf("with the budgets before %q lifted: budgetSpent = %+v, %v", want, got, err)
		}
	}
}
