package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/tools"
)

func TestPauseAndResume(t *testing.T) {
	h := newHarness(t)
	// The pause lands while the command waits at the gate, which opens
	// once the run is paused: the command redone after the resume goes on.
	script := `
turns:
  - tool_calls:
      - name: write_file
        args: {path: "first.txt", content: "before the pause\n"}
  - tool_calls:
      - name: run_command
        args: {command: "echo partial > partial.txt && ` + gateWait + ` && echo done > second.txt"}
  - tool_calls:
      - name: finish
        args: {summary: "paused and resumed"}
`
	g := newGate(t)
	r := h.start("pause me", script, engine.Config{Mounts: g.mounts(), Checks: engine.Checks{Commands: []string{"test -f first.txt && test -f second.txt"}}})
	done := make(chan engine.Outcome, 1)
	go func() {
		o, err := h.eng.Drive(ctxT(t, time.Minute), r.ID)
		if err != nil {
			t.Errorf("Drive = %v", err)
		}
		done <- o
	}()
	waitForN(t, h, r.ID, event.TypeToolStarted, 2)
	if err := h.eng.Pause(context.Background(), r.ID, "lunch"); err != nil {
		t.Fatal(err)
	}
	if o := <-done; o.Status != event.StatusPaused {
		t.Fatalf("status after pause = %s", o.Status)
	}
	g.open(t)
	evs := h.verifyLog(r.ID)
	if count(evs, event.TypeSandboxDestroyed) != 1 {
		t.Errorf("the sandbox was not destroyed on pause: %v", types(evs))
	}
	var paused event.RunPaused
	for _, e := range evs {
		if e.Type == event.TypeRunPaused {
			_ = json.Unmarshal(e.Payload, &paused)
		}
	}
	if len(paused.Snapshots) != 1 || paused.Reason != "lunch" {
		t.Errorf("run.paused = %+v", paused)
	}
	// A paused run is not driven without an explicit resume.
	if _, err := h.eng.Drive(ctxT(t, time.Minute), r.ID); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("Drive of a paused run = %v", err)
	}
	o, err := h.eng.Resume(ctxT(t, time.Minute), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != event.StatusCompleted {
		t.Fatalf("status after resume = %s (%s) %+v", o.Status, o.Reason, o.Verification)
	}
	evs = h.verifyLog(r.ID)
	var prov []event.SandboxProvisioned
	for _, e := range evs {
		if e.Type == event.TypeSandboxProvisioned {
			var p event.SandboxProvisioned
			_ = json.Unmarshal(e.Payload, &p)
			prov = append(prov, p)
		}
	}
	if len(prov) != 2 || prov[1].Snapshot != paused.Snapshots[0] {
		t.Errorf("the resumed sandbox was not booted from the pause snapshot: %+v", prov)
	}
}

func TestTimeBudgetKillsTheCommand(t *testing.T) {
	h := newHarness(t)
	start := time.Now()
	o := h.run("slow", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 600\"}\n", engine.Config{TimeoutMS: 1500})
	if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "wall_time") {
		t.Fatalf("status %s reason %q", o.Status, o.Reason)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the run took %v", d)
	}
}

// TestForkFromAStep forks a finished run after its edit step: the child
// starts from the parent's conversation and workspace snapshot.
func TestForkFromAStep(t *testing.T) {
	h := newHarness(t)
	ws := calcRepo(t)
	cfg := engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}}, Checks: engine.Checks{Commands: []string{"python3 -m unittest -q"}}}
	parent := h.run("fix", fixScript, cfg)
	if parent.Status != event.StatusCompleted {
		t.Fatalf("parent: %s", parent.Status)
	}
	// A fork's script starts at the fork point: its turn 1 is the
	// child's step 3.
	childScript := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "cat calc.py"}
  - tool_calls:
      - name: finish
        args: {summary: "checked the fix from the fork"}
`
	child, err := h.eng.Fork(context.Background(), parent.RunID, 2, engine.ForkOptions{Model: "script:child.yaml", Script: []byte(childScript)})
	if err != nil {
		t.Fatal(err)
	}
	if child.ParentRunID != parent.RunID || child.ParentSeq == 0 {
		t.Fatalf("child run = %+v", child)
	}
	o, err := h.eng.Drive(ctxT(t, time.Minute), child.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != event.StatusCompleted || o.Steps != 4 {
		t.Fatalf("child: %s after %d steps (%s)", o.Status, o.Steps, o.Reason)
	}
	fin := h.finished(child.ID)
	if len(fin) != 2 || !strings.Contains(fin[0].Output, "a + b") {
		t.Errorf("the fork did not start from the parent's workspace after step 2: %+v", fin)
	}
	// Linked in both logs, tamper-evidently.
	pevs := h.verifyLog(parent.RunID)
	var forked event.RunForked
	for _, e := range pevs {
		if e.Type == event.TypeRunForked {
			_ = json.Unmarshal(e.Payload, &forked)
		}
	}
	if forked.ChildRunID != child.ID || forked.AtStep != 2 || forked.AtSeq != child.ParentSeq {
		t.Errorf("run.forked = %+v", forked)
	}
	cevs := h.verifyLog(child.ID)
	var created event.RunCreated
	_ = json.Unmarshal(cevs[0].Payload, &created)
	if created.ParentHash != pevs[child.ParentSeq-1].Hash.String() {
		t.Errorf("the child's parent hash %s is not the hash of parent event %d", created.ParentHash, child.ParentSeq)
	}
	// Only complete steps are fork points.
	if _, err := h.eng.Fork(context.Background(), parent.RunID, 9, engine.ForkOptions{}); err == nil {
		t.Error("fork past the last step succeeded")
	}
}

// TestForkScriptResumed: a fork's new script starts at the fork point, and
// a fork whose drive stopped after its first own turn is resumed with the
// script's next turn: the turns it recorded are not asked for again, nor
// counted twice.
func TestForkScriptResumed(t *testing.T) {
	var stop atomic.Pointer[context.CancelCauseFunc]
	h := newHarness(t, func(o *engine.Options) {
		inner := o.OnEvents
		o.OnEvents = func(evs []event.Event) {
			inner(evs)
			for _, e := range evs {
				if e.Type == event.TypeModelResponse {
					if c := stop.Swap(nil); c != nil {
						(*c)(errors.New("the host stops"))
					}
				}
			}
		}
	})
	const parentScript = `
turns:
  - tool_calls:
      - {name: run_command, args: {command: "echo one > one.txt"}}
  - tool_calls:
      - {name: run_command, args: {command: "echo two > two.txt"}}
  - tool_calls:
      - {name: finish, args: {summary: parent}}
`
	parent := h.run("count", parentScript, engine.Config{})
	if parent.Status != event.StatusCompleted || parent.Steps != 3 {
		t.Fatalf("parent: %s after %d steps (%s)", parent.Status, parent.Steps, parent.Reason)
	}
	// The case: a fork at step 2 with a script of 2 turns.
	const forkScript = `
turns:
  - tool_calls:
      - {name: run_command, args: {command: "ls; echo three > three.txt"}}
  - tool_calls:
      - {name: finish, args: {summary: forked}}
`
	child, err := h.eng.Fork(context.Background(), parent.RunID, 2, engine.ForkOptions{Model: "script:fork.yaml", Script: []byte(forkScript)})
	if err != nil {
		t.Fatal(err)
	}
	// The first drive stops at the child's first model turn (recorded,
	// its call not run yet), as a host that stops there would.
	ctx, cancel := context.WithCancelCause(ctxT(t, time.Minute))
	defer cancel(nil)
	stop.Store(&cancel)
	if o, err := h.eng.Drive(ctx, child.ID); err == nil && o.Status.Final() {
		t.Fatalf("the first drive ended the run: %+v", o)
	}
	if got := count(h.verifyLog(child.ID), event.TypeModelResponse); got != 1 {
		t.Fatalf("%d model turns recorded by the first drive, want 1", got)
	}
	o, err := h.eng.Drive(ctxT(t, time.Minute), child.ID)
	if err != nil || o.Status != event.StatusCompleted || o.Steps != 4 || o.Summary != "forked" {
		t.Fatalf("resumed fork = %s after %d steps (%s, summary %q), %v; want completed after 4", o.Status, o.Steps, o.Reason, o.Summary, err)
	}
	evs := h.verifyLog(child.ID)
	if got := count(evs, event.TypeModelResponse); got != 2 {
		t.Errorf("%d model turns in the fork's log, want 2 (the script's two)", got)
	}
	fin := h.finished(child.ID)
	if len(fin) != 2 || !strings.Contains(fin[0].Output, "one.txt") || !strings.Contains(fin[0].Output, "two.txt") {
		t.Errorf("the fork's first call did not run in the parent's workspace after step 2: %+v", fin)
	}
}

func TestReplay(t *testing.T) {
	h := newHarness(t)
	ws := calcRepo(t)
	cfg := engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}}, Checks: engine.Checks{Commands: []string{"python3 -m unittest -q"}}}
	// unittest prints its own run time; a replay compares outputs, so the
	// commands leave it out.
	script := strings.ReplaceAll(fixScript, "python3 -m unittest -q", "python3 -m unittest -q 2>&1 | grep -v '^Ran '")
	orig := h.run("fix", script, cfg)
	rep, err := h.eng.Replay(context.Background(), orig.RunID)
	if err != nil {
		t.Fatal(err)
	}
	o, err := h.eng.Drive(ctxT(t, time.Minute), rep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != event.StatusCompleted {
		t.Fatalf("replay: %s", o.Status)
	}
	// The replay asked no model: its turns are the recorded ones.
	diffs, err := h.eng.Compare(context.Background(), orig.RunID, rep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 0 {
		t.Errorf("a deterministic run replays with differences: %+v", diffs)
	}

	// A command whose output changes shows up as a difference.
	nd := h.run("clock", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"date +%N\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: s}\n", engine.Config{})
	rep2, err := h.eng.Replay(context.Background(), nd.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Drive(ctxT(t, time.Minute), rep2.ID); err != nil {
		t.Fatal(err)
	}
	diffs, err = h.eng.Compare(context.Background(), nd.RunID, rep2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].Field != "output" || diffs[0].Step != 1 {
		t.Errorf("differences = %+v", diffs)
	}
}

// notifyTool is a host tool with an external effect (it would send a
// message somewhere); it counts its calls.
type notifyTool struct{ calls *atomic.Int32 }

func (n notifyTool) Spec() model.ToolSpec {
	return model.ToolSpec{Name: "notify", Description: "Send a message.", Schema: json.RawMessage(`{"type":"object"}`)}
}
func (notifyTool) Place() tools.Place { return tools.PlaceHost }
func (notifyTool) Mutating() bool     { return false }
func (notifyTool) External() bool     { return true }
func (n notifyTool) Run(context.Context, tools.Env, json.RawMessage) (tools.Result, error) {
	n.calls.Add(1)
	return tools.Result{Content: "sent"}, nil
}

// TestUncertainExternalCallFailsClosed: a host call with an external effect
// that started but has no recorded result is never repeated on recovery.
func TestUncertainExternalCallFailsClosed(t *testing.T) {
	var calls atomic.Int32
	h := newHarness(t, func(o *engine.Options) { o.Tools = []tools.Tool{notifyTool{&calls}} })
	r := h.start("notify", "turns:\n  - tool_calls:\n      - name: notify\n        args: {}\n", engine.Config{})
	o := h.diedMidCall(r, "notify")
	if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "uncertain") {
		t.Fatalf("status %s reason %q", o.Status, o.Reason)
	}
	if calls.Load() != 0 {
		t.Errorf("the external call was repeated %d times", calls.Load())
	}
	if count(h.verifyLog(r.ID), event.TypeToolUncertain) != 1 {
		t.Error("no tool.uncertain event")
	}
}

func mustEvents(t *testing.T, ps ...event.Payload) []event.Event {
	t.Helper()
	var out []event.Event
	for _, p := range ps {
		e, err := event.New(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestOneDriverPerRun: a second process (here, a second engine on the same
// files) cannot drive a run that is being driven.
func TestOneDriverPerRun(t *testing.T) {
	h := newHarness(t)
	r := h.start("wait", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 600\"}\n", engine.Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.eng.Drive(ctx, r.ID)
	}()
	waitFor(t, h, r.ID, event.TypeToolStarted)
	if !h.eng.Driven(r.ID) {
		t.Error("Driven = false while a drive runs")
	}
	if _, err := h.eng.Drive(ctxT(t, time.Minute), r.ID); !errors.Is(err, engine.ErrBusy) {
		t.Errorf("second Drive = %v, want ErrBusy", err)
	}
	// Stopping the host without cancelling leaves the run resumable.
	cancel(errors.New("host shutting down"))
	<-done
	got, _ := h.store.GetRun(context.Background(), r.ID)
	if got.Status != event.StatusRunning {
		t.Errorf("status after a host stop = %s, want running (resumable)", got.Status)
	}
	if err := h.eng.Cancel(context.Background(), r.ID, "test", "cleanup"); err != nil {
		t.Error(err)
	}
}

// TestBadRequests: bad input gets a clear error and records nothing.
func TestBadRequests(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for name, req := range map[string]engine.Request{
		"empty task":      {Task: " ", Config: engine.Config{Model: "script:x"}, Script: []byte("turns: []")},
		"no script":       {Task: "t", Config: engine.Config{Model: "script:x"}},
		"bad script":      {Task: "t", Config: engine.Config{Model: "script:x"}, Script: []byte("turns: [{bogus: 1}]")},
		"bad sandbox":     {Task: "t", Config: engine.Config{Model: "script:x", Sandboxes: []engine.SandboxConfig{{Name: "../x"}}}, Script: []byte("turns: []")},
		"twin sandboxes":  {Task: "t", Config: engine.Config{Model: "script:x", Sandboxes: []engine.SandboxConfig{{Name: "a"}, {Name: "a"}}}, Script: []byte("turns: []")},
		"relative ws":     {Task: "t", Config: engine.Config{Model: "script:x", Sandboxes: []engine.SandboxConfig{{Name: "a", Workspace: "rel"}}}, Script: []byte("turns: []")},
		"changed outside": {Task: "t", Config: engine.Config{Model: "script:x", Checks: engine.Checks{Changed: []string{"../etc/passwd"}}}, Script: []byte("turns: []")},
		"bad glob":        {Task: "t", Config: engine.Config{Model: "script:x", Artifacts: []string{"[x"}}, Script: []byte("turns: []")},
		"no model":        {Task: "t"},
	} {
		if _, err := h.eng.Create(ctx, req); err == nil {
			t.Errorf("%s: Create succeeded", name)
		}
	}
	runs, err := h.store.ListRuns(ctx, store.RunFilter{})
	if err != nil || len(runs) != 0 {
		t.Errorf("bad requests left %d runs (%v)", len(runs), err)
	}
}

// TestArtifactGlobs: only regular files the globs match are kept; a symlink
// never is (it could name a host path when the artifacts are written out).
func TestArtifactGlobs(t *testing.T) {
	h := newHarness(t)
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "mkdir -p out/sub && echo r > out/report.txt && echo s > out/sub/deep.txt && echo x > other.log && ln -s /etc/passwd out/link.txt"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	o := h.run("artifacts", script, engine.Config{Artifacts: []string{"out/**"}})
	names := map[string]bool{}
	for _, a := range o.Artifacts {
		names[a.Name] = true
	}
	for _, want := range []string{"patch.diff", "files/out/report.txt", "files/out/sub/deep.txt"} {
		if !names[want] {
			t.Errorf("no artifact %s in %v", want, names)
		}
	}
	if names["files/other.log"] || names["files/out/link.txt"] {
		t.Errorf("artifacts outside the globs or a symlink kept: %v", names)
	}
}

// TestUnchangedWorkspaceIsNotExportedAgain: a command that changes nothing
// reuses the last snapshot; a change that restores the old mtime is still
// seen (the fingerprint includes the change time), and a restore brings it
// back.
func TestUnchangedWorkspaceIsNotExportedAgain(t *testing.T) {
	var lb *lossyBackend
	h := newHarness(t, func(o *engine.Options) {
		lb = &lossyBackend{Backend: o.Backend}
		o.Backend = lb
	})
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo aaaa > f && touch -d @1000000000 f"}
  - tool_calls:
      - name: run_command
        args: {command: "cat f"}
  - tool_calls:
      - name: run_command
        args: {command: "echo bbbb > f && touch -d @1000000000 f"}
  - tool_calls:
      - name: run_command
        args: {command: "sleep 600"}
  - tool_calls:
      - name: run_command
        args: {command: "cat f"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	r := h.start("fingerprints", script, engine.Config{})
	done := make(chan engine.Outcome, 1)
	go func() {
		o, _ := h.eng.Drive(ctxT(t, time.Minute), r.ID)
		done <- o
	}()
	waitForN(t, h, r.ID, event.TypeToolStarted, 4)
	time.Sleep(200 * time.Millisecond)
	lb.killLatest()
	if o := <-done; o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s)", o.Status, o.Reason)
	}
	var snaps []event.SnapshotTaken
	for _, e := range h.verifyLog(r.ID) {
		if e.Type == event.TypeSnapshotTaken {
			var s event.SnapshotTaken
			_ = json.Unmarshal(e.Payload, &s)
			if !s.Start {
				snaps = append(snaps, s)
			}
		}
	}
	if len(snaps) != 4 {
		t.Fatalf("%d snapshots: %+v", len(snaps), snaps)
	}
	if snaps[1].Digest != snaps[0].Digest || snaps[1].Base != snaps[0].Digest {
		t.Errorf("cat changed the snapshot: %+v", snaps[:2])
	}
	if snaps[2].Digest == snaps[1].Digest {
		t.Error("a rewrite with the old mtime was not seen")
	}
	fin := h.finished(r.ID)
	if got := fin[len(fin)-2].Output; !strings.Contains(got, "bbbb") {
		t.Errorf("after the restore f holds %q, want bbbb", got)
	}
}

// TestHostMeasuredBudgets: the CPU time of the run's sandboxes (from their
// cgroups) and the bytes through its egress proxies (from the proxies) end
// the run when spent; nothing the sandbox says about itself counts.
func TestHostMeasuredBudgets(t *testing.T) {
	t.Run("sandbox_cpu", func(t *testing.T) {
		h := newHarness(t)
		// The command spins until it has used half a second of CPU (its
		// own utime, field 14 of /proc/PID/stat, in ticks of 10 ms), however
		// busy the machine, and claims nothing; the cgroup sees the CPU.
		script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "while read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u _ < /proc/$$/stat; [ \"$u\" -lt 50 ]; do :; done; echo spun"}
  - tool_calls:
      - name: list_dir
        args: {path: "."}
  - tool_calls:
      - name: finish
        args: {summary: done}
`
		o := h.run("spin", script, engine.Config{MaxSandboxCPUMS: 300})
		if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "sandbox_cpu") || o.Steps != 1 {
			t.Fatalf("status %s reason %q after %d steps", o.Status, o.Reason, o.Steps)
		}
		var snap event.SnapshotTaken
		for _, e := range h.verifyLog(o.RunID) {
			if e.Type == event.TypeSnapshotTaken {
				_ = json.Unmarshal(e.Payload, &snap)
			}
		}
		if snap.CPUMS < 300 || snap.SandboxID == "" {
			t.Errorf("the snapshot records %d ms of CPU for %q", snap.CPUMS, snap.SandboxID)
		}
	})
	t.Run("egress_bytes", func(t *testing.T) {
		net := &fakeNetwork{bytes: 5 << 20}
		h := newHarness(t, func(o *engine.Options) { o.Network = net })
		script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo fetched"}
  - tool_calls:
      - name: list_dir
        args: {path: "."}
`
		o := h.run("fetch", script, engine.Config{MaxEgressBytes: 1 << 20})
		if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "egress_bytes") {
			t.Fatalf("status %s reason %q", o.Status, o.Reason)
		}
	})
}

// fakeNetwork reports one egress decision of the given size for each
// sandbox, as a proxy would after a download.
type fakeNetwork struct{ bytes int64 }

func (f *fakeNetwork) Attach(_ context.Context, a sandbox.Attachment) (func(), error) {
	a.Audit(event.EgressDecision{Decision: "allowed", Method: "GET", Host: "example.test", Port: 443, BytesIn: f.bytes})
	return func() {}, nil
}

// TestLiveLeaseOfThisHostIsNotWaitedOut: a process of this host with
// another lock directory drives a run; a second one gives up once it sees
// the lease renewed, instead of waiting for it forever.
func TestLiveLeaseOfThisHostIsNotWaitedOut(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.LeaseTTL = time.Second })
	r := h.start("wait", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 600\"}\n", engine.Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := drive(t, ctx, h, r.ID)
	waitFor(t, h, r.ID, event.TypeToolStarted)
	o2 := h.opts
	o2.LockDir = t.TempDir()
	o2.OnEvents = nil
	host, _ := os.Hostname()
	o2.Owner = host + ":1" // another process of this host
	second, err := engine.New(o2)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := second.Drive(ctxT(t, time.Minute), r.ID); !errors.Is(err, engine.ErrBusy) {
		t.Errorf("second Drive = %v, want ErrBusy", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the second drive waited %v", d)
	}
	cancel(engine.ErrCancelled)
	<-done
}
