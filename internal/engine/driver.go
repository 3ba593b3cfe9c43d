package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/mcpclient"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret/scan"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/tools"
)

// driver drives one run in this process.
//
// Goroutines, and what each may touch:
//
//   - The loop: the goroutine that called Engine.Drive runs drive, loop
//     and every step. It alone reads and writes st, the run's fold, and
//     needs no lock for it: events reach st only when the loop calls sync
//     (append does, after it records).
//   - The calls of a step (execute runs one goroutine per call, then one per
//     sandbox to snapshot, and waits for them) and the host channels (the
//     egress proxy's Audit and Ask, the LLM gateway's Log, called from the
//     bridge's goroutines at any time while a sandbox lives): they record
//     events (record, later) and read cfg, the sandboxes (sbMu, live.mu)
//     and what mu guards. Never st.
//   - watch, the lease's renewal, progress reports and the model request's
//     flush timer: status, and record.
//
// Why the loop folds: a host channel's event (an egress decision, an
// llm.call, a budget.exhausted) may come at any moment, also while the
// loop reads st to decide what to do next; folding it there would need
// every read of st under a lock, and a fold that only the loop makes
// needs none. Recorded events wait in a queue under mu (unfolded), not a
// channel: recording must never wait for the loop (the loop may itself be
// waiting for the call whose command made the request), so a channel
// would need an unbounded buffer, which the queue is; the loop drains it
// each time before it reads st. What the other goroutines need of the
// state (the latest snapshots, the network approvals) is kept beside it
// under mu (shared), from the same events, as they are recorded.
type driver struct {
	e   *Engine
	run store.Run
	// cfg is the run's config: set before the drive, never written again.
	cfg Config
	// scan is the run's secret scanner (cfg.Secrets); nil when off.
	scan *scan.Scanner
	// fence is the drive's lease token (when fenced): every append
	// carries it, whatever context it is made with (a host channel's
	// request context carries none).
	fence  int64
	fenced bool
	// abort ends the drive with a cause (see audit); set by drive before
	// any sandbox exists.
	abort context.CancelCauseFunc

	// st is the run's state: the loop's alone (see above).
	st *state

	// mu serialises appends and guards the fields from here to sbMu.
	mu sync.Mutex
	// seq is the seq of the last event of the log this driver knows (it
	// recorded it or took it in): the next append expects seq+1.
	seq int64
	// pending are events not yet written: they go out with the next
	// append. Only events whose loss a crash makes harmless are deferred
	// (a step's last result and its snapshot: without them the step is
	// incomplete and recovery redoes it), which saves a synchronous commit
	// per step.
	pending []event.Event
	// unfolded are the events recorded, deferred or taken in that st does
	// not hold yet, in order: the loop folds them (sync).
	unfolded []unfolded
	// shared is what the goroutines other than the loop know of the state.
	shared shared
	// status is the run's status as this driver set it: running, or
	// awaiting_approval while it waits for a decision. Any other status
	// in the store means someone else stopped the run.
	status event.Status
	// changes is what the current step's calls did to each sandbox, and
	// snaps what is known of each sandbox's last snapshot.
	changes map[string]*change
	snaps   map[string]snapInfo

	// sbMu guards sbs, the run's sandboxes by name (each live's own mu is
	// held while it is provisioned, replaced or destroyed).
	sbMu sync.Mutex
	sbs  map[string]*live

	// account is the tenant's credit account as the step's budget check
	// read it (credits.go): the loop's alone, like st.
	account credit.Account

	// Set by the loop before any call runs, read-only after: the model,
	// the run's tools and their specs, and the run's sandbox names (the
	// first is the default).
	prov     model.Provider
	provKind string
	reg      *tools.Registry
	specs    []model.ToolSpec
	names    []string

	netAsks netAsker

	// mcp holds the run's MCP servers (mcp.go), set by setup, closed when
	// the drive ends; mcpRelease ends their egress proxy.
	mcp        *mcpclient.Set
	mcpRelease func()

	// arts counts the artifacts the run's sandboxes declared (events.go).
	arts artifactCount
}

// unfolded is an event waiting for the loop's fold, and where it is from.
type unfolded struct {
	ev event.Event
	o  origin
}

// shared is the part of the run's state that goroutines other than the
// loop read, under driver.mu: folded from the same events as st, by take,
// as each is recorded or taken in (steps by the loop's sync).
type shared struct {
	// steps is st.steps as of the loop's last sync: model turns are the
	// loop's own events.
	steps int
	// snapshots, fetched and checkpoints are st's: the latest snapshot of
	// each sandbox, the tree its git source gave, and its checkpoints.
	snapshots, fetched map[string]string
	checkpoints        map[string]ckptRef
	// net is the run's network approvals, which Ask decides from while the
	// loop waits for the call that made the request.
	net netApprovals
}

// note keeps what ev changes of s.
func (s *shared) note(ev event.Event) {
	switch ev.Type {
	case event.TypeSnapshotTaken, event.TypeWorkspaceFetched, event.TypeApprovalRequested, event.TypeApprovalDecided:
	default:
		return
	}
	p, err := ev.Unpack()
	if err != nil {
		return // the loop's fold reports it
	}
	switch p := p.(type) {
	case *event.SnapshotTaken:
		s.snapshots[p.Sandbox] = p.Digest
		noteCheckpoint(s.checkpoints, p)
	case *event.WorkspaceFetched:
		s.fetched[p.Sandbox] = p.Digest
	case *event.ApprovalRequested:
		if p.Destination != "" {
			s.net.requested(*p, ev.Time)
		}
	case *event.ApprovalDecided:
		s.net.decided(*p)
	}
}

// change is what one step's calls did to one sandbox.
type change struct {
	// calls counts the calls that may have changed it; fingerprint is the
	// workspace's fingerprint after the one call among them that reported
	// one (run_command), "" when another kind of call, or several, may
	// have changed it.
	calls       int
	fingerprint string
}

// snapInfo is the last snapshot of a sandbox taken in this process.
type snapInfo struct {
	digest      string
	size        int64
	fingerprint string // of the workspace the snapshot holds; "" unknown
	format      string // SnapshotTaken.Format
	treeBytes   int64  // SnapshotTaken.TreeBytes
}

// live is a provisioned sandbox.
type live struct {
	mu      sync.Mutex // held while provisioning
	sb      sandbox.Sandbox
	release func()
	// stopEvents drains and stops the reader of the sandbox's event
	// channel (watchEvents); set with sb.
	stopEvents func()
	// baseline names the sandbox's record of its workspace as of its
	// latest checkpoint (sandbox.Checkpointer): the next checkpoint is
	// the change since it. "" when it has none (the next is whole).
	baseline string
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
	return &driver{
		e: e, run: r, cfg: st.cfg, st: st, seq: st.lastSeq, sbs: map[string]*live{}, snaps: map[string]snapInfo{}, scan: st.cfg.Secrets.scanner(),
		shared: shared{steps: st.steps, snapshots: maps.Clone(st.snapshots), fetched: maps.Clone(st.fetched), checkpoints: maps.Clone(st.checkpoints), net: st.net.clone()},
	}
}

// append records payloads as one durable batch and folds it into the
// state. ctx's end does not stop it: what happened must be recorded.
//
// Preconditions: called by the loop (it folds).
func (d *driver) append(ctx context.Context, ps ...event.Payload) error {
	return d.appendStatus(ctx, "", "", ps...)
}

// appendStatus is append moving the run's status from from to to in the
// same write.
//
// Preconditions: called by the loop.
func (d *driver) appendStatus(ctx context.Context, from, to event.Status, ps ...event.Payload) error {
	if _, err := d.recordStatus(ctx, from, to, ps...); err != nil {
		return err
	}
	return d.sync()
}

// record records payloads as one durable batch, with the pending events
// before them, and returns the events it stored; the loop folds them
// later. Any goroutine may record. ctx's end does not stop it, and the
// drive's lease fences it whatever ctx carries.
func (d *driver) record(ctx context.Context, ps ...event.Payload) ([]event.Event, error) {
	return d.recordStatus(ctx, "", "", ps...)
}

// logged records ps for a host channel (Attachment.Log) and returns the
// seq of ps[0].
func (d *driver) logged(ctx context.Context, ps ...event.Payload) (int64, error) {
	stored, err := d.record(ctx, ps...)
	if err != nil {
		return 0, err
	}
	if i := len(stored) - len(ps); i >= 0 && len(ps) > 0 {
		return stored[i].Seq, nil
	}
	return 0, errors.New("engine: nothing recorded")
}

// audit records a decision of the egress proxy of a run sandbox
// (Attachment.Audit), made with the context of the sandbox's provisioning.
// The request it decided on has been served or refused already; a decision
// that cannot be recorded stops the drive, as any failed append does,
// rather than being dropped: every egress decision is an event, and the
// run's egress budget counts only recorded bytes. The run stays resumable
// (its log is whole up to there).
func (d *driver) audit(ctx context.Context, ed event.EgressDecision) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if _, err := d.record(ctx, ed); err != nil && d.abort != nil {
		d.abort(fmt.Errorf("engine: record an egress decision of sandbox %s: %w", ed.Sandbox, err))
	}
}

// recordStatus is record moving the run's status from from to to ("" for
// no change) in the same write.
func (d *driver) recordStatus(ctx context.Context, from, to event.Status, ps ...event.Payload) ([]event.Event, error) {
	evs, err := drafts(ps...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if d.fenced {
		ctx = store.WithFence(ctx, d.fence)
	}
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
			_, stored, err = d.e.o.Store.AppendStatus(ctx, d.run.ID, d.seq+1, from, to, evs)
		} else {
			stored, err = d.e.o.Store.Append(ctx, d.run.ID, d.seq+1, evs)
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
		if err := d.catchUpLocked(ctx); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, fmt.Errorf("engine: record %s: %w", evs[0].Type, err)
	}
	if to != "" {
		d.status = to
	}
	d.pending = nil
	d.take(own, stored...)
	d.e.emit(stored)
	return stored, nil
}

// take queues evs (of origin o) for the loop's fold and keeps the shared
// part of the state.
//
// Preconditions: d.mu is held.
func (d *driver) take(o origin, evs ...event.Event) {
	for _, ev := range evs {
		if o == own {
			d.seq = ev.Seq
		}
		d.unfolded = append(d.unfolded, unfolded{ev: ev, o: o})
		d.shared.note(ev)
	}
}

// sync folds into st the events recorded, deferred or taken in since the
// last sync, in order.
//
// Preconditions: called by the loop.
func (d *driver) sync() error {
	d.mu.Lock()
	q := d.unfolded
	d.unfolded = nil
	d.mu.Unlock()
	for _, u := range q {
		if err := d.st.apply(u.ev, u.o); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.shared.steps = d.st.steps
	d.mu.Unlock()
	return nil
}

// later defers ps: they are written with the next append, and folded
// before it as pending. Any goroutine may defer.
func (d *driver) later(ps ...event.Payload) error {
	evs, err := drafts(ps...)
	if err != nil {
		return err
	}
	now := d.e.o.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range evs {
		evs[i].Time = now
	}
	d.pending = append(d.pending, evs...)
	d.take(pending, evs...)
	return nil
}

// flush writes the pending events. Any goroutine may flush.
func (d *driver) flush(ctx context.Context) error {
	_, err := d.record(ctx)
	return err
}

// onlyDecisionsSince reports whether every event appended after the last
// one this driver knows is a decision on an approval.
//
// Preconditions: d.mu is held.
func (d *driver) onlyDecisionsSince(ctx context.Context) bool {
	evs, err := d.e.o.Store.Events(ctx, d.run.ID, d.seq+1, store.MaxPage)
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

// catchUp takes in the events others appended (a cancel or pause, a
// decision on an approval) for the loop to fold. Any goroutine may catch
// up.
func (d *driver) catchUp(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.catchUpLocked(ctx)
}

// Preconditions: d.mu is held.
func (d *driver) catchUpLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	evs, err := d.e.o.Store.Events(ctx, d.run.ID, d.seq+1, store.MaxPage)
	if err != nil {
		return fmt.Errorf("engine: read what others recorded: %w", err)
	}
	d.take(own, evs...)
	d.e.emit(evs)
	return nil
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
//
// Preconditions: called by the loop (it is the loop).
func (d *driver) drive(parent context.Context) (Outcome, error) {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	defer d.closeMCP()
	d.abort = cancel
	go d.watch(ctx, cancel)

	status, final, err := d.loop(ctx)
	if err == nil && final != nil {
		if err = d.destroyAll(ctx, "run ended"); err == nil {
			err = d.appendStatus(ctx, d.current(), status, final)
		}
	}
	if err != nil {
		var stolen *stolenError
		cause := context.Cause(ctx)
		switch {
		case errors.As(err, &stolen) || errors.As(cause, &stolen):
			// The run is someone else's now. A run taken over refuses
			// this driver's writes, by design (its sandboxes are gone
			// all the same); a cancelled or paused one takes them.
			err = d.catchUp(ctx)
			_ = d.destroyAll(ctx, "run "+string(stolen.status))
		case errors.Is(cause, ErrCancelled) || errors.Is(err, ErrCancelled):
			if err = d.destroyAll(ctx, "run cancelled"); err == nil {
				err = d.appendStatus(ctx, d.current(), event.StatusCancelled, event.RunCancelled{By: "signal", Reason: "interrupted"})
			}
		case errors.Is(err, ErrDrained):
			// Handed back at a step boundary: resumable at once
			// elsewhere (the lease goes when drive returns).
			err = errors.Join(err, d.destroyAll(ctx, "host process draining"))
			o, _ := d.outcome(ctx)
			return o, err
		default:
			// The host process stops (or the store failed): leave the run
			// resumable; its sandboxes die, its log holds everything.
			err = errors.Join(err, d.destroyAll(ctx, "host process stopping"))
			o, _ := d.outcome(ctx)
			return o, err
		}
		if err != nil {
			var again *stolenError
			if !errors.As(err, &again) {
				return Outcome{RunID: d.run.ID, Status: event.StatusRunning}, err
			}
		}
	}
	return d.outcome(ctx)
}

// outcome reports the run as it stands: its record in the store, and the
// fold.
//
// Preconditions: called by the loop.
func (d *driver) outcome(ctx context.Context) (Outcome, error) {
	ctx = context.WithoutCancel(ctx)
	r, err := d.e.o.Store.GetRun(ctx, d.run.ID)
	if err != nil {
		return Outcome{RunID: d.run.ID}, err
	}
	if err := d.sync(); err != nil {
		return Outcome{RunID: d.run.ID, Status: r.Status}, err
	}
	return d.e.outcome(ctx, r, d.st)
}

// current returns the run's status as this driver set it.
func (d *driver) current() event.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}

// loop runs steps until the run reaches a final status, which it returns
// with the payload that records it.
//
// Preconditions: called by the loop.
func (d *driver) loop(ctx context.Context) (event.Status, event.Payload, error) {
	if n, most := d.st.recoveries, d.cfg.RecoveryAttempts; n >= most {
		// Picked up again and again, and each time stopped before any
		// progress (a host process that keeps dying at the same place, a
		// store that fails): stop, without building a sandbox again.
		return d.failure("recovery", fmt.Sprintf("the run was recovered %d times in a row without progress; its policy allows %d (retries.recovery)", n, most-1))
	}
	if err := d.setup(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped (a pause, a shutdown) while setting up: not the
			// run's failure.
			return "", nil, context.Cause(ctx)
		}
		return d.failure("setup", err.Error())
	}
	if err := d.sync(); err != nil {
		return "", nil, err
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
		if err := d.sync(); err != nil {
			return "", nil, err
		}
		if p := d.st.eventStop; p != nil {
			// An events rule read a sandbox event and said stop.
			return d.failure("policy", fmt.Sprintf("%s: %s (%s)", p.Rule, p.Reason, p.Input))
		}
		if s, err := d.wallTimeSpent(ctx); err != nil || s.Budget != "" {
			return d.exhausted(ctx, s, err)
		}
		sctx, scancel := context.WithTimeoutCause(ctx, d.stepBound(), errTimeBudget)
		status, final, err := d.step(sctx)
		scancel()
		if errors.Is(context.Cause(sctx), errTimeBudget) && ctx.Err() == nil {
			return d.exhausted(ctx, d.wallTimeUsed(), nil)
		}
		var sbe *sandboxError
		if errors.As(err, &sbe) && ctx.Err() == nil {
			// Every try the policy allows failed: the run fails, with why.
			return d.failure("sandbox", sbe.Error())
		}
		if err != nil || final != nil {
			return status, final, err
		}
	}
}

// failure ends the run as failed, for reason; msg says more.
//
// Preconditions: called by the loop.
func (d *driver) failure(reason, msg string) (event.Status, event.Payload, error) {
	if err := d.sync(); err != nil {
		return "", nil, err
	}
	return event.StatusFailed, event.RunFailed{Status: event.StatusFailed, Reason: reason, Error: msg, Steps: d.st.steps, Usage: d.st.usage}, nil
}

// step does the next thing the run needs: finish an incomplete step, verify
// a finished run, or check the budgets, ask the model and run its calls.
//
// Preconditions: called by the loop, which synced.
func (d *driver) step(ctx context.Context) (event.Status, event.Payload, error) {
	if d.st.pendingAsk() {
		return "", nil, d.awaitApprovals(ctx, d.resolve(d.st.cur.calls))
	}
	if !d.st.complete() {
		err := d.redo(ctx)
		if errors.Is(err, errUncertain) {
			return d.failure("uncertain_effect", err.Error())
		}
		return "", nil, err
	}
	if d.st.finished {
		return d.finish(ctx)
	}
	if s, err := d.budgetSpent(ctx); err != nil || s.Budget != "" {
		return d.exhausted(ctx, s, err)
	}
	resp, mcalls, err := d.callModel(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", nil, context.Cause(ctx)
		}
		var stolen *stolenError
		if errors.As(err, &stolen) {
			return "", nil, err
		}
		return d.failure("model", err.Error())
	}
	if len(mcalls) == 0 {
		if err := d.append(ctx, resp); err != nil {
			return "", nil, err
		}
		return "", nil, d.charge(ctx, d.st.cur.respSeq)
	}
	// The turn, the policy's decisions and the starts of the calls are
	// one durable batch, written before any call runs.
	calls := d.resolve(mcalls)
	ps := []event.Payload{resp}
	decisions := make([]event.PolicyDecision, len(calls))
	var asks []event.Payload
	for i, c := range calls {
		decisions[i] = d.decide(ctx, resp.Step, c)
		if i == 0 {
			decisions[i] = heldByEvent(decisions[i], d.st.eventHold)
		}
		ps = append(ps, proposed(resp.Step, c), decisions[i])
		if decisions[i].Decision == event.DecisionAsk {
			asks = append(asks, d.approvalRequest(resp.Step, c, decisions[i]))
		}
	}
	if len(asks) > 0 {
		// Nothing of the step runs before every ask is decided; the wait
		// is durable (awaiting_approval survives a restart).
		if err := d.appendStatus(ctx, event.StatusRunning, event.StatusAwaitingApproval, append(ps, asks...)...); err != nil {
			return "", nil, err
		}
		if err := d.charge(ctx, d.st.cur.respSeq); err != nil {
			return "", nil, err
		}
		return "", nil, d.awaitApprovals(ctx, calls)
	}
	return "", nil, d.execute(ctx, resp.Step, calls, decisions, ps, func() error {
		return d.charge(ctx, d.st.cur.respSeq)
	})
}

// exhausted ends the run for a spent budget s (err, when not nil, says
// why the budget could not be checked: the drive stops with it). A budget
// a host channel found spent is in the log already; any other is recorded
// now.
//
// Preconditions: called by the loop.
func (d *driver) exhausted(ctx context.Context, s spent, err error) (event.Status, event.Payload, error) {
	if err != nil {
		return "", nil, err
	}
	if !s.recorded {
		if err := d.append(ctx, s.BudgetExhausted); err != nil {
			return "", nil, err
		}
	}
	return d.failure("budget_exhausted: "+s.Budget, "")
}

// resolve resolves the calls of the current step against the run's tools
// and sandboxes: once per step, by the step's first path through the loop
// (a new turn, a wait for approvals, a redo), which carries the result on.
func (d *driver) resolve(cs []model.ToolCall) []tools.Call {
	out := make([]tools.Call, len(cs))
	for i, c := range cs {
		out[i] = d.reg.Resolve(c, d.names...)
	}
	return out
}

func (d *driver) decide(ctx context.Context, n int, c tools.Call) event.PolicyDecision {
	if d.e.o.Policy == nil {
		return event.PolicyDecision{Step: n, CallID: c.ID, Tool: c.Name, Decision: event.DecisionAllow, Rule: "default"}
	}
	q := PolicyQuery{Run: d.run, Step: n, Usage: d.st.usage, Elapsed: d.st.elapsed(d.e.o.Now()), Call: c}
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

// heldByEvent is a call's decision pd once an events rule's ask or deny
// (hold, when not nil) takes it: deny refuses the call, ask holds an allowed
// call for an approval (a call the tools section asks about is then asked
// about for the event); a call the tools section denies stays denied by it,
// and the hold waits for the next call.
func heldByEvent(pd event.PolicyDecision, hold *event.PolicyDecision) event.PolicyDecision {
	if hold == nil || pd.Decision == event.DecisionDeny {
		return pd
	}
	pd.Decision, pd.Rule, pd.Input, pd.Secrets = hold.Decision, hold.Rule, hold.Input, nil
	pd.Reason = hold.Reason + " (a sandbox event: " + hold.Input + ")"
	return pd
}

// redo finishes a step a crash or a lost sandbox left incomplete: its
// sandbox calls run again in sandboxes restored from the last snapshot (the
// effects of the first attempt died with the sandbox); a host call with an
// external effect and no recorded result stops the run (fail closed).
//
// Preconditions: called by the loop.
func (d *driver) redo(ctx context.Context) error {
	cur := d.st.cur
	var calls []tools.Call
	var decisions []event.PolicyDecision
	var uncertain []event.Payload
	for _, c := range d.resolve(cur.calls) {
		_, done := cur.results[c.ID]
		switch {
		case c.Place == tools.PlaceSandbox && (!done || cur.dirty[c.Sandbox]):
		case !done && c.External:
			uncertain = append(uncertain, event.ToolUncertain{
				Step: cur.n, CallID: c.ID, Tool: c.Name, StartedSeq: cur.started[c.ID],
				Reason: "started with an external effect and no recorded result",
			})
			continue
		case !done:
		default:
			continue
		}
		calls = append(calls, c)
		decisions = append(decisions, event.PolicyDecision{Decision: event.DecisionAllow})
	}
	if len(uncertain) > 0 {
		if err := d.append(ctx, uncertain...); err != nil {
			return err
		}
		return errUncertain
	}
	var ps []event.Payload
	for _, c := range calls {
		ps = append(ps, event.Retry{Step: cur.n, What: "tool", Attempt: 2, Reason: "the step did not complete: its sandbox effects were lost; running " + c.Name + " again"})
	}
	return d.execute(ctx, cur.n, calls, decisions, ps)
}

var errUncertain = errors.New("engine: a tool call with an external effect may or may not have run")

// execute records prefix with the start (or the denial) of each call of
// step n in one batch, runs the allowed calls concurrently, then
// snapshots every sandbox they may have changed.
//
// Preconditions: called by the loop.
func (d *driver) execute(ctx context.Context, n int, calls []tools.Call, decisions []event.PolicyDecision, prefix []event.Payload, after ...func() error) error {
	batch := prefix
	var run []tools.Call
	for i, c := range calls {
		if decisions[i].Decision != event.DecisionAllow {
			batch = append(batch, denied(n, c, decisions[i]))
			continue
		}
		batch = append(batch, started(n, c))
		run = append(run, c)
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
	for i, c := range run {
		wg.Go(func() { errs[i] = d.call(ctx, n, c, &left) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := d.sync(); err != nil {
		return err
	}
	var dirty []string
	for name := range d.st.cur.dirty {
		dirty = append(dirty, name)
	}
	errs = make([]error, len(dirty))
	for i, name := range dirty {
		wg.Go(func() { errs[i] = d.snapshot(ctx, n, name) })
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
//
// Preconditions: runs in a goroutine of execute (never reads st).
func (d *driver) call(ctx context.Context, n int, c tools.Call, left *atomic.Int32) error {
	begin := time.Now()
	var env tools.Env
	var err error
	if c.Err == nil && c.Place == tools.PlaceSandbox {
		env.Sandbox, err = d.sandbox(ctx, c.Sandbox)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("engine: provision sandbox %s: %w", c.Sandbox, err)
		}
	}
	stop := d.progress(ctx, n, c.ID, c.Name)
	res, err := d.reg.Call(ctx, env, c)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !errors.Is(err, tools.ErrSandboxLost) {
			return err
		}
		snap := "the start of the run"
		if d.snapshotOf(c.Sandbox) != "" {
			snap = "its last snapshot"
		}
		res.IsError = true
		res.Content = fmt.Sprintf("The sandbox %q was lost while this call ran (its processes were killed). A fresh sandbox is restored from %s; changes made since then are gone.", c.Sandbox, snap)
		res.Details.Outcome, res.Details.ExitCode = string(sandbox.OutcomeLost), nil
		if lerr := d.lost(ctx, c.Sandbox, env.Sandbox, err.Error()); lerr != nil {
			return lerr
		}
	}
	if c.Place == tools.PlaceSandbox && c.Mutating {
		d.mu.Lock()
		ch := d.changes[c.Sandbox]
		if ch == nil {
			ch = &change{}
			d.changes[c.Sandbox] = ch
		}
		if ch.calls++; ch.calls == 1 {
			ch.fingerprint = res.Details.Fingerprint
		} else {
			ch.fingerprint = ""
		}
		d.mu.Unlock()
	}
	fin := finished(n, c, res, time.Since(begin))
	if d.cfg.Secrets.Results != string(policy.SecretKeep) {
		var fs []scan.Finding
		fin.Output, fs = d.scan.Redact(fin.Output)
		fin.Secrets = scan.IDs(fs)
	}
	ps, err := d.callFiles(ctx, n, c, res.Files)
	if err != nil {
		return err
	}
	ps = append(ps, fin)
	if left.Add(-1) == 0 && !c.External {
		return d.later(ps...)
	}
	_, err = d.record(ctx, ps...)
	return err
}

// callFiles stores the files call c of step n produced (run_code's
// images) as the run's artifacts, named calls/STEP-CALL-I.EXT, and
// returns their events, for the batch of the call's result.
func (d *driver) callFiles(ctx context.Context, n int, c tools.Call, files []tools.File) ([]event.Payload, error) {
	var ps []event.Payload
	for i, f := range files {
		ext := "bin"
		if f.MediaType == "image/png" {
			ext = "png"
		}
		name := fmt.Sprintf("calls/%d-%s-%d.%s", n, artifactPart(c.ID), i+1, ext)
		a, kept, err := d.storeArtifact(ctx, event.ArtifactStored{Name: name, MediaType: f.MediaType, Kind: "image"}, bytes.NewReader(f.Data))
		if err != nil {
			return nil, err
		}
		if kept {
			ps = append(ps, a)
		}
	}
	return ps, nil
}

// artifactPart is s (a model's call id) as a part of an artifact name:
// letters, digits, - and _ only, at most 64 bytes.
func artifactPart(s string) string {
	b := []byte(s)
	out := b[:0]
	for _, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			out = append(out, c)
		}
	}
	if len(out) > 64 {
		out = out[:64]
	}
	if len(out) == 0 {
		return "call"
	}
	return string(out)
}

// progress reports a running call about once a second until stop.
func (d *driver) progress(ctx context.Context, n int, callID, tool string) (stop func()) {
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
				d.e.o.OnProgress(Progress{RunID: d.run.ID, Step: n, CallID: callID, Tool: tool, Elapsed: time.Since(start)})
			}
		}
	}()
	return func() { close(done) }
}

// callModel records the request (durably, before the model is called) and
// returns the response for the caller to record, and the tool calls the
// model asked for.
//
// Preconditions: called by the loop.
func (d *driver) callModel(ctx context.Context) (event.ModelResponse, []model.ToolCall, error) {
	// Refused before the call, not after it: the provider would charge
	// the host for a call whose usage the tenant cannot be charged for.
	rate, err := d.rate()
	if err != nil {
		return event.ModelResponse{}, nil, err
	}
	if err := d.refreshMCP(ctx); err != nil {
		return event.ModelResponse{}, nil, err
	}
	n := d.st.steps + 1
	req := model.Request{System: systemPrompt(d.cfg), Messages: d.st.conversation(), Tools: d.specs}
	budget := d.cfg.ContextTokens - 8192 - 1024
	req, _ = model.Fit(req, model.FitOptions{Budget: budget})
	modelName := d.modelName()
	// The request is written with the response, or after
	// requestFlushDelay if the model takes longer: a scripted or local
	// model costs no commit of its own, and a slow call in flight is on
	// record (a crash before either only means the call is made again).
	if err := d.later(event.ModelRequest{Step: n, Provider: d.provKind, Model: modelName, Attempt: 1, Messages: len(req.Messages)}); err != nil {
		return event.ModelResponse{}, nil, err
	}
	flushed := time.AfterFunc(requestFlushDelay, func() {
		// An error is the next append's too (the request stays pending
		// and goes out with it), which reports it.
		_ = d.flush(ctx)
	})
	defer flushed.Stop()
	stop := d.progress(ctx, n, "model", "model "+modelName)
	defer stop()
	start := time.Now()
	resp, err := d.prov.Complete(ctx, req, nil)
	if errors.Is(err, model.ErrContextOverflow) && ctx.Err() == nil {
		// The estimate was short of the provider's count: keep less.
		req, _ = model.Fit(req, model.FitOptions{Budget: budget / 2, KeepTurns: 1})
		if err := d.append(ctx, event.Retry{Step: n, What: "model", Attempt: 2, Reason: "context window exceeded; older tool output shortened"},
			event.ModelRequest{Step: n, Provider: d.provKind, Model: modelName, Attempt: 2, Messages: len(req.Messages)}); err != nil {
			return event.ModelResponse{}, nil, err
		}
		resp, err = d.prov.Complete(ctx, req, nil)
	}
	if err != nil {
		return event.ModelResponse{}, nil, err
	}
	m := resp.Model
	if m == "" {
		m = modelName
	}
	usage := event.Usage{
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
		CacheReadTokens: resp.Usage.CacheReadTokens, CacheWriteTokens: resp.Usage.CacheWriteTokens,
	}
	if usage.CostMicroUSD, err = rate.Cost(usage); err != nil {
		return event.ModelResponse{}, nil, err
	}
	return event.ModelResponse{
		Step: n, Provider: d.provKind, Model: m, Text: resp.Text, ToolCalls: eventCalls(resp.ToolCalls),
		StopReason: string(resp.StopReason), DurationMS: time.Since(start).Milliseconds(), Usage: usage,
	}, resp.ToolCalls, nil
}

func (d *driver) modelName() string {
	_, m, _ := strings.Cut(d.cfg.Model, ":")
	return m
}

// finish runs the completion checks after the model called finish, keeps
// the artifacts, and decides the final status.
//
// Preconditions: called by the loop.
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
	if err := d.sync(); err != nil {
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
	return event.StatusFailedVerification, event.RunFailed{
		Status: event.StatusFailedVerification,
		Reason: "verification failed: " + strings.Join(failed, "; "), Steps: d.st.steps, Usage: d.st.usage,
	}, nil
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
