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
	// is recorded, and waits for its decision (Await).
	Ask(ctx context.Context, q Ask, held func(id string)) (Decision, error)
	// Request records q as a pending approval and returns its id.
	Request(ctx context.Context, q Ask) (string, error)
	// Answer records d, the MCP user's own answer (an elicitation's), on
	// pending approval id, which must be q's: of q's tenant and sandbox,
	// about the same call. With d nil (the user gave none) it records
	// nothing. Then it waits for the approval's decision (Await).
	Answer(ctx context.Context, q Ask, id string, d *Decision) (Decision, error)
	// End closes what Ask keeps for tenant's sandbox, whose sandbox or
	// session has ended; its pending approvals are withdrawn.
	End(ctx context.Context, tenant, sandbox string)
}

// Await, in the Approver's contract, is waiting for an approval's
// decision: a person's, or the policy's on_timeout once it expires (By
// "timeout"). When ctx ends first the approval is withdrawn and ctx's
// error returned.

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
// naming the approval. A client that declared elicitation, under a policy
// that does not restrict who decides, is first asked itself: the call
// returns an input request (a yes/no form naming the action and the rule)
// whose state is the approval's id, and the retried call carries the
// answer, recorded as the decision of ByMCPUser (the SDK does the round
// trip with an elicitation request for clients of older protocol
// versions).
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
	elicit := canElicit(c.req.Session) && len(b.Policy.Approvals.Approvers) == 0
	state := c.req.Params.RequestState
	if !elicit {
		state = "" // an answer counts only where the client may be asked
	}
	if elicit && state == "" {
		id, err := s.o.Approver.Request(ctx, q)
		if err != nil {
			c.rec.Outcome = "error"
			return s.textResult(fmt.Sprintf("error: %s needs a person's approval, and it could not be recorded: %v", name, err), true, nil)
		}
		c.rec.Approval, c.rec.Outcome = id, "input_required"
		msg := fmt.Sprintf("airlock: %s in sandbox %s needs your approval (approval %s; `airlock approve %s` decides it too).\n\nAction: %s %s\nPolicy %s, rule %s: %s\n\nApprove it?",
			name, b.id, id, id, name, clipLine(string(input), 1000), b.PolicyName, orDefault(d.Rule, "(none)"), d.Reason)
		return &sdk.CallToolResult{
			InputRequests: sdk.InputRequestMap{approveInput: &sdk.ElicitParams{Mode: "form", Message: s.o.Redact(msg), RequestedSchema: approveSchema}},
			RequestState:  id,
		}
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
	held := func(id string) {
		mu.Lock()
		approval = id
		mu.Unlock()
		c.rec.Approval = id
		s.notify(ctx, c, waiting(id))
	}
	var dec Decision
	var err error
	if state != "" {
		// A retried call: the state names the approval it asked about;
		// the approver checks it is this call's.
		held(state)
		dec, err = s.o.Approver.Answer(ctx, q, state, answer(c.req.Params.InputResponses))
	} else {
		dec, err = s.o.Approver.Ask(ctx, q, held)
	}
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

// approveInput names the input request of an approval's form.
const approveInput = "approve"

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

// answer is the MCP user's decision in a retried call's input responses:
// nil when they gave none (dismissed the form, or the call carries no
// answer), and the approval is left to others.
func answer(rs sdk.InputResponseMap) *Decision {
	res, ok := rs[approveInput].(*sdk.ElicitResult)
	if !ok {
		return nil
	}
	switch res.Action {
	case "accept":
		yes, _ := res.Content["approve"].(bool)
		if yes {
			return &Decision{Approved: true, By: ByMCPUser}
		}
		return &Decision{By: ByMCPUser, Reason: "the MCP user said no"}
	case "decline":
		return &Decision{By: ByMCPUser, Reason: "the MCP user declined"}
	}
	return nil
}
