package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// harness is an engine on a real SQLite store, blob directory and sandbox
// backend, with every appended event collected.
type harness struct {
	t       *testing.T
	eng     *engine.Engine
	store   *sqlite.Store
	blobs   *blob.Store
	backend *linux.Backend
	opts    engine.Options

	mu     sync.Mutex
	events []event.Event
}

func newHarness(t *testing.T, mod ...func(*engine.Options)) *harness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	dir := t.TempDir()
	st, bl, b := openStack(t, dir)
	h := &harness{t: t, store: st, blobs: bl, backend: b}
	h.opts = engine.Options{
		Store: st, Blobs: bl, Backend: b, LockDir: filepath.Join(dir, "locks"), Poll: 50 * time.Millisecond,
		OnEvents: engine.EachEvent(func(e event.Event) {
			h.mu.Lock()
			h.events = append(h.events, e)
			h.mu.Unlock()
		}),
	}
	for _, f := range mod {
		f(&h.opts)
	}
	var err error
	h.eng, err = engine.New(h.opts)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// openStack opens what an engine runs on, in dir, as a host would: the
// SQLite store, the blob directory and the sandbox backend; they close when
// tb ends.
func openStack(tb testing.TB, dir string) (*sqlite.Store, *blob.Store, *linux.Backend) {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close(); _ = linux.Forget(filepath.Join(dir, "run")) })
	return st, bl, b
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testRuntimeEnv names the runtime the harness's runs ask for when a
// config names none; TestLifecycleGVisor runs tests again with gvisor.
const testRuntimeEnv = "AIRLOCK_TEST_RUNTIME"

// start creates a scripted run.
func (h *harness) start(task, script string, cfg engine.Config) store.Run {
	h.t.Helper()
	if cfg.Model == "" {
		cfg.Model = "script:test.yaml"
	}
	if cfg.Runtime == "" {
		cfg.Runtime = os.Getenv(testRuntimeEnv)
	}
	r, err := h.eng.Create(ctxT(h.t, time.Minute), engine.Request{Task: task, Config: cfg, Script: []byte(script)})
	if err != nil {
		h.t.Fatalf("Create = %v", err)
	}
	return r
}

// run creates and drives a scripted run to its end.
func (h *harness) run(task, script string, cfg engine.Config) engine.Outcome {
	h.t.Helper()
	r := h.start(task, script, cfg)
	o, err := h.eng.Drive(ctxT(h.t, 2*time.Minute), r.ID)
	if err != nil {
		h.t.Fatalf("Drive = %v", err)
	}
	h.verifyLog(r.ID)
	return o
}

// verifyLog checks the run's hash chain and gap-free sequence.
func (h *harness) verifyLog(id string) []event.Event {
	h.t.Helper()
	if _, err := store.VerifyRun(context.Background(), h.store, id); err != nil {
		h.t.Fatalf("VerifyRun(%s) = %v", id, err)
	}
	evs, err := h.eng.Events(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	wantRuntime(h.t, evs)
	return evs
}

// wantRuntime checks that every sandbox of evs had the runtime
// testRuntimeEnv names, if it names one.
func wantRuntime(t *testing.T, evs []event.Event) {
	t.Helper()
	rt := os.Getenv(testRuntimeEnv)
	if rt == "" {
		return
	}
	for _, e := range evs {
		if e.Type != event.TypeSandboxProvisioned {
			continue
		}
		var p event.SandboxProvisioned
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Backend != rt {
			t.Errorf("sandbox %s provisioned on %q, want %q", p.SandboxID, p.Backend, rt)
		}
	}
}

// byTool is the tool.finished events of run id by tool, in order.
func (h *harness) byTool(id string) map[string][]event.ToolFinished {
	h.t.Helper()
	out := map[string][]event.ToolFinished{}
	for _, f := range h.finished(id) {
		out[f.Tool] = append(out[f.Tool], f)
	}
	return out
}

// diedMidCall appends to r's log what a host that died during its first
// step's call of tool (started, external, without a result) left, then
// drives r again and returns how it ended.
func (h *harness) diedMidCall(r store.Run, tool string) engine.Outcome {
	h.t.Helper()
	args := json.RawMessage(`{}`)
	if _, _, err := h.store.AppendStatus(context.Background(), r.ID, r.LastSeq+1, event.StatusQueued, event.StatusRunning, mustEvents(h.t,
		event.RunStarted{Host: "dead:1"},
		event.ModelRequest{Step: 1, Provider: "script", Attempt: 1, Messages: 1},
		event.ModelResponse{Step: 1, Provider: "script", StopReason: "tool_use", ToolCalls: []event.ToolCall{{ID: "call_1_0", Name: tool, Args: args}}},
		event.ToolProposed{Step: 1, CallID: "call_1_0", Tool: tool, Args: args},
		event.PolicyDecision{Step: 1, CallID: "call_1_0", Tool: tool, Decision: "allow"},
		event.ToolStarted{Step: 1, CallID: "call_1_0", Tool: tool, Place: "host", External: true},
	)); err != nil {
		h.t.Fatal(err)
	}
	o, err := h.eng.Drive(ctxT(h.t, time.Minute), r.ID)
	if err != nil {
		h.t.Fatal(err)
	}
	return o
}

// finished returns the tool.finished payloads of run id, in order.
func (h *harness) finished(id string) []event.ToolFinished {
	h.t.Helper()
	var out []event.ToolFinished
	for _, e := range h.verifyLog(id) {
		if e.Type == event.TypeToolFinished {
			var f event.ToolFinished
			if err := json.Unmarshal(e.Payload, &f); err != nil {
				h.t.Fatal(err)
			}
			out = append(out, f)
		}
	}
	return out
}

// stepSnapshots counts the snapshots of steps: not the sandboxes' starts
// (the workspace as each was made).
func stepSnapshots(evs []event.Event) int {
	n := 0
	for _, e := range evs {
		if e.Type != event.TypeSnapshotTaken {
			continue
		}
		var s event.SnapshotTaken
		if err := json.Unmarshal(e.Payload, &s); err == nil && !s.Start {
			n++
		}
	}
	return n
}

func count(evs []event.Event, t event.Type) int {
	n := 0
	for _, e := range evs {
		if e.Type == t {
			n++
		}
	}
	return n
}

// calcRepo writes a small Python project with a failing test.
func calcRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"calc.py":      "def add(a, b):\n    return a - b\n",
		"test_calc.py": "import unittest\nimport calc\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\nif __name__ == '__main__':\n    unittest.main()\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		// Python trusts a .pyc whose source has the same size and mtime
		// second: an edit in the second the file was written would go
		// unseen, as it would anywhere.
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const fixScript = `
turns:
  - text: "Let me run the tests."
    tool_calls:
      - name: run_command
        args: {command: "python3 -m unittest -q 2>&1; echo exit=$?"}
  - tool_calls:
      - name: edit_file
        args: {path: "calc.py", old: "a - b", new: "a + b"}
  - tool_calls:
      - name: run_command
        args: {command: "python3 -m unittest -q"}
  - tool_calls:
      - name: finish
        args: {summary: "Fixed the sign error in add."}
`

func TestRunCompletesAndVerifies(t *testing.T) {
	h := newHarness(t)
	ws := calcRepo(t)
	o := h.run("fix the failing test", fixScript, engine.Config{
		Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}},
		Checks:    engine.Checks{Commands: []string{"python3 -m unittest -q"}, Changed: []string{"calc.py"}, OnlyChanged: []string{"*.py", "__pycache__/**"}},
	})
	if o.Status != event.StatusCompleted {
		t.Fatalf("status = %s (%s), want completed; checks %+v", o.Status, o.Reason, o.Verification)
	}
	if o.Steps != 4 || o.Summary != "Fixed the sign error in add." {
		t.Errorf("steps %d summary %q", o.Steps, o.Summary)
	}
	if o.Verification == nil || !o.Verification.Passed || len(o.Verification.Checks) != 3 {
		t.Errorf("verification = %+v", o.Verification)
	}
	fin := h.finished(o.RunID)
	if len(fin) != 4 || !strings.Contains(fin[0].Output, "exit=1") || fin[0].Outcome != "exited" {
		t.Errorf("first command result = %+v", fin[0])
	}
	var patch string
	for _, a := range o.Artifacts {
		if a.Name == "patch.diff" {
			r, err := h.blobs.Open(context.Background(), a.Digest)
			if err != nil {
				t.Fatal(err)
			}
			b := new(strings.Builder)
			_, _ = fmt.Fprint(b, mustRead(t, r))
			patch = b.String()
		}
	}
	if !strings.Contains(patch, "-    return a - b") || !strings.Contains(patch, "+    return a + b") {
		t.Errorf("patch = %q", patch)
	}
	// The host copy never changed.
	if b, _ := os.ReadFile(filepath.Join(ws, "calc.py")); !strings.Contains(string(b), "a - b") {
		t.Errorf("host workspace changed: %s", b)
	}
	evs := h.verifyLog(o.RunID)
	for _, typ := range []event.Type{
		event.TypeRunCreated, event.TypePolicyResolved, event.TypeRunStarted, event.TypeModelRequest,
		event.TypeModelResponse, event.TypeToolProposed, event.TypePolicyDecision, event.TypeToolStarted, event.TypeToolFinished,
		event.TypeSnapshotTaken, event.TypeSandboxProvisioned, event.TypeSandboxDestroyed, event.TypeVerificationResult,
		event.TypeArtifactStored, event.TypeRunCompleted,
	} {
		if count(evs, typ) == 0 {
			t.Errorf("no %s event", typ)
		}
	}
	// Snapshots only after steps that may change the workspace (1, 2, 3).
	if n := stepSnapshots(evs); n != 3 {
		t.Errorf("%d snapshots, want 3", n)
	}
	// Every appended event was observed, in order.
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != len(evs) {
		t.Errorf("observed %d events, log has %d", len(h.events), len(evs))
	}
}

func mustRead(t *testing.T, r interface {
	Read([]byte) (int, error)
	Close() error
},
) string {
	t.Helper()
	defer r.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("read: %v", err)
			}
			return b.String()
		}
	}
}

func TestVerificationFailure(t *testing.T) {
	h := newHarness(t)
	ws := calcRepo(t)
	script := `
turns:
  - tool_calls:
      - name: write_file
        args: {path: "notes.txt", content: "nothing fixed\n"}
  - tool_calls:
      - name: finish
        args: {summary: "All done (it is not)."}
`
	o := h.run("fix it", script, engine.Config{
		Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}},
		Checks:    engine.Checks{Commands: []string{"python3 -m unittest -q"}, Changed: []string{"calc.py"}, OnlyChanged: []string{"calc.py"}},
	})
	if o.Status != event.StatusFailedVerification {
		t.Fatalf("status = %s, want failed_verification", o.Status)
	}
	v := o.Verification
	if v == nil || v.Passed || len(v.Checks) != 3 {
		t.Fatalf("verification = %+v", v)
	}
	for _, c := range v.Checks {
		if c.Passed {
			t.Errorf("check %q passed", c.Name)
		}
	}
	if !strings.Contains(v.Checks[2].Detail, "notes.txt") {
		t.Errorf("only-changed detail = %q", v.Checks[2].Detail)
	}
	if !strings.Contains(o.Reason, "verification failed") {
		t.Errorf("reason = %q", o.Reason)
	}
}

func TestToolErrorsAndOutputCap(t *testing.T) {
	h := newHarness(t)
	script := `
turns:
  - tool_calls:
      - name: read_file
        args: {path: "missing.txt"}
      - name: run_command
        args: {command: "head -c 100000 /dev/zero | tr '\\0' x"}
      - name: no_such_tool
        args: {}
      - name: edit_file
        args: {path: 7}
  - tool_calls:
      - name: finish
        args: {summary: "done"}
`
	o := h.run("probe errors", script, engine.Config{MaxResultBytes: 1000})
	if o.Status != event.StatusCompleted {
		t.Fatalf("status = %s (%s)", o.Status, o.Reason)
	}
	fin := h.finished(o.RunID)
	byCall := map[string]event.ToolFinished{}
	for _, f := range fin {
		byCall[f.CallID] = f
	}
	if f := byCall["call_1_0"]; !f.IsError || !strings.Contains(f.Output, "missing.txt") {
		t.Errorf("read_file of a missing file = %+v", f)
	}
	if f := byCall["call_1_1"]; f.IsError || len(f.Output) > 1200 || !strings.Contains(f.Output, "bytes truncated") || !f.OutputTruncated {
		t.Errorf("capped output: len %d truncated %v: %.200q", len(f.Output), f.OutputTruncated, f.Output)
	}
	if f := byCall["call_1_2"]; !f.IsError || !strings.Contains(f.Output, "unknown tool") {
		t.Errorf("unknown tool = %+v", f)
	}
	if f := byCall["call_1_3"]; !f.IsError {
		t.Errorf("bad arguments = %+v", f)
	}
}

func TestMaxSteps(t *testing.T) {
	h := newHarness(t)
	script := "turns:\n" + strings.Repeat("  - tool_calls:\n      - name: list_dir\n        args: {path: \".\"}\n", 5)
	o := h.run("loop", script, engine.Config{MaxSteps: 3})
	if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "steps") {
		t.Fatalf("status %s reason %q, want failed for steps", o.Status, o.Reason)
	}
	if o.Steps != 3 {
		t.Errorf("steps = %d, want 3", o.Steps)
	}
	if n := count(h.verifyLog(o.RunID), event.TypeBudgetExhausted); n != 1 {
		t.Errorf("%d budget.exhausted events", n)
	}
}

func TestParallelCallsRunConcurrently(t *testing.T) {
	h := newHarness(t)
	// Each command waits until the other has started: they finish only
	// if they run at the same time (bounded by the command timeout).
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "touch /tmp/a; for i in $(seq 100); do [ -e /tmp/b ] && exit 0; sleep 0.1; done; exit 1"}
      - name: run_command
        args: {command: "touch /tmp/b; for i in $(seq 100); do [ -e /tmp/a ] && exit 0; sleep 0.1; done; exit 1"}
  - tool_calls:
      - name: finish
        args: {summary: "ran both"}
`
	o := h.run("parallel", script, engine.Config{})
	fin := h.finished(o.RunID)
	if len(fin) != 3 {
		t.Fatalf("%d results", len(fin))
	}
	for _, f := range fin[:2] {
		if f.ExitCode == nil || *f.ExitCode != 0 {
			t.Errorf("call %s did not see its sibling: %+v", f.CallID, f)
		}
	}
}

func TestSeveralSandboxes(t *testing.T) {
	h := newHarness(t)
	ws := calcRepo(t)
	script := `
turns:
  - tool_calls:
      - name: write_file
        args: {sandbox: "db", path: "/workspace/data.txt", content: "in db\n"}
      - name: run_command
        args: {command: "test ! -e /workspace/data.txt && ls /workspace"}
      - name: list_dir
        args: {sandbox: "nope", path: "."}
  - tool_calls:
      - name: run_command
        args: {sandbox: "db", command: "cat /workspace/data.txt"}
      - name: finish
        args: {summary: "two sandboxes"}
`
	o := h.run("two", script, engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}, {Name: "db"}}})
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s %s", o.Status, o.Reason)
	}
	fin := h.finished(o.RunID)
	by := map[string]event.ToolFinished{}
	for _, f := range fin {
		by[f.CallID] = f
	}
	if f := by["call_1_1"]; f.IsError || !strings.Contains(f.Output, "calc.py") || f.Sandbox != "main" {
		t.Errorf("main sees db's file or lacks its own: %+v", f)
	}
	if f := by["call_1_2"]; !f.IsError || !strings.Contains(f.Output, `no sandbox called "nope"`) {
		t.Errorf("unknown sandbox = %+v", f)
	}
	if f := by["call_2_0"]; f.Sandbox != "db" || !strings.Contains(f.Output, "in db") {
		t.Errorf("db = %+v", f)
	}
	evs := h.verifyLog(o.RunID)
	if n := count(evs, event.TypeSandboxProvisioned); n != 2 {
		t.Errorf("%d sandboxes provisioned", n)
	}
	names := map[string]bool{}
	for _, a := range o.Artifacts {
		names[a.Name] = true
	}
	if !names["patch.diff"] || !names["db.patch.diff"] {
		t.Errorf("artifacts = %v", names)
	}
}

func TestCancelKillsTheCommand(t *testing.T) {
	h := newHarness(t)
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "sleep 600"}
`
	r := h.start("wait", script, engine.Config{})
	done := make(chan engine.Outcome, 1)
	go func() {
		o, err := h.eng.Drive(ctxT(t, time.Minute), r.ID)
		if err != nil {
			t.Errorf("Drive = %v", err)
		}
		done <- o
	}()
	waitFor(t, h, r.ID, event.TypeSandboxProvisioned) // the command runs
	start := time.Now()
	if err := h.eng.Cancel(context.Background(), r.ID, "user", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.Status != event.StatusCancelled {
		t.Fatalf("status = %s", o.Status)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("cancel took %v", d)
	}
	evs := h.verifyLog(r.ID)
	if count(evs, event.TypeSandboxDestroyed) != 1 || count(evs, event.TypeRunCancelled) != 1 {
		t.Errorf("log: %v", types(evs))
	}
	if _, err := h.eng.Drive(ctxT(t, time.Minute), r.ID); err != nil {
		t.Errorf("Drive of a cancelled run = %v, want its outcome", err)
	}
	if err := h.eng.Cancel(context.Background(), r.ID, "user", ""); err == nil {
		t.Error("Cancel of a cancelled run succeeded")
	}
}

func TestInterruptCancels(t *testing.T) {
	h := newHarness(t)
	r := h.start("wait", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 600\"}\n", engine.Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan engine.Outcome, 1)
	go func() {
		o, _ := h.eng.Drive(ctx, r.ID)
		done <- o
	}()
	waitFor(t, h, r.ID, event.TypeToolStarted)
	cancel(engine.ErrCancelled)
	if o := <-done; o.Status != event.StatusCancelled {
		t.Fatalf("status = %s", o.Status)
	}
	h.verifyLog(r.ID)
}

// gate is a host directory a run's sandboxes mount read-only at /gate: a
// command that runs gateWait does not end until the test opens the gate.
// A test that stops a run while its command runs opens it only once the
// stop has landed, so the stop comes first by an event, whatever the load,
// where a sleep in the command raced it; and the command, redone after a
// resume, ends at once.
type gate string

// gateWait waits until the gate is open; timeout bounds the wait, so a
// stop that never lands ends the command (exit 124) and fails the test
// instead of hanging it.
const gateWait = `timeout 60 sh -c 'until [ -e /gate/open ]; do sleep 0.05; done'`

// newGate returns a closed gate for t.
func newGate(t *testing.T) gate { return gate(t.TempDir()) }

// mounts are what a run's Config.Mounts need for the gate.
func (g gate) mounts() []engine.Mount {
	return []engine.Mount{{Source: string(g), Target: "/gate", ReadOnly: true}}
}

// open opens the gate: the commands waiting on it end.
func (g gate) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(string(g), "open"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, h *harness, id string, typ event.Type) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		evs, err := h.eng.Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if count(evs, typ) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s event in a minute", typ)
}

func types(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Type)
	}
	return out
}

var _ = sandbox.Spec{}
