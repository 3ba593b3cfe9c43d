package pool_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
)

// markBackend is a real backend that remembers, per sandbox, whether it
// was asked for in the background, and whether it was raised.
type markBackend struct{ b sandbox.Backend }

func (m markBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := m.b.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &markSandbox{Sandbox: sb, background: sandbox.IsBackground(ctx)}, nil
}

type markSandbox struct {
	sandbox.Sandbox
	background bool
	raised     atomic.Bool
}

func (s *markSandbox) Foreground() error {
	s.raised.Store(true)
	return nil
}

// TestRefillInBackground: with Options.Background the pool makes its idle
// sandboxes, plain and warm ones, in the background (below the CPU
// priority of sandboxes in use) and raises each as it hands it out; a
// sandbox a create makes itself (a miss) is made in the foreground, and
// so is every one without the option.
func TestRefillInBackground(t *testing.T) {
	for _, background := range []bool{true, false} {
		t.Run(fmt.Sprintf("background=%v", background), func(t *testing.T) { testRefill(t, background) })
	}
}

func testRefill(t *testing.T, background bool) {
	ctx := ctxT(t)
	p := pool.New(markBackend{backend(t)}, pool.Options{PerSpec: 1, Max: 2, RefillDelay: 1, Background: background})
	defer p.Close(ctx)
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	miss, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer miss.Destroy(ctx)
	if m := miss.(*markSandbox); m.background || m.raised.Load() {
		t.Errorf("a miss's own sandbox: background %v, raised %v; want neither", m.background, m.raised.Load())
	}
	if err := p.Prime(spec); err != nil {
		t.Fatal(err)
	}
	if err := p.Warm("tpl", spec, 1, func(context.Context, sandbox.Sandbox) error { return nil }); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 2)
	hit, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer hit.Destroy(ctx)
	warm, ok := p.Take("tpl")
	if !ok {
		t.Fatal("Take(tpl) found none ready")
	}
	defer warm.Destroy(ctx)
	for name, sb := range map[string]sandbox.Sandbox{"Create's hit": hit, "Take's": warm} {
		if m := sb.(*markSandbox); m.background != background || !m.raised.Load() {
			t.Errorf("%s sandbox: made in the background %v, raised %v; want %v, true", name, m.background, m.raised.Load(), background)
		}
		echo(t, ctx, sb, "works")
	}
}
