package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/event"
)

// Runs is what the run-level tools act on: the host's agent runs and
// their approvals, as the caller's tenant sees them. An id of another
// tenant's run or approval must be answered like one that does not exist.
// A request the caller should correct is a *RequestError.
type Runs interface {
	// Start records the run q asks for, queued, and returns its id.
	Start(ctx context.Context, p auth.Principal, q StartRun) (string, error)
	// Run returns run id.
	Run(ctx context.Context, p auth.Principal, id string) (api.Run, error)
	// Events returns a page of run id's log from seq from on.
	Events(ctx context.Context, p auth.Principal, id string, from int64) ([]event.Event, error)
	// Approvals lists the pending approvals of p's tenant.
	Approvals(ctx context.Context, p auth.Principal) ([]api.Approval, error)
	// Decide approves or denies approval id, as p.
	Decide(ctx context.Context, p auth.Principal, id string, approve bool, reason string) error
}

// StartRun is what start_run asks for.
type StartRun struct {
	Task     string            `json:"task"`
	Model    string            `json:"model,omitempty"`
	Script   string            `json:"script,omitempty"`
	Policy   string            `json:"policy,omitempty"`
	Git      string            `json:"git,omitempty"`
	Ref      string            `json:"ref,omitempty"`
	MaxSteps int               `json:"max_steps,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// runTools are the run-level tools, each with the scope it needs.
func (s *Server) runTools() []lifecycleTool {
	if s.o.Runs == nil {
		return nil
	}
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	obj := func(props map[string]any, required ...string) map[string]any {
		if required == nil {
			required = []string{}
		}
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	mk := func(name, scope, desc string, schema map[string]any, run func(context.Context, *callCtx) (*sdk.CallToolResult, error)) lifecycleTool {
		return lifecycleTool{name: name, scope: scope, run: run, tool: &sdk.Tool{Name: name, Description: desc, InputSchema: schema, Annotations: annotations(name)}}
	}
	return []lifecycleTool{
		mk("start_run", auth.ScopeRunsWrite, "Start an airlock agent run: a model works on the task in sandboxes of its own, every step recorded, held to its policy, verified at the end. Returns the run's id at once (the run is queued; run_status and run_timeline follow it).",
			obj(map[string]any{
				"task":      str("What the agent is to do."),
				"model":     str(`The model, "PROVIDER:MODEL" (e.g. "anthropic:claude-sonnet-4-5"), one the host has a key for.`),
				"script":    str("Instead of a model: the YAML of scripted model turns (tests, demos)."),
				"policy":    str("A stored policy's name (NAME or NAME@vN). Default: the built-in strict default."),
				"git":       str("An http(s) git repository to start /workspace from (the policy must allow its host)."),
				"ref":       str("The branch, tag or commit of git."),
				"max_steps": map[string]any{"type": "integer", "minimum": 1, "maximum": 10000, "description": "Lower the policy's step budget."},
				"metadata":  map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "Your own labels for the run."},
			}, "task"), s.startRun),
		mk("run_status", auth.ScopeRunsRead, "A run's status, steps, usage, reason, summary and verification.",
			obj(map[string]any{"run": str("The run's id, as start_run returned it.")}, "run"), s.runStatus),
		mk("run_timeline", auth.ScopeRunsRead, "A run's log, one line per event (seq, time, type, what happened), from seq `from` on (default 1); long timelines are paged: call again from the last seq + 1.",
			obj(map[string]any{
				"run":  str("The run's id, as start_run returned it."),
				"from": map[string]any{"type": "integer", "minimum": 1, "description": "The first seq to show (default 1)."},
			}, "run"), s.runTimeline),
		mk("list_approvals", auth.ScopeApprovals, "The actions of your runs that wait for a person's decision: id, run, action, reason, expiry.",
			obj(map[string]any{}), s.listApprovals),
		mk("decide_approval", auth.ScopeApprovals, "Approve or deny a pending action of one of your runs (list_approvals lists them). A denial needs a reason, which the run's model is told.",
			obj(map[string]any{
				"approval": str("The approval's id (RUN.CALL)."),
				"approve":  map[string]any{"type": "boolean", "description": "true to approve, false to deny."},
				"reason":   str("Why: required to deny."),
			}, "approval", "approve"), s.decideApproval),
	}
}

// runResult answers a Runs error: a RequestError is the caller's to
// correct, anything else is logged and reported plainly.
func (s *Server) runError(c *callCtx, what string, err error) *sdk.CallToolResult {
	var re *RequestError
	if errors.As(err, &re) {
		c.rec.Outcome = "invalid"
		return s.textResult("error: "+what+": "+re.Msg, true, nil)
	}
	s.o.Logger.Warn("run tool", "tool", c.rec.Tool, "err", err)
	return s.textResult("error: "+what+": "+err.Error(), true, nil)
}

func (s *Server) startRun(ctx context.Context, c *callCtx) (*sdk.CallToolResult, error) {
	var q StartRun
	if err := decodeStrict("start_run", c.args, &q); err != nil {
		c.rec.Outcome = "invalid"
		return nil, err
	}
	if strings.TrimSpace(q.Task) == "" {
		c.rec.Outcome = "invalid"
		return nil, invalidParams("start_run: invalid arguments: task is empty")
	}
	if (q.Model == "") == (q.Script == "") {
		c.rec.Outcome = "invalid"
		return nil, invalidParams("start_run: invalid arguments: give model or script (one of them)")
	}
	c.rec.Detail = clip(s.o.Redact("model=" + q.Model + " policy=" + q.Policy))
	id, err := s.o.Runs.Start(ctx, c.p, q)
	if err != nil {
		return s.runError(c, "start_run", err), nil
	}
	c.rec.Detail += " run=" + id
	return s.textResult(fmt.Sprintf("started run %s (queued); run_status and run_timeline follow it", id), false, map[string]any{"run": id, "status": "queued"}), nil
}

func (s *Server) runStatus(ctx context.Context, c *callCtx) (*sdk.CallToolResult, error) {
	var a struct {
		Run string `json:"run"`
	}
	if err := decodeStrict("run_status", c.args, &a); err != nil || a.Run == "" {
		c.rec.Outcome = "invalid"
		return nil, orInvalid(err, "run_status: invalid arguments: run is required")
	}
	c.rec.Detail = "run=" + a.Run
	r, err := s.o.Runs.Run(ctx, c.p, a.Run)
	if err != nil {
		return s.runError(c, "run_status", err), nil
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return s.textResult(string(b), false, m), nil
}

func (s *Server) runTimeline(ctx context.Context, c *callCtx) (*sdk.CallToolResult, error) {
	var a struct {
		Run  string `json:"run"`
		From int64  `json:"from"`
	}
	if err := decodeStrict("run_timeline", c.args, &a); err != nil || a.Run == "" || a.From < 0 {
		c.rec.Outcome = "invalid"
		return nil, orInvalid(err, "run_timeline: invalid arguments: run is required and from is at least 1")
	}
	c.rec.Detail = "run=" + a.Run
	r, err := s.o.Runs.Run(ctx, c.p, a.Run)
	if err != nil {
		return s.runError(c, "run_timeline", err), nil
	}
	evs, err := s.o.Runs.Events(ctx, c.p, r.ID, max(a.From, 1))
	if err != nil {
		return s.runError(c, "run_timeline", err), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "run %s: %s, %d events\n", r.ID, r.Status, r.Events)
	var last int64
	for _, ev := range evs {
		fmt.Fprintf(&b, "%d %s %s %s\n", ev.Seq, ev.Time.UTC().Format("15:04:05.000"), ev.Type, clipLine(string(ev.Payload), 200))
		last = ev.Seq
	}
	text, _ := truncateHead(b.String(), s.maxContent())
	return s.textResult(text, false, map[string]any{"run": r.ID, "status": r.Status, "last_seq": last}), nil
}

func (s *Server) listApprovals(ctx context.Context, c *callCtx) (*sdk.CallToolResult, error) {
	var a struct{}
	if err := decodeStrict("list_approvals", c.args, &a); err != nil {
		c.rec.Outcome = "invalid"
		return nil, err
	}
	as, err := s.o.Runs.Approvals(ctx, c.p)
	if err != nil {
		return s.runError(c, "list_approvals", err), nil
	}
	var b strings.Builder
	for _, x := range as {
		fmt.Fprintf(&b, "%s\trun %s step %d\texpires %s\t%s\t%s\n", x.ID, x.RunID, x.Step, x.Expires.UTC().Format("15:04:05"), clipLine(x.Action, 200), clipLine(x.Reason, 200))
	}
	if len(as) == 0 {
		b.WriteString("no pending approvals\n")
	}
	if as == nil {
		as = []api.Approval{}
	}
	return s.textResult(b.String(), false, map[string]any{"approvals": as}), nil
}

func (s *Server) decideApproval(ctx context.Context, c *callCtx) (*sdk.CallToolResult, error) {
	var a struct {
		Approval string `json:"approval"`
		Approve  *bool  `json:"approve"`
		Reason   string `json:"reason"`
	}
	if err := decodeStrict("decide_approval", c.args, &a); err != nil || a.Approval == "" || a.Approve == nil {
		c.rec.Outcome = "invalid"
		return nil, orInvalid(err, "decide_approval: invalid arguments: approval and approve are required")
	}
	if !*a.Approve && strings.TrimSpace(a.Reason) == "" {
		c.rec.Outcome = "invalid"
		return nil, invalidParams("decide_approval: invalid arguments: a denial needs a reason")
	}
	c.rec.Detail = clip(fmt.Sprintf("approval=%s approve=%v", a.Approval, *a.Approve))
	if err := s.o.Runs.Decide(ctx, c.p, a.Approval, *a.Approve, a.Reason); err != nil {
		return s.runError(c, "decide_approval", err), nil
	}
	what := "denied"
	if *a.Approve {
		what = "approved"
	}
	return s.textResult(fmt.Sprintf("%s %s", what, a.Approval), false, map[string]any{"approval": a.Approval, "decision": what}), nil
}

func orInvalid(err error, msg string) error {
	if err != nil {
		return err
	}
	return invalidParams("%s", msg)
}

// clipLine is s on one line, at most n bytes.
func clipLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// truncateHead keeps the head of s within limit bytes (a timeline pages
// forward, so its start matters), with a note.
func truncateHead(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	cut := strings.LastIndexByte(s[:limit], '\n')
	if cut < 0 {
		cut = limit
	}
	return s[:cut+1] + "[... truncated: call again with a later from ...]\n", true
}
