package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/mcp"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// mcpApprover holds the MCP sessions' asked calls as approvals of the
// host's store (engine.MCPHold): one record of kind mcp per sandbox
// that asks, opened at its first ask with the sandbox's policy and
// completed when the sandbox or its session ends. `airlock approvals`,
// `airlock approve`/`deny`, /v1/approvals and decide_approval see and
// decide them like a run's, from this process or another on the store.
type mcpApprover struct {
	h *Host

	// mu is held while a record is looked up or opened, so that two
	// first asks of one sandbox open one record.
	mu sync.Mutex
	// records maps a sandbox's tenant and id to its record, held by
	// this process (guarded by mu).
	records map[[2]string]*engine.MCPHold
}

var _ mcp.Approver = (*mcpApprover)(nil)

func newMCPApprover(h *Host) *mcpApprover {
	return &mcpApprover{h: h, records: map[[2]string]*engine.MCPHold{}}
}

// record returns the record of q's sandbox, opening it on first use, or
// anew when stale: the one held before was taken over by another process
// (this one stalled past its lease) or closed.
func (a *mcpApprover) record(ctx context.Context, eng *engine.Engine, q mcp.Ask, stale *engine.MCPHold) (*engine.MCPHold, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := [2]string{q.Tenant, q.Sandbox}
	if h, ok := a.records[key]; ok && h != stale {
		return h, nil
	}
	h, err := eng.OpenMCPRecord(ctx, engine.MCPRecord{
		Tenant: q.Tenant, Session: q.Session, Sandbox: q.Sandbox, PolicyName: q.PolicyName, Policy: q.Policy, KeyID: q.KeyID,
	})
	if err != nil {
		return nil, err
	}
	a.records[key] = h
	return h, nil
}

// action is q as the person deciding reads it, and reason the policy's
// reason with its rule.
func action(q mcp.Ask) (action, reason string) {
	args := string(q.Args)
	if len(args) > 2000 {
		args = args[:2000] + "…"
	}
	reason = q.Reason
	if q.Rule != "" {
		reason = strings.TrimSpace(reason + " (" + q.Rule + ")")
	}
	return q.Tool + " " + args, reason
}

func askPolicy(q mcp.Ask) *policy.Document {
	if q.Policy == nil {
		return policy.Default()
	}
	return q.Policy
}

// Request records q in its sandbox's record.
func (a *mcpApprover) Request(ctx context.Context, q mcp.Ask) (string, error) {
	rs, err := a.h.run()
	if err != nil {
		return "", err
	}
	act, reason := action(q)
	ask := engine.MCPAsk{Action: act, Reason: reason, Timeout: time.Duration(askPolicy(q).Approvals.Timeout)}
	var stale *engine.MCPHold
	for {
		rec, err := a.record(ctx, rs.eng, q, stale)
		if err != nil {
			return "", err
		}
		req, err := rec.Request(ctx, ask)
		if stale == nil && (errors.Is(err, engine.ErrFinal) || errors.Is(err, store.ErrLeaseLost)) {
			stale = rec // taken over while this process stalled: a new record, once
			_ = rec.Close(ctx, "taken over")
			continue
		}
		return req.ApprovalID, err
	}
}

// Ask records q in its sandbox's record and waits for the decision.
func (a *mcpApprover) Ask(ctx context.Context, q mcp.Ask, held func(string)) (mcp.Decision, error) {
	id, err := a.Request(ctx, q)
	if err != nil {
		return mcp.Decision{}, err
	}
	held(id)
	return a.await(ctx, q, id)
}

// Answer records the MCP user's answer on approval id, which must be one
// of q's sandbox's record about q's call, by one the policy lets decide,
// and waits for the decision.
func (a *mcpApprover) Answer(ctx context.Context, q mcp.Ask, id string, d *mcp.Decision) (mcp.Decision, error) {
	a.mu.Lock()
	h, ok := a.records[[2]string{q.Tenant, q.Sandbox}]
	a.mu.Unlock()
	rec := ""
	if ok {
		rec = h.ID()
	}
	if recID, ok2 := engine.ApprovalRunID(id); !ok || !ok2 || recID != rec {
		return mcp.Decision{}, fmt.Errorf("%w: %q is not an approval of sandbox %s", engine.ErrNoApproval, id, q.Sandbox)
	}
	rs, err := a.h.run()
	if err != nil {
		return mcp.Decision{}, err
	}
	if d != nil {
		if !askPolicy(q).Approvals.MayDecide(d.By) {
			return mcp.Decision{}, &NotApproverError{Run: rec, Approvers: askPolicy(q).Approvals.Approvers}
		}
		decision := "denied"
		if d.Approved {
			decision = "approved"
		}
		act, _ := action(q)
		err := rs.eng.AnswerMCPAsk(ctx, id, q.Tenant, act, event.ApprovalDecided{Decision: decision, By: d.By, Reason: d.Reason})
		if err != nil && !errors.Is(err, engine.ErrDecided) { // decided by someone else first: that decision stands
			return mcp.Decision{}, err
		}
	}
	return a.await(ctx, q, id)
}

// await waits for approval id's decision; an expired approval becomes the
// policy's on_timeout.
func (a *mcpApprover) await(ctx context.Context, q mcp.Ask, id string) (mcp.Decision, error) {
	rs, err := a.h.run()
	if err != nil {
		return mcp.Decision{}, err
	}
	d, err := rs.eng.AwaitMCPAsk(ctx, id)
	if err != nil {
		return mcp.Decision{}, err
	}
	switch d.Decision {
	case "approved":
		return mcp.Decision{Approved: true, By: d.By, Reason: d.Reason}, nil
	case "expired":
		allow := askPolicy(q).Approvals.OnTimeout == policy.Allow
		what := "deny"
		if allow {
			what = "allow"
		}
		return mcp.Decision{Approved: allow, By: "timeout", Reason: fmt.Sprintf("%s; on timeout: %s", d.Reason, what)}, nil
	case "withdrawn":
		return mcp.Decision{By: "airlock", Reason: "the approval was withdrawn: " + d.Reason}, nil
	default:
		return mcp.Decision{By: d.By, Reason: d.Reason}, nil
	}
}

// End completes the record of tenant's sandbox, if it asked.
func (a *mcpApprover) End(ctx context.Context, tenant, sandbox string) {
	a.mu.Lock()
	key := [2]string{tenant, sandbox}
	h, ok := a.records[key]
	delete(a.records, key)
	a.mu.Unlock()
	if !ok {
		return
	}
	if err := h.Close(ctx, "the sandbox ended with its MCP session or was destroyed"); err != nil {
		a.h.log.Warn("close an mcp record", "run_id", h.ID(), "sandbox_id", sandbox, "err", err)
	}
}
