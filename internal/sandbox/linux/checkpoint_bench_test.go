package linux_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// benchTreeChanged is the file the delta benchmarks change
// (sandboxtest.BenchTreeChanged).
const benchTreeChanged = sandboxtest.BenchTreeChanged

var (
	benchTreeOnce sync.Once
	benchTreeDir  string
	benchTreeSize int64
	benchTreeErr  error
)

// benchTree makes the benchmarks' 1 GiB workspace once per test binary, in
// a temporary directory TestMain removes, and returns it and its size.
func benchTree(b *testing.B) (string, int64) {
	b.Helper()
	benchTreeOnce.Do(func() {
		benchTreeDir, benchTreeSize, benchTreeErr = sandboxtest.MakeBenchTree()
	})
	if benchTreeErr != nil {
		b.Fatalf("make the benchmark workspace: %v", benchTreeErr)
	}
	return benchTreeDir, benchTreeSize
}

func removeBenchTree() {
	if benchTreeDir != "" {
		_ = os.RemoveAll(benchTreeDir)
	}
}

// benchCheckpointer creates a sandbox over ws in mode and returns it as a
// Checkpointer.
func benchCheckpointer(b *testing.B, ws, mode string) (sandbox.Sandbox, sandbox.Checkpointer) {
	b.Helper()
	ctx := context.Background()
	sb, err := benchBackend(b).Create(ctx, sandbox.Spec{Workspace: ws, WorkspaceMode: mode, Limits: sandbox.DefaultLimits})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sb.Destroy(ctx) })
	return sb, sb.(sandbox.Checkpointer)
}

// BenchmarkCheckpointDelta is the checkpoint of a step that changed one
// file: in a cow workspace of about 1 GiB (20k files) against one of a
// single file (the target: at most 1.2 times as long), the same 1 GiB
// tree restored into an empty workspace (imported, as a restore or an
// upload brings it), and as an rw workspace, where the executor walks it
// with stat. Only the checkpoint is timed, not the command that changes
// the file; walked/op is the entries the sandbox's walk looked at, and
// sandbox-cpu-ms/op the sandbox's CPU time during the checkpoint.
func BenchmarkCheckpointDelta(b *testing.B) {
	b.Run("restored-1GiB", func(b *testing.B) {
		sb := benchRestored(b, sandbox.RuntimeNative)
		benchDelta(b, sb, sb.(sandbox.Checkpointer), benchTreeChanged)
	})
	cases := []struct {
		name, mode string
		ws         func(b *testing.B) (string, string)
	}{
		{"cow-1GiB", sandbox.WorkspaceCOW, func(b *testing.B) (string, string) {
			dir, _ := benchTree(b)
			return dir, benchTreeChanged
		}},
		{"cow-1file", sandbox.WorkspaceCOW, func(b *testing.B) (string, string) {
			// The same file as the large tree changes, alone.
			tree, _ := benchTree(b)
			content, err := os.ReadFile(filepath.Join(tree, benchTreeChanged))
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "f"), content, 0o644); err != nil {
				b.Fatal(err)
			}
			return dir, "f"
		}},
		{"rw-1GiB", sandbox.WorkspaceRW, func(b *testing.B) (string, string) {
			dir, _ := benchTree(b)
			// The steps write to the shared tree: put the file back.
			path := filepath.Join(dir, benchTreeChanged)
			content, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = os.WriteFile(path, content, 0o644) })
			return dir, benchTreeChanged
		}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			ws, changed := bc.ws(b)
			sb, cp := benchCheckpointer(b, ws, bc.mode)
			benchDelta(b, sb, cp, changed)
		})
	}
}

// benchRestored creates a sandbox of runtime rt with an empty workspace and
// imports the 1 GiB tree into it with checkpoint.Untar, as a restore or an
// upload does.
func benchRestored(b *testing.B, rt string) sandbox.Sandbox {
	b.Helper()
	dir, _ := benchTree(b)
	ctx := context.Background()
	mem := int64(2 << 30)
	if rt == sandbox.RuntimeGVisor {
		mem = 3 << 30 // the tree is in gVisor's memory, beside the sentry's
	}
	sb, err := benchBackend(b).Create(ctx, sandbox.Spec{Runtime: rt, Limits: sandbox.Limits{MemoryBytes: mem, Pids: 512, CPUs: 1, DiskBytes: 4 << 30}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sb.Destroy(ctx) })
	tarCmd := exec.Command("tar", "-C", dir, "-cf", "-", ".")
	out, err := tarCmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := tarCmd.Start(); err != nil {
		b.Fatal(err)
	}
	if err := checkpoint.Untar(ctx, sb, out, false); err != nil {
		b.Fatal(err)
	}
	if err := tarCmd.Wait(); err != nil {
		b.Fatal(err)
	}
	return sb
}

// benchDelta times the checkpoints of steps that each append to the file
// changed of sb's workspace.
func benchDelta(b *testing.B, sb sandbox.Sandbox, cp sandbox.Checkpointer, changed string) {
	ctx := context.Background()
	step := sandbox.Command{Argv: []string{"sh", "-c", "echo x >> /workspace/" + changed}}
	c0 := sb.(*linux.Sandbox).Usage().CPU
	mark, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{MarkOnly: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The mark a restore ends with: what it walked, and its CPU
	// (reported after the loop, whose start drops metrics).
	markCPU := sb.(*linux.Sandbox).Usage().CPU - c0
	since := mark.Baseline
	// A first step copies the file's directories up to a cow workspace's
	// upper layer; the next ones change the file alone.
	if r, err := sandbox.Run(ctx, sb, step); err != nil || r.ExitCode != 0 {
		b.Fatalf("run: %+v %v", r, err)
	}
	res, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Since: since}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	since = res.Baseline
	var w countingWriter
	var walked int64
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		if r, err := sandbox.Run(ctx, sb, step); err != nil || r.ExitCode != 0 {
			b.Fatalf("run: %+v %v", r, err)
		}
		w.n = 0
		c0 := sb.(*linux.Sandbox).Usage().CPU
		b.StartTimer()
		res, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Since: since}, &w)
		b.StopTimer()
		cpu += sb.(*linux.Sandbox).Usage().CPU - c0
		b.StartTimer()
		if err != nil || res.Full || res.Entries != 1 {
			b.Fatalf("Checkpoint = %+v, %v; want a delta of the changed file alone", res, err)
		}
		since, walked = res.Baseline, walked+res.Walked
	}
	b.ReportMetric(float64(w.n), "stream-B/op")
	b.ReportMetric(float64(walked)/float64(b.N), "walked/op")
	b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "sandbox-cpu-ms/op")
	b.ReportMetric(float64(mark.Walked), "mark-walked")
	b.ReportMetric(markCPU.Seconds()*1e3, "mark-cpu-ms")
}

// BenchmarkCheckpointFull is the first checkpoint of the 1 GiB cow
// workspace: the whole tree streamed through the protocol (MB/s is of
// file content).
func BenchmarkCheckpointFull(b *testing.B) {
	ws, size := benchTree(b)
	_, cp := benchCheckpointer(b, ws, sandbox.WorkspaceCOW)
	ctx := context.Background()
	b.SetBytes(size)
	for b.Loop() {
		res, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{}, io.Discard)
		if err != nil || !res.Full || res.Bytes != size {
			b.Fatalf("Checkpoint = %+v, %v; want the full tree, %d bytes", res, err, size)
		}
	}
}

// countingWriter counts what is written to it.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}
