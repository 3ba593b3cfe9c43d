package kube_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// BenchmarkFirstOutput: from a create to the first output of `echo hi`,
// on the kubernetes backend from a warm pool of pods and from nothing (a
// cold pod from a cached image), and on the native backend from its warm
// pool, on the same machine in the same run (bench/kube.sh runs it beside
// a bare `kubectl run` of the same image). The refill and the destroy run
// outside the timer.
//
//	go test -run=NONE -bench=FirstOutput -benchtime=10x ./internal/sandbox/kube/
func BenchmarkFirstOutput(b *testing.B) {
	ctx := context.Background()
	echo := func(b *testing.B, sb sandbox.Sandbox) {
		var out bytes.Buffer
		if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"echo", "hi"}, Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "hi\n" {
			b.Fatalf("echo: %+v %v %q", r, err, out.String())
		}
	}
	pooled := func(b *testing.B, be sandbox.Backend, spec sandbox.Spec) {
		p := pool.New(be, pool.Options{PerSpec: 1, Max: 2})
		defer p.Close(ctx)
		if err := p.Prime(spec); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			for deadline := time.Now().Add(2 * time.Minute); p.Stats().Idle < 1; {
				if time.Now().After(deadline) {
					b.Fatalf("the pool made no sandbox in two minutes: %+v", p.Stats())
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.StartTimer()
			sb, err := p.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			echo(b, sb)
			b.StopTimer()
			if p.Stats().Hits == 0 {
				b.Fatal("the create was not a pool hit")
			}
			_ = sb.Destroy(ctx)
			b.StartTimer()
		}
	}
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	b.Run("backend=native/pool", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("needs root for native sandboxes")
		}
		path, remove, err := sandboxtest.BuildExecutor()
		if err != nil {
			b.Fatal(err)
		}
		defer remove()
		be, err := linux.New(linux.Config{Executor: path, StateDir: filepath.Join(b.TempDir(), "run")})
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		pooled(b, be, spec)
	})
	if cluster == nil {
		b.Log("no cluster: set AIRLOCK_KUBECONFIG for the kubernetes cases")
		return
	}
	ns := namespace(b, cluster)
	b.Run("backend=kubernetes/pool", func(b *testing.B) {
		pooled(b, newBackend(b, cluster, ns), spec)
	})
	b.Run("backend=kubernetes/cold", func(b *testing.B) {
		be := newBackend(b, cluster, ns)
		for b.Loop() {
			sb, err := be.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			echo(b, sb)
			b.StopTimer()
			_ = sb.Destroy(ctx)
			b.StartTimer()
		}
	})
}
