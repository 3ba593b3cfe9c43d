package linux_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

func benchBackend(b *testing.B) *linux.Backend {
	if os.Geteuid() != 0 {
		b.Skip("needs root to create sandboxes")
	}
	be, err := linux.New(linux.Config{Executor: executorPath, StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() }) // after the sandboxes' cleanups
	return be
}

// BenchmarkCreateExecDestroy is the cold path of one sandboxed command.
func BenchmarkCreateExecDestroy(b *testing.B) {
	be := benchBackend(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sb, err := be.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
		if err != nil {
			b.Fatal(err)
		}
		if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || r.ExitCode != 0 {
			b.Fatalf("run: %+v %v", r, err)
		}
		_ = sb.Destroy(ctx)
	}
}

// BenchmarkCreateExecDestroyWorkspace is the same with a host workspace, as
// every agent run has: the workspace is an id-mapped, copy-on-write mount.
func BenchmarkCreateExecDestroyWorkspace(b *testing.B) {
	be := benchBackend(b)
	ctx := context.Background()
	ws := b.TempDir()
	if err := os.WriteFile(ws+"/f", []byte("x"), 0o644); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		sb, err := be.Create(ctx, sandbox.Spec{Workspace: ws, Limits: sandbox.DefaultLimits})
		if err != nil {
			b.Fatal(err)
		}
		if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || r.ExitCode != 0 {
			b.Fatalf("run: %+v %v", r, err)
		}
		_ = sb.Destroy(ctx)
	}
}

// BenchmarkExec is one tool call: a command through the protocol into a
// running sandbox. Compare with BenchmarkForkExec.
func BenchmarkExec(b *testing.B) { benchExec(b, 0) }

// benchExec runs /bin/true in one running sandbox for each round, after an
// untimed pause when pause is not 0.
func benchExec(b *testing.B, pause time.Duration) {
	be := benchBackend(b)
	ctx := context.Background()
	sb, err := be.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	b.ReportAllocs()
	for b.Loop() {
		if pause > 0 {
			b.StopTimer()
			time.Sleep(pause)
			b.StartTimer()
		}
		if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || r.ExitCode != 0 {
			b.Fatalf("run: %+v %v", r, err)
		}
	}
}

// firstExecPause is how long BenchmarkFirstExec leaves a sandbox before
// its first command, as a pool's sandbox waits for its caller.
var firstExecPause = 50 * time.Millisecond

// BenchmarkFirstExec is the first command of a sandbox made beforehand:
// what a warm `sandbox run`, handed to a daemon's pool, waits for (the
// executor's and the host's per-sandbox first-use costs included). Only
// the command is timed, not the create or the destroy.
func BenchmarkFirstExec(b *testing.B) {
	be := benchBackend(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		sb, err := be.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
		if err != nil {
			b.Fatal(err)
		}
		// As a pool's idle sandbox: preopened, and waiting for its
		// caller while whatever the start left running settles.
		if o, ok := sb.(interface{ Preopen() }); ok {
			o.Preopen()
		}
		time.Sleep(firstExecPause)
		b.StartTimer()
		r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}})
		b.StopTimer()
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("run: %+v %v", r, err)
		}
		_ = sb.Destroy(ctx)
		b.StartTimer()
	}
}

// BenchmarkForkExec is the floor: a plain fork+exec+wait of the same command.
func BenchmarkForkExec(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStartRoot is a sandbox's start (create, one command, destroy) on
// the host's read-only root and on a cached image's (the busybox test
// image, unpacked once before the loop), side by side in one run, so their
// ratio is visible:
//
//	go test -run=NONE -bench=StartRoot -count=10 ./internal/sandbox/linux/ | benchstat -col /root -
func BenchmarkStartRoot(b *testing.B) {
	be := benchBackend(b)
	ctx := context.Background()
	s := imageStore(b, filepath.Join(b.TempDir(), "images"), false, nil)
	root, err := s.Root(ctx, testImage)
	if err != nil {
		b.Fatal(err)
	}
	image := sandbox.Spec{Limits: sandbox.DefaultLimits}
	root.Apply(&image)
	for _, c := range []struct {
		name string
		spec sandbox.Spec
	}{{"root=host", sandbox.Spec{Limits: sandbox.DefaultLimits}}, {"root=image", image}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sb, err := be.Create(ctx, c.spec)
				if err != nil {
					b.Fatal(err)
				}
				if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || r.ExitCode != 0 {
					b.Fatalf("run: %+v %v", r, err)
				}
				_ = sb.Destroy(ctx)
			}
		})
	}
}

// BenchmarkExecPaused is BenchmarkExec with firstExecPause between the
// commands (untimed): against BenchmarkFirstExec, what a sandbox's first
// command costs beyond a later one after the same pause.
func BenchmarkExecPaused(b *testing.B) { benchExec(b, firstExecPause) }
