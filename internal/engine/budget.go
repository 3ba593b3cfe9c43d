package engine

import (
	"context"
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// The run's budgets are measured on the host and checked at step
// boundaries: the wall time before each step (it also bounds the step),
// the others, in the order of stepBudgets, before each model turn. The
// first one spent ends the run with budget.exhausted.

// budgetCheck looks at one of the run's budgets.
type budgetCheck struct {
	// name names the check (a spent one names its budget in what it
	// returns: the credits check covers two).
	name string
	// spent reports whether the budget is spent, and by how much; an
	// error says it could not be told (the drive stops with it).
	//
	// Preconditions: called by the loop.
	spent func(d *driver, ctx context.Context) (spent, error)
}

// spent is a spent budget: what its budget.exhausted records. A zero
// Budget means not spent.
type spent struct {
	event.BudgetExhausted
	// recorded: the log holds its budget.exhausted already (a host channel
	// found it spent), so the run ends without another.
	recorded bool
}

// stepBudgets are checked, in order, before each model turn.
var stepBudgets = []budgetCheck{
	{"host_channel", (*driver).hostChannelSpent},
	{"steps", (*driver).stepsSpent},
	{"tokens", (*driver).tokensSpent},
	{"sandbox_cpu", (*driver).cpuSpent},
	{"egress_bytes", (*driver).egressSpent},
	{"credits", (*driver).creditsSpent},
}

// budgetSpent returns the first of stepBudgets that is spent (the zero
// spent when none is).
//
// Preconditions: called by the loop.
func (d *driver) budgetSpent(ctx context.Context) (spent, error) {
	for _, b := range stepBudgets {
		if s, err := b.spent(d, ctx); err != nil || s.Budget != "" {
			return s, err
		}
	}
	return spent{}, nil
}

// exceeds returns the spent budget when used reached limit.
func exceeds(budget string, limit, used int64) spent {
	if used < limit {
		return spent{}
	}
	return spent{BudgetExhausted: event.BudgetExhausted{Budget: budget, Limit: limit, Used: used}}
}

// wallTimeSpent checks the run's active wall time (all its drive
// sessions) against its timeout.
func (d *driver) wallTimeSpent(context.Context) (spent, error) {
	return exceeds("wall_time", d.cfg.TimeoutMS, d.st.elapsed(d.e.o.Now()).Milliseconds()), nil
}

// wallTimeUsed is the wall time budget.exhausted when a step outlived the
// run's time.
func (d *driver) wallTimeUsed() spent {
	return spent{BudgetExhausted: event.BudgetExhausted{Budget: "wall_time", Limit: d.cfg.TimeoutMS, Used: d.st.elapsed(d.e.o.Now()).Milliseconds()}}
}

// hostChannelSpent reports the budget a host channel (the LLM gateway)
// found spent and recorded.
func (d *driver) hostChannelSpent(context.Context) (spent, error) {
	if d.st.spent == nil {
		return spent{}, nil
	}
	return spent{BudgetExhausted: *d.st.spent, recorded: true}, nil
}

// stepsSpent checks the model turns against max_steps.
func (d *driver) stepsSpent(context.Context) (spent, error) {
	return exceeds("steps", int64(d.cfg.MaxSteps), int64(d.st.steps)), nil
}

// tokensSpent checks the model's tokens, in and out, against max_tokens
// (none when zero).
func (d *driver) tokensSpent(context.Context) (spent, error) {
	if d.cfg.MaxTokens <= 0 {
		return spent{}, nil
	}
	return exceeds("tokens", d.cfg.MaxTokens, d.st.usage.InputTokens+d.st.usage.OutputTokens), nil
}

// cpuSpent checks the sandboxes' CPU time against max_sandbox_cpu (none
// when zero).
func (d *driver) cpuSpent(context.Context) (spent, error) {
	if d.cfg.MaxSandboxCPUMS <= 0 {
		return spent{}, nil
	}
	return exceeds("sandbox_cpu", d.cfg.MaxSandboxCPUMS, d.cpuUsed()), nil
}

// egressSpent checks the bytes through the run's egress proxies against
// max_egress_bytes (none when zero).
func (d *driver) egressSpent(context.Context) (spent, error) {
	if d.cfg.MaxEgressBytes <= 0 {
		return spent{}, nil
	}
	return exceeds("egress_bytes", d.cfg.MaxEgressBytes, d.st.egressBytes), nil
}

// creditsSpent checks the run's own credits (max_credits: "credits"),
// then its tenant's balance ("tenant_credits"); see credits.go.
func (d *driver) creditsSpent(ctx context.Context) (spent, error) {
	budget, limit, used, err := d.creditsLeft(ctx)
	if err != nil || budget == "" {
		return spent{}, err
	}
	return spent{BudgetExhausted: event.BudgetExhausted{Budget: budget, Limit: limit, Used: used}}, nil
}

// stepBound is how long the next step may take: the run's time left.
func (d *driver) stepBound() time.Duration {
	return time.Duration(d.cfg.TimeoutMS)*time.Millisecond - d.st.elapsed(d.e.o.Now())
}
