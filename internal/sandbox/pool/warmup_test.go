package pool_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
)

// starts is a real backend that remembers every sandbox it made, when
// Create returned it, and every command started in it before the test
// took it over (the pool's warm-ups).
type starts struct {
	sandbox.Backend
	mu sync.Mutex
	// made is guarded by mu.
	made []*startSandbox
	// started receives each command's sandbox as the command starts.
	started chan *startSandbox
}

func newStarts(b sandbox.Backend) *starts {
	return &starts{Backend: b, started: make(chan *startSandbox, 16)}
}

func (s *starts) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := s.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	r := &startSandbox{Sandbox: sb, created: time.Now(), started: s.started}
	s.mu.Lock()
	s.made = append(s.made, r)
	s.mu.Unlock()
	return r, nil
}

type startSandbox struct {
	sandbox.Sandbox
	created time.Time
	started chan<- *startSandbox
	// handed is set once the test runs its own commands: they are not
	// recorded.
	handed atomic.Bool
	mu     sync.Mutex
	// argvs and at are guarded by mu: each recorded command and when it
	// started.
	argvs [][]string
	at    []time.Time
	// ended counts recorded commands whose Wait returned.
	ended atomic.Int64
}

func (s *startSandbox) Start(ctx context.Context, cmd sandbox.Command) (sandbox.Process, error) {
	if s.handed.Load() {
		return s.Sandbox.Start(ctx, cmd)
	}
	pr, err := s.Sandbox.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.argvs = append(s.argvs, cmd.Argv)
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	s.started <- s
	return endProcess{pr, &s.ended}, nil
}

// commands returns the commands recorded, and stops recording.
func (s *startSandbox) commands() ([][]string, []time.Time) {
	s.handed.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.argvs), slices.Clone(s.at)
}

type endProcess struct {
	sandbox.Process
	ended *atomic.Int64
}

func (p endProcess) Wait(ctx context.Context) (sandbox.Result, error) {
	defer p.ended.Add(1)
	return p.Process.Wait(ctx)
}

func runscOrSkip(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil && os.Getenv(linux.RunscEnv) == "" {
		t.Skip("gvisor runtime: runsc is not installed (scripts/runsc.sh build; AIRLOCK_RUNSC)")
	}
}

// waitWarm waits until the pool holds n warm idle sandboxes.
func waitWarm(t *testing.T, p *pool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for p.Stats().Warm != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d warm idle sandboxes, want %d: %+v", p.Stats().Warm, n, p.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sh runs script in sb and returns its output.
func sh(t *testing.T, ctx context.Context, sb sandbox.Sandbox, script string) string {
	t.Helper()
	var out bytes.Buffer
	res, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s in %s: %v %+v %q", script, sb.ID(), err, res, out.String())
	}
	return out.String()
}

// trace is what a user could see of what ran in a sandbox before it was
// handed out: the files in its writable places, the processes in it, and
// the lines of its event channel.
func trace(t *testing.T, ctx context.Context, sb sandbox.Sandbox) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range []string{"/workspace", "/tmp"} {
		fs, err := sb.List(ctx, dir)
		if err != nil {
			t.Fatalf("list %s in %s: %v", dir, sb.ID(), err)
		}
		for _, f := range fs {
			b.WriteString(dir + "/" + f.Name + "\n")
		}
	}
	// Every process but the shell that looks and its own children.
	b.WriteString(sh(t, ctx, sb, `for p in /proc/[0-9]*; do [ "${p#/proc/}" = $$ ] || [ "$(cut -d' ' -f4 $p/stat 2>/dev/null)" = $$ ] || echo "process $(cat $p/comm 2>/dev/null)"; done | sort`))
	es, ok := sb.(sandbox.EventSource)
	if !ok {
		t.Fatalf("sandbox %s has no event channel", sb.ID())
	}
	lines, drain, err := es.Events(ctx)
	if err != nil {
		t.Fatalf("events of %s: %v", sb.ID(), err)
	}
	drain()
	for l := range lines {
		if l.Drops != nil && *l.Drops == (sandbox.EventDrops{}) {
			continue
		}
		b.WriteString("event " + string(l.Line) + "\n")
	}
	return b.String()
}

// TestWarmUp: the pool warms its sandboxes before it counts them warm (on
// gvisor by default, after gVisor's clock had time to be calibrated;
// natively when asked), hands a warm one out as a hit, and the warm-up
// leaves nothing a user could see: no file, no process, no event; the
// sandbox looks as one the backend made and nothing ran in.
func TestWarmUp(t *testing.T) {
	def := pool.DefaultWarmUp()[sandbox.RuntimeGVisor]
	for _, tt := range []struct {
		runtime string
		warmUp  map[string]pool.WarmUp // nil: the default
		settle  time.Duration
	}{
		{sandbox.RuntimeNative, map[string]pool.WarmUp{sandbox.RuntimeNative: {Argv: def.Argv}}, 0},
		{sandbox.RuntimeGVisor, nil, def.Settle},
	} {
		t.Run(tt.runtime, func(t *testing.T) {
			if tt.runtime == sandbox.RuntimeGVisor {
				runscOrSkip(t)
			}
			ctx := ctxT(t)
			be := backend(t)
			rec := newStarts(be)
			p := pool.New(rec, pool.Options{PerSpec: 1, Max: 1, WarmUp: tt.warmUp})
			defer p.Close(ctx)
			spec := sandbox.Spec{Runtime: tt.runtime, Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
			if err := p.Prime(spec); err != nil {
				t.Fatal(err)
			}
			waitWarm(t, p, 1)
			before := p.Stats()
			sb, err := p.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(ctx)
			st := p.Stats()
			if st.Hits != before.Hits+1 || st.Cold != before.Cold || st.Misses != before.Misses {
				t.Errorf("a create with a warm sandbox idle: stats %+v, want one more hit, not cold (before %+v)", st, before)
			}
			ws := sb.(*startSandbox)
			argvs, at := ws.commands()
			if len(argvs) != 1 || !slices.Equal(argvs[0], def.Argv) {
				t.Fatalf("commands run in the sandbox before its hand-out: %q, want one %q (the warm-up)", argvs, def.Argv)
			}
			if after := at[0].Sub(ws.created); after < tt.settle {
				t.Errorf("warm-up ran %v after the sandbox was ready, want at least %v", after, tt.settle)
			}
			if ws.ended.Load() != 1 {
				t.Errorf("the warm-up had not ended when the sandbox was handed out")
			}
			fresh, err := be.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Destroy(ctx)
			if got, want := trace(t, ctx, ws.Sandbox), trace(t, ctx, fresh); got != want {
				t.Errorf("a warmed sandbox shows\n%s\nwant what one nothing ran in shows\n%s", got, want)
			}
			echo(t, ctx, sb, "warm")
		})
	}
}

// TestWarmUpNotYet: a create that finds no warm sandbox is served all the
// same: by an idle one whose warm-up is not due yet, at once (cold), and
// not by a new sandbox.
func TestWarmUpNotYet(t *testing.T) {
	ctx := ctxT(t)
	rec := newStarts(backend(t))
	p := pool.New(rec, pool.Options{PerSpec: 1, Max: 1, WarmUp: map[string]pool.WarmUp{
		sandbox.RuntimeNative: {Settle: time.Hour, Argv: []string{"/bin/sh", "-c", ":"}},
	}})
	defer p.Close(ctx)
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	if err := p.Prime(spec); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, p, 1)
	if st := p.Stats(); st.Warm != 0 {
		t.Fatalf("stats %+v: a sandbox is warm before its warm-up", st)
	}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if st := p.Stats(); st.Hits != 1 || st.Cold != 1 || st.Misses != 0 {
		t.Errorf("stats %+v: want one hit, cold, no miss", st)
	}
	if argvs, _ := sb.(*startSandbox).commands(); len(argvs) != 0 {
		t.Errorf("commands run in a sandbox handed out before its warm-up: %q", argvs)
	}
	echo(t, ctx, sb, "cold")
}

// TestWarmUpWaited: a create that finds the only idle sandbox in its
// warm-up gets that one once the warm-up has ended (never a sandbox with
// the pool's command still in it), as a hit.
func TestWarmUpWaited(t *testing.T) {
	ctx := ctxT(t)
	rec := newStarts(backend(t))
	// The warm-up waits for the test's go-ahead.
	p := pool.New(rec, pool.Options{PerSpec: 1, Max: 1, WarmUp: map[string]pool.WarmUp{
		sandbox.RuntimeNative: {Argv: []string{"/bin/sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.02; done; rm /tmp/go"}},
	}})
	defer p.Close(ctx)
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	if err := p.Prime(spec); err != nil {
		t.Fatal(err)
	}
	var warming *startSandbox
	select {
	case warming = <-rec.started:
	case <-ctx.Done():
		t.Fatal("no warm-up started")
	}
	type created struct {
		sb    sandbox.Sandbox
		ended int64
		err   error
	}
	got := make(chan created, 1)
	go func() {
		sb, err := p.Create(ctx, spec)
		var ended int64
		if err == nil {
			ended = sb.(*startSandbox).ended.Load()
		}
		got <- created{sb, ended, err}
	}()
	if err := warming.WriteFile(ctx, "/tmp/go", strings.NewReader(""), 0o644); err != nil {
		t.Fatal(err)
	}
	c := <-got
	if c.err != nil {
		t.Fatal(c.err)
	}
	defer c.sb.Destroy(ctx)
	if c.sb != sandbox.Sandbox(warming) {
		t.Errorf("create got %s, want %s, the sandbox in its warm-up", c.sb.ID(), warming.ID())
	}
	if c.ended != 1 {
		t.Errorf("the sandbox was handed out before its warm-up ended")
	}
	if st := p.Stats(); st.Hits != 1 || st.Cold != 0 || st.Misses != 0 {
		t.Errorf("stats %+v: want one hit, not cold, no miss", st)
	}
	warming.handed.Store(true)
	echo(t, ctx, c.sb, "waited")
}
