package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/tools"
)

// An approval's id is its run's id and the call's id: "RUN.CALL". It names
// one call of one run, so it cannot be decided for another run or tenant.

func approvalID(runID, callID string) string { return runID + "." + callID }

// ApprovalRunID returns the run an approval id names.
func ApprovalRunID(id string) (string, bool) {
	runID, _, ok := splitApprovalID(id)
	return runID, ok
}

func splitApprovalID(id string) (runID, callID string, ok bool) {
	runID, callID, ok = strings.Cut(id, ".")
	if !ok || callID == "" || event.ValidRunID(runID) != nil {
		return "", "", false
	}
	return runID, callID, true
}

// approvalRequest is the event that asks for a decision on call c.
func (d *driver) approvalRequest(n int, c tools.Call, pd event.PolicyDecision) event.ApprovalRequested {
	reason := pd.Reason
	if pd.Rule != "" {
		reason = strings.TrimSpace(reason + " (" + pd.Rule + ")")
	}
	timeout, _ := d.approvalRules()
	return event.ApprovalRequested{
		ApprovalID: approvalID(d.run.ID, c.ID), Step: n, CallID: c.ID,
		Action: describeCall(c), Reason: reason, Expires: d.e.o.Now().Add(timeout).UTC(),
	}
}

// approvalRules returns how long an approval of this run waits and what
// happens on timeout: the run's config, else the engine's.
func (d *driver) approvalRules() (time.Duration, string) {
	timeout, onTimeout := d.e.o.ApprovalTimeout, d.e.o.ApprovalOnTimeout
	if ms := d.cfg.ApprovalTimeoutMS; ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	if o := d.cfg.ApprovalOnTimeout; o != "" {
		onTimeout = o
	}
	return timeout, onTimeout
}

// describeCall is a call as a person deciding on it reads it: as the model
// wrote it.
func describeCall(c tools.Call) string {
	args := string(c.Args)
	if len(args) > 2000 {
		args = args[:2000] + "…"
	}
	return c.Name + " " + args
}

// awaitApprovals waits until every approval of the current step is decided
// (by a person through Decide, or by its timeout), then runs the step's
// calls that have not run: the approved ones and the others the policy
// allowed; a denied one is reported to the model as denied, with the reason.
// calls are the step's calls, resolved.
//
// Preconditions: called by the loop.
func (d *driver) awaitApprovals(ctx context.Context, calls []tools.Call) error {
	open := d.st.openApprovals()
	if len(open) > 0 && d.current() == event.StatusRunning {
		// Resumed after a pause: wait again, durably.
		var ps []event.Payload
		for _, a := range open {
			ps = append(ps, a.req)
		}
		if err := d.appendStatus(ctx, event.StatusRunning, event.StatusAwaitingApproval, ps...); err != nil {
			return err
		}
	}
	for {
		if err := d.sync(); err != nil {
			return err
		}
		open = d.st.openApprovals()
		if len(open) == 0 {
			break
		}
		now := d.e.o.Now()
		timeout, onTimeout := d.approvalRules()
		var expired []event.Payload
		for _, a := range open {
			if !a.req.Expires.IsZero() && !now.Before(a.req.Expires) {
				expired = append(expired, event.ApprovalDecided{
					ApprovalID: a.req.ApprovalID, Decision: "expired", By: "timeout",
					Reason: "no decision in " + timeout.String() + "; on timeout: " + onTimeout,
				})
			}
		}
		if len(expired) > 0 {
			if err := d.append(ctx, expired...); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-d.e.draining:
			// Nothing is in flight while a decision is awaited: the wait
			// is durable, and another worker takes it up.
			return ErrDrained
		case <-time.After(d.e.o.Poll):
		}
		if err := d.catchUp(ctx); err != nil {
			return err
		}
	}
	if d.current() == event.StatusAwaitingApproval {
		if err := d.appendStatus(ctx, event.StatusAwaitingApproval, event.StatusRunning,
			event.RunResumed{Reason: "approvals decided", FromSeq: d.st.lastSeq}); err != nil {
			return err
		}
	}
	_, onTimeout := d.approvalRules()
	cur := d.st.cur
	var run []tools.Call
	var decisions []event.PolicyDecision
	for _, c := range calls {
		if _, started := cur.started[c.ID]; started {
			continue
		}
		if _, done := cur.results[c.ID]; done {
			continue
		}
		pd := cur.decisions[c.ID]
		if pd.Decision == event.DecisionAsk {
			a := cur.approvals[c.ID]
			switch {
			case a == nil:
				pd.Decision, pd.Reason = event.DecisionDeny, "no approval was asked for"
			case a.Decision == "approved", a.Decision == "expired" && onTimeout == "allow":
				pd.Decision = event.DecisionAllow
			default:
				pd.Decision = event.DecisionDeny
				pd.Reason = a.Decision
				if a.By != "" {
					pd.Reason += " by " + a.By
				}
				if a.Reason != "" {
					pd.Reason += ": " + a.Reason
				}
			}
		}
		run = append(run, c)
		decisions = append(decisions, pd)
	}
	return d.execute(ctx, cur.n, run, decisions, nil)
}

// Approval is one pending approval.
type Approval struct {
	ID     string `json:"id"`
	RunID  string `json:"run_id"`
	Tenant string `json:"tenant"`
	Task   string `json:"task"`
	Step   int    `json:"step"`
	CallID string `json:"call_id,omitempty"`
	// Destination ("host:port") and Sandbox name a network ask.
	Destination string    `json:"destination,omitempty"`
	Sandbox     string    `json:"sandbox,omitempty"`
	Action      string    `json:"action"`
	Reason      string    `json:"reason,omitempty"`
	Requested   time.Time `json:"requested"`
	Expires     time.Time `json:"expires"`
}

// Approvals lists the pending approvals of tenant's runs (every tenant's
// when tenant is empty), oldest run first, then the pending asks of its
// MCP sessions (records of kind store.KindMCP).
func (e *Engine) Approvals(ctx context.Context, tenant string) ([]Approval, error) {
	out, err := e.runApprovals(ctx, tenant)
	if err != nil {
		return nil, err
	}
	asks, err := e.mcpApprovals(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return append(out, asks...), nil
}

// runApprovals lists the pending approvals of tenant's agent runs.
func (e *Engine) runApprovals(ctx context.Context, tenant string) ([]Approval, error) {
	var out []Approval
	// A running run may hold a network ask.
	f := store.RunFilter{Tenant: tenant, Statuses: []event.Status{event.StatusAwaitingApproval, event.StatusRunning}}
	for {
		runs, err := e.o.Store.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range runs {
			st, _, err := e.load(ctx, r)
			if err != nil {
				return nil, err
			}
			for _, a := range append(st.openApprovals(), st.net.open()...) {
				out = append(out, Approval{
					ID: a.req.ApprovalID, RunID: r.ID, Tenant: r.Tenant, Task: r.Task, Step: a.req.Step, CallID: a.req.CallID,
					Destination: a.req.Destination, Sandbox: a.req.Sandbox, Action: a.req.Action, Reason: a.req.Reason, Requested: a.Requested.UTC(), Expires: a.req.Expires.UTC(),
				})
			}
		}
		if len(runs) < store.PageLimit(f.Limit) {
			return out, nil
		}
		f.After = runs[len(runs)-1].ID
	}
}

// Errors of Decide.
var (
	// ErrNoApproval: no pending approval has that id (for that tenant).
	ErrNoApproval = errors.New("engine: no such approval")
	// ErrDecided: the approval was decided already.
	ErrDecided = errors.New("engine: approval already decided")
)

// Decide records a person's decision on a pending approval: approve, or deny
// with a reason. tenant, when not empty, must own the run; by names who
// decided. The process driving the run (or holding the MCP call) picks the
// decision up and goes on.
func (e *Engine) Decide(ctx context.Context, id, tenant, by string, approve bool, reason string) error {
	runID, _, ok := splitApprovalID(id)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoApproval, id)
	}
	decision := "denied"
	if approve {
		decision = "approved"
	}
	if r, err := e.o.Store.GetRun(ctx, runID); err == nil && r.Kind == store.KindMCP {
		return e.decideMCP(ctx, id, tenant, "", event.ApprovalDecided{ApprovalID: id, Decision: decision, By: by, Reason: reason}, false)
	}
	err := e.appendFresh(ctx, runID, func(r store.Run) (event.Status, event.Payload, error) {
		if tenant != "" && r.Tenant != tenant {
			return "", nil, fmt.Errorf("%w: %q", ErrNoApproval, id) // another tenant's run does not exist for this one
		}
		st, evs, err := e.load(ctx, r)
		if err != nil {
			return "", nil, err
		}
		// A decision made earlier may belong to a step the run has left.
		for _, ev := range evs {
			if ev.Type != event.TypeApprovalDecided {
				continue
			}
			if p, err := ev.Unpack(); err == nil && p.(*event.ApprovalDecided).ApprovalID == id {
				p := p.(*event.ApprovalDecided)
				return "", nil, fmt.Errorf("%w: %s %s by %s", ErrDecided, id, p.Decision, p.By)
			}
		}
		a := st.net.byID[id]
		if a == nil && st.cur != nil {
			for _, x := range st.cur.approvals {
				if x.req.ApprovalID == id {
					a = x
				}
			}
		}
		switch {
		case a == nil:
			return "", nil, fmt.Errorf("%w: %q", ErrNoApproval, id)
		case a.Decision != "":
			return "", nil, fmt.Errorf("%w: %s %s by %s", ErrDecided, id, a.Decision, a.By)
		case r.Status.Final():
			return "", nil, fmt.Errorf("%w: run %s is %s", ErrFinal, r.ID, r.Status)
		}
		return "", event.ApprovalDecided{ApprovalID: id, Decision: decision, By: by, Reason: reason}, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %q", ErrNoApproval, id)
	}
	return err
}
