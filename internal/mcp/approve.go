package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/policy"
)

// Approver holds the calls a policy answers with ask until a person decides.
type Approver interface {
	// Ask records q as a pending approval, calls held with its id once it
	// is recorded, and waits for the decision: a person's, or the
	// policy's on_timeout once the approval expires (By "timeout"). When
	// ctx ends first the approval is withdrawn and ctx's error returned.
	Ask(ctx context.Context, q Ask, held func(id string)) (Decision, error)
	// Decide records d, the MCP user's own answer to pending approval id
	// of q (an elicitation), as a person's decision; the Ask waiting on it
	// returns it.
	Decide(ctx context.Context, q Ask, id string, d Decision) error
	// End closes what Ask keeps for sandbox q.Sandbox, whose sandbox or
	// session has ended; its pending approvals are withdrawn.
	End(ctx context.Context, tenant, sandbox string)
}

// Ask is a call waiting for a person.
type Ask struct {
	Session string
	Tenant  string
	KeyID   string
	Sandbox string
	Tool    string
	Args    json.RawMessage
	// Rule and Reason are the policy's.
	Rule, Reason string
	// Policy is the sandbox's policy (its approvals section says who may
	// decide, how long the call waits and what its expiry means), known
	// to the session as PolicyName.
	Policy     *policy.Document
	PolicyName string
}

// Decision is a person's answer to an Ask.
type Decision struct {
	Approved bool
	By       string
	Reason   string
}

// ByMCPUser names the decider of an approval answered through an
// elicitation: the person at the MCP client.
const ByMCPUser = "mcp-user"

// hold waits for a person's decision on an asked call; a nil result means
// approved, run it. While it waits the client gets progress notifications
// naming the approval, and, when it declared elicitation and the policy
// does not restrict who decides, a yes/no form.
func (s *Server) hold(ctx context.Context, c *callCtx, b *liveBox, name string, input json.RawMessage, d policy.ToolDecision) *sdk.CallToolResult {
	if s.o.Approver == nil {
		c.rec.Outcome = "denied"
		return s.textResult(fmt.Sprintf("error: %s needs a person's approval (%s: %s), and this server cannot hold approvals: the call was not run", name, d.Rule, d.Reason), true,
			map[string]any{"sandbox": b.id, "decision": "ask", "rule": d.Rule, "reason": d.Reason})
	}
	q := Ask{
		Session: c.se.id, Tenant: c.p.Tenant, KeyID: c.p.KeyID, Sandbox: b.id, Tool: name, Args: input, Rule: d.Rule, Reason: d.Reason,
		Policy: b.Policy, PolicyName: b.PolicyName,
	}
	var mu sync.Mutex
	var approval string
	waiting := func(id string) string {
		return fmt.Sprintf("%s waits for approval %s (airlock approve %s / airlock deny %s --reason ...)", name, id, id, id)
	}
	stop := s.progress(ctx, c, func(int) string {
		mu.Lock()
		defer mu.Unlock()
		if approval == "" {
			return name + " waits for a person's approval"
		}
		return waiting(approval)
	})
	ectx, cancelElicit := context.WithCancel(ctx)
	var elicited sync.WaitGroup
	dec, err := s.o.Approver.Ask(ctx, q, func(id string) {
		mu.Lock()
		approval = id
		mu.Unlock()
		c.rec.Approval = id
		s.notify(ctx, c, waiting(id))
		if canElicit(c.req.Session) && len(b.Policy.Approvals.Approvers) == 0 {
			elicited.Go(func() { s.elicit(ectx, c, q, id) })
		}
	})
	cancelElicit()
	elicited.Wait()
	stop()
	if err != nil {
		c.rec.Outcome = "denied"
		return s.textResult(fmt.Sprintf("error: %s was held for approval and not decided: %v", name, err), true, nil)
	}
	if !dec.Approved {
		c.rec.Outcome = "denied"
		msg := fmt.Sprintf("error: %s denied by %s", name, orDefault(dec.By, "a person"))
		if dec.Reason != "" {
			msg += ": " + dec.Reason
		}
		return s.textResult(msg, true, map[string]any{"sandbox": b.id, "decision": "denied", "approval": approval, "by": dec.By, "reason": dec.Reason})
	}
	return nil
}

// canElicit reports whether the client declared form elicitation.
func canElicit(ss *sdk.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return false
	}
	e := ip.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil // neither named: form, as the protocol's first version had it
}

// approveSchema is the elicitation's form: one yes/no answer.
var approveSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "Run this call in the sandbox."},
	},
	"required": []string{"approve"},
}

// elicit asks the MCP user about approval id of q, and records a yes or a
// no as their decision. Dismissing the form (cancel), or the client not
// answering before someone else decides, leaves the approval to others.
func (s *Server) elicit(ctx context.Context, c *callCtx, q Ask, id string) {
	msg := fmt.Sprintf("airlock: %s in sandbox %s needs your approval (approval %s).\n\nAction: %s %s\nPolicy %s, rule %s: %s\n\nApprove it?",
		q.Tool, q.Sandbox, id, q.Tool, clipLine(string(q.Args), 1000), q.PolicyName, orDefault(q.Rule, "(none)"), q.Reason)
	res, err := c.req.Session.Elicit(ctx, &sdk.ElicitParams{Mode: "form", Message: s.o.Redact(msg), RequestedSchema: approveSchema})
	if err != nil || res == nil {
		if ctx.Err() == nil {
			s.o.Logger.Debug("elicit an approval", "approval", id, "err", err)
		}
		return
	}
	var d Decision
	switch res.Action {
	case "accept":
		yes, _ := res.Content["approve"].(bool)
		d = Decision{Approved: yes, By: ByMCPUser}
		if !yes {
			d.Reason = "the MCP user said no"
		}
	case "decline":
		d = Decision{By: ByMCPUser, Reason: "the MCP user declined"}
	default:
		return
	}
	if err := s.o.Approver.Decide(context.WithoutCancel(ctx), q, id, d); err != nil {
		s.o.Logger.Debug("record an elicited decision", "approval", id, "err", err) // decided by someone else first
	}
}
