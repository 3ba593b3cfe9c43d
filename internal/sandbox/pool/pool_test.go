package pool_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

func backend(t *testing.T) *linux.Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(t.TempDir(), "run")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitIdle waits until the pool holds n idle sandboxes.
func waitIdle(t *testing.T, p *pool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for p.Stats().Idle != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d idle sandboxes, want %d", p.Stats().Idle, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func echo(t *testing.T, ctx context.Context, sb sandbox.Sandbox, s string) {
	t.Helper()
	var out bytes.Buffer
	res, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "echo " + s + " > /workspace/f; cat /workspace/f"}, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 || out.String() != s+"\n" {
		t.Fatalf("echo in %s: %v %+v %q", sb.ID(), err, res, out.String())
	}
}

// TestPool: the first two creates of a spec are made by the backend; the
// pool then keeps PerSpec more ready, each handed out once, fresh (its
// workspace empty, its processes its own), and usable like any other.
func TestPool(t *testing.T) {
	ctx := ctxT(t)
	p := pool.New(backend(t), pool.Options{PerSpec: 2, Max: 4})
	defer p.Close(ctx)
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	first, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Destroy(ctx)
	echo(t, ctx, first, "first")
	time.Sleep(100 * time.Millisecond)
	if st := p.Stats(); st.Idle != 0 {
		t.Fatalf("a spec asked for once was made ahead: %+v", st)
	}
	second, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Destroy(ctx)
	waitIdle(t, p, 2)

	seen := map[string]bool{first.ID(): true, second.ID(): true}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			sb, err := p.Create(ctx, spec)
			if err != nil {
				t.Error(err)
				return
			}
			defer sb.Destroy(ctx)
			mu.Lock()
			if seen[sb.ID()] {
				t.Errorf("sandbox %s handed out twice", sb.ID())
			}
			seen[sb.ID()] = true
			mu.Unlock()
			// Fresh: nothing of another sandbox's workspace.
			if _, err := sb.Stat(ctx, "/workspace/f"); err == nil {
				t.Errorf("sandbox %s has another's file", sb.ID())
			}
			echo(t, ctx, sb, sb.ID())
		})
	}
	wg.Wait()
	st := p.Stats()
	if st.Hits < 2 || st.Hits+st.Misses != 6 {
		t.Errorf("stats %+v: want the 2 ready ones used by 6 creates", st)
	}
	// Another spec is its own class.
	other := spec
	other.Env = []string{"X=1"}
	sb, err := p.Create(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	sb.Destroy(ctx)
	if st2 := p.Stats(); st2.Misses != st.Misses+1 {
		t.Errorf("a create of another spec was not a miss: %+v", st2)
	}
}

// TestPoolBypass: a spec bound to one user (an id, a workspace directory,
// a network, a TTL) never comes from or goes into the pool.
func TestPoolBypass(t *testing.T) {
	ctx := ctxT(t)
	p := pool.New(backend(t), pool.Options{})
	defer p.Close(ctx)
	ws := t.TempDir()
	for _, spec := range []sandbox.Spec{
		{ID: sandbox.NewID()},
		{Workspace: ws},
		{TTL: time.Hour},
	} {
		if pool.Poolable(spec) {
			t.Errorf("spec %+v is poolable", spec)
		}
		sb, err := p.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if spec.ID != "" && sb.ID() != spec.ID {
			t.Errorf("id %s, want %s", sb.ID(), spec.ID)
		}
		sb.Destroy(ctx)
	}
	if pool.Poolable(sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: "/x"}) || pool.Poolable(sandbox.Spec{TrustedCAs: []byte("x")}) {
		t.Error("a proxied or CA-bearing spec is poolable")
	}
	time.Sleep(100 * time.Millisecond)
	if st := p.Stats(); st.Bypassed != 3 || st.Idle != 0 || st.Hits+st.Misses != 0 {
		t.Errorf("stats %+v", st)
	}
	// Bad specs fail as they would without the pool, and create nothing.
	if _, err := p.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{Pids: 1}}); err == nil {
		t.Error("a spec with pids 1 was accepted")
	}
	if st := p.Stats(); st.Idle != 0 {
		t.Errorf("a bad spec filled the pool: %+v", st)
	}
}

// recorder is a backend that remembers every sandbox it made.
type recorder struct {
	sandbox.Backend
	mu   sync.Mutex
	made []sandbox.Sandbox
}

func (r *recorder) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Backend.Create(ctx, spec)
	if err == nil {
		r.mu.Lock()
		r.made = append(r.made, sb)
		r.mu.Unlock()
	}
	return sb, err
}

// alive returns the one sandbox made that is still alive.
func (r *recorder) alive(t *testing.T) sandbox.Sandbox {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sandbox.Sandbox
	for _, sb := range r.made {
		select {
		case <-sb.Done():
		default:
			out = append(out, sb)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%d sandboxes alive, want the idle one only", len(out))
	}
	return out[0]
}

// other returns the sandbox r made after its first n that is not sb.
func (r *recorder) other(n int, sb sandbox.Sandbox) sandbox.Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.made[n:] {
		if o.ID() != sb.ID() {
			return o
		}
	}
	return nil
}

// count returns how many sandboxes r made.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.made)
}

// last returns the sandbox r made last.
func (r *recorder) last() sandbox.Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.made[len(r.made)-1]
}

// askTwice asks p for spec twice (each sandbox destroyed at once), which
// puts spec in demand for Options.Idle, and waits until the pool holds the
// sandbox its refill makes. A refill slower than Idle (a sandbox's start
// under load) finds the demand lapsed and destroys its sandbox: that
// round is asked again, for a minute at most. It waits on the refill's
// sandbox, not on a time.
func askTwice(t *testing.T, ctx context.Context, p *pool.Pool, rec *recorder, spec sandbox.Spec) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		for range 2 {
			sb, err := p.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			sb.Destroy(ctx)
		}
		asked := rec.count()
		for p.Stats().Idle == 0 && rec.count() == asked && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // the refill's sandbox
		}
		if rec.count() > asked {
			refill := rec.last()
			for p.Stats().Idle == 0 && time.Now().Before(deadline) {
				select {
				case <-refill.Done():
				case <-time.After(10 * time.Millisecond):
					continue
				}
				break // destroyed: the demand lapsed before the refill ended
			}
		}
		if p.Stats().Idle == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d idle sandboxes a minute after a spec was asked for twice, want 1", p.Stats().Idle)
		}
		t.Logf("the refill ended after the demand lapsed (%v): asking again", p.Stats())
	}
}

// TestPoolLifetime: an idle sandbox that died is never handed out; idle
// sandboxes of a spec no longer asked for are destroyed; Close destroys
// the rest.
func TestPoolLifetime(t *testing.T) {
	ctx := ctxT(t)
	rec := &recorder{Backend: backend(t)}
	p := pool.New(rec, pool.Options{PerSpec: 1, Idle: 1500 * time.Millisecond})
	spec := sandbox.Spec{}
	askTwice(t, ctx, p, rec, spec)

	// The idle one dies behind the pool's back: the next create skips it.
	victim := rec.alive(t)
	if err := victim.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	// Counted before the create: the refill the miss starts may end
	// before the miss's own sandbox does (under load), and be counted
	// with it.
	made := rec.count()
	next, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if next.ID() == victim.ID() {
		t.Fatalf("a dead idle sandbox was handed out")
	}
	echo(t, ctx, next, "alive")
	next.Destroy(ctx)

	// Demand lapses: the refilled idle one is destroyed (whether the
	// refill ended before the lapse, or after it, under load).
	for deadline := time.Now().Add(time.Minute); rec.count() < made+2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no refill a minute after a miss: %+v", p.Stats())
		}
	}
	idle := rec.other(made, next)
	select {
	case <-idle.Done():
	case <-time.After(time.Minute):
		t.Fatalf("idle sandbox kept a minute past the demand: %+v", p.Stats())
	}
	if st := p.Stats(); st.Idle != 0 {
		t.Errorf("stats after the demand lapsed: %+v", st)
	}

	// Close destroys what is idle, and later creates still work.
	askTwice(t, ctx, p, rec, spec)
	idle = rec.alive(t)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-idle.Done():
	default:
		t.Error("Close left an idle sandbox alive")
	}
	if st := p.Stats(); st.Idle != 0 {
		t.Errorf("Close left %+v", st)
	}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	sb.Destroy(ctx)
}

// TestPoolPrime: a primed spec has its idle sandboxes made before any
// create asks, so that the first create is a hit, and its demand does not
// lapse; a spec chosen for one user cannot be primed.
func TestPoolPrime(t *testing.T) {
	ctx := ctxT(t)
	rec := &recorder{Backend: backend(t)}
	p := pool.New(rec, pool.Options{PerSpec: 1, Max: 2, Idle: 100 * time.Millisecond})
	defer p.Close(ctx)
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	if err := p.Prime(spec); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 1)
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	echo(t, ctx, sb, "primed")
	sb.Destroy(ctx)
	if st := p.Stats(); st.Hits != 1 || st.Misses != 0 {
		t.Errorf("the first create of a primed spec: stats %+v, want one hit", st)
	}
	// Refilled, and kept past Idle: the pool's expiry runs every second
	// at the least, so after two the refill would have lapsed.
	waitIdle(t, p, 1)
	idle := rec.alive(t)
	time.Sleep(2500 * time.Millisecond)
	select {
	case <-idle.Done():
		t.Errorf("the idle sandbox of a primed spec was destroyed when its demand would have lapsed")
	default:
	}
	bound := spec
	bound.ID = "bound"
	if err := p.Prime(bound); err == nil {
		t.Errorf("Prime of a spec with an id = nil, want an error")
	}
}

// preopens is a backend whose sandboxes count their Preopen calls (and
// pass them on to the backend's).
type preopens struct{ sandbox.Backend }

type preopenCount struct {
	sandbox.Sandbox
	n atomic.Int32
}

func (c *preopenCount) Preopen() {
	c.n.Add(1)
	if o, ok := c.Sandbox.(interface{ Preopen() }); ok {
		o.Preopen()
	}
}

func (b preopens) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &preopenCount{Sandbox: sb}, nil
}

// TestPoolPreopens: what a sandbox's first command would open (Preopen)
// is opened by the pool when it makes an idle one, once, and not for a
// create it could not serve, whose caller waits for the make anyway.
func TestPoolPreopens(t *testing.T) {
	ctx := ctxT(t)
	p := pool.New(preopens{backend(t)}, pool.Options{PerSpec: 1})
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	spec := sandbox.Spec{}
	for range 2 { // a spec is in demand from its second create
		miss, err := p.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if n := miss.(*preopenCount).n.Load(); n != 0 {
			t.Errorf("a sandbox made for a waiting caller was preopened %d times", n)
		}
		miss.Destroy(ctx)
	}
	waitIdle(t, p, 1)
	hit, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer hit.Destroy(ctx)
	if st := p.Stats(); st.Hits != 1 {
		t.Fatalf("stats %+v, want a hit", st)
	}
	if n := hit.(*preopenCount).n.Load(); n != 1 {
		t.Errorf("an idle sandbox handed out was preopened %d times, want 1", n)
	}
	echo(t, ctx, hit, "preopened")
}
