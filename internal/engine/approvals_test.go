package engine_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// askPushes is a policy hook that asks before any command that pushes and
// denies reading /etc.
func askPushes(_ context.Context, q engine.PolicyQuery) event.PolicyDecision {
	switch {
	case q.Call.Name == "run_command" && regexp.MustCompile(`"command":"git push`).Match(q.Call.Input):
		return event.PolicyDecision{Decision: event.DecisionAsk, Rule: "tools.run_command.rules[0]", Reason: "pushing needs a person"}
	case q.Call.Name == "read_file" && strings.Contains(string(q.Call.Input), `"/etc/`):
		return event.PolicyDecision{Decision: event.DecisionDeny, Rule: "tools.read_file.rules[0]", Reason: "no host config"}
	}
	return event.PolicyDecision{Decision: event.DecisionAllow, Rule: "default"}
}

const pushScript = `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "git push origin main || echo pushed"}
      - name: run_command
        args: {command: "echo unrelated"}
      - name: read_file
        args: {path: "/etc/hostname"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`

// drive starts a drive of run id in the background.
func drive(t *testing.T, ctx context.Context, h *harness, id string) <-chan engine.Outcome {
	done := make(chan engine.Outcome, 1)
	go func() {
		o, _ := h.eng.Drive(ctx, id)
		done <- o
	}()
	return done
}

func waitApproval(t *testing.T, h *harness) engine.Approval {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		as, err := h.eng.Approvals(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(as) > 0 {
			return as[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no pending approval in a minute")
	return engine.Approval{}
}

func TestApprovals(t *testing.T) {
	for _, tc := range []struct {
		name    string
		approve bool
		want    string // in the push call's result
	}{
		{"approve", true, "pushed"},
		{"deny", false, "denied by alice: not today"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(o *engine.Options) { o.Policy = askPushes })
			r := h.start("push", pushScript, engine.Config{})
			done := drive(t, ctxT(t, time.Minute), h, r.ID)
			a := waitApproval(t, h)
			if a.RunID != r.ID || a.Step != 1 || !strings.Contains(a.Action, "git push") || !strings.Contains(a.Reason, "pushing needs a person") {
				t.Errorf("approval = %+v", a)
			}
			got, _ := h.store.GetRun(context.Background(), r.ID)
			if got.Status != event.StatusAwaitingApproval {
				t.Errorf("status while waiting = %s", got.Status)
			}
			// Nothing of the step ran while it waited.
			if n := count(h.verifyLog(r.ID), event.TypeToolStarted); n != 0 {
				t.Errorf("%d calls started before the decision", n)
			}
			if err := h.eng.Decide(context.Background(), a.ID, "someone-else", "mallory", true, ""); !errors.Is(err, engine.ErrNoApproval) {
				t.Errorf("decision for another tenant = %v", err)
			}
			if err := h.eng.Decide(context.Background(), a.ID, "", "alice", tc.approve, "not today"); err != nil {
				t.Fatal(err)
			}
			if err := h.eng.Decide(context.Background(), a.ID, "", "bob", true, ""); !errors.Is(err, engine.ErrDecided) {
				t.Errorf("second decision = %v, want ErrDecided", err)
			}
			o := <-done
			if o.Status != event.StatusCompleted {
				t.Fatalf("status %s (%s)", o.Status, o.Reason)
			}
			by := map[string]event.ToolFinished{}
			for _, f := range h.finished(r.ID) {
				by[f.CallID] = f
			}
			if f := by["call_1_0"]; !strings.Contains(f.Output, tc.want) {
				t.Errorf("push result = %+v", f)
			}
			if f := by["call_1_1"]; !strings.Contains(f.Output, "unrelated") {
				t.Errorf("the allowed call of the step: %+v", f)
			}
			if f := by["call_1_2"]; f.Outcome != "denied" || !strings.Contains(f.Output, "no host config") {
				t.Errorf("the denied call: %+v", f)
			}
			evs := h.verifyLog(r.ID)
			if count(evs, event.TypeApprovalRequested) != 1 || count(evs, event.TypeApprovalDecided) != 1 {
				t.Errorf("log: %v", types(evs))
			}
		})
	}
}

func TestApprovalTimeout(t *testing.T) {
	for _, onTimeout := range []string{"deny", "allow"} {
		t.Run(onTimeout, func(t *testing.T) {
			h := newHarness(t, func(o *engine.Options) {
				o.Policy, o.ApprovalTimeout, o.ApprovalOnTimeout = askPushes, 300*time.Millisecond, onTimeout
			})
			o := h.run("push", pushScript, engine.Config{})
			if o.Status != event.StatusCompleted {
				t.Fatalf("status %s", o.Status)
			}
			f := h.finished(o.RunID)
			var push event.ToolFinished
			for _, x := range f {
				if x.CallID == "call_1_0" {
					push = x
				}
			}
			if denied := push.Outcome == "denied"; denied != (onTimeout == "deny") {
				t.Errorf("on timeout %s the push was %+v", onTimeout, push)
			}
			if onTimeout == "deny" && !strings.Contains(push.Output, "expired") {
				t.Errorf("the model is not told the approval expired: %q", push.Output)
			}
		})
	}
}

// TestApprovalSurvivesRestart: a host that stops while a run waits leaves it
// awaiting_approval; a new drive keeps waiting and goes on after the
// decision.
func TestApprovalSurvivesRestart(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.Policy = askPushes })
	r := h.start("push", pushScript, engine.Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := drive(t, ctx, h, r.ID)
	a := waitApproval(t, h)
	cancel(errors.New("host stopping"))
	<-done
	got, _ := h.store.GetRun(context.Background(), r.ID)
	if got.Status != event.StatusAwaitingApproval {
		t.Fatalf("status after the host stopped = %s", got.Status)
	}
	done = drive(t, ctxT(t, time.Minute), h, r.ID)
	time.Sleep(200 * time.Millisecond)
	if as, _ := h.eng.Approvals(context.Background(), ""); len(as) != 1 || as[0].ID != a.ID {
		t.Fatalf("pending after the restart: %+v", as)
	}
	if err := h.eng.Decide(context.Background(), a.ID, store.Run{}.Tenant, "alice", true, ""); err != nil {
		t.Fatal(err)
	}
	if o := <-done; o.Status != event.StatusCompleted {
		t.Fatalf("status %s", o.Status)
	}
}

func TestDecideUnknown(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"", "nope", "run_01AAAAAAAAAAAAAAAAAAAAAAAA.call_1_0", "run_bad.x"} {
		if err := h.eng.Decide(context.Background(), id, "", "a", true, ""); !errors.Is(err, engine.ErrNoApproval) {
			t.Errorf("Decide(%q) = %v", id, err)
		}
	}
}
