package credit_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// prices prices "priced:m" at one micro-credit per input token and two per
// output token; nothing else has a price.
var prices = price.Table{"priced:m": {Input: 1_000_000, Output: 2_000_000}}

// usage costs 100 + 2*50 = 200 micro-credits at "priced:m".
var usage = event.Usage{InputTokens: 100, OutputTokens: 50}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newRun stores a run of tenant with n events, for debits to name.
func newRun(t *testing.T, st store.Store, tenant string, n int) string {
	t.Helper()
	ctx := context.Background()
	id := event.NewRunID(time.Now())
	if _, err := st.CreateRun(ctx, store.Run{ID: id, Tenant: tenant, Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	for i := range n {
		e, err := event.New(event.Retry{Step: i, What: "test", Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e)
	}
	if _, err := st.Append(ctx, id, 1, evs); err != nil {
		t.Fatal(err)
	}
	return id
}

func grant(t *testing.T, st store.Store, tenant string, micro int64) {
	t.Helper()
	if _, err := st.AddLedgerEntry(context.Background(), store.LedgerEntry{Tenant: tenant, Kind: store.LedgerGrant, Amount: micro}); err != nil {
		t.Fatal(err)
	}
}

func debits(t *testing.T, st store.Store, tenant string) []store.LedgerEntry {
	t.Helper()
	es, err := st.LedgerEntries(context.Background(), tenant, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.LedgerEntry
	for _, e := range es {
		if e.Kind == store.LedgerDebit {
			out = append(out, e)
		}
	}
	return out
}

func balance(t *testing.T, st store.Store, tenant string) int64 {
	t.Helper()
	b, err := st.Balance(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRule: the package's rule, case by case, against a real store: who is
// metered, what a model costs, which use is refused, when the credits are
// spent, and whether a debit reaches the ledger.
func TestRule(t *testing.T) {
	tests := []struct {
		name     string
		grant    int64 // the tenant's grant in micro-credits; 0: no ledger
		spentBy  int64 // debited before, linked to an earlier event
		spec     string
		budgeted bool // the use counts against a credit budget of its own

		metered bool
		refused bool  // an *UnpricedError
		cost    int64 // of usage
		spent   bool  // Account.Spent says tenant_credits
		used    int64 // its Used, when spent
		debited bool  // the debit of the cost reaches the ledger
	}{
		{name: "unmetered, priced", spec: "priced:m", cost: 200},
		{name: "unmetered, unpriced is free", spec: "free:m", cost: 0},
		{name: "unmetered, unpriced with a credit budget", spec: "free:m", budgeted: true, refused: true},
		{name: "unmetered, priced with a credit budget", spec: "priced:m", budgeted: true, cost: 200},
		{name: "metered, priced", grant: 1000, spec: "priced:m", metered: true, cost: 200, debited: true},
		{name: "metered, unpriced", grant: 1000, spec: "free:m", metered: true, refused: true},
		{name: "metered, unpriced with a credit budget", grant: 1000, spec: "free:m", budgeted: true, metered: true, refused: true},
		{name: "metered, one micro-credit left", grant: 1000, spentBy: 999, spec: "priced:m", metered: true, cost: 200, debited: true},
		{name: "metered, balance zero", grant: 1000, spentBy: 1000, spec: "priced:m", metered: true, cost: 200, spent: true, used: 0, debited: true},
		{name: "metered, overdrawn", grant: 1000, spentBy: 1500, spec: "priced:m", metered: true, cost: 200, spent: true, used: 500, debited: true},
	}
	st := openStore(t)
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenant := "t" + strconv.Itoa(i)
			run := newRun(t, st, tenant, 2)
			if tt.grant > 0 {
				grant(t, st, tenant, tt.grant)
			}
			if tt.spentBy > 0 {
				if _, err := st.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: tenant, Kind: store.LedgerDebit, Amount: tt.spentBy, RunID: run, Seq: 1}); err != nil {
					t.Fatal(err)
				}
			}
			m := credit.New(st, prices)
			a, err := m.Account(ctx, tenant)
			if err != nil {
				t.Fatal(err)
			}
			if a.Metered != tt.metered || a.Balance != tt.grant-tt.spentBy {
				t.Errorf("Account(%s) = %+v, want metered %t, balance %d", tenant, a, tt.metered, tt.grant-tt.spentBy)
			}
			ex := a.Spent()
			if (ex != nil) != tt.spent || ex != nil && (ex.Budget != credit.BudgetTenant || ex.Used != tt.used) {
				t.Errorf("Spent() = %+v, want spent %t (used %d)", ex, tt.spent, tt.used)
			}
			r, err := m.Rate(a, tt.spec, tt.budgeted)
			var unpriced *credit.UnpricedError
			if errors.As(err, &unpriced) != tt.refused || err != nil && !tt.refused {
				t.Fatalf("Rate(%s, budgeted %t) = %v, want refused %t", tt.spec, tt.budgeted, err, tt.refused)
			}
			if tt.refused {
				if unpriced.Spec != tt.spec {
					t.Errorf("UnpricedError.Spec = %q, want %q", unpriced.Spec, tt.spec)
				}
				return
			}
			cost, err := r.Cost(usage)
			if err != nil || cost != tt.cost {
				t.Fatalf("Cost(%+v) = %d, %v, want %d", usage, cost, err, tt.cost)
			}
			if err := m.Debit(ctx, credit.Debit{Tenant: tenant, RunID: run, Seq: 2, Amount: cost, Note: "test"}); err != nil {
				t.Fatalf("Debit = %v", err)
			}
			var got int64
			for _, d := range debits(t, st, tenant) {
				if d.Seq == 2 {
					got += d.Amount
				}
			}
			want := int64(0)
			if tt.debited {
				want = tt.cost
			}
			if got != want {
				t.Errorf("debited %d for event 2, want %d", got, want)
			}
		})
	}
}

// countingLedger counts the ledger reads that decide whether a tenant is
// metered.
type countingLedger struct {
	*sqlite.Store
	reads atomic.Int64
}

func (c *countingLedger) LedgerEntries(ctx context.Context, tenant string, after int64, limit int) ([]store.LedgerEntry, error) {
	c.reads.Add(1)
	return c.Store.LedgerEntries(ctx, tenant, after, limit)
}

// TestMeteredCache: an unmetered tenant is read again on every question,
// so its first grant (here from another handle, as another replica would)
// counts at once; a metered one is remembered and not read again.
func TestMeteredCache(t *testing.T) {
	st := openStore(t)
	l := &countingLedger{Store: st}
	m := credit.New(l, nil)
	ctx := context.Background()
	for i := range 3 {
		if got, err := m.Metered(ctx, "acme"); err != nil || got {
			t.Fatalf("Metered(acme) = %t, %v before a grant, want false", got, err)
		}
		if n := l.reads.Load(); n != int64(i+1) {
			t.Fatalf("%d ledger reads after %d questions about an unmetered tenant, want one each", n, i+1)
		}
	}
	grant(t, st, "acme", 1)
	for range 3 {
		if got, err := m.Metered(ctx, "acme"); err != nil || !got {
			t.Fatalf("Metered(acme) = %t, %v after a grant, want true", got, err)
		}
	}
	if n := l.reads.Load(); n != 4 {
		t.Errorf("%d ledger reads, want 4: a metered tenant is read once", n)
	}
	if got, err := credit.New(nil, nil).Metered(ctx, "acme"); err != nil || got {
		t.Errorf("Metered without a ledger = %t, %v, want false", got, err)
	}
}

// TestDebitOnce: a debit is made once per event, however often and by
// however many meters it is made (a retry, a settle after a crash, the
// engine and the gateway both); the same event with another amount is
// refused.
func TestDebitOnce(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	run := newRun(t, st, "acme", 3)
	grant(t, st, "acme", 1_000_000)
	d := credit.Debit{Tenant: "acme", RunID: run, Seq: 2, Amount: 300, Note: "model priced:m"}

	first, second := credit.New(st, prices), credit.New(st, prices)
	for range 2 {
		if err := first.Debit(ctx, d); err != nil {
			t.Fatalf("Debit = %v", err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		m := first
		if i%2 == 1 {
			m = second
		}
		wg.Go(func() { errs[i] = m.Debit(ctx, d) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Debit = %v", err)
	}
	if ds := debits(t, st, "acme"); len(ds) != 1 || ds[0].Amount != 300 || ds[0].RunID != run || ds[0].Seq != 2 {
		t.Fatalf("debits = %+v, want one of 300 linked to %s seq 2", ds, run)
	}
	if b := balance(t, st, "acme"); b != 1_000_000-300 {
		t.Errorf("balance = %d, want %d", b, 1_000_000-300)
	}

	other := d
	other.Amount = 301
	if err := first.Debit(ctx, other); !errors.Is(err, store.ErrExists) {
		t.Errorf("Debit of the same event with another amount = %v, want ErrExists", err)
	}
	// Refused for good: not owed, not counted against the balance.
	if a, err := first.Account(ctx, "acme"); err != nil || a.Balance != 1_000_000-300 {
		t.Errorf("Account = %+v, %v, want balance %d", a, err, 1_000_000-300)
	}

	// An amount past what one entry holds is debited as that.
	huge := credit.Debit{Tenant: "acme", RunID: run, Seq: 3, Amount: store.MaxLedgerAmount + 5}
	for range 2 {
		if err := first.Debit(ctx, huge); err != nil {
			t.Fatalf("Debit(huge) = %v", err)
		}
	}
	if ds := debits(t, st, "acme"); len(ds) != 2 || ds[1].Amount != store.MaxLedgerAmount {
		t.Errorf("debits = %+v, want the second of %d", ds, int64(store.MaxLedgerAmount))
	}
}

// TestDebitUnmetered: an unmetered tenant's usage is never debited, nor a
// debit of nothing.
func TestDebitUnmetered(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	run := newRun(t, st, "acme", 1)
	m := credit.New(st, prices)
	if err := m.Debit(ctx, credit.Debit{Tenant: "acme", RunID: run, Seq: 1, Amount: 10}); err != nil {
		t.Fatal(err)
	}
	if ds := debits(t, st, "acme"); len(ds) != 0 {
		t.Fatalf("an unmetered tenant was debited: %+v", ds)
	}
	grant(t, st, "acme", 100)
	if err := m.Debit(ctx, credit.Debit{Tenant: "acme", RunID: run, Seq: 1, Amount: 0}); err != nil {
		t.Fatal(err)
	}
	if ds := debits(t, st, "acme"); len(ds) != 0 {
		t.Fatalf("a debit of nothing was written: %+v", ds)
	}
}

// flakyLedger is a store whose debits fail while down is set, as a store
// that went away between a usage's record and its debit would.
type flakyLedger struct {
	*sqlite.Store
	down atomic.Bool
}

func (f *flakyLedger) AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error) {
	if e.Kind == store.LedgerDebit && f.down.Load() {
		return store.LedgerEntry{}, errors.New("the ledger is down")
	}
	return f.Store.AddLedgerEntry(ctx, e)
}

// TestDebitOwed: a debit that fails is owed: the balance counts it at
// once, and it is made once the ledger answers again, by the tenant's next
// debit or by Retry, and only once. One refused for good is not owed.
func TestDebitOwed(t *testing.T) {
	st := openStore(t)
	l := &flakyLedger{Store: st}
	ctx := context.Background()
	run := newRun(t, st, "acme", 4)
	grant(t, st, "acme", 1000)
	m := credit.New(l, prices)
	l.down.Store(true)
	for seq := int64(1); seq <= 2; seq++ {
		if err := m.Debit(ctx, credit.Debit{Tenant: "acme", RunID: run, Seq: seq, Amount: 100}); err == nil {
			t.Fatal("Debit through a ledger that is down = nil")
		}
	}
	if a, err := m.Account(ctx, "acme"); err != nil || a.Balance != 800 {
		t.Fatalf("Account = %+v, %v, want the owed 200 counted: balance 800", a, err)
	}
	if err := m.Retry(ctx); err == nil {
		t.Fatal("Retry through a ledger that is down = nil")
	}
	l.down.Store(false)
	// The tenant's next debit makes what it owes.
	if err := m.Debit(ctx, credit.Debit{Tenant: "acme", RunID: run, Seq: 3, Amount: 100}); err != nil {
		t.Fatal(err)
	}
	if err := m.Retry(ctx); err != nil {
		t.Fatalf("Retry = %v, want nothing left", err)
	}
	ds := debits(t, st, "acme")
	seen := map[int64]int{}
	for _, d := range ds {
		seen[d.Seq]++
	}
	if len(ds) != 3 || seen[1] != 1 || seen[2] != 1 || seen[3] != 1 {
		t.Fatalf("debits = %+v, want one each for seqs 1, 2, 3", ds)
	}
	if a, err := m.Account(ctx, "acme"); err != nil || a.Balance != 700 || balance(t, st, "acme") != 700 {
		t.Fatalf("Account = %+v, %v, want balance 700 in the ledger and the meter", a, err)
	}

	// Past the run's log: the store refuses it for good, so it is not
	// owed, and Retry has nothing to do.
	if err := m.Debit(ctx, credit.Debit{Tenant: "acme", RunID: run, Seq: 99, Amount: 100}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("Debit past the log = %v, want ErrInvalid", err)
	}
	if err := m.Retry(ctx); err != nil {
		t.Fatalf("Retry = %v, want nothing owed", err)
	}
	if a, _ := m.Account(ctx, "acme"); a.Balance != 700 {
		t.Errorf("Account balance = %d, want 700", a.Balance)
	}
}

// TestHold: a hold counts against the balance until it is released, once.
func TestHold(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	grant(t, st, "acme", 1000)
	m := credit.New(st, prices)
	release := m.Hold("acme", 600)
	other := m.Hold("acme", 400)
	a, err := m.Account(ctx, "acme")
	if err != nil || a.Balance != 0 || a.Spent() == nil {
		t.Fatalf("Account with 1000 held = %+v, %v, want balance 0, spent", a, err)
	}
	release()
	release()
	if a, _ := m.Account(ctx, "acme"); a.Balance != 600 {
		t.Errorf("Account after one release (twice) = %+v, want balance 600", a)
	}
	other()
	if a, _ := m.Account(ctx, "acme"); a.Balance != 1000 {
		t.Errorf("Account after both releases = %+v, want balance 1000", a)
	}
}

// TestCost: a priced rate's cost, capped at what one debit may take; an
// unpriced one is free.
func TestCost(t *testing.T) {
	m := credit.New(nil, price.Table{"huge:m": {Input: 1 << 40, Output: 1 << 40}})
	tests := []struct {
		spec string
		u    event.Usage
		want int64
	}{
		{"huge:m", event.Usage{InputTokens: 1}, (1<<40 + 999_999) / 1_000_000}, // rounded up
		{"huge:m", event.Usage{InputTokens: 1 << 30, OutputTokens: 1 << 30}, store.MaxLedgerAmount},
		{"free:m", event.Usage{InputTokens: 1 << 30}, 0},
	}
	for _, tt := range tests {
		got, err := m.Lookup(tt.spec).Cost(tt.u)
		if err != nil || got != tt.want {
			t.Errorf("Lookup(%s).Cost(%+v) = %d, %v, want %d", tt.spec, tt.u, got, err, tt.want)
		}
	}
}

// TestDebitOf: the events that record a cost, and the debit each calls
// for.
func TestDebitOf(t *testing.T) {
	e := event.Event{RunID: "run-x", Seq: 7}
	tests := []struct {
		name string
		p    event.Payload
		want credit.Debit
		ok   bool
	}{
		{
			"model response", &event.ModelResponse{Provider: "anthropic", Model: "claude", Usage: event.Usage{CostMicroUSD: 12}},
			credit.Debit{Tenant: "acme", RunID: "run-x", Seq: 7, Amount: 12, Note: "model anthropic:claude"},
			true,
		},
		{
			"gateway call", &event.LLMCall{Upstream: "openai", UpstreamModel: "gpt", CostMicroCredits: 34},
			credit.Debit{Tenant: "acme", RunID: "run-x", Seq: 7, Amount: 34, Note: "llm openai:gpt"},
			true,
		},
		{
			"sandbox usage", &event.SandboxUsage{SandboxID: "sb-1", CostMicroCredits: 56},
			credit.Debit{Tenant: "acme", RunID: "run-x", Seq: 7, Amount: 56, Note: "sandbox sb-1"},
			true,
		},
		{"free model response", &event.ModelResponse{Provider: "script", Model: "m"}, credit.Debit{}, false},
		{"another event", &event.Retry{Step: 1}, credit.Debit{}, false},
	}
	for _, tt := range tests {
		got, ok := credit.DebitOf("acme", e, tt.p)
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("DebitOf(%s) = %+v, %t, want %+v, %t", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
