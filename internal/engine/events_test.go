package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
)

// TestSandboxEvents: a command of a scripted run reports progress and
// declares an artifact through airlock-event; the run's log has them,
// marked as the sandbox's, and the file is the run's artifact. Declared
// artifacts that are symlinks, FIFOs, devices or outside the workspace,
// malformed lines and unknown kinds are refused and counted, and the run
// completes regardless.
func TestSandboxEvents(t *testing.T) {
	h := newHarness(t)
	script := `
turns:
  - tool_calls:
      - name: run_command
        args:
          command: >-
            airlock-event progress --pct 40 "running tests" &&
            echo '<h1>report</h1>' > report.html && airlock-event artifact report.html --type text/html &&
            ln -s /etc/passwd passwd-link && airlock-event artifact passwd-link &&
            ln -s /etc/shadow shadow-link && airlock-event artifact shadow-link &&
            mkfifo pipe && airlock-event artifact pipe &&
            ln -s /etc etc-link && airlock-event artifact etc-link/passwd &&
            airlock-event artifact /etc/passwd && airlock-event artifact /dev/zero &&
            mkdir -p big && head -c 2000000 /dev/zero > big/f && airlock-event artifact big/f &&
            echo 'not json' | airlock-event lines && airlock-event emit shell '{"cmd":"rm -rf /"}' &&
            airlock-event test --name unit --status pass &&
            airlock-event log "token ` + "ghp_" + `Zq7RkW2mXb9TcV4nLp8YsJ3dHf6GaQ1uEo5i" && echo done
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	cfg := engine.Config{Events: engine.Events{ArtifactMaxSize: 1 << 20}}
	o := h.run("events", script, cfg)
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s), want completed", o.Status, o.Reason)
	}
	var progress, tests, logs []event.SandboxEvent
	artifacts := map[string]event.SandboxEvent{}
	var dropped *event.SandboxEventsDropped
	for _, e := range h.verifyLog(o.RunID) {
		p, err := e.Unpack()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *event.SandboxEvent:
			if p.Source != event.SourceSandbox || p.Sandbox != engine.DefaultSandbox {
				t.Errorf("sandbox event %+v: want source sandbox, sandbox %s", p, engine.DefaultSandbox)
			}
			switch p.Kind {
			case "progress":
				progress = append(progress, *p)
			case "test":
				tests = append(tests, *p)
			case "artifact":
				artifacts[p.Path] = *p
			case "log":
				logs = append(logs, *p)
			default:
				t.Errorf("recorded a sandbox event of kind %q: %+v", p.Kind, p)
			}
		case *event.SandboxEventsDropped:
			dropped = p
		}
	}
	if len(progress) != 1 || progress[0].Message != "running tests" || progress[0].Pct == nil || *progress[0].Pct != 40 {
		t.Errorf("progress events %+v, want one of 40%% running tests", progress)
	}
	if len(tests) != 1 || tests[0].Name != "unit" || tests[0].Status != "pass" {
		t.Errorf("test events %+v, want unit passed", tests)
	}
	if len(logs) != 1 || logs[0].Message != "token [redacted:github-pat]" || strings.Join(logs[0].Secrets, ",") != "github-pat" {
		t.Errorf("log events %+v, want the token redacted", logs)
	}
	if a := artifacts["/workspace/report.html"]; a.Artifact != "sandbox/report.html" || a.Refused != "" {
		t.Errorf("report.html's event = %+v, want it stored as sandbox/report.html", a)
	}
	for _, p := range []string{"/workspace/passwd-link", "/workspace/shadow-link", "/workspace/pipe", "/workspace/etc-link/passwd", "/etc/passwd", "/dev/zero", "/workspace/big/f"} {
		if a, ok := artifacts[p]; !ok || a.Refused == "" || a.Artifact != "" {
			t.Errorf("artifact %s: event %+v (seen %t), want it refused", p, a, ok)
		}
	}
	want := event.SandboxEventsDropped{Sandbox: engine.DefaultSandbox, Malformed: 1, UnknownKind: 1, Artifacts: 7}
	if dropped == nil || *dropped != want {
		t.Errorf("sandbox.events_dropped = %+v, want %+v", dropped, want)
	}
	var found bool
	for _, a := range o.Artifacts {
		switch {
		case a.Name == "sandbox/report.html":
			found = true
			r, err := h.blobs.Open(context.Background(), a.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, r); got != "<h1>report</h1>\n" || a.MediaType != "text/html" {
				t.Errorf("sandbox/report.html = %q (%s), want the report as text/html", got, a.MediaType)
			}
		case strings.HasPrefix(a.Name, "sandbox/"):
			t.Errorf("artifact %s stored, want only sandbox/report.html", a.Name)
		}
	}
	if !found {
		t.Errorf("no artifact sandbox/report.html among %+v", o.Artifacts)
	}
}

// eventRuleScript reports a failed test in its first call, then gives
// the host's events goroutine time to record it (several short commands:
// the rule's decision is taken at a step boundary) before it finishes.
const eventRuleScript = `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "airlock-event test --name unit --status fail && airlock-event log ignored"}
  - tool_calls:
      - name: run_command
        args: {command: "sleep 1"}
  - tool_calls:
      - name: run_command
        args: {command: "sleep 1"}
  - tool_calls:
      - name: run_command
        args: {command: "sleep 1"}
  - tool_calls:
      - name: run_command
        args: {command: "sleep 1"}
  - tool_calls:
      - name: run_command
        args: {command: "sleep 1"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`

// eventDecisions are the run's policy decisions that name a sandbox event,
// and its run.failed if any.
func eventDecisions(t *testing.T, evs []event.Event) (rules, calls []event.PolicyDecision, failed *event.RunFailed) {
	t.Helper()
	for _, e := range evs {
		p, err := e.Unpack()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *event.PolicyDecision:
			if p.Input == "" {
				continue
			}
			if p.CallID == "" {
				rules = append(rules, *p)
			} else {
				calls = append(calls, *p)
			}
		case *event.RunFailed:
			failed = p
		}
	}
	return rules, calls, failed
}

// TestEventRuleStop: a rule naming the test kind reads the sandbox's failed
// test and stops the run, failed, naming the rule.
func TestEventRuleStop(t *testing.T) {
	h := newHarness(t)
	cfg := engine.Config{Events: engine.Events{Rules: []engine.EventRule{
		{Kinds: []string{"test"}, When: `event.status == "fail"`, Action: "stop", Reason: "a test failed"},
	}}}
	o := h.run("event-stop", eventRuleScript, cfg)
	if o.Status != event.StatusFailed || !strings.HasPrefix(o.Reason, "policy: events.rules[0]: a test failed") {
		t.Fatalf("status %s (%s), want failed (policy: events.rules[0]: a test failed)", o.Status, o.Reason)
	}
	rules, calls, failed := eventDecisions(t, h.verifyLog(o.RunID))
	if len(rules) != 1 || rules[0].Decision != "stop" || rules[0].Rule != "events.rules[0]" || rules[0].Reason != "a test failed" || !strings.HasPrefix(rules[0].Input, "sandbox.event seq ") {
		t.Errorf("decisions on events %+v, want one stop by events.rules[0] on the test event", rules)
	}
	if len(calls) != 0 {
		t.Errorf("calls decided by an event: %+v", calls)
	}
	if failed == nil || !strings.Contains(failed.Error, "events.rules[0]: a test failed") {
		t.Errorf("run.failed %+v, want it to name events.rules[0] and its reason", failed)
	}
	if o.Steps >= 7 {
		t.Errorf("the run took %d steps: it did not stop", o.Steps)
	}
}

// TestEventRuleDefault: without rules the same events decide nothing and
// the run completes.
func TestEventRuleDefault(t *testing.T) {
	h := newHarness(t)
	o := h.run("event-default", eventRuleScript, engine.Config{})
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s), want completed", o.Status, o.Reason)
	}
	if rules, calls, _ := eventDecisions(t, h.verifyLog(o.RunID)); len(rules)+len(calls) != 0 {
		t.Errorf("the default policy decided on events: %+v %+v", rules, calls)
	}
}

// TestEventRuleDeny: deny refuses the run's next tool call with the rule
// and its reason, once; the run goes on.
func TestEventRuleDeny(t *testing.T) {
	h := newHarness(t)
	cfg := engine.Config{Events: engine.Events{Rules: []engine.EventRule{
		{Kinds: []string{"test"}, When: `event.status == "fail"`, Action: "deny", Reason: "tests fail: fix them first"},
	}}}
	o := h.run("event-deny", eventRuleScript, cfg)
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s), want completed", o.Status, o.Reason)
	}
	evs := h.verifyLog(o.RunID)
	rules, calls, _ := eventDecisions(t, evs)
	if len(rules) != 1 || rules[0].Decision != "deny" {
		t.Fatalf("decisions on events %+v, want one deny", rules)
	}
	if len(calls) != 1 || calls[0].Decision != event.DecisionDeny || calls[0].Rule != "events.rules[0]" || calls[0].Input != rules[0].Input ||
		!strings.Contains(calls[0].Reason, "tests fail: fix them first") {
		t.Fatalf("calls decided by the event %+v, want one denied by events.rules[0]", calls)
	}
	denied := false
	for _, e := range evs {
		if p, _ := e.Unpack(); p != nil {
			if f, ok := p.(*event.ToolFinished); ok && f.CallID == calls[0].CallID {
				denied = f.Outcome == "denied" && strings.Contains(f.Output, "tests fail: fix them first")
			}
		}
	}
	if !denied {
		t.Errorf("the call %s was not refused", calls[0].CallID)
	}
}

// TestEventRuleKindNotNamed: an event of a kind no rule names is evaluated
// by none, even by a rule whose condition would hold on it.
func TestEventRuleKindNotNamed(t *testing.T) {
	h := newHarness(t)
	cfg := engine.Config{Events: engine.Events{Rules: []engine.EventRule{
		{Kinds: []string{"test"}, When: `event.kind == "log"`, Action: "stop", Reason: "reads logs"},
	}}}
	o := h.run("event-kind", eventRuleScript, cfg)
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s), want completed", o.Status, o.Reason)
	}
	if rules, calls, _ := eventDecisions(t, h.verifyLog(o.RunID)); len(rules)+len(calls) != 0 {
		t.Errorf("a rule decided on a kind it does not name: %+v %+v", rules, calls)
	}
}

// TestEventRuleAsk: ask holds the run's next tool call for an approval
// naming the rule and the event; denied, the call does not run, and the run
// goes on.
func TestEventRuleAsk(t *testing.T) {
	h := newHarness(t)
	cfg := engine.Config{Events: engine.Events{Rules: []engine.EventRule{
		{Kinds: []string{"test"}, When: `event.status == "fail"`, Action: "ask", Reason: "a test failed: go on?"},
	}}}
	r := h.start("event-ask", eventRuleScript, cfg)
	done := drive(t, ctxT(t, 2*time.Minute), h, r.ID)
	a := waitApproval(t, h)
	if a.RunID != r.ID || !strings.Contains(a.Reason, "a test failed: go on?") || !strings.Contains(a.Reason, "sandbox.event seq ") {
		t.Errorf("approval = %+v, want the rule's reason and the event", a)
	}
	if err := h.eng.Decide(context.Background(), a.ID, "", "alice", false, "no"); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s), want completed", o.Status, o.Reason)
	}
	rules, calls, _ := eventDecisions(t, h.verifyLog(r.ID))
	if len(rules) != 1 || rules[0].Decision != "ask" {
		t.Fatalf("decisions on events %+v, want one ask", rules)
	}
	if len(calls) != 1 || calls[0].Decision != event.DecisionAsk || calls[0].Rule != "events.rules[0]" || calls[0].Input != rules[0].Input {
		t.Fatalf("calls decided by the event %+v, want one asked about by events.rules[0]", calls)
	}
	for _, f := range h.finished(r.ID) {
		if f.CallID == calls[0].CallID && (f.Outcome == "exited" || !strings.Contains(f.Output, "denied by alice")) {
			t.Errorf("the held call, denied: %+v", f)
		}
	}
}
