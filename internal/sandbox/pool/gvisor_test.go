package pool_test

import (
	"os/exec"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
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
