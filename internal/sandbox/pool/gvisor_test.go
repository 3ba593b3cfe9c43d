package pool_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestPoolRuntimes: the runtime is part of a spec's class: a gvisor spec's
// warm sandboxes are gvisor sandboxes, and a native create of the same
// spec never gets one.
func TestPoolRuntimes(t *testing.T) {
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("gvisor runtime: runsc is not installed (scripts/ci-deps.sh installs it)")
	}
	ctx := ctxT(t)
	p := pool.New(backend(t), pool.Options{PerSpec: 1, Max: 2})
	defer p.Close(ctx)
	gv := sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	for range 2 { // the second create puts the spec in demand
		sb, err := p.Create(ctx, gv)
		if err != nil {
			t.Fatal(err)
		}
		sb.Destroy(ctx)
	}
	waitIdle(t, p, 1)
	hits := p.Stats().Hits
	warm, err := p.Create(ctx, gv)
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Destroy(ctx)
	if p.Stats().Hits != hits+1 {
		t.Errorf("the third gvisor create was not served warm: %+v", p.Stats())
	}
	if b := warm.Info().Backend; b != sandbox.RuntimeGVisor {
		t.Errorf("warm sandbox of a gvisor spec: backend %q, want gvisor", b)
	}
	echo(t, ctx, warm, "warm")
	native := gv
	native.Runtime = ""
	sb, err := p.Create(ctx, native)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if b := sb.Info().Backend; b != "linux" {
		t.Errorf("native create after gvisor ones: backend %q, want linux (native)", b)
	}
}

// BenchmarkPoolFirstOutput is create to first output from a warm pool, per
// runtime: Create (a warm sandbox handed out), one echo, its output read.
// The refill, the pool's warm-up and the destroy run outside the timer: a
// create waits until the pool holds a warm sandbox. AIRLOCK_BENCH_POOL_WARMUP
// picks the pool's warm-ups: unset the default (DefaultWarmUp), "off" none
// (the pool before warm-ups), "all" gvisor's and, natively, `/bin/sh -c :`
// at once (bench/gvisor-exec.sh's -cold and -warm rungs).
//
//	go test -run=NONE -bench=PoolFirstOutput -benchtime=5x ./internal/sandbox/pool/
func BenchmarkPoolFirstOutput(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for real sandboxes")
	}
	if _, err := exec.LookPath("runsc"); err != nil && os.Getenv(linux.RunscEnv) == "" {
		b.Skip("gvisor runtime: runsc is not installed")
	}
	be, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(b.TempDir(), "run")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	ctx := context.Background()
	type runtime struct {
		name, runtime string
		be            *linux.Backend
	}
	rts := []runtime{{"native", sandbox.RuntimeNative, be}, {"gvisor", sandbox.RuntimeGVisor, be}}
	if ref := os.Getenv("AIRLOCK_BENCH_RUNSC_REF"); ref != "" {
		// Another runsc beside the one be finds (bench/gvisor.sh).
		rb, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(b.TempDir(), "run"), Runsc: ref})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rb.Close() })
		rts = append(rts, runtime{"gvisor,ref", sandbox.RuntimeGVisor, rb})
	}
	var warmUp map[string]pool.WarmUp
	switch w := os.Getenv("AIRLOCK_BENCH_POOL_WARMUP"); w {
	case "":
	case "off":
		warmUp = map[string]pool.WarmUp{}
	case "all":
		g := pool.DefaultWarmUp()[sandbox.RuntimeGVisor]
		warmUp = map[string]pool.WarmUp{sandbox.RuntimeGVisor: g, sandbox.RuntimeNative: {Argv: g.Argv}}
	default:
		b.Fatalf("AIRLOCK_BENCH_POOL_WARMUP=%q: want off or all", w)
	}
	if a := strings.Fields(os.Getenv("AIRLOCK_BENCH_POOL_WARMUP_ARGV")); len(a) > 0 {
		// Another warm-up command, on every runtime warmed.
		if warmUp == nil {
			warmUp = pool.DefaultWarmUp()
		}
		for rt, w := range warmUp {
			w.Argv = a
			warmUp[rt] = w
		}
	}
	for _, rt := range rts {
		b.Run("runtime="+rt.name, func(b *testing.B) {
			p := pool.New(rt.be, pool.Options{PerSpec: 1, Max: 2, WarmUp: warmUp})
			defer p.Close(ctx)
			spec := sandbox.Spec{Runtime: rt.runtime, Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
			if err := p.Prime(spec); err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				for p.Stats().Warm < 1 {
					time.Sleep(5 * time.Millisecond)
				}
				b.StartTimer()
				sb, err := p.Create(ctx, spec)
				if err != nil {
					b.Fatal(err)
				}
				c0 := sandboxtest.Measured(b, sb).CPU
				var out bytes.Buffer
				if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"echo", "hi"}, Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "hi\n" {
					b.Fatalf("echo: %+v %v %q", r, err, out.String())
				}
				b.StopTimer()
				cpu += sandboxtest.Measured(b, sb).CPU - c0
				_ = sb.Destroy(ctx)
				b.StartTimer()
			}
			// The handed-out sandbox's CPU for its first command (its
			// cgroup; the refill beside it is another's).
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
