package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// snapshots returns run id's snapshot payloads, in order.
func (h *harness) snapshots(id string) []event.SnapshotTaken {
	h.t.Helper()
	var out []event.SnapshotTaken
	for _, e := range h.verifyLog(id) {
		if e.Type == event.TypeSnapshotTaken {
			var s event.SnapshotTaken
			if err := json.Unmarshal(e.Payload, &s); err != nil {
				h.t.Fatal(err)
			}
			out = append(out, s)
		}
	}
	return out
}

// patchOf returns the patch artifact of outcome o.
func (h *harness) patchOf(o engine.Outcome) string {
	h.t.Helper()
	for _, a := range o.Artifacts {
		if a.Name == "patch.diff" {
			r, err := h.blobs.Open(context.Background(), a.Digest)
			if err != nil {
				h.t.Fatal(err)
			}
			return mustRead(h.t, r)
		}
	}
	h.t.Fatalf("no patch among %+v", o.Artifacts)
	return ""
}

// TestCheckpointsCostWhatChanged runs twice over one copy-on-write
// workspace of a few MB: the sandbox's start holds the whole tree, and a
// step that appends a line to one file carries that file alone, not the
// tree; the second run's start stores almost nothing new (its chunks are
// the first's). The patch, read from the checkpoints' manifests, holds the
// change and the deletion and nothing else.
func TestCheckpointsCostWhatChanged(t *testing.T) {
	h := newHarness(t)
	ws := t.TempDir()
	for i := range 40 {
		dir := filepath.Join(ws, fmt.Sprintf("pkg%02d", i%8))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64<<10)
		_, _ = rand.Read(b)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("blob%02d.bin", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "gone.txt"), []byte("bye\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo two >> notes.txt"}
  - tool_calls:
      - name: run_command
        args: {command: "rm gone.txt"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	cfg := engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}}}
	var starts []event.SnapshotTaken
	for run := range 2 {
		o := h.run("edit", script, cfg)
		if o.Status != event.StatusCompleted {
			t.Fatalf("run %d: %s (%s)", run, o.Status, o.Reason)
		}
		snaps := h.snapshots(o.RunID)
		if len(snaps) != 3 || !snaps[0].Start || snaps[0].Format != event.FormatCheckpoint {
			t.Fatalf("run %d: want a start and two steps' checkpoints: %+v", run, snaps)
		}
		start := snaps[0]
		if start.TreeBytes < 40*64<<10 || !start.Full {
			t.Errorf("run %d: the start holds %d bytes of the tree, full %v", run, start.TreeBytes, start.Full)
		}
		if step := snaps[1]; step.DeltaBytes > 64 || step.Size > 16<<10 {
			t.Errorf("run %d: appending a line carried %d bytes and stored %d: %+v", run, step.DeltaBytes, step.Size, step)
		}
		starts = append(starts, start)
		patch := h.patchOf(o)
		if !strings.Contains(patch, "+two") || !strings.Contains(patch, "-bye") || strings.Contains(patch, "blob") {
			t.Errorf("run %d: patch\n%s", run, patch)
		}
	}
	if first, second := starts[0], starts[1]; second.Size > first.Size/50 || second.SharedBytes < first.TreeBytes*99/100 {
		t.Errorf("the second run's start stored %d bytes (the first %d), shared %d of %d", second.Size, first.Size, second.SharedBytes, second.TreeBytes)
	}
}

// noCheckpoints hides a backend's sandboxes' checkpoints, as a host
// without them made runs: their snapshots are gzipped tars.
type noCheckpoints struct{ sandbox.Backend }

func (b noCheckpoints) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	return plainSandbox{sb}, err
}

type plainSandbox struct{ sandbox.Sandbox }

// TestSnapshotsOfTheOlderFormatResume drives the first steps of a run on a
// backend without checkpoints (gzipped tars, as runs recorded before them
// have), then resumes it on one with them: the tar is restored, the next
// snapshot starts a chain of checkpoints with the whole tree, and the run
// completes with the files of both.
func TestSnapshotsOfTheOlderFormatResume(t *testing.T) {
	h := newHarness(t)
	opts := h.opts
	opts.Backend = noCheckpoints{h.backend}
	old, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo before > a.txt"}
  - tool_calls:
      - name: run_command
        args: {command: "echo after > b.txt"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	r := h.start("old", script, engine.Config{Checks: engine.Checks{Commands: []string{"test \"$(cat a.txt b.txt)\" = \"$(printf 'before\\nafter')\""}}})
	done := make(chan error, 1)
	go func() { _, err := old.Drive(ctxT(t, time.Minute), r.ID); done <- err }()
	waitFor(t, h, r.ID, event.TypeToolStarted)
	old.Drain() // the first step ends, snapshotted as a tar
	if err := <-done; !errors.Is(err, engine.ErrDrained) {
		t.Fatalf("drained drive: %v", err)
	}
	before := h.snapshots(r.ID)
	if len(before) == 0 {
		t.Fatal("the drained step took no snapshot")
	}
	for _, s := range before {
		if s.Format != "" || s.Start {
			t.Fatalf("a backend without checkpoints took %+v", s)
		}
	}
	o, err := h.eng.Drive(ctxT(t, 2*time.Minute), r.ID)
	if err != nil || o.Status != event.StatusCompleted {
		t.Fatalf("resumed: %s (%s), %v", o.Status, o.Reason, err)
	}
	snaps := h.snapshots(r.ID)
	last := snaps[len(snaps)-1]
	if last.Format != event.FormatCheckpoint || last.Start {
		t.Errorf("the resumed run's last snapshot: %+v", last)
	}
	var chunked bool
	for _, s := range snaps {
		if s.Format == event.FormatCheckpoint {
			if !chunked && (!s.Full || s.Base != "") {
				t.Errorf("the first checkpoint after tars is not whole: %+v", s)
			}
			chunked = true
		}
	}
}
