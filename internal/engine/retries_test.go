package engine_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
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

// TestSandboxAttempts: provisioning is tried SandboxAttempts times, each
// retry recorded; when every try fails the drive stops with the error and
// leaves the run resumable (the host, not the run, is at fault), and a
// later drive completes it.
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
		{"no retries", 1, 1, "", 1}, // the second drive redoes the call
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
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("Drive = %+v, %v; want the provisioning error", o, err)
				}
				if got, _ := h.store.GetRun(context.Background(), r.ID); got.Status != event.StatusRunning {
					t.Fatalf("status %s, want running (resumable)", got.Status)
				}
				o, err = h.eng.Drive(ctxT(t, time.Minute), r.ID)
				tc.want = event.StatusCompleted
			}
			if err != nil || o.Status != tc.want {
				t.Fatalf("status %s (%s) %v, want %s", o.Status, o.Reason, err, tc.want)
			}
			if n := count(h.verifyLog(o.RunID), event.TypeRetry); n != tc.retries {
				t.Errorf("%d retries recorded, want %d", n, tc.retries)
			}
		})
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
	_, err := h.eng.Create(context.Background(), engine.Request{Task: "t", Config: engine.Config{Model: "openai:x",
		Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: "/tmp", Mode: "rw"}}, Checks: engine.Checks{Changed: []string{"a"}}}})
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
	if _, err := h.eng.Create(context.Background(), engine.Request{Task: "t", Config: engine.Config{Model: "openai:x",
		Sandboxes: []engine.SandboxConfig{{Name: "main", Tar: missing}}}}); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("missing tar: %v", err)
	}
}
