// Package credit is the one meter of tenants' credits: the run engine (its
// model calls), the LLM gateway (a sandbox's model calls) and the E2B API
// (sandbox time) all count usage through it. It owns one rule:
//
//   - A tenant whose credit ledger has an entry is metered: its usage is
//     debited from the ledger, and once its balance is spent (zero or less)
//     it starts nothing more that costs; the callers stop its runs, calls
//     and sandboxes with the budget BudgetTenant.
//   - A tenant without ledger entries is not metered: its usage is priced
//     and recorded, never debited, and nothing stops for its credits.
//   - The usage of a model the host's price table (internal/price) does not
//     price is refused for a metered tenant, and for a use that counts
//     against a credit budget of its own (a run's max_credits): its cost
//     could be neither debited nor counted, so the meter fails closed. For
//     anyone else it is free.
//   - Every debit names the event that recorded its usage (run id and seq)
//     and is idempotent per event: a retry, a settle after a crash, or two
//     components debiting the same event charge it once.
//
// Usage comes from the host's own measure (a provider's response, the
// sandbox's cgroup), never from the sandbox.
//
// Importers: internal/engine, internal/gateway and internal/e2b, and host
// wiring (internal/host), which gives the three one meter.
package credit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/store"
)

// BudgetTenant names the tenant's credits in a budget.exhausted event.
const BudgetTenant = "tenant_credits"

// Ledger is the part of the store a Meter reads and writes: the tenants'
// credit ledgers. store.Store satisfies it.
type Ledger interface {
	AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error)
	Balance(ctx context.Context, tenant string) (int64, error)
	LedgerEntries(ctx context.Context, tenant string, after int64, limit int) ([]store.LedgerEntry, error)
}

// Meter applies the rule of the package doc to one ledger and one price
// table. Create it with New; it is safe for concurrent use.
//
// Whether a tenant is metered is read from its ledger until the answer is
// yes, and from then on remembered for the Meter's life without reading
// the store again. That is the most caching that is correct: the ledger is
// append-only (the store has no way to remove an entry), so a metered
// tenant stays metered for good, while an unmetered one becomes metered the
// moment its first entry is written, by this process or by another
// replica, and the next question must see it.
type Meter struct {
	ledger Ledger
	prices price.Table

	mu sync.Mutex
	// metered holds the tenants seen metered. Guarded by mu.
	metered map[string]bool
	// held is, by tenant, what the debits under way (Hold) will take.
	// Guarded by mu.
	held map[string]int64
	// owed holds, by tenant and then by event, the debits that failed
	// for a reason a retry may cure. Guarded by mu.
	owed map[string]map[eventKey]Debit
}

// eventKey names the event a debit is linked to.
type eventKey struct {
	run string
	seq int64
}

// New returns a Meter of ledger's tenants, pricing models by prices. A nil
// ledger meters no one.
func New(ledger Ledger, prices price.Table) *Meter {
	return &Meter{
		ledger: ledger, prices: prices, metered: map[string]bool{}, held: map[string]int64{},
		owed: map[string]map[eventKey]Debit{},
	}
}

// Metered reports whether tenant is metered: whether its ledger has an
// entry.
func (m *Meter) Metered(ctx context.Context, tenant string) (bool, error) {
	if m.ledger == nil {
		return false, nil
	}
	m.mu.Lock()
	known := m.metered[tenant]
	m.mu.Unlock()
	if known {
		return true, nil
	}
	es, err := m.ledger.LedgerEntries(ctx, tenant, 0, 1)
	if err != nil {
		return false, fmt.Errorf("credit: read the ledger of %s: %w", tenant, err)
	}
	if len(es) == 0 {
		return false, nil
	}
	m.mu.Lock()
	m.metered[tenant] = true
	m.mu.Unlock()
	return true, nil
}

// Account is a tenant's standing at one moment.
type Account struct {
	Tenant string
	// Metered says the tenant's usage is debited and bounded by Balance.
	Metered bool
	// Balance is, when Metered, the ledger's balance less what this
	// Meter holds (Hold) and owes (Debit) for the tenant, in
	// micro-credits; 0 otherwise.
	Balance int64
}

// Account reads tenant's standing: whether it is metered and, if so, its
// balance.
func (m *Meter) Account(ctx context.Context, tenant string) (Account, error) {
	a := Account{Tenant: tenant}
	metered, err := m.Metered(ctx, tenant)
	if err != nil || !metered {
		return a, err
	}
	// What is held and owed is read first: a debit that lands between the
	// two reads is then counted twice (refusing early), never not at all.
	m.mu.Lock()
	pending := m.held[tenant]
	for _, d := range m.owed[tenant] {
		pending += d.Amount
	}
	m.mu.Unlock()
	bal, err := m.ledger.Balance(ctx, tenant)
	if err != nil {
		return a, fmt.Errorf("credit: balance of %s: %w", tenant, err)
	}
	a.Metered, a.Balance = true, bal-pending
	return a, nil
}

// Spent returns the budget.exhausted event of an account whose credits are
// spent (metered, with a balance of zero or less), and nil for any other.
func (a Account) Spent() *event.BudgetExhausted {
	if !a.Metered || a.Balance > 0 {
		return nil
	}
	return &event.BudgetExhausted{Budget: BudgetTenant, Used: -a.Balance}
}

// Rate is what a model's usage costs.
type Rate struct {
	// Spec is the model, as the price table looks it up
	// ("PROVIDER:MODEL").
	Spec string
	// Price is the model's price when Priced; a model without one is
	// free.
	Price  price.Price
	Priced bool
}

// UnpricedError refuses the usage of a model that has no price where its
// cost must be counted.
type UnpricedError struct{ Spec string }

func (e *UnpricedError) Error() string {
	return fmt.Sprintf("model %q has no price in the host's price table, and its usage must be counted (the tenant is metered or the run has a credit budget)", e.Spec)
}

// Lookup returns model spec's rate by the price table alone, for a use
// that is never charged (a token count, a model list).
func (m *Meter) Lookup(spec string) Rate {
	p, ok := m.prices.Lookup(spec)
	return Rate{Spec: spec, Price: p, Priced: ok}
}

// Rate returns the rate of model spec for a use by account a; budgeted
// says the use also counts against a credit budget of its own. An unpriced
// model is refused with an *UnpricedError when a is metered or the use is
// budgeted; otherwise it is free.
func (m *Meter) Rate(a Account, spec string, budgeted bool) (Rate, error) {
	r := m.Lookup(spec)
	if !r.Priced && (a.Metered || budgeted) {
		return r, &UnpricedError{Spec: spec}
	}
	return r, nil
}

// Cost returns what usage u costs at rate r, in micro-credits: 0 when r is
// not priced, and at most store.MaxLedgerAmount, what one debit may take
// (a larger cost comes only from a misconfigured price; uncapped, its
// debit would be refused on every try, and the usage never charged).
func (r Rate) Cost(u event.Usage) (int64, error) {
	if !r.Priced {
		return 0, nil
	}
	c, err := r.Price.Cost(u)
	if err != nil {
		return 0, fmt.Errorf("credit: cost of %s: %w", r.Spec, err)
	}
	return min(c, store.MaxLedgerAmount), nil
}

// Debit is one charge of a tenant's credits, linked to the event of a run
// that recorded the usage.
type Debit struct {
	Tenant string
	RunID  string
	Seq    int64
	// Amount is in micro-credits.
	Amount int64
	// Note says what was used, for a person reading the ledger.
	Note string
}

// DebitOf returns the debit that event e of one of tenant's runs calls
// for, p being its payload: the cost that a model response (the engine's
// own model calls), a gateway call (llm.call) or a sandbox's usage
// (sandbox.usage) records. ok is false for any other payload and for a cost
// of zero.
func DebitOf(tenant string, e event.Event, p event.Payload) (d Debit, ok bool) {
	d = Debit{Tenant: tenant, RunID: e.RunID, Seq: e.Seq}
	switch p := p.(type) {
	case *event.ModelResponse:
		d.Amount, d.Note = p.Usage.CostMicroUSD, "model "+p.Provider+":"+p.Model
	case *event.LLMCall:
		d.Amount, d.Note = p.CostMicroCredits, "llm "+p.Upstream+":"+p.UpstreamModel
	case *event.SandboxUsage:
		d.Amount, d.Note = p.CostMicroCredits, "sandbox "+p.SandboxID
	}
	return d, d.Amount > 0
}

// Hold counts amount against tenant's balance (Account) until release is
// called: for a debit under way whose event is not recorded yet, so that
// no other use spends the same credits meanwhile. Call release once, after
// Debit returned (a failed debit stays counted, as owed).
func (m *Meter) Hold(tenant string, amount int64) (release func()) {
	if amount <= 0 {
		return func() {}
	}
	m.mu.Lock()
	m.held[tenant] += amount
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.held[tenant] -= amount; m.held[tenant] <= 0 {
				delete(m.held, tenant)
			}
		})
	}
}

// Debit takes d.Amount from d.Tenant's credits if the tenant is metered; a
// debit of zero or less, or of a tenant that is not metered, does nothing.
// An amount above store.MaxLedgerAmount is debited as that (see Rate.Cost).
//
// It is idempotent per event: a second debit of the same run and seq with
// the same amount writes nothing (the store keeps one debit per event); the
// same event with another amount is an error wrapping store.ErrExists.
//
// A debit that fails for a reason a retry may cure (anything but
// store.ErrInvalid and store.ErrExists) is owed: it counts against the
// tenant's balance and is tried again by Retry, and by the tenant's next
// debit that succeeds, until it is made. The error is returned either way.
func (m *Meter) Debit(ctx context.Context, d Debit) error {
	if d.Amount <= 0 {
		return nil
	}
	d.Amount = min(d.Amount, store.MaxLedgerAmount)
	if err := m.debit(ctx, d); err != nil {
		return err
	}
	// The ledger answers: make what the tenant owes from before.
	m.mu.Lock()
	var again []Debit
	for _, o := range m.owed[d.Tenant] {
		again = append(again, o)
	}
	m.mu.Unlock()
	for _, o := range again {
		if m.debit(ctx, o) != nil {
			break // still owed; d itself is made
		}
	}
	return nil
}

// Retry makes the debits owed (see Debit), and returns what still fails.
func (m *Meter) Retry(ctx context.Context) error {
	m.mu.Lock()
	var again []Debit
	for _, ds := range m.owed {
		for _, d := range ds {
			again = append(again, d)
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, d := range again {
		errs = append(errs, m.debit(ctx, d))
	}
	return errors.Join(errs...)
}

// debit writes d to the ledger if its tenant is metered, and keeps it owed
// when that fails for a reason a retry may cure.
func (m *Meter) debit(ctx context.Context, d Debit) error {
	metered, err := m.Metered(ctx, d.Tenant)
	if err == nil && !metered {
		return nil
	}
	if err == nil {
		_, err = m.ledger.AddLedgerEntry(ctx, store.LedgerEntry{
			Tenant: d.Tenant, Kind: store.LedgerDebit, Amount: d.Amount,
			RunID: d.RunID, Seq: d.Seq, Note: d.Note,
		})
		if err != nil {
			err = fmt.Errorf("credit: debit %d from %s for run %s seq %d: %w", d.Amount, d.Tenant, d.RunID, d.Seq, err)
		}
	}
	k := eventKey{d.RunID, d.Seq}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil && !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrExists) {
		if m.owed[d.Tenant] == nil {
			m.owed[d.Tenant] = map[eventKey]Debit{}
		}
		m.owed[d.Tenant][k] = d
		return err
	}
	// Made, or refused for good: no longer owed. It leaves the owed set
	// only after the ledger holds it, so a balance read in between
	// counts it twice, never not at all.
	if ds := m.owed[d.Tenant]; ds != nil {
		delete(ds, k)
		if len(ds) == 0 {
			delete(m.owed, d.Tenant)
		}
	}
	return err
}
