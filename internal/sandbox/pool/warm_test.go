package pool_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
)

// TestPoolWarm: Warm keeps n sandboxes made and prepared under a name;
// Take hands each out once, prepared, and the pool makes another; a name
// nothing prepared under misses; a prepare that fails keeps nothing; a new
// spec for a name replaces what was made of the old one.
func TestPoolWarm(t *testing.T) {
	ctx := ctxT(t)
	p := pool.New(backend(t), pool.Options{Max: 4})
	defer p.Close(ctx)
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	prepared := func(tag string) func(context.Context, sandbox.Sandbox) error {
		return func(ctx context.Context, sb sandbox.Sandbox) error {
			res, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "echo " + tag + " > /tmp/prepared"}})
			if err == nil && res.ExitCode != 0 {
				err = errors.New("prepare exited nonzero")
			}
			return err
		}
	}
	mark := func(sb sandbox.Sandbox) string {
		var out bytes.Buffer
		if _, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"cat", "/tmp/prepared"}, Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if _, ok := p.Take("web@v1"); ok {
		t.Fatal("Take of a name never warmed handed a sandbox out")
	}
	if err := p.Warm("web@v1", spec, 2, prepared("v1")); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 2)
	sb, ok := p.Take("web@v1")
	if !ok {
		t.Fatal("Take found nothing ready after Warm")
	}
	if got := mark(sb); got != "v1\n" {
		t.Errorf("a warm sandbox's preparation: %q, want v1", got)
	}
	echo(t, ctx, sb, "used")
	sb.Destroy(ctx)
	waitIdle(t, p, 2) // refilled
	if _, ok := p.Take("other"); ok {
		t.Error("Take handed out a sandbox prepared under another name")
	}

	// Another spec for the name: what the old one made goes.
	spec2 := spec
	spec2.Env = []string{"V=2"}
	if err := p.Warm("web@v1", spec2, 1, prepared("v2")); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 1)
	sb, ok = p.Take("web@v1")
	if !ok {
		t.Fatal("Take found nothing after the spec changed")
	}
	if got := mark(sb); got != "v2\n" {
		t.Errorf("after the spec changed, a sandbox prepared %q, want v2", got)
	}
	sb.Destroy(ctx)

	// A prepare that fails keeps nothing ready.
	if err := p.Warm("broken", spec, 1, func(context.Context, sandbox.Sandbox) error { return errors.New("not ready") }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if _, ok := p.Take("broken"); ok {
		t.Error("Take handed out a sandbox whose prepare failed")
	}
	bound := spec
	bound.ID = "bound"
	for _, bad := range []struct {
		spec sandbox.Spec
		n    int
	}{{bound, 1}, {spec, 0}, {spec, pool.MaxWarm + 1}} {
		if err := p.Warm("x", bad.spec, bad.n, prepared("x")); err == nil {
			t.Errorf("Warm(%+v, %d) = nil, want an error", bad.spec.ID, bad.n)
		}
	}
}
