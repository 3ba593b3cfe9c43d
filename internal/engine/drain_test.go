package engine_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestQueueResume: a resume request is the status change paused -> queued,
// which any engine on the store then drives as a resume; only a paused
// agent run can be queued again.
func TestQueueResume(t *testing.T) {
	h := newHarness(t)
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo one > one.txt && ` + gateWait + `"}
  - tool_calls:
      - name: run_command
        args: {command: "echo two > two.txt"}
  - tool_calls:
      - name: finish
        args: {summary: "resumed"}
`
	// The pause lands while the first command waits at the gate, which
	// opens once the run is paused; the runs after it find it open.
	g := newGate(t)
	checks := engine.Config{Mounts: g.mounts(), Checks: engine.Checks{Commands: []string{"test -f one.txt && test -f two.txt"}}}
	ctx := ctxT(t, 2*time.Minute)

	t.Run("paused mid-run", func(t *testing.T) {
		r := h.start("pause me", script, checks)
		done := drive(t, ctx, h, r.ID)
		waitFor(t, h, r.ID, event.TypeToolStarted)
		if err := h.eng.Pause(ctx, r.ID, "lunch"); err != nil {
			t.Fatal(err)
		}
		if o := <-done; o.Status != event.StatusPaused {
			t.Fatalf("status after the pause = %s", o.Status)
		}
		g.open(t)
		before, _ := h.store.GetRun(ctx, r.ID)
		q, err := h.eng.QueueResume(ctx, r.ID)
		if err != nil || q.Status != event.StatusQueued {
			t.Fatalf("QueueResume = %s, %v; want queued", q.Status, err)
		}
		if q.LastSeq != before.LastSeq {
			t.Errorf("QueueResume appended events: last seq %d -> %d", before.LastSeq, q.LastSeq)
		}
		if _, err := h.eng.QueueResume(ctx, r.ID); !errors.Is(err, event.ErrTransition) {
			t.Errorf("QueueResume of a queued run = %v, want ErrTransition", err)
		}
		// Another engine on the store (a worker of another process) takes
		// the request up with a plain Drive.
		o2 := h.opts
		o2.LockDir, o2.OnEvents = t.TempDir(), nil
		other, err := engine.New(o2)
		if err != nil {
			t.Fatal(err)
		}
		o, err := other.Drive(ctx, r.ID)
		if err != nil || o.Status != event.StatusCompleted {
			t.Fatalf("Drive of the queued resume = %s, %v (%s)", o.Status, err, o.Reason)
		}
		evs := h.verifyLog(r.ID)
		if n := count(evs, event.TypeRunStarted); n != 1 {
			t.Errorf("%d run.started events, want 1: %v", n, types(evs))
		}
		var resumed []event.RunResumed
		for _, e := range evs[before.LastSeq:] {
			if e.Type == event.TypeRunResumed {
				var p event.RunResumed
				_ = json.Unmarshal(e.Payload, &p)
				resumed = append(resumed, p)
			}
		}
		if len(resumed) != 1 || resumed[0].Reason != "resume" || resumed[0].FromSeq != before.LastSeq {
			t.Errorf("after the pause: run.resumed %+v, want one, reason resume, from seq %d", resumed, before.LastSeq)
		}
		if _, err := h.eng.QueueResume(ctx, r.ID); !errors.Is(err, engine.ErrFinal) {
			t.Errorf("QueueResume of a completed run = %v, want ErrFinal", err)
		}
	})

	t.Run("paused before it started", func(t *testing.T) {
		g.open(t) // also when run alone
		r := h.start("never started", script, checks)
		if err := h.eng.Pause(ctx, r.ID, "not yet"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.eng.QueueResume(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		o, err := h.eng.Drive(ctx, r.ID)
		if err != nil || o.Status != event.StatusCompleted {
			t.Fatalf("Drive = %s, %v", o.Status, err)
		}
		evs := h.verifyLog(r.ID)
		if count(evs, event.TypeRunStarted) != 1 || count(evs, event.TypeRunResumed) != 0 {
			t.Errorf("a run that never ran starts, it does not resume: %v", types(evs))
		}
	})

	t.Run("not paused", func(t *testing.T) {
		r := h.start("queued", script, checks)
		if _, err := h.eng.QueueResume(ctx, r.ID); !errors.Is(err, event.ErrTransition) {
			t.Errorf("QueueResume of a queued run = %v, want ErrTransition", err)
		}
		if _, err := h.eng.QueueResume(ctx, event.NewRunID(time.Now())); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("QueueResume of no run = %v, want ErrNotFound", err)
		}
	})
}

// TestDrainFinishesTheStepInFlight: Drain lets the command in flight end
// and its step be recorded complete, then hands the run back, running,
// with its lease released; another engine goes on from the next step at
// once, redoing nothing. The command waits at a gate that opens once Drain
// has returned, so the drain lands while it runs, whatever the load.
func TestDrainFinishesTheStepInFlight(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.LeaseTTL = time.Hour })
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "` + gateWait + ` && echo one > one.txt"}
  - tool_calls:
      - name: run_command
        args: {command: "echo two > two.txt"}
  - tool_calls:
      - name: finish
        args: {summary: "drained and resumed"}
`
	g := newGate(t)
	r := h.start("drain me", script, engine.Config{Mounts: g.mounts(), Checks: engine.Checks{Commands: []string{"test -f one.txt && test -f two.txt"}}})
	ctx := ctxT(t, 2*time.Minute)
	type result struct {
		o   engine.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		o, err := h.eng.Drive(ctx, r.ID)
		done <- result{o, err}
	}()
	waitFor(t, h, r.ID, event.TypeToolStarted)
	h.eng.Drain()
	h.eng.Drain() // again: nothing more
	g.open(t)
	res := <-done
	if !errors.Is(res.err, engine.ErrDrained) || res.o.Status != event.StatusRunning {
		t.Fatalf("drained Drive = %s, %v; want running, ErrDrained", res.o.Status, res.err)
	}
	evs := h.verifyLog(r.ID)
	fin := h.finished(r.ID)
	if len(fin) != 1 || fin[0].IsError || fin[0].ExitCode == nil || *fin[0].ExitCode != 0 {
		t.Fatalf("the command in flight did not finish: %+v", fin)
	}
	if stepSnapshots(evs) != 1 || count(evs, event.TypeToolStarted) != 1 || count(evs, event.TypeSandboxDestroyed) != 1 {
		t.Errorf("want the step's snapshot, no second step, the sandbox destroyed: %v", types(evs))
	}
	after, err := h.store.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status != event.StatusRunning || after.LeaseOwner != "" {
		t.Errorf("after the drain: status %s, lease owner %q; want running, released", after.Status, after.LeaseOwner)
	}
	// A drained engine starts nothing, and writes nothing.
	if _, err := h.eng.Drive(ctx, r.ID); !errors.Is(err, engine.ErrDrained) {
		t.Errorf("Drive on a drained engine = %v, want ErrDrained", err)
	}
	if again, _ := h.store.GetRun(ctx, r.ID); again.LastSeq != after.LastSeq {
		t.Errorf("a drained engine appended: seq %d -> %d", after.LastSeq, again.LastSeq)
	}
	// Another engine (an hour's lease TTL: were the lease not released it
	// would wait) takes over at once and redoes nothing.
	o2 := h.opts
	o2.LockDir, o2.OnEvents = t.TempDir(), nil
	other, err := engine.New(o2)
	if err != nil {
		t.Fatal(err)
	}
	o, err := other.Drive(ctx, r.ID)
	if err != nil || o.Status != event.StatusCompleted {
		t.Fatalf("Drive after the drain = %s, %v (%s)", o.Status, err, o.Reason)
	}
	evs = h.verifyLog(r.ID)
	if n := count(evs, event.TypeRetry); n != 0 {
		t.Errorf("%d retries: the drained step was redone: %v", n, types(evs))
	}
	if n := len(h.finished(r.ID)); n != 3 {
		t.Errorf("%d tool calls finished, want 3 (each once)", n)
	}
}

// TestDrainStopsAnApprovalWait: a run waiting for a person is handed back
// at once by a drain, still awaiting approval, lease released.
func TestDrainStopsAnApprovalWait(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.Policy = askPushes })
	r := h.start("push", pushScript, engine.Config{})
	ctx := ctxT(t, time.Minute)
	errc := make(chan error, 1)
	go func() {
		_, err := h.eng.Drive(ctx, r.ID)
		errc <- err
	}()
	waitApproval(t, h)
	h.eng.Drain()
	if err := <-errc; !errors.Is(err, engine.ErrDrained) {
		t.Fatalf("Drive = %v, want ErrDrained", err)
	}
	got, err := h.store.GetRun(ctx, r.ID)
	if err != nil || got.Status != event.StatusAwaitingApproval || got.LeaseOwner != "" {
		t.Fatalf("after the drain: %s, lease owner %q, %v; want awaiting_approval, released", got.Status, got.LeaseOwner, err)
	}
	if as, err := h.eng.Approvals(ctx, ""); err != nil || len(as) != 1 {
		t.Errorf("the approval after the drain: %v, %v; want it still pending", as, err)
	}
}

// TestLeaseOfADeadProcessOfThisHost: Driven tells a lease held by a live
// process of this host (with another lock directory) from one held by a
// process that died, whose lease a drive waits out and takes.
func TestLeaseOfADeadProcessOfThisHost(t *testing.T) {
	h := newHarness(t)
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	tests := []struct {
		name   string
		owner  string
		driven bool
	}{
		{"this process", host + ":" + strconv.Itoa(os.Getpid()) + ":other", true},
		{"a dead process", host + ":" + strconv.Itoa(dead.Process.Pid) + ":gone", false},
		{"another host", "elsewhere.example:1:x", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.start("leased", "turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: ok}\n", engine.Config{})
			if _, err := h.store.AcquireLease(ctx, r.ID, tt.owner, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if got := h.eng.Driven(r.ID); got != tt.driven {
				t.Errorf("Driven with a lease of %s = %v, want %v", tt.owner, got, tt.driven)
			}
			o, err := h.eng.Drive(ctx, r.ID)
			if tt.driven {
				if !errors.Is(err, engine.ErrBusy) {
					t.Errorf("Drive = %v, want ErrBusy", err)
				}
				return
			}
			if err != nil || o.Status != event.StatusCompleted {
				t.Errorf("Drive after waiting out the dead process's lease = %s, %v", o.Status, err)
			}
		})
	}
}
