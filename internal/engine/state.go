package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/tools"
)

// state is what the loop knows about a run. It is a fold of the run's
// events: the live loop applies each event it appends, and recovery applies
// the whole log, so both arrive at the same state by the same code.
type state struct {
	runID   string
	created event.RunCreated
	cfg     Config

	// messages is the conversation after the task message, as the model
	// sees it: an assistant message per model turn, then the tool message
	// with its results once the step is complete.
	messages []model.Message
	// steps counts model responses; usage sums their tokens.
	steps int
	usage event.Usage
	// responses are the recorded model turns, in order (replay uses them).
	responses []event.ModelResponse

	// cur is the latest step; complete reports whether its tool results
	// are all recorded and every sandbox it changed is snapshotted.
	cur *step

	// eventStop is the first stop an events rule decided (the run ends
	// failed at the loop's next step); eventHold the ask or deny an
	// events rule decided that no call has taken yet (the run's next call
	// is held for an approval or refused).
	eventStop, eventHold *event.PolicyDecision

	// snapshots holds the digest of the latest workspace snapshot of each
	// sandbox that has one.
	snapshots map[string]string
	// fetched holds the digest of the tree each sandbox's git source gave.
	fetched map[string]string
	// checkpoints holds, for each sandbox whose latest snapshot is a
	// checkpoint, that and its start.
	checkpoints map[string]ckptRef
	// ckptUse is what the run's own checkpoints cost (TreeBytes aside),
	// treeBytes each sandbox's tree as of its latest.
	ckptUse   api.Checkpoints
	treeBytes map[string]int64

	// finished is set when the finish tool succeeded; summary is its claim.
	finished bool
	verified *event.VerificationResult
	// reason is why the run last stopped (failed, cancelled, paused).
	reason string
	// cpu holds each sandbox's CPU time (by sandbox id) as last recorded;
	// egressBytes sums the bytes through the run's proxies.
	cpu         map[string]int64
	egressBytes int64
	// charges holds the debit each of the run's own events that recorded
	// a cost calls for (credit.DebitOf), by the event's seq: what the
	// tenant's ledger must be debited.
	charges map[int64]credit.Debit
	// spent is the first budget.exhausted of the run: a host channel (the
	// LLM gateway) that found its budget spent; the loop ends the run at
	// its next boundary.
	spent *event.BudgetExhausted
	// net holds the run's network approvals.
	net netApprovals
	// tools are the tools the engine gives runs (without their limits):
	// whether a started call may change its sandbox is its tool's answer.
	tools *tools.Registry

	// recoveries counts the recoveries (run.resumed, reason recovery) since
	// the run last made progress (a model turn, a snapshot, a
	// verification, a decision on an approval) or was started or resumed
	// by a person. A recovery of a run that waits for a person's decision
	// does not count: the wait is not a failure.
	recoveries int

	// active is the run's wall time in earlier drive sessions; segStart is
	// when the current one began, last the time of the latest event.
	active     time.Duration
	segStart   time.Time
	segStarted bool
	last       time.Time
	lastSeq    int64
}

// step is one model turn and its tool calls.
type step struct {
	n int
	// respSeq is the seq of the model response that began the step.
	respSeq int64
	calls   []model.ToolCall
	results map[string]model.ToolResult
	// started holds the seq of each call's latest tool.started.
	started map[string]int64
	// dirty holds the sandboxes a call may have changed since their last
	// snapshot.
	dirty map[string]bool
	// settled: the step's results were appended to the conversation.
	settled bool
	// decisions holds the policy's decision on each call; approvals the
	// approval asked for each call the policy said ask about.
	decisions map[string]event.PolicyDecision
	approvals map[string]*approval
}

// approval is one asked-for approval and, once made, its decision.
type approval struct {
	req       event.ApprovalRequested
	Requested time.Time
	// Decision is "" while pending, else approved, denied or expired.
	Decision string
	By       string
	Reason   string
}

// pendingAsk reports whether a call of the current step waits for an
// approval, or was decided on and has not run yet.
func (s *state) pendingAsk() bool {
	c := s.cur
	if c == nil || c.settled {
		return false
	}
	for _, call := range c.calls {
		if c.decisions[call.ID].Decision != event.DecisionAsk {
			continue
		}
		_, started := c.started[call.ID]
		_, done := c.results[call.ID]
		if !started && !done {
			return true
		}
	}
	return false
}

// openApprovals returns the current step's undecided approvals, in call
// order.
func (s *state) openApprovals() []*approval {
	var out []*approval
	if s.cur == nil {
		return nil
	}
	for _, call := range s.cur.calls {
		if a := s.cur.approvals[call.ID]; a != nil && a.Decision == "" {
			out = append(out, a)
		}
	}
	return out
}

// netApprovals are a run's network approvals: by id, and the latest of
// each destination ("host:port"). The loop's state keeps them for the
// run's listings, and the driver a copy for the egress proxy's asks
// (driver.shared), both from the same events.
type netApprovals struct {
	byID   map[string]*approval
	byDest map[string]*approval
}

// requested adds the approval p asks for, at time at.
func (n *netApprovals) requested(p event.ApprovalRequested, at time.Time) {
	if n.byID == nil {
		n.byID, n.byDest = map[string]*approval{}, map[string]*approval{}
	}
	a := &approval{req: p, Requested: at}
	n.byID[p.ApprovalID], n.byDest[p.Destination] = a, a
}

// decided records decision p, if it is on an undecided approval of n.
func (n *netApprovals) decided(p event.ApprovalDecided) {
	if a := n.byID[p.ApprovalID]; a != nil && a.Decision == "" {
		a.Decision, a.By, a.Reason = p.Decision, p.By, p.Reason
	}
}

// get returns approval id (the zero approval when there is none).
func (n *netApprovals) get(id string) approval {
	if a := n.byID[id]; a != nil {
		return *a
	}
	return approval{}
}

// latest returns the latest approval asked for dest (the zero approval
// when there is none).
func (n *netApprovals) latest(dest string) approval {
	if a := n.byDest[dest]; a != nil {
		return *a
	}
	return approval{}
}

// open returns the undecided approvals, oldest first.
func (n *netApprovals) open() []*approval {
	var out []*approval
	for _, a := range n.byID {
		if a.Decision == "" {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *approval) int { return a.Requested.Compare(b.Requested) })
	return out
}

// clone returns a copy of n that shares nothing with it.
func (n *netApprovals) clone() netApprovals {
	c := netApprovals{byID: map[string]*approval{}, byDest: map[string]*approval{}}
	for id, a := range n.byID {
		b := *a
		c.byID[id] = &b
	}
	for dest, a := range n.byDest {
		c.byDest[dest] = c.byID[a.req.ApprovalID]
	}
	return c
}

// newState returns the state of run runID before its first event; reg
// holds the tools the engine gives runs.
func newState(runID string, reg *tools.Registry) *state {
	return &state{
		runID: runID, snapshots: map[string]string{}, fetched: map[string]string{}, checkpoints: map[string]ckptRef{}, cpu: map[string]int64{}, charges: map[int64]credit.Debit{},
		tools: reg,
	}
}

// mutates reports whether a call of the tool called name may change the
// files of its sandbox.
func (s *state) mutates(name string) bool {
	t, ok := s.tools.Get(name)
	return ok && t.Mutating()
}

// nudge is the user message that follows a model turn with no tool calls:
// the loop goes on until the model calls finish or a budget ends it.
const nudge = "Continue with the tools. When the task is done, call finish with a summary."

// origin says where an event given to apply comes from.
type origin int

const (
	// own: an event of the run's own log.
	own origin = iota
	// inherited: an event of a parent run's log, read before the run's
	// own (a fork); its lifecycle events do not apply.
	inherited
	// pending: an event the driver has not written yet; it is applied
	// again, as own, once it is. Only idempotent events are pending.
	pending
)

// apply folds one event into the state. The events fall in families, each
// folded by its own method: the run's life, the model's turns, policy
// decisions and approvals, tool calls, sandboxes and their workspaces,
// what the run used, and verification.
func (s *state) apply(e event.Event, o origin) error {
	prevLast := s.last
	if o == own {
		s.lastSeq = e.Seq
		s.last = e.Time
	}
	defer s.settle()
	if !e.Type.Known() {
		return nil // written by a newer airlock; nothing this build acts on
	}
	p, err := e.Unpack()
	if err != nil {
		return err
	}
	if o == own {
		if c, ok := credit.DebitOf(s.created.Tenant, e, p); ok {
			s.charges[e.Seq] = c
		}
	}
	switch p := p.(type) {
	case *event.RunCreated, *event.RunStarted, *event.RunResumed, *event.RunFailed, *event.RunCancelled, *event.RunPaused:
		if o == inherited {
			return nil // a parent's life is not the run's
		}
		return s.applyLife(e, p, prevLast)
	case *event.ModelResponse:
		s.applyTurn(e, p, o)
	case *event.PolicyDecision, *event.ApprovalRequested, *event.ApprovalDecided:
		s.applyDecision(e, p, o)
	case *event.ToolStarted, *event.ToolFinished:
		return s.applyCall(e, p)
	case *event.SnapshotTaken, *event.WorkspaceFetched, *event.SandboxDestroyed, *event.SandboxLost:
		s.applySandbox(p, o)
	case *event.BudgetExhausted, *event.EgressDecision:
		s.applyUse(p, o)
	case *event.VerificationResult:
		if o != inherited {
			v := *p
			s.verified = &v
			s.recoveries = 0
		}
	}
	return nil
}

// applyLife folds an event of the run's own life: its creation, the start
// of a drive session, its stops. prevLast is the time of the event before.
func (s *state) applyLife(e event.Event, p event.Payload, prevLast time.Time) error {
	switch p := p.(type) {
	case *event.RunCreated:
		s.created = *p
		cfg, err := decodeConfig(p.Config)
		if err != nil {
			return err
		}
		s.cfg = cfg
	case *event.RunStarted, *event.RunResumed:
		if r, ok := p.(*event.RunResumed); ok && r.Reason == "recovery" {
			if !s.pendingAsk() {
				s.recoveries++
			}
		} else {
			s.recoveries = 0
		}
		// A drive session starts; the one before ended at its last event.
		if s.segStarted && prevLast.After(s.segStart) {
			s.active += prevLast.Sub(s.segStart)
		}
		s.segStart, s.segStarted = e.Time, true
	case *event.RunFailed:
		s.reason = p.Reason
		if p.Error != "" {
			s.reason += ": " + p.Error
		}
	case *event.RunCancelled:
		s.reason = p.Reason
	case *event.RunPaused:
		s.reason = p.Reason
	}
	return nil
}

// applyTurn folds a model turn: it begins a step.
func (s *state) applyTurn(e event.Event, r *event.ModelResponse, o origin) {
	if o != inherited {
		s.recoveries = 0
	}
	s.steps = max(s.steps, r.Step)
	s.usage = s.usage.Add(r.Usage)
	s.responses = append(s.responses, *r)
	msg := responseMessage(*r)
	s.cur = &step{
		n: r.Step, respSeq: e.Seq, calls: modelCalls(r.ToolCalls), results: map[string]model.ToolResult{}, started: map[string]int64{},
		dirty: map[string]bool{}, decisions: map[string]event.PolicyDecision{}, approvals: map[string]*approval{},
	}
	if len(msg.Content) > 0 {
		s.messages = append(s.messages, msg)
	}
	if len(s.cur.calls) == 0 {
		if len(msg.Content) > 0 {
			s.messages = append(s.messages, model.Message{Role: model.RoleUser, Content: []model.Part{model.TextPart(nudge)}})
		}
		// An empty turn is not sent back (providers reject it).
		s.cur.settled = true
	}
}

// applyEventDecision folds a decision an events rule made (no CallID), or
// a call's decision that took an events rule's ask or deny (eventHold).
// A fork does not inherit its parent's.
func (s *state) applyEventDecision(p event.PolicyDecision, o origin) {
	if o == inherited {
		return
	}
	switch {
	case p.CallID != "":
		if s.eventHold != nil && s.eventHold.Input == p.Input {
			s.eventHold = nil
		}
		if s.cur != nil && s.cur.n == p.Step {
			s.cur.decisions[p.CallID] = p
		}
	case p.Decision == policy.EventStop:
		if s.eventStop == nil {
			s.eventStop = &p
		}
	case p.Decision == policy.EventAsk || p.Decision == policy.EventDeny:
		if s.eventHold == nil {
			s.eventHold = &p
		}
	}
}

// applyDecision folds the policy's decision on a call, and the approvals
// asked for and decided: of the current step's calls, and of the run's
// network destinations.
func (s *state) applyDecision(e event.Event, p event.Payload, o origin) {
	switch p := p.(type) {
	case *event.PolicyDecision:
		if p.Input != "" {
			s.applyEventDecision(*p, o)
			return
		}
		if s.cur != nil && s.cur.n == p.Step {
			s.cur.decisions[p.CallID] = *p
		}
	case *event.ApprovalRequested:
		if p.Destination != "" {
			if o != inherited {
				s.net.requested(*p, e.Time)
			}
			return
		}
		if s.cur != nil && s.cur.n == p.Step {
			a := s.cur.approvals[p.CallID]
			if a == nil {
				a = &approval{Requested: e.Time}
				s.cur.approvals[p.CallID] = a
			}
			a.req = *p
		}
	case *event.ApprovalDecided:
		if o != inherited {
			s.recoveries = 0
		}
		s.net.decided(*p)
		if s.cur != nil {
			for _, a := range s.cur.approvals {
				if a.req.ApprovalID == p.ApprovalID && a.Decision == "" {
					a.Decision, a.By, a.Reason = p.Decision, p.By, p.Reason
				}
			}
		}
	}
}

// applyCall folds the start or the result of a call of the current step.
func (s *state) applyCall(e event.Event, p event.Payload) error {
	switch p := p.(type) {
	case *event.ToolStarted:
		if s.cur == nil || s.cur.n != p.Step {
			return fmt.Errorf("engine: seq %d: tool.started for step %d outside its step", e.Seq, p.Step)
		}
		s.cur.started[p.CallID] = e.Seq
		if p.Place == event.PlaceSandbox && s.mutates(p.Tool) {
			s.cur.dirty[p.Sandbox] = true
		}
	case *event.ToolFinished:
		if s.cur == nil || s.cur.n != p.Step {
			return fmt.Errorf("engine: seq %d: tool.finished for step %d outside its step", e.Seq, p.Step)
		}
		s.cur.results[p.CallID] = model.ToolResult{CallID: p.CallID, Content: p.Output, IsError: p.IsError}
		if p.Tool == "finish" && !p.IsError {
			s.finished = true
		}
	}
	return nil
}

// applySandbox folds what happened to a sandbox and its workspace.
func (s *state) applySandbox(p event.Payload, o origin) {
	switch p := p.(type) {
	case *event.SnapshotTaken:
		if o != inherited {
			s.recoveries = 0
		}
		s.snapshots[p.Sandbox] = p.Digest
		noteCheckpoint(s.checkpoints, p)
		if o != inherited && p.Format == event.FormatCheckpoint {
			s.ckptUse.Count++
			s.ckptUse.StoredBytes += p.Size
			s.ckptUse.SharedBytes += p.SharedBytes
			if s.treeBytes == nil {
				s.treeBytes = map[string]int64{}
			}
			if p.TreeBytes > 0 || p.Digest != p.Base {
				// An unchanged tree's record may not know its size
				// (a process that did not take the one before).
				s.treeBytes[p.Sandbox] = p.TreeBytes
			}
		}
		s.recordCPU(p.SandboxID, p.CPUMS)
		if s.cur != nil && s.cur.n == p.Step && !p.Start {
			// A start is taken when the sandbox is first made, maybe by
			// a call of the step: what the call changes is after it.
			delete(s.cur.dirty, p.Sandbox)
		}
	case *event.WorkspaceFetched:
		s.fetched[p.Sandbox] = p.Digest
	case *event.SandboxDestroyed:
		s.recordCPU(p.SandboxID, p.CPUMS)
	case *event.SandboxLost:
		s.recordCPU(p.SandboxID, p.CPUMS)
		// The sandbox's state is its last snapshot again; a step's change
		// to it is gone, and the model is told so in the call's result.
		if s.cur != nil {
			delete(s.cur.dirty, p.Sandbox)
		}
	}
}

// applyUse folds what the run used through its host channels.
func (s *state) applyUse(p event.Payload, o origin) {
	switch p := p.(type) {
	case *event.BudgetExhausted:
		if o != inherited && s.spent == nil {
			b := *p
			s.spent = &b
		}
	case *event.EgressDecision:
		s.egressBytes += p.BytesIn + p.BytesOut
	}
}

// recordCPU keeps the largest CPU time recorded for a sandbox (its cgroup
// counter only grows).
func (s *state) recordCPU(id string, ms int64) {
	if id != "" && ms > s.cpu[id] {
		s.cpu[id] = ms
	}
}

// settle appends the current step's tool results to the conversation once
// they are all recorded; a finish result marks the claim.
func (s *state) settle() {
	c := s.cur
	if c == nil || c.settled || !s.complete() {
		return
	}
	msg := model.Message{Role: model.RoleTool}
	for _, call := range c.calls {
		msg.Content = append(msg.Content, model.ToolResultPart(c.results[call.ID]))
	}
	s.messages = append(s.messages, msg)
	c.settled = true
}

// complete reports whether the current step is over: every call has a
// result and every sandbox it changed has been snapshotted (or lost).
func (s *state) complete() bool {
	c := s.cur
	if c == nil || c.settled {
		return true
	}
	for _, call := range c.calls {
		if _, ok := c.results[call.ID]; !ok {
			return false
		}
	}
	return len(c.dirty) == 0
}

// finishSummary returns the finish call's summary of the current step.
func (s *state) finishSummary() string {
	if s.cur == nil {
		return ""
	}
	for _, c := range s.cur.calls {
		if c.Name != "finish" {
			continue
		}
		var a struct {
			Summary string `json:"summary"`
		}
		if json.Unmarshal(c.Args, &a) == nil {
			return a.Summary
		}
	}
	return ""
}

// elapsed is the run's active wall time at now.
func (s *state) elapsed(now time.Time) time.Duration {
	if !s.segStarted || now.Before(s.segStart) {
		return s.active
	}
	return s.active + now.Sub(s.segStart)
}

// conversation returns the messages to send: the task, then the history.
func (s *state) conversation() []model.Message {
	msgs := make([]model.Message, 0, len(s.messages)+1)
	msgs = append(msgs, model.Message{Role: model.RoleUser, Content: []model.Part{model.TextPart(taskMessage(s.created.Task))}})
	msgs = append(msgs, s.messages...)
	return slices.Clip(msgs)
}

func responseMessage(r event.ModelResponse) model.Message {
	m := model.Message{Role: model.RoleAssistant}
	if r.Text != "" {
		m.Content = append(m.Content, model.TextPart(r.Text))
	}
	for _, c := range modelCalls(r.ToolCalls) {
		m.Content = append(m.Content, model.ToolCallPart(c))
	}
	return m
}

func taskMessage(task string) string {
	return "Task:\n" + task
}

// ckptRef is what a run's log says of a sandbox's checkpoints: its latest
// snapshot, and the checkpoint it started as ("" when its chain began
// after a snapshot of the older format, which has no start).
type ckptRef struct{ start, latest string }

// noteCheckpoint keeps in m what snapshot p says of its sandbox's
// checkpoints: a snapshot of the older format ends them.
func noteCheckpoint(m map[string]ckptRef, p *event.SnapshotTaken) {
	if p.Format != event.FormatCheckpoint {
		delete(m, p.Sandbox)
		return
	}
	r := m[p.Sandbox]
	r.latest = p.Digest
	if p.Start {
		r.start = p.Digest
	}
	m[p.Sandbox] = r
}

// checkpointUsage is what the run's own checkpoints hold and cost.
func (s *state) checkpointUsage() api.Checkpoints {
	u := s.ckptUse
	for _, n := range s.treeBytes {
		u.TreeBytes += n
	}
	return u
}
