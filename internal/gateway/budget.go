package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/credit"
)

// The gateway's budgets, as a budget.exhausted event names them.
const (
	budgetTokens  = "llm_tokens"
	budgetCredits = "llm_credits"
	budgetTenant  = credit.BudgetTenant
)

// microPerCredit converts the policy's credits to the ledger's
// micro-credits.
const microPerCredit = 1_000_000

// Totals are what a run's gateway calls have used so far: the tokens
// (input and output) and the cost in micro-credits.
type Totals struct {
	Tokens       int64
	MicroCredits int64
}

type runKey struct{ tenant, run string }

// runState is the gateway's accounting of one run: totals of finished
// calls, estimates of calls in flight, and recent request times for the
// rate limit. Calls of the same run from several sandboxes share it.
type runState struct {
	mu sync.Mutex
	// All fields below are guarded by mu.
	seeded bool
	done   Totals
	// live are the estimates of the calls in flight: each holds its
	// input estimate from the start and adds its output as it streams.
	live Totals
	// recent are the start times of the calls of the last minute,
	// oldest first.
	recent []time.Time
}

// run returns the state of id's run, seeded on first use by Config.Spent.
func (g *Gateway) run(ctx context.Context, id bridge.Identity) (*runState, error) {
	k := runKey{id.Tenant, id.Run}
	g.mu.Lock()
	st, ok := g.runs[k]
	if !ok {
		st = &runState{}
		g.runs[k] = st
	}
	g.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.seeded {
		if g.cfg.Spent != nil {
			t, err := g.cfg.Spent(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("gateway: totals of run %s: %w", id.Run, err)
			}
			st.done = t
		}
		st.seeded = true
	}
	return st, nil
}

// allow counts a call against the rate limit of perMinute calls in any
// minute (0: none) and reports whether it may go ahead, or how long until
// it could.
func (st *runState) allow(now time.Time, perMinute int64) (bool, time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	cut := now.Add(-time.Minute)
	i := 0
	for i < len(st.recent) && !st.recent[i].After(cut) {
		i++
	}
	st.recent = st.recent[i:]
	if perMinute > 0 && int64(len(st.recent)) >= perMinute {
		return false, st.recent[0].Sub(cut)
	}
	st.recent = append(st.recent, now)
	return true, 0
}

// used returns the totals counting the calls in flight.
func (st *runState) used() Totals {
	st.mu.Lock()
	defer st.mu.Unlock()
	return Totals{Tokens: st.done.Tokens + st.live.Tokens, MicroCredits: st.done.MicroCredits + st.live.MicroCredits}
}

// flight is one call's share of its run's live estimate.
type flight struct {
	st  *runState
	cur Totals
}

// start puts est in flight.
func (st *runState) start(est Totals) *flight {
	f := &flight{st: st}
	f.set(est)
	return f
}

// set replaces the call's estimate with est and returns the run's totals
// with it.
func (f *flight) set(est Totals) Totals {
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	st.live.Tokens += est.Tokens - f.cur.Tokens
	st.live.MicroCredits += est.MicroCredits - f.cur.MicroCredits
	f.cur = est
	return Totals{Tokens: st.done.Tokens + st.live.Tokens, MicroCredits: st.done.MicroCredits + st.live.MicroCredits}
}

// land takes the call out of flight and adds what it really used; it
// returns the run's totals of finished calls.
func (f *flight) land(used Totals) Totals {
	st := f.st
	st.mu.Lock()
	defer st.mu.Unlock()
	st.live.Tokens -= f.cur.Tokens
	st.live.MicroCredits -= f.cur.MicroCredits
	f.cur = Totals{}
	st.done.Tokens += used.Tokens
	st.done.MicroCredits += used.MicroCredits
	return st.done
}
