package telemetry_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// newTraced returns telemetry whose spans go to an in-memory exporter.
func newTraced(t *testing.T) (*telemetry.Telemetry, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.New(telemetry.Options{SpanExporter: exp, Redactor: newRedactor(), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel, exp
}

// TestRunSpans: a run's events make a run span with steps, model calls,
// tool calls, sandbox execs, egress requests, a gateway call, an approval
// wait, provisioning and verification under it, with the times the
// events record and the attributes an operator filters on, and none of the
// text a span must never carry.
func TestRunSpans(t *testing.T) {
	t.Parallel()
	tel, exp := newTraced(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	l := fullRun(t, t0)
	for _, ev := range l.events() {
		tel.Event(ev)
	}
	spans := exp.GetSpans()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	run := one(t, spans, "run")
	if run.Parent.IsValid() {
		t.Errorf("run span has parent %v", run.Parent)
	}
	if !run.StartTime.Equal(t0) || !run.EndTime.Equal(at(7000)) {
		t.Errorf("run span %v..%v, want %v..%v", run.StartTime, run.EndTime, t0, at(7000))
	}
	steps := named(spans, "step")
	if len(steps) != 3 {
		t.Fatalf("%d step spans, want 3", len(steps))
	}
	for _, s := range spans {
		if s.SpanContext.TraceID() != run.SpanContext.TraceID() {
			t.Errorf("span %s is in trace %s, not the run's %s", s.Name, s.SpanContext.TraceID(), run.SpanContext.TraceID())
		}
		if v, ok := attr(s, "airlock.run.id"); !ok || v.AsString() != l.runID {
			t.Errorf("span %s: airlock.run.id = %v, want %s", s.Name, v.String(), l.runID)
		}
		if v, ok := attr(s, "airlock.tenant"); !ok || v.AsString() != "acme" {
			t.Errorf("span %s: airlock.tenant = %v, want acme", s.Name, v.String())
		}
	}
	child := func(s tracetest.SpanStub, parent tracetest.SpanStub) {
		t.Helper()
		if s.Parent.SpanID() != parent.SpanContext.SpanID() {
			t.Errorf("span %s's parent is %s, want %s (%s)", s.Name, s.Parent.SpanID(), parent.SpanContext.SpanID(), parent.Name)
		}
	}
	window := func(s tracetest.SpanStub, from, to int) {
		t.Helper()
		if !s.StartTime.Equal(at(from)) || !s.EndTime.Equal(at(to)) {
			t.Errorf("span %s: %v..%v, want +%dms..+%dms", s.Name, s.StartTime.Sub(t0), s.EndTime.Sub(t0), from, to)
		}
	}
	stepN := map[int64]tracetest.SpanStub{}
	for _, s := range steps {
		child(s, run)
		v, _ := attr(s, "airlock.step")
		stepN[v.AsInt64()] = s
	}
	window(stepN[1], 40, 900)
	window(stepN[2], 1000, 6400)
	window(stepN[3], 6500, 6603)

	models := named(spans, "chat claude-test")
	if len(models) != 3 {
		t.Fatalf("%d model spans, want 3", len(models))
	}
	for _, m := range models {
		step, _ := attr(m, "airlock.step")
		child(m, stepN[step.AsInt64()])
		if v, _ := attr(m, "gen_ai.usage.input_tokens"); v.AsInt64() != 100 {
			t.Errorf("model span: input tokens %v", v.String())
		}
		if v, _ := attr(m, "gen_ai.request.model"); v.AsString() != "claude-test" {
			t.Errorf("model span: model %v", v.String())
		}
		if m.SpanKind != trace.SpanKindClient {
			t.Errorf("model span kind %v", m.SpanKind)
		}
	}
	m1 := models[0]
	for _, m := range models {
		if s, _ := attr(m, "airlock.step"); s.AsInt64() == 1 {
			m1 = m
		}
	}
	window(m1, 40, 540)

	tools := named(spans, "execute_tool run_command")
	if len(tools) != 2 {
		t.Fatalf("%d run_command spans, want 2", len(tools))
	}
	var tool1, tool2 tracetest.SpanStub
	for _, s := range tools {
		if id, _ := attr(s, "gen_ai.tool.call.id"); id.AsString() == "call_1" {
			tool1 = s
		} else {
			tool2 = s
		}
	}
	child(tool1, stepN[1])
	window(tool1, 550, 900)
	for key, want := range map[string]string{
		"gen_ai.tool.name": "run_command", "airlock.sandbox": "main", "airlock.outcome": "exited",
		"airlock.policy.decision": "allow", "airlock.policy.rule": "net-ok",
	} {
		if v, _ := attr(tool1, key); v.AsString() != want {
			t.Errorf("tool span: %s = %q, want %q", key, v.String(), want)
		}
	}
	if tool2.Status.Code != codes.Error {
		t.Errorf("failed tool call's span status %v", tool2.Status)
	}
	child(one(t, spans, "execute_tool finish"), stepN[3])

	execs := named(spans, "sandbox.exec")
	if len(execs) != 2 {
		t.Fatalf("%d sandbox.exec spans, want 2", len(execs))
	}
	for _, e := range execs {
		if e.Parent.SpanID() != tool1.SpanContext.SpanID() && e.Parent.SpanID() != tool2.SpanContext.SpanID() {
			t.Errorf("sandbox.exec's parent %s is no tool call", e.Parent.SpanID())
		}
	}
	eg := one(t, spans, "egress.request")
	child(eg, tool1)
	window(eg, 600, 700)
	for key, want := range map[string]any{
		"airlock.egress.decision": "allowed", "server.address": "example.com",
		"airlock.egress.bytes_in": int64(1000), "airlock.egress.credential_injected": true,
	} {
		v, _ := attr(eg, key)
		if v.AsInterface() != want {
			t.Errorf("egress span: %s = %v, want %v", key, v.String(), want)
		}
	}
	child(one(t, spans, "llm_gateway openai.chat"), tool1)
	ap := one(t, spans, "approval.wait")
	child(ap, stepN[2])
	window(ap, 1210, 6210)
	if v, _ := attr(ap, "airlock.approval.decision"); v.AsString() != "approved" {
		t.Errorf("approval span decision %v", v.String())
	}
	child(one(t, spans, "sandbox.provision"), run)
	v := one(t, spans, "verification")
	child(v, run)
	window(v, 6650, 6800)
	for key, want := range map[string]any{
		"airlock.run.status": "completed", "airlock.run.steps": int64(3),
		"gen_ai.usage.input_tokens": int64(300), "gen_ai.request.model": "anthropic:claude-test", "airlock.policy.hash": "abc123",
	} {
		got, _ := attr(run, key)
		if got.AsInterface() != want {
			t.Errorf("run span: %s = %v, want %v", key, got.String(), want)
		}
	}
	if found := leaks(spans); len(found) > 0 {
		t.Errorf("spans carry what they must not: %q", found)
	}
}

// TestRunSpansAcrossProcesses: a process that takes over a run whose
// creation it did not see makes spans in the run's one trace, under the
// run span's ids, with the tenant from the store; its run span starts at
// the time in the run id. A fork's run span links to its parent's.
func TestRunSpansAcrossProcesses(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	l := fullRun(t, t0)
	evs := l.events()

	// The API process saw the creation only.
	api, apiExp := newTraced(t)
	for _, ev := range evs[:2] {
		api.Event(ev)
	}
	if n := len(apiExp.GetSpans()); n != 0 {
		t.Fatalf("the creating process exported %d spans before the run ended", n)
	}

	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.CreateRun(context.Background(), store.Run{ID: l.runID, Tenant: "acme", Task: "t", Model: "anthropic:claude-test", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	worker, exp := newTraced(t)
	if err := worker.UseStore(st); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs[2:] {
		worker.Event(ev)
	}
	spans := exp.GetSpans()
	run := one(t, spans, "run")
	created, _ := event.RunIDTime(l.runID)
	if !run.StartTime.Equal(created) {
		t.Errorf("run span starts %v, want the run id's time %v", run.StartTime, created)
	}
	for _, s := range spans {
		if v, _ := attr(s, "airlock.tenant"); v.AsString() != "acme" {
			t.Errorf("span %s: tenant %q, want acme from the store", s.Name, v.String())
		}
	}
	// The same run's trace, whatever process: compare with one made from
	// the whole log.
	whole, wholeExp := newTraced(t)
	for _, ev := range evs {
		whole.Event(ev)
	}
	if want := one(t, wholeExp.GetSpans(), "run").SpanContext; run.SpanContext.TraceID() != want.TraceID() || run.SpanContext.SpanID() != want.SpanID() {
		t.Errorf("run span %s/%s in one process, %s/%s in another", run.SpanContext.TraceID(), run.SpanContext.SpanID(), want.TraceID(), want.SpanID())
	}

	// A fork links to its parent's run span.
	f := newRunLog(t, t0.Add(time.Minute))
	f.add(0, event.RunCreated{Tenant: "acme", Task: "t", Model: "script:", ParentRunID: l.runID, ParentSeq: 5}).
		add(time.Second, event.RunCancelled{By: "api", Reason: "ARG-MARKER"})
	for _, ev := range f.events() {
		whole.Event(ev)
	}
	var fork tracetest.SpanStub
	for _, s := range named(wholeExp.GetSpans(), "run") {
		if v, _ := attr(s, "airlock.run.id"); v.AsString() == f.runID {
			fork = s
		}
	}
	if len(fork.Links) != 1 || fork.Links[0].SpanContext.SpanID() != run.SpanContext.SpanID() || fork.Links[0].SpanContext.TraceID() != run.SpanContext.TraceID() {
		t.Errorf("fork's links %+v, want one to its parent's run span", fork.Links)
	}
	if v, _ := attr(fork, "airlock.run.status"); v.AsString() != "cancelled" {
		t.Errorf("fork's status %q", v.String())
	}
	if found := leaks(append(spans, wholeExp.GetSpans()...)); len(found) > 0 {
		t.Errorf("spans carry what they must not: %q", found)
	}
}

// TestInterruptedRun: a run paused in the middle of a tool call ends the
// step and the call at the pause; a model retry ends the first call's
// span as retried; a denied call and a lost sandbox get spans of their
// own, whose free text is scrubbed.
func TestInterruptedRun(t *testing.T) {
	t.Parallel()
	tel, exp := newTraced(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	l := newRunLog(t, t0)
	l.add(0, event.RunCreated{Tenant: "acme", Task: "t", Model: "anthropic:m"}).
		add(10*ms, event.RunStarted{}).
		add(20*ms, event.ModelRequest{Step: 1, Provider: "anthropic", Model: "m", Attempt: 1}).
		add(30*ms, event.Retry{Step: 1, What: "model", Attempt: 2, Reason: "ERROR-MARKER"}).
		add(30*ms, event.ModelRequest{Step: 1, Provider: "anthropic", Model: "m", Attempt: 2}).
		add(90*ms, event.ModelResponse{Step: 1, Provider: "anthropic", Model: "m", DurationMS: 60}).
		add(100*ms, event.ToolFinished{Step: 1, CallID: "c0", Tool: "evil " + secretValue, Outcome: "denied", IsError: true}).
		add(110*ms, event.ToolStarted{Step: 1, CallID: "c1", Tool: "run_command", Place: event.PlaceSandbox, Sandbox: "main"}).
		add(150*ms, event.SandboxLost{Sandbox: "main", SandboxID: "sb", Reason: "killed near " + secretValue}).
		add(200*ms, event.RunPaused{Reason: "api"})
	for _, ev := range l.events() {
		tel.Event(ev)
	}
	spans := exp.GetSpans()
	if n := len(named(spans, "run")); n != 0 {
		t.Errorf("a paused run has %d run spans; its span ends with the run", n)
	}
	step := one(t, spans, "step")
	if !step.EndTime.Equal(t0.Add(200 * ms)) {
		t.Errorf("interrupted step ends %v after t0, want at the pause", step.EndTime.Sub(t0))
	}
	cmd := one(t, spans, "execute_tool run_command")
	if v, _ := attr(cmd, "airlock.outcome"); v.AsString() != "interrupted" || !cmd.EndTime.Equal(t0.Add(200*ms)) {
		t.Errorf("interrupted call: outcome %q, end %v", v.String(), cmd.EndTime.Sub(t0))
	}
	models := named(spans, "chat m")
	if len(models) != 2 || models[0].Status.Description != "retried" {
		t.Errorf("model spans %d, first status %+v; want 2, the first retried", len(models), models[0].Status)
	}
	one(t, spans, "execute_tool evil [redacted]")
	lost := one(t, spans, "sandbox.lost")
	if v, _ := attr(lost, "airlock.reason"); v.AsString() != "killed near [redacted]" {
		t.Errorf("lost reason %q", v.String())
	}
	if found := leaks(spans); len(found) > 0 {
		t.Errorf("spans carry what they must not: %q", found)
	}
}
