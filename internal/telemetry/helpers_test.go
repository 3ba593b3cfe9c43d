package telemetry_test

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/secret"
)

// secretValue is a secret the tests' redactor knows; it is put in every
// place an event may carry text (outputs, arguments, reasons, names).
const secretValue = "s3cr3t-ghp_0123456789abcdefXYZ"

// markers are text that must never reach a span, a metric or a log: the
// secret, and the markers put in tasks, arguments, outputs, model text,
// prompt bodies, approval actions and egress paths.
var markers = []string{
	secretValue, "TASK-MARKER", "ARG-MARKER", "OUTPUT-MARKER", "MODEL-TEXT-MARKER",
	"PROMPT-BODY-MARKER", "ACTION-MARKER", "PATH-MARKER", "ERROR-MARKER", "SUMMARY-MARKER",
}

func newRedactor() *secret.Redactor {
	r := secret.NewRedactor()
	r.Add(secret.NewValue([]byte(secretValue)))
	return r
}

// runLog builds a valid event log of one run: canonical payloads, seqs
// 1, 2, 3... and a hash chain, with times relative to t0.
type runLog struct {
	t     *testing.T
	runID string
	t0    time.Time
	evs   []event.Event
}

func newRunLog(t *testing.T, t0 time.Time) *runLog {
	return &runLog{t: t, runID: event.NewRunID(t0), t0: t0}
}

// add appends p at t0+at.
func (l *runLog) add(at time.Duration, p event.Payload) *runLog {
	l.t.Helper()
	ev, err := event.New(p)
	if err != nil {
		l.t.Fatal(err)
	}
	if ev.Payload, err = event.CanonicalPayload(ev.Payload, func(b []byte) []byte { return b }); err != nil {
		l.t.Fatal(err)
	}
	ev.Time = l.t0.Add(at).UTC()
	var prevSeq int64
	var prev event.Hash
	if n := len(l.evs); n > 0 {
		prevSeq, prev = l.evs[n-1].Seq, l.evs[n-1].Hash
	}
	event.Seal(l.runID, prevSeq, prev, &ev)
	l.evs = append(l.evs, ev)
	return l
}

// events returns the log, after checking it verifies.
func (l *runLog) events() []event.Event {
	l.t.Helper()
	if err := event.Verify(l.evs); err != nil {
		l.t.Fatalf("the test's log does not verify: %v", err)
	}
	return l.evs
}

func intp(n int) *int { return &n }

// fullRun is a run of three steps: a command in a sandbox that goes
// through the egress proxy and the LLM gateway, a command that waits for
// an approval, and finish; then verification and the end. Every text
// field carries a marker or the secret.
func fullRun(t *testing.T, t0 time.Time) *runLog {
	ms := time.Millisecond
	l := newRunLog(t, t0)
	call1 := event.ToolCall{ID: "call_1", Name: "run_command", Args: []byte(`{"command":"curl https://example.com/ARG-MARKER ` + secretValue + `"}`)}
	call2 := event.ToolCall{ID: "call_2", Name: "run_command", Args: []byte(`{"command":"git push ARG-MARKER"}`)}
	fin := event.ToolCall{ID: "call_3", Name: "finish", Args: []byte(`{"summary":"SUMMARY-MARKER"}`)}
	usage := event.Usage{InputTokens: 100, OutputTokens: 20, CostMicroUSD: 1500}
	l.add(0, event.RunCreated{Tenant: "acme", Task: "TASK-MARKER fix it with " + secretValue, Model: "anthropic:claude-test", PolicyHash: "abc123"}).
		add(0, event.PolicyResolved{PolicyHash: "abc123", Source: "default"}).
		add(10*ms, event.RunStarted{Host: "host:1"}).
		add(30*ms, event.SandboxProvisioned{Sandbox: "main", SandboxID: "sb_1", Backend: "linux", DurationMS: 15}).
		add(40*ms, event.ModelRequest{Step: 1, Provider: "anthropic", Model: "claude-test", Attempt: 1, Messages: 2}).
		add(540*ms, event.ModelResponse{
			Step: 1, Provider: "anthropic", Model: "claude-test", Text: "MODEL-TEXT-MARKER " + secretValue,
			ToolCalls: []event.ToolCall{call1}, StopReason: "tool_use", Usage: usage, DurationMS: 500,
		}).
		add(541*ms, event.ToolProposed{Step: 1, CallID: call1.ID, Tool: call1.Name, Args: call1.Args}).
		add(541*ms, event.PolicyDecision{Step: 1, CallID: call1.ID, Tool: call1.Name, Decision: event.DecisionAllow, Rule: "net-ok", Reason: "ARG-MARKER allowed"}).
		add(550*ms, event.ToolStarted{Step: 1, CallID: call1.ID, Tool: call1.Name, Place: event.PlaceSandbox, Sandbox: "main"}).
		add(700*ms, event.EgressDecision{
			Sandbox: "main", Decision: "allowed", Rule: "example", Method: "GET", Host: "example.com", Port: 443,
			Path: "/PATH-MARKER?token=" + secretValue, Addr: "127.0.0.9:443", Status: 200, BytesIn: 1000, BytesOut: 200, DurationMS: 100, Credential: "gh-token",
		}).
		add(720*ms, event.LLMCall{
			Sandbox: "main", API: "openai.chat", Model: "gpt-test", Upstream: "openai", Usage: event.Usage{InputTokens: 7, OutputTokens: 3},
			CostMicroCredits: 250, LatencyMS: 60, Status: 200, Outcome: event.LLMOutcomeOK, RequestBody: "PROMPT-BODY-MARKER " + secretValue, ResponseBody: "MODEL-TEXT-MARKER",
		}).
		add(900*ms, event.ToolFinished{
			Step: 1, CallID: call1.ID, Tool: call1.Name, Sandbox: "main", Outcome: "exited", ExitCode: intp(0),
			Output: "OUTPUT-MARKER " + secretValue, OutputBytes: 40, DurationMS: 350, WallMS: 300, Resources: event.Resources{UserMS: 5, SystemMS: 2, MaxRSSKB: 1024},
		}).
		add(1000*ms, event.ModelRequest{Step: 2, Provider: "anthropic", Model: "claude-test", Attempt: 1, Messages: 4}).
		add(1200*ms, event.ModelResponse{Step: 2, Provider: "anthropic", Model: "claude-test", ToolCalls: []event.ToolCall{call2}, StopReason: "tool_use", Usage: usage, DurationMS: 200}).
		add(1201*ms, event.ToolProposed{Step: 2, CallID: call2.ID, Tool: call2.Name, Args: call2.Args}).
		add(1201*ms, event.PolicyDecision{Step: 2, CallID: call2.ID, Tool: call2.Name, Decision: event.DecisionAsk, Rule: "push"}).
		add(1210*ms, event.ApprovalRequested{
			ApprovalID: l.runID + ".call_2", Step: 2, CallID: call2.ID, Action: "ACTION-MARKER git push " + secretValue,
			Reason: "pushing needs a person", Expires: t0.Add(time.Hour).UTC(),
		}).
		add(6210*ms, event.ApprovalDecided{ApprovalID: l.runID + ".call_2", Decision: "approved", By: "key_approver", Reason: "go ahead"}).
		add(6215*ms, event.RunResumed{Reason: "approvals decided", FromSeq: 18}).
		add(6220*ms, event.ToolStarted{Step: 2, CallID: call2.ID, Tool: call2.Name, Place: event.PlaceSandbox, Sandbox: "main", External: true}).
		add(6400*ms, event.ToolFinished{
			Step: 2, CallID: call2.ID, Tool: call2.Name, Sandbox: "main", Outcome: "exited", ExitCode: intp(1), IsError: true,
			Error: "ERROR-MARKER " + secretValue, Output: "OUTPUT-MARKER", DurationMS: 180, WallMS: 170,
		}).
		add(6500*ms, event.ModelRequest{Step: 3, Provider: "anthropic", Model: "claude-test", Attempt: 1, Messages: 6}).
		add(6600*ms, event.ModelResponse{Step: 3, Provider: "anthropic", Model: "claude-test", ToolCalls: []event.ToolCall{fin}, StopReason: "tool_use", Usage: usage, DurationMS: 100}).
		add(6601*ms, event.ToolProposed{Step: 3, CallID: fin.ID, Tool: fin.Name, Args: fin.Args}).
		add(6601*ms, event.PolicyDecision{Step: 3, CallID: fin.ID, Tool: fin.Name, Decision: event.DecisionAllow, Rule: "default"}).
		add(6602*ms, event.ToolStarted{Step: 3, CallID: fin.ID, Tool: fin.Name, Place: event.PlaceHost}).
		add(6603*ms, event.ToolFinished{Step: 3, CallID: fin.ID, Tool: fin.Name, Outcome: "ok", Output: "SUMMARY-MARKER", DurationMS: 1}).
		add(6800*ms, event.VerificationResult{Passed: true, Checks: []event.Check{{Name: "go test ARG-MARKER", Kind: "command", Passed: true, Detail: "OUTPUT-MARKER"}}, DurationMS: 150}).
		add(6900*ms, event.SandboxDestroyed{Sandbox: "main", SandboxID: "sb_1", Reason: "run ended"}).
		add(7000*ms, event.RunCompleted{Summary: "SUMMARY-MARKER " + secretValue, Steps: 3, Usage: event.Usage{InputTokens: 300, OutputTokens: 60, CostMicroUSD: 4500}})
	return l
}

// leaks returns every marker found in a span's name, attributes, events,
// links or resource.
func leaks(spans tracetest.SpanStubs) []string {
	var found []string
	check := func(where, s string) {
		for _, m := range markers {
			if strings.Contains(s, m) {
				found = append(found, where+": "+m)
			}
		}
	}
	checkAttrs := func(where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			check(where+" "+string(kv.Key), string(kv.Key)+"="+kv.Value.String())
		}
	}
	for _, s := range spans {
		check("name", s.Name)
		check("status", s.Status.Description)
		checkAttrs(s.Name, s.Attributes)
		for _, e := range s.Events {
			check(s.Name+" event", e.Name)
			checkAttrs(s.Name+" event "+e.Name, e.Attributes)
		}
		for _, l := range s.Links {
			checkAttrs(s.Name+" link", l.Attributes)
		}
		if s.Resource != nil {
			checkAttrs("resource", s.Resource.Attributes())
		}
	}
	return found
}

// attr returns span s's attribute key.
func attr(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// named returns the spans called name.
func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only span called name.
func one(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	got := named(spans, name)
	if len(got) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Fatalf("%d spans called %q, want 1; spans: %q", len(got), name, names)
	}
	return got[0]
}
