package engine

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// A tenant whose ledger has entries is metered: its runs' model calls are
// debited, each debit linked to the model.response event that caused it
// (so a retry never charges twice), and a run stops when the tenant's
// balance is spent. Nothing the sandbox says is counted: the usage comes
// from the provider's response, the price from the host's table.

// checkMetered reads whether the run's tenant is metered.
func (d *driver) checkMetered(ctx context.Context) error {
	es, err := d.e.o.Store.LedgerEntries(ctx, d.run.Tenant, 0, 1)
	if err != nil {
		return fmt.Errorf("engine: credit ledger: %w", err)
	}
	d.metered = len(es) > 0
	return nil
}

// costOf prices usage u of the run's model. An unpriced model costs
// nothing for an unmetered tenant and is refused for a metered one.
func (d *driver) costOf(u event.Usage) (int64, error) {
	c, err := d.e.o.Prices.Cost(d.st.cfg.Model, u)
	if err != nil {
		if d.metered {
			return 0, err
		}
		return 0, nil
	}
	return c, nil
}

// charge debits the tenant for the response at seq; a second charge of
// the same response is a no-op.
func (d *driver) charge(ctx context.Context, seq, cost int64) error {
	if !d.metered || cost <= 0 {
		return nil
	}
	_, err := d.e.o.Store.AddLedgerEntry(context.WithoutCancel(ctx), store.LedgerEntry{Tenant: d.run.Tenant, Kind: store.LedgerDebit,
		Amount: cost, RunID: d.run.ID, Seq: seq, Note: "model " + d.st.cfg.Model})
	if err != nil {
		return fmt.Errorf("engine: debit the credit ledger: %w", err)
	}
	return nil
}

// settleCharges debits every recorded response the ledger may lack (a host
// that died between a response and its debit).
func (d *driver) settleCharges(ctx context.Context) error {
	d.mu.Lock()
	charges := make(map[int64]int64, len(d.st.charges))
	for k, v := range d.st.charges {
		charges[k] = v
	}
	d.mu.Unlock()
	for seq, cost := range charges {
		if err := d.charge(ctx, seq, cost); err != nil {
			return err
		}
	}
	return nil
}

// creditsLeft checks the run's own credit budget and the tenant's balance.
func (d *driver) creditsLeft(ctx context.Context) (budget string, limit, used int64, err error) {
	d.mu.Lock()
	spent := d.st.usage.CostMicroUSD
	d.mu.Unlock()
	if max := d.st.cfg.MaxCredits; max > 0 && spent >= max {
		return "credits", max, spent, nil
	}
	if !d.metered {
		return "", 0, 0, nil
	}
	bal, err := d.e.o.Store.Balance(ctx, d.run.Tenant)
	if err != nil {
		return "", 0, 0, fmt.Errorf("engine: credit balance: %w", err)
	}
	if bal <= 0 {
		return "tenant_credits", 0, -bal, nil
	}
	return "", 0, 0, nil
}
