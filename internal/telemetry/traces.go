package telemetry

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockrun/airlock/internal/event"
)

// Span attribute keys. Token usage, models and tools use the OpenTelemetry
// GenAI names; the rest are airlock's own.
const (
	attrRunID     = "airlock.run.id"
	attrTenant    = "airlock.tenant"
	attrStep      = "airlock.step"
	attrSandbox   = "airlock.sandbox"
	attrOutcome   = "airlock.outcome"
	attrModel     = "gen_ai.request.model"
	attrProvider  = "gen_ai.provider.name"
	attrOperation = "gen_ai.operation.name"
	attrTool      = "gen_ai.tool.name"
	attrCallID    = "gen_ai.tool.call.id"
	attrInTokens  = "gen_ai.usage.input_tokens"
	attrOutTokens = "gen_ai.usage.output_tokens"
)

// RunInfo is what spans say about a run beyond its id, for runs whose
// run.created event this process did not see.
type RunInfo struct {
	Tenant string
	Model  string
}

// defaultMaxRuns bounds the runs whose open spans a tracer keeps.
const defaultMaxRuns = 4096

// tracer builds the spans of runs from their events: a run span from
// run.created to the run's end, a step span from its model.request to its
// last tool.finished, a model call span from model.request to
// model.response, a tool call span from tool.started to tool.finished
// (with a sandbox.exec child for commands), and spans for sandbox
// provisioning and snapshots, egress decisions, LLM gateway calls,
// approvals and verification, each with the times the events record.
//
// Spans of a step are started when the step's first event arrives and
// ended when it is over; the run span is made whole when the run's final
// event arrives, with the ids its children already name (runSpanContext).
type tracer struct {
	t   trace.Tracer
	red Redactor
	// lookup, when not nil, tells about a run first seen after its
	// run.created (created by another process, or before a restart).
	lookup  func(runID string) (RunInfo, bool)
	maxRuns int

	mu sync.Mutex
	// runs are the runs with spans open, by id (guarded by mu).
	runs map[string]*runTrace
	// tick orders runs by last use, for eviction (guarded by mu).
	tick uint64
}

// runTrace is what the tracer keeps of one run.
type runTrace struct {
	id      string
	info    RunInfo
	created time.Time // run.created's time; zero when not seen
	parent  string    // the run a fork started from
	replay  string    // the run a replay re-drives
	policy  string
	budget  string // the budget that was exhausted, if any
	sc      trace.SpanContext
	ctx     context.Context // carries sc, the parent of top-level spans
	used    uint64
	step    *stepTrace
	// approvals are the approval waits still open, by approval id.
	approvals map[string]*openSpan
}

// stepTrace is the open step of a run.
type stepTrace struct {
	n           int
	span        trace.Span
	ctx         context.Context
	start, last time.Time
	model       *openSpan
	tools       map[string]*toolTrace // by call id
	decisions   map[string]event.PolicyDecision
}

type openSpan struct {
	span  trace.Span
	start time.Time
}

// toolTrace is a tool call of the open step; end is zero while it runs.
type toolTrace struct {
	span       trace.Span
	ctx        context.Context
	sandbox    string
	start, end time.Time
}

func newTracer(t trace.Tracer, red Redactor, lookup func(string) (RunInfo, bool)) *tracer {
	return &tracer{t: t, red: red, lookup: lookup, maxRuns: defaultMaxRuns, runs: map[string]*runTrace{}}
}

// text makes engine-written free text fit for an attribute: redacted,
// valid UTF-8, at most n bytes.
func (tr *tracer) text(s string, n int) string {
	if tr.red != nil {
		s = tr.red.String(s)
	}
	return clip(s, n)
}

// name is text for a name (model, tool, sandbox, host).
func (tr *tracer) name(s string) string { return tr.text(s, 128) }

// known reports whether the tracer keeps state for run id.
func (tr *tracer) known(id string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	_, ok := tr.runs[id]
	return ok
}

// event adds what ev (with payload p) tells to the run's spans.
func (tr *tracer) event(ev event.Event, p event.Payload) {
	info := tr.lookupInfo(ev)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := tr.runLocked(ev.RunID, info)
	switch p := p.(type) {
	case *event.RunCreated, *event.PolicyResolved, *event.RunStarted, *event.RunResumed, *event.RunPaused,
		*event.RunCompleted, *event.RunFailed, *event.RunCancelled:
		tr.runEvent(r, ev, p)
	case *event.ModelRequest, *event.ModelResponse:
		tr.modelEvent(r, ev, p)
	case *event.PolicyDecision, *event.ToolStarted, *event.ToolFinished, *event.ToolUncertain:
		tr.toolEvent(r, ev, p)
	case *event.Retry, *event.BudgetExhausted:
		tr.stepNote(r, ev, p)
	case *event.SandboxProvisioned, *event.SandboxLost, *event.SnapshotTaken:
		tr.sandboxEvent(r, ev, p)
	case *event.EgressDecision, *event.LLMCall:
		tr.trafficEvent(r, ev, p)
	case *event.ApprovalRequested, *event.ApprovalDecided:
		tr.approvalEvent(r, ev, p)
	case *event.VerificationResult:
		tr.verification(r, ev, p)
	}
}

// lookupInfo returns what tr.lookup tells about the run of ev when the
// tracer keeps nothing of it yet, or nil. A run.created tells it all
// itself.
//
// Preconditions: tr.mu is not held: the lookup reads the store.
func (tr *tracer) lookupInfo(ev event.Event) *RunInfo {
	if ev.Type == event.TypeRunCreated || tr.lookup == nil || tr.known(ev.RunID) {
		return nil
	}
	if ri, ok := tr.lookup(ev.RunID); ok {
		return &ri
	}
	return nil
}

// runEvent follows the run's life: what run.created and policy.resolved
// tell about it, the drives that start and pause it (each ends the step an
// earlier drive left open), and its end, which records the run span.
//
// Preconditions: tr.mu is held.
func (tr *tracer) runEvent(r *runTrace, ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.RunCreated:
		r.created = ev.Time
		r.info = RunInfo{Tenant: p.Tenant, Model: p.Model}
		r.parent, r.replay, r.policy = p.ParentRunID, p.ReplayOf, p.PolicyHash
	case *event.PolicyResolved:
		r.policy = p.PolicyHash
	case *event.RunStarted:
		// A new drive: a step left open by an earlier one is over.
		tr.closeStep(r, ev.Time)
	case *event.RunResumed:
		if newDrive(p) {
			tr.closeStep(r, ev.Time)
		}
	case *event.RunPaused:
		tr.closeStep(r, ev.Time)
	case *event.RunCompleted:
		tr.endRun(r, ev.Time, event.StatusCompleted, "", p.Steps, p.Usage)
	case *event.RunFailed:
		status := p.Status
		if status == "" {
			status = event.StatusFailed
		}
		tr.endRun(r, ev.Time, status, p.Reason, p.Steps, p.Usage)
	case *event.RunCancelled:
		tr.endRun(r, ev.Time, event.StatusCancelled, p.By, 0, event.Usage{})
	}
}

// modelEvent follows the model call of a step: model.request opens its
// span (ending one an earlier attempt left open as retried), and
// model.response ends it, first opening it at the call's start when this
// process did not see the request.
//
// Preconditions: tr.mu is held.
func (tr *tracer) modelEvent(r *runTrace, ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.ModelRequest:
		s := tr.stepAt(r, p.Step, ev.Time)
		if s.model != nil {
			s.model.span.SetStatus(codes.Error, "retried")
			s.model.span.End(trace.WithTimestamp(ev.Time))
		}
		s.model = tr.startChat(r, s, p.Step, p.Provider, p.Model, ev.Time,
			attribute.Int("airlock.model.attempt", p.Attempt), attribute.Int("airlock.model.messages", p.Messages))
	case *event.ModelResponse:
		start := ev.Time.Add(-ms(p.DurationMS))
		s := tr.stepAt(r, p.Step, start)
		m := s.model
		if m == nil {
			m = tr.startChat(r, s, p.Step, p.Provider, p.Model, start)
		}
		m.span.SetAttributes(
			attribute.String("gen_ai.response.model", tr.name(p.Model)),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{tr.text(p.StopReason, 64)}),
			attribute.Int64(attrInTokens, p.Usage.InputTokens), attribute.Int64(attrOutTokens, p.Usage.OutputTokens),
			attribute.Int64("gen_ai.usage.cache_read.input_tokens", p.Usage.CacheReadTokens),
			attribute.Int64("gen_ai.usage.cache_creation.input_tokens", p.Usage.CacheWriteTokens),
			attribute.Int64("airlock.cost_micro_credits", p.Usage.CostMicroUSD),
			attribute.Int("airlock.model.tool_calls", len(p.ToolCalls)),
			attribute.Int64("airlock.duration_ms", p.DurationMS))
		m.span.End(trace.WithTimestamp(ev.Time))
		s.model = nil
		s.touch(ev.Time)
	}
}

// startChat opens the span of a model call of step s (numbered step) at
// start, with more attributes after the common ones.
func (tr *tracer) startChat(r *runTrace, s *stepTrace, step int, provider, model string, start time.Time, more ...attribute.KeyValue) *openSpan {
	attrs := append([]attribute.KeyValue{
		attribute.Int(attrStep, step), attribute.String(attrOperation, "chat"),
		attribute.String(attrProvider, tr.name(provider)), attribute.String(attrModel, tr.name(model)),
	}, more...)
	_, sp := tr.t.Start(s.ctx, "chat "+tr.name(model), trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tr.base(r, attrs...)...))
	return &openSpan{span: sp, start: start}
}

// toolEvent follows the tool calls of a step: the policy decision on a
// call (an event of the step span, and attributes of the call's span), the
// call's start, and its end: finished, or uncertain (its result was never
// recorded).
//
// Preconditions: tr.mu is held.
func (tr *tracer) toolEvent(r *runTrace, ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.PolicyDecision:
		if s := r.step; s != nil && s.n == p.Step {
			s.decisions[p.CallID] = event.PolicyDecision{Decision: p.Decision, Rule: p.Rule}
			s.span.AddEvent("policy.decision", trace.WithTimestamp(ev.Time), trace.WithAttributes(
				attribute.String(attrTool, tr.name(p.Tool)), attribute.String(attrCallID, tr.name(p.CallID)),
				attribute.String("airlock.policy.decision", tr.name(p.Decision)), attribute.String("airlock.policy.rule", tr.name(p.Rule))))
		}
	case *event.ToolStarted:
		s := tr.stepAt(r, p.Step, ev.Time)
		tt := tr.startTool(r, s, p.Step, p.CallID, p.Tool, ev.Time)
		tt.sandbox = p.Sandbox
		tt.span.SetAttributes(attribute.String("airlock.tool.place", tr.name(p.Place)), attribute.Bool("airlock.tool.external", p.External))
		if p.Sandbox != "" {
			tt.span.SetAttributes(attribute.String(attrSandbox, tr.name(p.Sandbox)))
		}
	case *event.ToolFinished:
		tr.finishTool(r, ev, p)
	case *event.ToolUncertain:
		if s := r.step; s != nil && s.n == p.Step {
			if tt := s.tools[p.CallID]; tt != nil && tt.end.IsZero() {
				tt.span.SetAttributes(attribute.String(attrOutcome, "uncertain"))
				tt.span.SetStatus(codes.Error, "uncertain")
				tt.span.End(trace.WithTimestamp(ev.Time))
				tt.end = ev.Time
			}
		}
	}
}

// stepNote adds a retry or a spent budget to the open step's span as an
// event; a spent budget is also kept for the run span.
//
// Preconditions: tr.mu is held.
func (tr *tracer) stepNote(r *runTrace, ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.Retry:
		if s := r.step; s != nil {
			s.span.AddEvent("retry", trace.WithTimestamp(ev.Time), trace.WithAttributes(
				attribute.String("airlock.retry.what", tr.name(p.What)), attribute.Int("airlock.retry.attempt", p.Attempt),
				attribute.Int64("airlock.retry.delay_ms", p.DelayMS)))
		}
	case *event.BudgetExhausted:
		r.budget = p.Budget
		if s := r.step; s != nil {
			s.span.AddEvent("budget.exhausted", trace.WithTimestamp(ev.Time), trace.WithAttributes(
				attribute.String("airlock.budget", tr.name(p.Budget)), attribute.Int64("airlock.budget.limit", p.Limit),
				attribute.Int64("airlock.budget.used", p.Used)))
		}
	}
}

// sandboxEvent records a sandbox operation as a span that ends at ev: a
// provision or a snapshot, which started the time it took before, or the
// loss of a sandbox (an error).
//
// Preconditions: tr.mu is held.
func (tr *tracer) sandboxEvent(r *runTrace, ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.SandboxProvisioned:
		start := ev.Time.Add(-ms(p.DurationMS))
		_, sp := tr.t.Start(r.parentAt("", start), "sandbox.provision", trace.WithTimestamp(start), trace.WithAttributes(tr.base(r,
			attribute.String(attrSandbox, tr.name(p.Sandbox)), attribute.String("airlock.sandbox.id", tr.name(p.SandboxID)),
			attribute.String("airlock.sandbox.backend", tr.name(p.Backend)), attribute.Bool("airlock.sandbox.restored", p.Snapshot != ""))...))
		sp.End(trace.WithTimestamp(ev.Time))
	case *event.SandboxLost:
		_, sp := tr.t.Start(r.parentAt("", ev.Time), "sandbox.lost", trace.WithTimestamp(ev.Time), trace.WithAttributes(tr.base(r,
			attribute.String(attrSandbox, tr.name(p.Sandbox)), attribute.String("airlock.sandbox.id", tr.name(p.SandboxID)),
			attribute.String("airlock.reason", tr.text(p.Reason, 128)))...))
		sp.SetStatus(codes.Error, "sandbox lost")
		sp.End(trace.WithTimestamp(ev.Time))
	case *event.SnapshotTaken:
		start := ev.Time.Add(-ms(p.DurationMS))
		_, sp := tr.t.Start(r.parentAt("", start), "sandbox.snapshot", trace.WithTimestamp(start), trace.WithAttributes(tr.base(r,
			attribute.String(attrSandbox, tr.name(p.Sandbox)), attribute.Int64("airlock.snapshot.bytes", p.Size),
			attribute.Bool("airlock.snapshot.incremental", p.Base != ""))...))
		sp.End(trace.WithTimestamp(ev.Time))
	}
}

// trafficEvent records what a sandbox sent out as a span under the tool
// call that ran on that sandbox then (see parentAt): an egress proxy
// request, or an LLM gateway call (an error unless it went through).
//
// Preconditions: tr.mu is held.
func (tr *tracer) trafficEvent(r *runTrace, ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.EgressDecision:
		start := ev.Time.Add(-ms(p.DurationMS))
		attrs := tr.base(r,
			attribute.String(attrSandbox, tr.name(p.Sandbox)), attribute.String("airlock.egress.decision", tr.name(p.Decision)),
			attribute.String("airlock.egress.rule", tr.name(p.Rule)), attribute.String("http.request.method", tr.text(p.Method, 16)),
			attribute.String("server.address", tr.name(p.Host)), attribute.Int("server.port", p.Port),
			attribute.Int64("airlock.egress.bytes_in", p.BytesIn), attribute.Int64("airlock.egress.bytes_out", p.BytesOut),
			attribute.Bool("airlock.egress.inspected", p.Inspected), attribute.Bool("airlock.egress.credential_injected", p.Credential != ""))
		if p.Addr != "" {
			attrs = append(attrs, attribute.String("network.peer.address", tr.name(p.Addr)))
		}
		if p.Status != 0 {
			attrs = append(attrs, attribute.Int("http.response.status_code", p.Status))
		}
		_, sp := tr.t.Start(r.parentAt(p.Sandbox, start), "egress.request", trace.WithTimestamp(start),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		sp.End(trace.WithTimestamp(ev.Time))
	case *event.LLMCall:
		start := ev.Time.Add(-ms(p.LatencyMS))
		_, sp := tr.t.Start(r.parentAt(p.Sandbox, start), "llm_gateway "+tr.name(p.API), trace.WithTimestamp(start),
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(tr.base(r,
				attribute.String(attrSandbox, tr.name(p.Sandbox)), attribute.String("airlock.llm.api", tr.name(p.API)),
				attribute.String(attrModel, tr.name(p.Model)), attribute.String("airlock.llm.upstream", tr.name(p.Upstream)),
				attribute.String("gen_ai.response.model", tr.name(p.UpstreamModel)), attribute.Bool("airlock.llm.stream", p.Stream),
				attribute.Int64(attrInTokens, p.Usage.InputTokens), attribute.Int64(attrOutTokens, p.Usage.OutputTokens),
				attribute.Bool("airlock.llm.usage_estimated", p.UsageEstimated),
				attribute.Int64("airlock.cost_micro_credits", p.CostMicroCredits), attribute.Int64("airlock.llm.ttft_ms", p.TTFTMS),
				attribute.Int("http.response.status_code", p.Status), attribute.String(attrOutcome, tr.name(p.Outcome)),
				attribute.String("airlock.reason", tr.name(p.Reason)), attribute.String("airlock.budget", tr.name(p.Budget)))...))
		if p.Outcome != event.LLMOutcomeOK {
			sp.SetStatus(codes.Error, tr.name(p.Outcome))
		}
		sp.End(trace.WithTimestamp(ev.Time))
	}
}

// approvalEvent follows an approval wait: approval.requested opens its
// span, under the tool call asked about or else where parentAt puts a
// network approval (ending a span of the same approval left open), and
// approval.decided ends it with the decision. Waits still open when the
// run ends are ended there (endRun).
//
// Preconditions: tr.mu is held.
func (tr *tracer) approvalEvent(r *runTrace, ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.ApprovalRequested:
		parent := r.parentAt(p.Sandbox, ev.Time)
		if s := r.step; p.CallID != "" && s != nil && s.n == p.Step {
			parent = s.ctx
		}
		// The action is not an attribute: it quotes the tool call's
		// arguments.
		attrs := tr.base(r, attribute.String("airlock.approval.id", tr.name(p.ApprovalID)), attribute.Int(attrStep, p.Step))
		if p.CallID != "" {
			attrs = append(attrs, attribute.String(attrCallID, tr.name(p.CallID)))
		}
		if p.Destination != "" {
			attrs = append(attrs, attribute.String("airlock.approval.destination", tr.name(p.Destination)))
		}
		if p.Sandbox != "" {
			attrs = append(attrs, attribute.String(attrSandbox, tr.name(p.Sandbox)))
		}
		if old := r.approvals[p.ApprovalID]; old != nil {
			old.span.End(trace.WithTimestamp(ev.Time))
		}
		_, sp := tr.t.Start(parent, "approval.wait", trace.WithTimestamp(ev.Time), trace.WithAttributes(attrs...))
		r.approvals[p.ApprovalID] = &openSpan{span: sp, start: ev.Time}
	case *event.ApprovalDecided:
		if a := r.approvals[p.ApprovalID]; a != nil {
			a.span.SetAttributes(attribute.String("airlock.approval.decision", tr.name(p.Decision)), attribute.String("airlock.approval.by", tr.name(p.By)))
			a.span.End(trace.WithTimestamp(ev.Time))
			delete(r.approvals, p.ApprovalID)
		}
	}
}

// verification ends the open step (the agent's work is over) and records
// the run's verification as a span of the run, an error if it failed.
//
// Preconditions: tr.mu is held.
func (tr *tracer) verification(r *runTrace, ev event.Event, p *event.VerificationResult) {
	tr.closeStep(r, ev.Time)
	failed := 0
	for _, c := range p.Checks {
		if !c.Passed {
			failed++
		}
	}
	start := ev.Time.Add(-ms(p.DurationMS))
	_, sp := tr.t.Start(r.ctx, "verification", trace.WithTimestamp(start), trace.WithAttributes(tr.base(r,
		attribute.Bool("airlock.verification.passed", p.Passed), attribute.Int("airlock.verification.checks", len(p.Checks)),
		attribute.Int("airlock.verification.failed", failed))...))
	if !p.Passed {
		sp.SetStatus(codes.Error, "verification failed")
	}
	sp.End(trace.WithTimestamp(ev.Time))
}

// newDrive reports whether a run.resumed starts a new drive of the run
// (on request, or after a restart), rather than the same drive going on
// after its approvals were decided, in the middle of a step.
func newDrive(p *event.RunResumed) bool { return p.Reason == "resume" || p.Reason == "recovery" }

func ms(n int64) time.Duration { return time.Duration(max(n, 0)) * time.Millisecond }

// base returns the attributes every span of run r has, then more.
func (tr *tracer) base(r *runTrace, more ...attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, 2+len(more))
	out = append(out, attribute.String(attrRunID, r.id))
	if r.info.Tenant != "" {
		out = append(out, attribute.String(attrTenant, tr.name(r.info.Tenant)))
	}
	return append(out, more...)
}

// runLocked returns the state of run id, made on first sight (with info
// when not nil), evicting the least recently used run past maxRuns: its
// open spans are dropped unended, so they are never exported.
//
// Preconditions: tr.mu is held.
func (tr *tracer) runLocked(id string, info *RunInfo) *runTrace {
	tr.tick++
	if r := tr.runs[id]; r != nil {
		r.used = tr.tick
		return r
	}
	if len(tr.runs) >= tr.maxRuns {
		var oldest *runTrace
		for _, x := range tr.runs {
			if oldest == nil || x.used < oldest.used {
				oldest = x
			}
		}
		delete(tr.runs, oldest.id)
	}
	sc := runSpanContext(id)
	// Spans of a run are parented by its root span's ids, never by a
	// caller's context: the engine's OnEvent hook has none, and the root
	// may be recorded by another process.
	r := &runTrace{
		id: id, sc: sc, ctx: trace.ContextWithRemoteSpanContext(context.Background(), sc), used: tr.tick,
		approvals: map[string]*openSpan{},
	}
	if info != nil {
		r.info = *info
	}
	tr.runs[id] = r
	return r
}

// stepAt returns run r's open step n, closing an older one and opening n
// at start when needed.
func (tr *tracer) stepAt(r *runTrace, n int, start time.Time) *stepTrace {
	if s := r.step; s != nil && s.n == n {
		return s
	}
	tr.closeStep(r, start)
	ctx, sp := tr.t.Start(r.ctx, "step", trace.WithTimestamp(start), trace.WithAttributes(tr.base(r, attribute.Int(attrStep, n))...))
	r.step = &stepTrace{
		n: n, span: sp, ctx: ctx, start: start, last: start,
		tools: map[string]*toolTrace{}, decisions: map[string]event.PolicyDecision{},
	}
	return r.step
}

func (s *stepTrace) touch(t time.Time) {
	if t.After(s.last) {
		s.last = t
	}
}

// closeStep ends run r's open step, if any: at its last tool.finished (or
// model.response), or at "at" when a call in it never finished, which
// then ends as interrupted.
func (tr *tracer) closeStep(r *runTrace, at time.Time) {
	s := r.step
	if s == nil {
		return
	}
	r.step = nil
	end := s.last
	if s.model != nil {
		s.model.span.SetStatus(codes.Error, "interrupted")
		s.model.span.End(trace.WithTimestamp(at))
		end = at
	}
	for _, tt := range s.tools {
		if tt.end.IsZero() {
			tt.span.SetAttributes(attribute.String(attrOutcome, "interrupted"))
			tt.span.SetStatus(codes.Error, "interrupted")
			tt.span.End(trace.WithTimestamp(at))
			end = at
		}
	}
	if end.Before(s.start) {
		end = s.start
	}
	s.span.SetAttributes(attribute.Int("airlock.step.tool_calls", len(s.tools)))
	s.span.End(trace.WithTimestamp(end))
}

// startTool opens the span of a tool call of step s.
func (tr *tracer) startTool(r *runTrace, s *stepTrace, step int, callID, tool string, at time.Time) *toolTrace {
	attrs := tr.base(r, attribute.Int(attrStep, step), attribute.String(attrOperation, "execute_tool"),
		attribute.String(attrTool, tr.name(tool)), attribute.String(attrCallID, tr.name(callID)))
	if d, ok := s.decisions[callID]; ok {
		attrs = append(attrs, attribute.String("airlock.policy.decision", tr.name(d.Decision)), attribute.String("airlock.policy.rule", tr.name(d.Rule)))
	}
	ctx, sp := tr.t.Start(s.ctx, "execute_tool "+tr.name(tool), trace.WithTimestamp(at), trace.WithAttributes(attrs...))
	tt := &toolTrace{span: sp, ctx: ctx, start: at}
	s.tools[callID] = tt
	return tt
}

// finishTool ends a tool call's span, with a sandbox.exec child for a
// command that ran in a sandbox. Neither the output nor the error text is
// an attribute.
func (tr *tracer) finishTool(r *runTrace, ev event.Event, p *event.ToolFinished) {
	start := ev.Time.Add(-ms(p.DurationMS))
	s := tr.stepAt(r, p.Step, start)
	tt := s.tools[p.CallID]
	if tt == nil || !tt.end.IsZero() {
		// Not started here: a denied call, or one a process before
		// this one started.
		tt = tr.startTool(r, s, p.Step, p.CallID, p.Tool, start)
	}
	if p.Sandbox != "" {
		tt.sandbox = p.Sandbox
		tt.span.SetAttributes(attribute.String(attrSandbox, tr.name(p.Sandbox)))
	}
	tt.span.SetAttributes(attribute.String(attrOutcome, tr.name(p.Outcome)), attribute.Bool("airlock.tool.is_error", p.IsError),
		attribute.Int64("airlock.tool.output_bytes", p.OutputBytes), attribute.Bool("airlock.tool.output_truncated", p.OutputTruncated),
		attribute.Int64("airlock.duration_ms", p.DurationMS))
	if p.ExitCode != nil {
		tt.span.SetAttributes(attribute.Int("process.exit.code", *p.ExitCode))
	}
	if p.IsError {
		tt.span.SetStatus(codes.Error, tr.name(p.Outcome))
	}
	if p.WallMS > 0 {
		execStart := ev.Time.Add(-ms(p.WallMS))
		if execStart.Before(tt.start) {
			execStart = tt.start
		}
		attrs := tr.base(r, attribute.String(attrSandbox, tr.name(p.Sandbox)), attribute.String(attrOutcome, tr.name(p.Outcome)),
			attribute.Int64("airlock.exec.wall_ms", p.WallMS), attribute.Int64("airlock.exec.user_ms", p.Resources.UserMS),
			attribute.Int64("airlock.exec.system_ms", p.Resources.SystemMS), attribute.Int64("airlock.exec.max_rss_kb", p.Resources.MaxRSSKB))
		if p.ExitCode != nil {
			attrs = append(attrs, attribute.Int("process.exit.code", *p.ExitCode))
		}
		if p.Signal != 0 {
			attrs = append(attrs, attribute.Int("airlock.exec.signal", p.Signal))
		}
		_, ex := tr.t.Start(tt.ctx, "sandbox.exec", trace.WithTimestamp(execStart), trace.WithAttributes(attrs...))
		ex.End(trace.WithTimestamp(ev.Time))
	}
	tt.span.End(trace.WithTimestamp(ev.Time))
	tt.end = ev.Time
	s.touch(ev.Time)
}

// parentAt is the context of the span an egress request, a gateway call,
// a network approval or a sandbox operation at time at belongs under: the
// tool call of the open step that ran on sandbox at that time, else the
// open step, else the run.
func (r *runTrace) parentAt(sandbox string, at time.Time) context.Context {
	s := r.step
	if s == nil {
		return r.ctx
	}
	var best *toolTrace
	for _, tt := range s.tools {
		if sandbox == "" || tt.sandbox != sandbox || at.Before(tt.start) || (!tt.end.IsZero() && at.After(tt.end)) {
			continue
		}
		if best == nil || tt.start.After(best.start) {
			best = tt
		}
	}
	if best != nil {
		return best.ctx
	}
	return s.ctx
}

// endRun closes what is open of run r and records its root span, from
// run.created (or the time in its id) to its final event at end.
func (tr *tracer) endRun(r *runTrace, end time.Time, status event.Status, reason string, steps int, usage event.Usage) {
	tr.closeStep(r, end)
	for id, a := range r.approvals {
		a.span.SetAttributes(attribute.String("airlock.approval.decision", "undecided"))
		a.span.End(trace.WithTimestamp(end))
		delete(r.approvals, id)
	}
	delete(tr.runs, r.id)
	start := r.created
	if start.IsZero() {
		start, _ = event.RunIDTime(r.id)
	}
	if start.IsZero() || start.After(end) {
		start = end
	}
	attrs := tr.base(r, attribute.String("airlock.run.status", string(status)), attribute.Int("airlock.run.steps", steps),
		attribute.Int64(attrInTokens, usage.InputTokens), attribute.Int64(attrOutTokens, usage.OutputTokens),
		attribute.Int64("airlock.cost_micro_credits", usage.CostMicroUSD))
	if r.info.Model != "" {
		attrs = append(attrs, attribute.String(attrModel, tr.name(r.info.Model)))
	}
	if r.policy != "" {
		attrs = append(attrs, attribute.String("airlock.policy.hash", tr.name(r.policy)))
	}
	if r.replay != "" {
		attrs = append(attrs, attribute.String("airlock.run.replay_of", tr.name(r.replay)))
	}
	if r.budget != "" {
		attrs = append(attrs, attribute.String("airlock.budget", tr.name(r.budget)))
	}
	// Only the reason's category ("verification failed", "model",
	// "budget_exhausted"): what follows the colon may quote commands or
	// an upstream's error.
	category, _, _ := strings.Cut(reason, ":")
	if category != "" {
		attrs = append(attrs, attribute.String("airlock.run.reason", tr.text(category, 64)))
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(start), trace.WithAttributes(attrs...)}
	if r.parent != "" {
		opts = append(opts, trace.WithLinks(trace.Link{
			SpanContext: runSpanContext(r.parent),
			Attributes:  []attribute.KeyValue{attribute.String("airlock.link", "forked_from"), attribute.String(attrRunID, tr.name(r.parent))},
		}))
		attrs = append(attrs, attribute.String("airlock.run.parent_id", tr.name(r.parent)))
		opts = append(opts, trace.WithAttributes(attrs[len(attrs)-1]))
	}
	_, sp := tr.t.Start(withForcedIDs(context.Background(), r.sc), "run", opts...)
	if status == event.StatusFailed || status == event.StatusFailedVerification {
		sp.SetStatus(codes.Error, string(status))
	}
	sp.End(trace.WithTimestamp(end))
}
