package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/tools"
)

// driver drives one run in this process.
type driver struct {
	e   *Engine
	run store.Run

	// mu serialises appends and guards st and pending.
	mu sync.Mutex
	st *state
	// pending are events already folded into st but not yet written: they
	// go out with the next append. Only events whose loss a crash makes
	// harmless are deferred (a step's last result and its snapshot: without
	// them the step is incomplete and recovery redoes it), which saves a
	// synchronous commit per step.
	pending []event.Event
	// status is the run's status as this driver set it: running, or
	// awaiting_approval while it waits for a decision. Any other status
	// in the store means someone else stopped the run.
	status event.Status

	prov     model.Provider
	provKind string
	reg      *tools.Registry
	specs    []model.ToolSpec

	sbMu sync.Mutex
	sbs  map[string]*live

	// Guarded by mu: what the current step's calls did to each sandbox,
	// and what is known of each sandbox's last snapshot.
	changes map[string]*change
	snaps   map[string]snapInfo

	// account is the tenant's credit account as the step's budget check
	// read it (see credits.go). Guarded by mu.
	account credit.Account

	netAsks netAsker
}

// change is what one step's calls did to one sandbox.
type change struct {
	// calls counts the calls that may have changed it; fingerprint is the
	// workspace's fingerprint after the one run_command among them (""
	// when another kind of call, or several, may have changed it).
	calls       int
	fingerprint string
}

// snapInfo is the last snapshot of a sandbox taken in this process.
type snapInfo struct {
	digest      string
	size        int64
	fingerprint string // of the workspace the snapshot holds; "" unknown
}

// live is a provisioned sandbox.
type live struct {
	mu      sync.Mutex // held while provisioning
	sb      sandbox.Sandbox
	release func()
}

// stolenError is the cause of a drive's end when another process moved the
// run out of running (a cancel or pause).
type stolenError struct{ status event.Status }

func (e *stolenError) Error() string { return "engine: run is now " + string(e.status) }

var errTimeBudget = errors.New("engine: the run's time budget is spent")

// requestFlushDelay is how long a model request may stay unwritten while
// the model answers.
const requestFlushDelay = 100 * time.Millisecond

func newDriver(e *Engine, r store.Run, st *state) *driver {
	return &driver{e: e, run: r, st: st, sbs: map[string]*live{}, snaps: map[string]snapInfo{}}
}

// append records payloads as one durable batch and folds them into the
// state. ctx's end does not stop it: what happened must be recorded.
func (d *driver) append(ctx context.Context, ps ...event.Payload) error {
	return d.appendStatus(ctx, "", "", ps...)
}

func (d *driver) appendStatus(ctx context.Context, from, to event.Status, ps ...event.Payload) error {
	_, err := d.appendStored(ctx, from, to, ps...)
	return err
}

// logged appends ps from outside the loop (a host channel's record) and
// returns the seq of ps[0].
func (d *driver) logged(ctx context.Context, ps ...event.Payload) (int64, error) {
	stored, err := d.appendStored(ctx, "", "", ps...)
	if err != nil {
		return 0, err
	}
	if i := len(stored) - len(ps); i >= 0 && len(ps) > 0 {
		return stored[i].Seq, nil
	}
	return 0, errors.New("engine: nothing recorded")
}

// appendStored is appendStatus returning the events it stored (the pending
// ones first, then ps).
func (d *driver) appendStored(ctx context.Context, from, to event.Status, ps ...event.Payload) ([]event.Event, error) {
	evs, err := drafts(ps...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) > 0 {
		evs = append(append([]event.Event(nil), d.pending...), evs...)
	}
	if len(evs) == 0 {
		return nil, nil
	}
	var stored []event.Event
	for attempt := 0; ; attempt++ {
		if to != "" {
			_, stored, err = d.e.o.Store.AppendStatus(ctx, d.run.ID, d.st.lastSeq+1, from, to, evs)
		} else {
			stored, err = d.e.o.Store.Append(ctx, d.run.ID, d.st.lastSeq+1, evs)
		}
		if errors.Is(err, store.ErrLeaseLost) {
			return nil, &stolenError{status: "taken over (lease lost)"}
		}
		if err == nil || !errors.Is(err, store.ErrConflict) {
			break
		}
		// Someone else wrote to the log: a cancel or pause (the run's
		// status moved), a decision on an approval (the only foreign
		// event a driver takes in and goes on), or another driver, which
		// this one leaves the run to.
		r, gerr := d.e.o.Store.GetRun(ctx, d.run.ID)
		if gerr != nil {
			break
		}
		if r.Status != d.status || attempt >= 20 || !d.onlyDecisionsSince(ctx) {
			return nil, &stolenError{status: r.Status}
		}
		d.catchUpLocked(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("engine: record %s: %w", evs[0].Type, err)
	}
	if to != "" {
		d.status = to
	}
	d.pending = nil
	for _, ev := range stored {
		if err := d.st.apply(ev, own); err != nil {
			return nil, err
		}
	}
	d.e.emit(stored)
	return stored, nil
}

// later folds ps into the state now and writes them with the next append.
func (d *driver) later(ps ...event.Payload) error {
	evs, err := drafts(ps...)
	if err != nil {
		return err
	}
	now := d.e.o.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ev := range evs {
		ev.Time = now
		if err := d.st.apply(ev, pending); err != nil {
			return err
		}
		d.pending = append(d.pending, ev)
	}
	return nil
}

// flush writes the pending events.
func (d *driver) flush(ctx context.Context) error { return d.append(ctx) }

// onlyDecisionsSince reports whether every event appended after the last
// one this driver knows is a decision on an approval.
func (d *driver) onlyDecisionsSince(ctx context.Context) bool {
	evs, err := d.e.o.Store.Events(ctx, d.run.ID, d.st.lastSeq+1, store.MaxPage)
	if err != nil || len(evs) == 0 {
		return false
	}
	for _, e := range evs {
		if e.Type != event.TypeApprovalDecided {
			return false
		}
	}
	return true
}

// catchUp folds events others appended (a cancel or pause, a decision on
// an approval) into the state.
func (d *driver) catchUp(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.catchUpLocked(ctx)
}

func (d *driver) catchUpLocked(ctx context.Context) {
	evs, err := d.e.o.Store.Events(context.WithoutCancel(ctx), d.run.ID, d.st.lastSeq+1, store.MaxPage)
	if err != nil {
		return
	}
	for _, ev := range evs {
		_ = d.st.apply(ev, own)
	}
	d.e.emit(evs)
}

// watch cancels the drive when another process cancels or pauses the run.
func (d *driver) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(d.e.o.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, err := d.e.o.Store.GetRun(ctx, d.run.ID)
		d.mu.Lock()
		want := d.status
		d.mu.Unlock()
		if err == nil && r.Status != want && r.Status != event.StatusRunning && r.Status != event.StatusAwaitingApproval {
			cancel(&stolenError{status: r.Status})
			return
		}
	}
}

// drive drives the run until it ends and reports the outcome.
func (d *driver) drive(parent context.Context) (Outcome, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	go d.watch(ctx, cancel)

	status, final, err := d.loop(ctx)
	if err == nil && final != nil {
		d.destroyAll(ctx, "run ended")
		err = d.appendStatus(ctx, d.current(), status, final)
	}
	if err != nil {
		var stolen *stolenError
		cause := context.Cause(ctx)
		switch {
		case errors.As(err, &stolen) || errors.As(cause, &stolen):
			d.catchUp(ctx)
			d.destroyAll(ctx, "run "+string(stolen.status))
			err = nil
		case errors.Is(cause, ErrCancelled) || errors.Is(err, ErrCancelled):
			d.destroyAll(ctx, "run cancelled")
			err = d.appendStatus(ctx, d.current(), event.StatusCancelled, event.RunCancelled{By: "signal", Reason: "interrupted"})
		case errors.Is(err, ErrDrained):
			// Handed back at a step boundary: resumable at once
			// elsewhere (the lease goes when drive returns).
			d.destroyAll(ctx, "host process draining")
			r, _ := d.e.o.Store.GetRun(context.WithoutCancel(ctx), d.run.ID)
			o, _ := d.e.outcome(context.WithoutCancel(ctx), r, d.st)
			return o, err
		default:
			// The host process stops (or the store failed): leave the run
			// resumable; its sandboxes die, its log holds everything.
			d.destroyAll(ctx, "host process stopping")
			r, _ := d.e.o.Store.GetRun(context.WithoutCancel(ctx), d.run.ID)
			o, _ := d.e.outcome(context.WithoutCancel(ctx), r, d.st)
			return o, err
		}
		if err != nil {
			var again *stolenError
			if !errors.As(err, &again) {
				return Outcome{RunID: d.run.ID, Status: event.StatusRunning}, err
			}
		}
	}
	r, gerr := d.e.o.Store.GetRun(context.WithoutCancel(ctx), d.run.ID)
	if gerr != nil {
		return Outcome{RunID: d.run.ID}, gerr
	}
	return d.e.outcome(context.WithoutCancel(ctx), r, d.st)
}

// current returns the run's status as this driver set it.
func (d *driver) current() event.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}

// loop runs steps until the run reaches a final status, which it returns
// with the payload that records it.
func (d *driver) loop(ctx context.Context) (event.Status, event.Payload, error) {
	if n, most := d.st.recoveries, d.st.cfg.RecoveryAttempts; n >= most {
		// Picked up again and again, and each time stopped before any
		// progress (a host process that keeps dying at the same place, a
		// store that fails): stop, without building a sandbox again.
		return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: "recovery",
			Error: fmt.Sprintf("the run was recovered %d times in a row without progress; its policy allows %d (retries.recovery)", n, most-1),
			Steps: d.st.steps, Usage: d.st.usage}, nil
	}
	if err := d.setup(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped (a pause, a shutdown) while setting up: not the
			// run's failure.
			return "", nil, context.Cause(ctx)
		}
		return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: "setup", Error: err.Error(), Steps: d.st.steps, Usage: d.st.usage}, nil
	}
	if err := d.withdrawNetwork(ctx); err != nil {
		return "", nil, err
	}
	if err := d.settleCharges(ctx); err != nil {
		return "", nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return "", nil, context.Cause(ctx)
		}
		select {
		case <-d.e.draining:
			// A step boundary: what the last step left pending is
			// written, so that the step is complete in the log and no
			// one redoes it.
			if err := d.flush(ctx); err != nil {
				return "", nil, err
			}
			return "", nil, ErrDrained
		default:
		}
		cfg := d.st.cfg
		timeout := time.Duration(cfg.TimeoutMS) * time.Millisecond
		left := timeout - d.st.elapsed(d.e.o.Now())
		if left <= 0 {
			return d.exhausted(ctx, "wall_time", cfg.TimeoutMS, d.st.elapsed(d.e.o.Now()).Milliseconds())
		}
		sctx, scancel := context.WithTimeoutCause(ctx, left, errTimeBudget)
		status, final, err := d.step(sctx)
		scancel()
		if errors.Is(context.Cause(sctx), errTimeBudget) && ctx.Err() == nil {
			return d.exhausted(ctx, "wall_time", cfg.TimeoutMS, d.st.elapsed(d.e.o.Now()).Milliseconds())
		}
		var sbe *sandboxError
		if errors.As(err, &sbe) && ctx.Err() == nil {
			// Every try the policy allows failed: the run fails, with why.
			return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: "sandbox", Error: sbe.Error(), Steps: d.st.steps, Usage: d.st.usage}, nil
		}
		if err != nil || final != nil {
			return status, final, err
		}
	}
}

// step does the next thing the run needs: finish an incomplete step, verify
// a finished run, or ask the model and run its calls.
func (d *driver) step(ctx context.Context) (event.Status, event.Payload, error) {
	if d.st.pendingAsk() {
		return "", nil, d.awaitApprovals(ctx)
	}
	if !d.st.complete() {
		err := d.redo(ctx)
		if errors.Is(err, errUncertain) {
			return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: "uncertain_effect", Error: err.Error(), Steps: d.st.steps, Usage: d.st.usage}, nil
		}
		return "", nil, err
	}
	if d.st.finished {
		return d.finish(ctx)
	}
	cfg := d.st.cfg
	d.mu.Lock()
	spent := d.st.spent
	d.mu.Unlock()
	if spent != nil {
		return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: "budget_exhausted: " + spent.Budget, Steps: d.st.steps, Usage: d.st.usage}, nil
	}
	if d.st.steps >= cfg.MaxSteps {
		return d.exhausted(ctx, "steps", int64(cfg.MaxSteps), int64(d.st.steps))
	}
	if used := d.st.usage.InputTokens + d.st.usage.OutputTokens; cfg.MaxTokens > 0 && used >= cfg.MaxTokens {
		return d.exhausted(ctx, "tokens", cfg.MaxTokens, used)
	}
	if cfg.MaxSandboxCPUMS > 0 {
		if used := d.cpuUsed(); used >= cfg.MaxSandboxCPUMS {
			return d.exhausted(ctx, "sandbox_cpu", cfg.MaxSandboxCPUMS, used)
		}
	}
	d.mu.Lock()
	egress := d.st.egressBytes
	d.mu.Unlock()
	if cfg.MaxEgressBytes > 0 && egress >= cfg.MaxEgressBytes {
		return d.exhausted(ctx, "egress_bytes", cfg.MaxEgressBytes, egress)
	}
	if budget, limit, used, err := d.creditsLeft(ctx); err != nil {
		return "", nil, err
	} else if budget != "" {
		return d.exhausted(ctx, budget, limit, used)
	}
	resp, err := d.callModel(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, context.Cause(ctx)
		}
		var stolen *stolenError
		if errors.As(err, &stolen) {
			return "", nil, err
		}
		return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: "model", Error: err.Error(), Steps: d.st.steps, Usage: d.st.usage}, nil
	}
	if len(resp.ToolCalls) == 0 {
		if err := d.append(ctx, resp); err != nil {
			return "", nil, err
		}
		return "", nil, d.charge(ctx, d.respSeq())
	}
	// The turn, the policy's decisions and the starts of the calls are
	// one durable batch, written before any call runs.
	ps := []event.Payload{resp}
	calls := make([]model.ToolCall, len(resp.ToolCalls))
	decisions := make([]event.PolicyDecision, len(calls))
	var asks []event.Payload
	for i, c := range resp.ToolCalls {
		calls[i] = model.ToolCall{ID: c.ID, Name: c.Name, Args: c.Args}
		decisions[i] = d.decide(ctx, resp.Step, calls[i])
		ps = append(ps, event.ToolProposed{Step: resp.Step, CallID: c.ID, Tool: c.Name, Args: c.Args}, decisions[i])
		if decisions[i].Decision == event.DecisionAsk {
			asks = append(asks, d.approvalRequest(resp.Step, calls[i], decisions[i]))
		}
	}
	if len(asks) > 0 {
		// Nothing of the step runs before every ask is decided; the wait
		// is durable (awaiting_approval survives a restart).
		if err := d.appendStatus(ctx, event.StatusRunning, event.StatusAwaitingApproval, append(ps, asks...)...); err != nil {
			return "", nil, err
		}
		if err := d.charge(ctx, d.respSeq()); err != nil {
			return "", nil, err
		}
		return "", nil, d.awaitApprovals(ctx)
	}
	return "", nil, d.execute(ctx, resp.Step, calls, decisions, ps, func() error {
		return d.charge(ctx, d.respSeq())
	})
}

// respSeq is the seq of the current step's model response.
func (d *driver) respSeq() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st.cur.respSeq
}

// exhausted ends the run for a spent budget.
func (d *driver) exhausted(ctx context.Context, budget string, limit, used int64) (event.Status, event.Payload, error) {
	if err := d.append(ctx, event.BudgetExhausted{Budget: budget, Limit: limit, Used: used}); err != nil {
		return "", nil, err
	}
	return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: "budget_exhausted: " + budget, Steps: d.st.steps, Usage: d.st.usage}, nil
}

// target is where a call acts and what it may reach.
type target struct {
	// place is event.PlaceSandbox or event.PlaceHost (an unknown tool is
	// answered on the host); sandbox names the sandbox of a sandbox tool.
	place, sandbox string
	// args are the call's arguments without the sandbox selector, and
	// routeErr says why the selector is unusable.
	args     json.RawMessage
	routeErr error
	// external: the tool declares effects outside the run's sandboxes.
	external bool
}

func (d *driver) targetOf(c model.ToolCall) target {
	t, known := d.reg.Get(c.Name)
	name, args, err := d.route(c)
	tg := target{place: event.PlaceHost, args: args, routeErr: err, external: known && external(t)}
	if known && t.Place() == tools.PlaceSandbox {
		tg.place, tg.sandbox = event.PlaceSandbox, name
	}
	return tg
}

func (d *driver) decide(ctx context.Context, n int, c model.ToolCall) event.PolicyDecision {
	if d.e.o.Policy == nil {
		return event.PolicyDecision{Step: n, CallID: c.ID, Tool: c.Name, Decision: event.DecisionAllow, Rule: "default"}
	}
	tg := d.targetOf(c)
	d.mu.Lock()
	q := PolicyQuery{Run: d.run, Step: n, Usage: d.st.usage, Elapsed: d.st.elapsed(d.e.o.Now()),
		Call: model.ToolCall{ID: c.ID, Name: c.Name, Args: tg.args}, Sandbox: tg.sandbox, External: tg.external}
	d.mu.Unlock()
	pd := d.e.o.Policy(ctx, q)
	pd.Step, pd.CallID, pd.Tool = n, c.ID, c.Name
	switch pd.Decision {
	case event.DecisionAllow, event.DecisionDeny, event.DecisionAsk:
	default: // fail closed on anything else
		pd.Reason = fmt.Sprintf("unknown policy decision %q", pd.Decision)
		pd.Decision = event.DecisionDeny
	}
	return pd
}

// redo finishes a step a crash or a lost sandbox left incomplete: its
// sandbox calls run again in sandboxes restored from the last snapshot (the
// effects of the first attempt died with the sandbox); a host call with an
// external effect and no recorded result stops the run (fail closed).
func (d *driver) redo(ctx context.Context) error {
	d.mu.Lock()
	cur := d.st.cur
	var calls []model.ToolCall
	var decisions []event.PolicyDecision
	var uncertain []event.Payload
	for _, c := range cur.calls {
		tg := d.targetOf(c)
		_, done := cur.results[c.ID]
		switch {
		case tg.place == event.PlaceSandbox && (!done || cur.dirty[tg.sandbox]):
		case !done && tg.external:
			uncertain = append(uncertain, event.ToolUncertain{Step: cur.n, CallID: c.ID, Tool: c.Name, StartedSeq: cur.started[c.ID],
				Reason: "started with an external effect and no recorded result"})
			continue
		case !done:
		default:
			continue
		}
		calls = append(calls, c)
		decisions = append(decisions, event.PolicyDecision{Decision: event.DecisionAllow})
	}
	n := cur.n
	d.mu.Unlock()
	if len(uncertain) > 0 {
		if err := d.append(ctx, uncertain...); err != nil {
			return err
		}
		return errUncertain
	}
	var ps []event.Payload
	for _, c := range calls {
		ps = append(ps, event.Retry{Step: n, What: "tool", Attempt: 2, Reason: "the step did not complete: its sandbox effects were lost; running " + c.Name + " again"})
	}
	return d.execute(ctx, n, calls, decisions, ps)
}

var errUncertain = errors.New("engine: a tool call with an external effect may or may not have run")

// external reports whether a tool declares effects outside the sandboxes.
func external(t tools.Tool) bool {
	x, ok := t.(interface{ External() bool })
	return ok && x.External()
}

// execute records prefix with the start (or the denial) of each call of
// step n in one batch, runs the allowed calls concurrently, then
// snapshots every sandbox they may have changed.
func (d *driver) execute(ctx context.Context, n int, calls []model.ToolCall, decisions []event.PolicyDecision, prefix []event.Payload, after ...func() error) error {
	batch := prefix
	var run []int
	for i, c := range calls {
		if decisions[i].Decision != event.DecisionAllow {
			batch = append(batch, event.ToolFinished{Step: n, CallID: c.ID, Tool: c.Name, Outcome: "denied", IsError: true,
				Output: "The policy does not allow this call (" + decisions[i].Decision + ": " + decisions[i].Reason + ")."})
			continue
		}
		tg := d.targetOf(c)
		batch = append(batch, event.ToolStarted{Step: n, CallID: c.ID, Tool: c.Name, Place: tg.place, Sandbox: tg.sandbox, External: tg.external})
		run = append(run, i)
	}
	if err := d.append(ctx, batch...); err != nil {
		return err
	}
	for _, f := range after {
		if err := f(); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.changes = map[string]*change{}
	d.mu.Unlock()
	errs := make([]error, len(run))
	var wg sync.WaitGroup
	var left atomic.Int32
	left.Store(int32(len(run)))
	for j, i := range run {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[j] = d.call(ctx, n, calls[i], &left)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.mu.Lock()
	var dirty []string
	for name := range d.st.cur.dirty {
		dirty = append(dirty, name)
	}
	d.mu.Unlock()
	errs = make([]error, len(dirty))
	for i, name := range dirty {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.snapshot(ctx, n, name)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	return errors.Join(errs...)
}

// call runs one tool call, whose start is recorded, and records its
// result. left counts the step's calls still running: the result of the
// last one goes out with the step's snapshot (see driver.pending), unless
// the call reached outside the sandboxes.
func (d *driver) call(ctx context.Context, n int, c model.ToolCall, left *atomic.Int32) error {
	tg := d.targetOf(c)
	place, name := tg.place, tg.sandbox
	fin := event.ToolFinished{Step: n, CallID: c.ID, Tool: c.Name, Sandbox: name}
	begin := time.Now()
	var env tools.Env
	var res tools.Result
	var err error
	switch {
	case tg.routeErr != nil:
		res = tools.Result{Content: tg.routeErr.Error(), IsError: true}
	case place == event.PlaceSandbox:
		env.Sandbox, err = d.sandbox(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("engine: provision sandbox %s: %w", name, err)
		}
		fallthrough
	default:
		stop := d.progress(ctx, n, c)
		res, err = d.reg.Call(ctx, env, model.ToolCall{ID: c.ID, Name: c.Name, Args: tg.args})
		stop()
	}
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !errors.Is(err, tools.ErrSandboxLost) {
			return err
		}
		snap := "the start of the run"
		if d.snapshotOf(name) != "" {
			snap = "its last snapshot"
		}
		res.IsError = true
		res.Content = fmt.Sprintf("The sandbox %q was lost while this call ran (its processes were killed). A fresh sandbox is restored from %s; changes made since then are gone.", name, snap)
		res.Details.Outcome, res.Details.ExitCode = string(sandbox.OutcomeLost), nil
		if lerr := d.lost(ctx, name, env.Sandbox, err.Error()); lerr != nil {
			return lerr
		}
	}
	if place == event.PlaceSandbox && mutating[c.Name] {
		d.mu.Lock()
		ch := d.changes[name]
		if ch == nil {
			ch = &change{}
			d.changes[name] = ch
		}
		if ch.calls++; ch.calls == 1 && c.Name == "run_command" {
			ch.fingerprint = res.Details.Fingerprint
		} else {
			ch.fingerprint = ""
		}
		d.mu.Unlock()
	}
	fin.IsError = res.IsError
	fin.Output = res.Content
	fin.Outcome = res.Details.Outcome
	if fin.Outcome == "" {
		fin.Outcome = "ok"
		if res.IsError {
			fin.Outcome = "error"
		}
	}
	fin.ExitCode, fin.Signal = res.Details.ExitCode, res.Details.Signal
	fin.OutputBytes = res.Details.Bytes
	fin.OutputTruncated = res.Details.Truncated > 0
	fin.DurationMS = time.Since(begin).Milliseconds()
	fin.WallMS = res.Details.Wall.Milliseconds()
	if left.Add(-1) == 0 && !tg.external {
		return d.later(fin)
	}
	return d.append(ctx, fin)
}

// progress reports a running call about once a second until stop.
func (d *driver) progress(ctx context.Context, n int, c model.ToolCall) (stop func()) {
	if d.e.o.OnProgress == nil {
		return func() {}
	}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				d.e.o.OnProgress(Progress{RunID: d.run.ID, Step: n, CallID: c.ID, Tool: c.Name, Elapsed: time.Since(start)})
			}
		}
	}()
	return func() { close(done) }
}

// callModel records the request (durably, before the model is called) and
// returns the response for the caller to record.
func (d *driver) callModel(ctx context.Context) (event.ModelResponse, error) {
	// Refused before the call, not after it: the provider would charge
	// the host for a call whose usage the tenant cannot be charged for.
	rate, err := d.rate()
	if err != nil {
		return event.ModelResponse{}, err
	}
	d.mu.Lock()
	n := d.st.steps + 1
	cfg := d.st.cfg
	req := model.Request{System: systemPrompt(cfg), Messages: d.st.conversation(), Tools: d.specs}
	d.mu.Unlock()
	budget := cfg.ContextTokens - 8192 - 1024
	req, _ = model.Fit(req, model.FitOptions{Budget: budget})
	modelName := d.modelName()
	// The request is written with the response, or after
	// requestFlushDelay if the model takes longer: a scripted or local
	// model costs no commit of its own, and a slow call in flight is on
	// record (a crash before either only means the call is made again).
	if err := d.later(event.ModelRequest{Step: n, Provider: d.provKind, Model: modelName, Attempt: 1, Messages: len(req.Messages)}); err != nil {
		return event.ModelResponse{}, err
	}
	flushed := time.AfterFunc(requestFlushDelay, func() { _ = d.flush(ctx) })
	defer flushed.Stop()
	stop := d.progress(ctx, n, model.ToolCall{ID: "model", Name: "model " + modelName})
	defer stop()
	start := time.Now()
	resp, err := d.prov.Complete(ctx, req, nil)
	if errors.Is(err, model.ErrContextOverflow) && ctx.Err() == nil {
		// The estimate was short of the provider's count: keep less.
		req, _ = model.Fit(req, model.FitOptions{Budget: budget / 2, KeepTurns: 1})
		if err := d.append(ctx, event.Retry{Step: n, What: "model", Attempt: 2, Reason: "context window exceeded; older tool output shortened"},
			event.ModelRequest{Step: n, Provider: d.provKind, Model: modelName, Attempt: 2, Messages: len(req.Messages)}); err != nil {
			return event.ModelResponse{}, err
		}
		resp, err = d.prov.Complete(ctx, req, nil)
	}
	if err != nil {
		return event.ModelResponse{}, err
	}
	calls := make([]event.ToolCall, 0, len(resp.ToolCalls))
	for _, c := range resp.ToolCalls {
		calls = append(calls, event.ToolCall{ID: c.ID, Name: c.Name, Args: c.Args})
	}
	m := resp.Model
	if m == "" {
		m = modelName
	}
	usage := event.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
		CacheReadTokens: resp.Usage.CacheReadTokens, CacheWriteTokens: resp.Usage.CacheWriteTokens}
	if usage.CostMicroUSD, err = rate.Cost(usage); err != nil {
		return event.ModelResponse{}, err
	}
	return event.ModelResponse{
		Step: n, Provider: d.provKind, Model: m, Text: resp.Text, ToolCalls: calls,
		StopReason: string(resp.StopReason), DurationMS: time.Since(start).Milliseconds(), Usage: usage,
	}, nil
}

func (d *driver) modelName() string {
	_, m, _ := strings.Cut(d.st.cfg.Model, ":")
	return m
}

// finish runs the completion checks after the model called finish, keeps
// the artifacts, and decides the final status.
func (d *driver) finish(ctx context.Context) (event.Status, event.Payload, error) {
	vr, err := d.verify(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, context.Cause(ctx)
		}
		return "", nil, err
	}
	if err := d.append(ctx, vr); err != nil {
		return "", nil, err
	}
	if err := d.exportArtifacts(ctx); err != nil {
		if ctx.Err() != nil {
			return "", nil, context.Cause(ctx)
		}
		return "", nil, err
	}
	if vr.Passed {
		return event.StatusCompleted, event.RunCompleted{Summary: d.st.finishSummary(), Steps: d.st.steps, Usage: d.st.usage}, nil
	}
	var failed []string
	for _, c := range vr.Checks {
		if !c.Passed {
			failed = append(failed, c.Name)
		}
	}
	return event.StatusFailedVerification, event.RunFailed{Status: event.StatusFailedVerification,
		Reason: "verification failed: " + strings.Join(failed, "; "), Steps: d.st.steps, Usage: d.st.usage}, nil
}

func systemPrompt(cfg Config) string {
	var b strings.Builder
	b.WriteString("You are a software agent working on a task in a disposable Linux sandbox. ")
	b.WriteString("The project is in /workspace; relative paths resolve there. Use the tools to inspect, change and test it. ")
	b.WriteString("The sandbox has no network access unless the run's policy allows a destination. ")
	b.WriteString("Tool results may be shortened; a marker says how much was left out. ")
	b.WriteString("When the task is done, call finish with a short summary: the run's own checks then verify the work independently.")
	if len(cfg.Sandboxes) > 1 {
		names := make([]string, len(cfg.Sandboxes))
		for i, s := range cfg.Sandboxes {
			names[i] = s.Name
		}
		fmt.Fprintf(&b, " There are several sandboxes (%s); sandbox tools take a \"sandbox\" argument naming one, %q by default.", strings.Join(names, ", "), names[0])
	}
	if len(cfg.Checks.Commands) > 0 {
		fmt.Fprintf(&b, " The checks that must pass: %s.", strings.Join(cfg.Checks.Commands, "; "))
	}
	return b.String()
}
