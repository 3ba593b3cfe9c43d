package engine_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// flakyBackend fails the first n creations.
type flakyBackend struct {
	sandbox.Backend
	fail atomic.Int32
}

func (b *flakyBackend) Create(ctx context.Context, s sandbox.Spec) (sandbox.Sandbox, error) {
	if b.fail.Add(-1) >= 0 {
		return nil, errors.New("injected: no sandbox today")
	}
	return b.Backend.Create(ctx, s)
}

// TestSandboxAttempts: provisioning is tried SandboxAttempts times
// (retries.sandbox + 1), each retry recorded; when every try fails the run
// fails, naming the sandbox and the last error, and a later drive builds
// no sandbox again.
func TestSandboxAttempts(t *testing.T) {
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo hi\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	for _, tc := range []struct {
		name           string
		attempts, fail int
		want           event.Status
		retries        int
	}{
		{"default tries twice", 0, 1, event.StatusCompleted, 1},
		{"three tries", 3, 2, event.StatusCompleted, 2},
		{"no retries", 1, 1, event.StatusFailed, 0},
		{"every try fails", 3, 1000, event.StatusFailed, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fb *flakyBackend
			h := newHarness(t, func(o *engine.Options) {
				fb = &flakyBackend{Backend: o.Backend}
				fb.fail.Store(int32(tc.fail))
				o.Backend = fb
			})
			r := h.start("hi", script, engine.Config{SandboxAttempts: tc.attempts})
			o, err := h.eng.Drive(ctxT(t, time.Minute), r.ID)
			if err != nil || o.Status != tc.want {
				t.Fatalf("Drive = %s (%s), %v; want %s", o.Status, o.Reason, err, tc.want)
			}
			if n := count(h.verifyLog(o.RunID), event.TypeRetry); n != tc.retries {
				t.Errorf("%d retries recorded, want %d", n, tc.retries)
			}
			if tc.want != event.StatusFailed {
				return
			}
			if !strings.HasPrefix(o.Reason, "sandbox: sandbox main: ") || !strings.Contains(o.Reason, "injected: no sandbox today") {
				t.Errorf("reason %q, want the sandbox and the last error", o.Reason)
			}
			left := fb.fail.Load()
			if o, err := h.eng.Drive(ctxT(t, time.Minute), r.ID); err != nil || o.Status != event.StatusFailed || fb.fail.Load() != left {
				t.Errorf("a second drive of the failed run = %s, %v, and %d creations", o.Status, err, left-fb.fail.Load())
			}
		})
	}
}

// TestRestoreFails is the run: a workspace tar that cannot be
// unpacked (stored before uploads were checked, or failing for another
// reason) fails the run after the tries the policy allows, with the
// reason of the executor, which unpacks it, instead of looping retry,
// resume, retry.
func TestRestoreFails(t *testing.T) {
	h := newHarness(t)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, name := range []string{"ok.txt", "../x.txt"} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 3, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte("hi\n"))
	}
	tw.Close()
	gz.Close()
	digest, _, err := h.blobs.Put(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"cat ok.txt\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	o := h.run("read", script, engine.Config{SandboxAttempts: 3, Sandboxes: []engine.SandboxConfig{{Name: "main", Tar: digest}}})
	if o.Status != event.StatusFailed || !strings.HasPrefix(o.Reason, "sandbox: sandbox main: 3 tries failed, the last: restore snapshot "+digest+": import /workspace: entry ") ||
		!strings.Contains(o.Reason, "x.txt") {
		t.Fatalf("status %s, reason %q; want failed, naming the restore and the entry", o.Status, o.Reason)
	}
	evs := h.verifyLog(o.RunID)
	if n := count(evs, event.TypeRetry); n != 2 {
		t.Errorf("%d retries, want 2", n)
	}
	if n := count(evs, event.TypeSandboxProvisioned) + count(evs, event.TypeRunResumed); n != 0 {
		t.Errorf("%d sandboxes provisioned or resumptions, want none", n)
	}
}

// dyingExport is a backend whose sandboxes die while their workspace is
// exported, each of them.
type dyingExport struct{ sandbox.Backend }

func (b dyingExport) Create(ctx context.Context, s sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, s)
	if err != nil {
		return nil, err
	}
	return dyingSandbox{sb}, nil
}

type dyingSandbox struct{ sandbox.Sandbox }

func (s dyingSandbox) Export(ctx context.Context, _ string, _ io.Writer) error {
	_ = s.Destroy(ctx)
	return errors.New("injected: the sandbox died while exporting")
}

// TestSnapshotLostAttempts: a sandbox lost while its workspace is saved is
// replaced and saved again, as often as retries.sandbox allows; then the
// run fails, naming the loss.
func TestSnapshotLostAttempts(t *testing.T) {
	var created atomic.Int32
	h := newHarness(t, func(o *engine.Options) {
		o.Backend = counting{Backend: dyingExport{o.Backend}, n: &created}
	})
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo hi > f\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	o := h.run("write", script, engine.Config{SandboxAttempts: 3})
	if o.Status != event.StatusFailed || o.Reason != "sandbox: sandbox main: 3 tries failed, the last: lost while its workspace was saved: injected: the sandbox died while exporting" {
		t.Fatalf("status %s, reason %q; want failed for the losses", o.Status, o.Reason)
	}
	if n := created.Load(); n != 3 {
		t.Errorf("%d sandboxes created, want 3", n)
	}
	if n := count(h.verifyLog(o.RunID), event.TypeSandboxLost); n != 3 {
		t.Errorf("%d sandbox.lost recorded, want 3", n)
	}
}

// counting counts the sandboxes its backend creates.
type counting struct {
	sandbox.Backend
	n *atomic.Int32
}

func (c counting) Create(ctx context.Context, s sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := c.Backend.Create(ctx, s)
	if err == nil {
		c.n.Add(1)
	}
	return sb, err
}

// TestRecoveryAttempts: a run whose drives keep stopping before any
// progress (a host that dies at the same place each time) is recovered as
// often as its policy allows (retries.recovery), and the next recovery
// fails it before a sandbox is built.
func TestRecoveryAttempts(t *testing.T) {
	var stop atomic.Pointer[context.CancelCauseFunc]
	h := newHarness(t, func(o *engine.Options) {
		inner := o.OnEvents
		o.OnEvents = func(evs []event.Event) {
			inner(evs)
			for _, e := range evs {
				if e.Type == event.TypeToolStarted {
					if c := stop.Swap(nil); c != nil {
						(*c)(errors.New("the host stops"))
					}
				}
			}
		}
	})
	doc, err := policy.Parse([]byte("retries:\n  recovery: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.PolicyConfig(doc)
	if cfg.RecoveryAttempts != 2 {
		t.Fatalf("PolicyConfig(retries.recovery: 1).RecoveryAttempts = %d, want 2", cfg.RecoveryAttempts)
	}
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 600\"}\n"
	r := h.start("stall", script, cfg)
	for i := range 2 {
		ctx, cancel := context.WithCancelCause(ctxT(t, time.Minute))
		stop.Store(&cancel)
		o, err := h.eng.Drive(ctx, r.ID)
		cancel(nil)
		if err == nil || o.Status.Final() {
			t.Fatalf("drive %d = %s (%s), %v; want it stopped, the run left to recover", i+1, o.Status, o.Reason, err)
		}
	}
	o, err := h.eng.Drive(ctxT(t, time.Minute), r.ID)
	if err != nil || o.Status != event.StatusFailed || o.Reason != "recovery: the run was recovered 2 times in a row without progress; its policy allows 1 (retries.recovery)" {
		t.Fatalf("third drive = %s (%s), %v; want failed for its recoveries", o.Status, o.Reason, err)
	}
	evs := h.verifyLog(r.ID)
	last := 0
	for i, e := range evs {
		if e.Type == event.TypeRunResumed {
			last = i
		}
	}
	if n := count(evs[last:], event.TypeSandboxProvisioned); n != 0 || count(evs, event.TypeRunResumed) != 2 {
		t.Errorf("the failing recovery provisioned %d sandboxes; %d recoveries recorded, want 2", n, count(evs, event.TypeRunResumed))
	}
}

// TestModelAttempts: a run's model attempts reach the provider the host
// builds for it.
func TestModelAttempts(t *testing.T) {
	var got engine.ProviderSpec
	h := newHarness(t, func(o *engine.Options) {
		o.NewProvider = func(ps engine.ProviderSpec) (model.Provider, error) {
			got = ps
			return finisher{}, nil
		}
	})
	r, err := h.eng.Create(ctxT(t, time.Minute), engine.Request{Task: "t", Config: engine.Config{Model: "openai:gpt-x", BaseURL: "http://127.0.0.1:1", ModelAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := h.eng.Drive(ctxT(t, time.Minute), r.ID); err != nil || o.Status != event.StatusCompleted {
		t.Fatalf("Drive = %+v, %v", o, err)
	}
	if want := (engine.ProviderSpec{Model: "openai:gpt-x", BaseURL: "http://127.0.0.1:1", Attempts: 3}); got != want {
		t.Errorf("provider spec %+v, want %+v", got, want)
	}
	if _, err := h.eng.Create(context.Background(), engine.Request{Task: "t", Config: engine.Config{Model: "openai:gpt-x", ModelAttempts: 99}}); err == nil {
		t.Error("99 model attempts accepted")
	}
}

// finisher is a provider that finishes at once.
type finisher struct{}

func (finisher) Complete(context.Context, model.Request, func(model.Delta)) (model.Response, error) {
	return model.Response{ToolCalls: []model.ToolCall{{ID: "c1", Name: "finish", Args: []byte(`{"summary":"done"}`)}}}, nil
}

// TestWorkspaceModes: cow keeps the host directory unchanged, rw lets the
// agent's changes reach it, ro refuses them.
func TestWorkspaceModes(t *testing.T) {
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo new > /workspace/f && echo wrote\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	for _, tc := range []struct {
		mode, host, output string
	}{
		{"", "old\n", "wrote"},
		{sandbox.WorkspaceRW, "new\n", "wrote"},
		{sandbox.WorkspaceRO, "old\n", "Read-only file system"},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			h := newHarness(t)
			ws := t.TempDir()
			if err := os.WriteFile(filepath.Join(ws, "f"), []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			o := h.run("write", script, engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws, Mode: tc.mode}}})
			if o.Status != event.StatusCompleted {
				t.Fatalf("status %s (%s)", o.Status, o.Reason)
			}
			if f := h.finished(o.RunID); len(f) == 0 || !strings.Contains(f[0].Output, tc.output) {
				t.Errorf("output %+v, want %q", f, tc.output)
			}
			if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != tc.host {
				t.Errorf("host copy %q, want %q", b, tc.host)
			}
		})
	}
	h := newHarness(t)
	_, err := h.eng.Create(context.Background(), engine.Request{Task: "t", Config: engine.Config{
		Model:     "openai:x",
		Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: "/tmp", Mode: "rw"}}, Checks: engine.Checks{Changed: []string{"a"}},
	}})
	if err == nil || !strings.Contains(err.Error(), "rw") {
		t.Errorf("rw with a changed check: %v", err)
	}
}

// TestWorkspaceTar: a sandbox's workspace may start as an uploaded gzipped
// tar, unpacked inside the sandbox; a digest the blob store lacks is
// refused at creation.
func TestWorkspaceTar(t *testing.T) {
	h := newHarness(t)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	body := []byte("uploaded\n")
	if err := tw.WriteHeader(&tar.Header{Name: "src/f.txt", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	gz.Close()
	digest, _, err := h.blobs.Put(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"cat /workspace/src/f.txt && echo more >> /workspace/src/f.txt\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	o := h.run("read", script, engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Tar: digest}}})
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s)", o.Status, o.Reason)
	}
	if f := h.finished(o.RunID); len(f) == 0 || !strings.Contains(f[0].Output, "uploaded") {
		t.Errorf("output %+v", f)
	}
	// The patch is against the uploaded tree: one line added, not a new file.
	var patch string
	for _, a := range o.Artifacts {
		if a.Name == "patch.diff" {
			r, err := h.blobs.Open(context.Background(), a.Digest)
			if err != nil {
				t.Fatal(err)
			}
			patch = mustRead(t, r)
		}
	}
	if !strings.Contains(patch, "+more") || strings.Contains(patch, "new file") || strings.Contains(patch, "+uploaded") {
		t.Errorf("patch against the upload:\n%s", patch)
	}
	missing := "sha256:" + strings.Repeat("ab", 32)
	if _, err := h.eng.Create(context.Background(), engine.Request{Task: "t", Config: engine.Config{
		Model:     "openai:x",
		Sandboxes: []engine.SandboxConfig{{Name: "main", Tar: missing}},
	}}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("missing tar: %v", err)
	}
}
