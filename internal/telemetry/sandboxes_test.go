package telemetry_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// TestSandboxesByOrigin: airlock_sandboxes counts every live sandbox
// where it is made, by the origin of the backend it came through, as
// airlock serve wires them: the pool over the native backend (pool), the
// engine's and the E2B API's over the pool (run, e2b). A sandbox the pool
// made and handed out counts once, under the origin it went to; one that
// is destroyed, or ends by itself, no longer counts.
func TestSandboxesByOrigin(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	native, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(t.TempDir(), "run")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = native.Close() })
	m := telemetry.NewMetrics(nil, nil)
	p := pool.New(m.Sandboxes(telemetry.OriginPool, native), pool.Options{PerSpec: 1, Max: 1, RefillDelay: time.Millisecond})
	defer p.Close(context.Background())
	runs, e2b := m.Sandboxes(telemetry.OriginRun, p), m.Sandboxes(telemetry.OriginE2B, p)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	counts := func() map[string]float64 {
		t.Helper()
		out := map[string]float64{}
		for _, o := range []string{telemetry.OriginRun, telemetry.OriginE2B, telemetry.OriginPool} {
			n, ok := sample(t, m.Registry(), "airlock_sandboxes", "origin", o)
			if !ok {
				t.Fatalf("airlock_sandboxes{origin=%q} is missing", o)
			}
			out[o] = n
		}
		return out
	}
	check := func(when string, run, e2bs, idle float64) {
		t.Helper()
		if got := counts(); got[telemetry.OriginRun] != run || got[telemetry.OriginE2B] != e2bs || got[telemetry.OriginPool] != idle {
			t.Errorf("%s: airlock_sandboxes = %v, want run %v, e2b %v, pool %v", when, got, run, e2bs, idle)
		}
	}
	create := func(b sandbox.Backend, ttl time.Duration) sandbox.Sandbox {
		t.Helper()
		sb, err := b.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{Pids: 64}, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
		return sb
	}
	check("before any sandbox", 0, 0, 0)

	first := create(e2b, 0)
	check("one E2B sandbox", 0, 1, 0)
	// The spec asked for twice: the pool makes one ahead.
	second := create(runs, 0)
	deadline := time.Now().Add(time.Minute)
	for p.Stats().Idle != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool holds %d idle sandboxes, want 1", p.Stats().Idle)
		}
		time.Sleep(10 * time.Millisecond)
	}
	check("a run's sandbox and one made ahead", 1, 1, 1)
	// Handed out: the idle one is now the E2B API's. The pool may make
	// another meanwhile; closing it destroys that one.
	hits := p.Stats().Hits
	third := create(e2b, 0)
	if p.Stats().Hits != hits+1 {
		t.Fatalf("the third sandbox did not come from the pool (%+v)", p.Stats())
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	check("the idle one handed out", 1, 2, 0)

	if err := second.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	check("the run's sandbox destroyed", 0, 2, 0)
	for _, sb := range []sandbox.Sandbox{first, third} {
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check("every sandbox destroyed", 0, 0, 0)

	// One that ends by itself (its TTL), with no Destroy from anyone, no
	// longer counts either: Done says it is gone.
	short := create(e2b, time.Second)
	check("a sandbox with a TTL", 0, 1, 0)
	select {
	case <-short.Done():
	case <-ctx.Done():
		t.Fatalf("sandbox %s lives on past its TTL", short.ID())
	}
	check("past its TTL", 0, 0, 0)
}
