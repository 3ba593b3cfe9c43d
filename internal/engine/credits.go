package engine

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/credit"
)

// A run's model calls are counted by the engine's credit.Meter, whose
// package doc states the rule: a metered tenant's calls are debited, each
// debit linked to the event that recorded the call's cost (a model.response
// of the run's own, or an llm.call its sandboxes made through the
// gateway), so a retry never charges twice; a run stops when the tenant's
// balance is spent; and a model without a price is refused before it is
// called when the tenant is metered or the run has a credit budget.
// Nothing the sandbox says is counted: the usage comes from the provider's
// response, the price from the host's table.

// creditsLeft reads the tenant's account, which the step's model call is
// priced under (d.account), and checks the run's own credit budget and
// the tenant's balance.
//
// Preconditions: called by the loop, which owns st and account.
func (d *driver) creditsLeft(ctx context.Context) (budget string, limit, used int64, err error) {
	a, err := d.e.meter.Account(ctx, d.run.Tenant)
	if err != nil {
		return "", 0, 0, fmt.Errorf("engine: %w", err)
	}
	d.account = a
	spent := d.st.usage.CostMicroUSD
	if maxCredits := d.st.cfg.MaxCredits; maxCredits > 0 && spent >= maxCredits {
		return "credits", maxCredits, spent, nil
	}
	if ex := a.Spent(); ex != nil {
		return ex.Budget, ex.Limit, ex.Used, nil
	}
	return "", 0, 0, nil
}

// rate returns what the run's model costs under the tenant's account; an
// unpriced model is refused (a *credit.UnpricedError) for a metered
// tenant and for a run with a credit budget.
//
// Preconditions: called by the loop; creditsLeft ran in this step.
func (d *driver) rate() (credit.Rate, error) {
	return d.e.meter.Rate(d.account, d.st.cfg.Model, d.st.cfg.MaxCredits > 0)
}

// charge debits the tenant for the cost the event at seq recorded (see
// credit.DebitOf); a second charge of the same event is a no-op.
//
// Preconditions: called by the loop, once the event is folded.
func (d *driver) charge(ctx context.Context, seq int64) error {
	c, ok := d.st.charges[seq]
	if !ok {
		return nil
	}
	if err := d.e.meter.Debit(context.WithoutCancel(ctx), c); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return nil
}

// settleCharges debits every recorded cost the ledger may lack: a host
// that died between a response and its debit, a gateway debit that
// failed.
//
// Preconditions: called by the loop.
func (d *driver) settleCharges(ctx context.Context) error {
	for _, c := range d.st.charges {
		if err := d.e.meter.Debit(context.WithoutCancel(ctx), c); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
	}
	return nil
}
