package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// The crash helper: when the test binary runs with AIRLOCK_ENGINE_CRASH
// set, it drives one run and SIGKILLs itself right after the event the
// variable names is appended ("TYPE:N", the Nth event of that type).
func init() {
	spec := os.Getenv("AIRLOCK_ENGINE_CRASH")
	if spec == "" {
		return
	}
	os.Exit(crashHelper(spec))
}

func crashHelper(spec string) int {
	typ, nth, _ := strings.Cut(spec, ":")
	n, _ := strconv.Atoi(nth)
	dir, runID := os.Getenv("AIRLOCK_ENGINE_DIR"), os.Getenv("AIRLOCK_ENGINE_RUN")
	ctx := context.Background()
	var st store.Store
	var err error
	if u := os.Getenv("AIRLOCK_ENGINE_PG"); u != "" {
		st, err = postgres.Open(ctx, u, postgres.Options{Redactor: store.NoRedaction})
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	b, err := linux.New(linux.Config{Executor: os.Getenv("AIRLOCK_ENGINE_EXEC"), StateDir: filepath.Join(dir, "run-helper")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	seen := 0
	self := syscall.SIGKILL
	ps := &pausable{Store: st}
	if os.Getenv("AIRLOCK_ENGINE_STOP") != "" {
		self = syscall.SIGSTOP // stall, as a worker that loses its CPU does
	}
	var backend sandbox.Backend = b
	if strings.HasPrefix(typ, "checkpoint.") {
		backend = &crashingBackend{Backend: b, point: typ, nth: n}
	}
	eng, err := engine.New(engine.Options{
		Store: ps, Blobs: bl, Backend: backend, LockDir: filepath.Join(dir, "locks"), LeaseTTL: time.Second,
		// A model that thinks for a while, so that the request is on
		// record before its answer: the kill lands during the call.
		WrapProvider: func(p model.Provider) model.Provider { return slowModel{p} },
		OnEvents: engine.EachEvent(func(e event.Event) {
			if string(e.Type) == typ {
				if seen++; seen == n {
					if self == syscall.SIGSTOP {
						// Stall between writes: stopped inside a SQLite
						// write transaction (a lease renewal on another
						// goroutine), the helper would hold the database's
						// one write lock, and no host could take over.
						ps.mu.Lock()
						defer ps.mu.Unlock()
					}
					_ = syscall.Kill(os.Getpid(), self)
					if self == syscall.SIGKILL {
						select {}
					}
				}
			}
		}),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	o, err := eng.Drive(ctx, runID)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 4
	}
	//nolint:forbidigo // the child process answers its parent on stdout
	fmt.Printf("helper ended with the run %s\n", o.Status)
	return 5 // never reached the kill point, or woke up after a stop
}

// crashingBackend's sandboxes SIGKILL the process during the nth
// checkpoint of the run: at "checkpoint.stream", once the sandbox's stream
// has begun to reach the checkpoint store; at "checkpoint.sent", once the
// sandbox sent all of it (the store is writing its last chunks and its
// manifest; the event is not recorded).
type crashingBackend struct {
	sandbox.Backend
	point string
	nth   int
	mu    sync.Mutex
	seen  int
}

func (b *crashingBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return crashingSandbox{Sandbox: sb, b: b}, nil
}

type crashingSandbox struct {
	sandbox.Sandbox
	b *crashingBackend
}

func (s crashingSandbox) Checkpoint(ctx context.Context, req sandbox.CheckpointRequest, w io.Writer) (sandbox.CheckpointResult, error) {
	cp := s.Sandbox.(sandbox.Checkpointer)
	if req.MarkOnly {
		return cp.Checkpoint(ctx, req, w)
	}
	s.b.mu.Lock()
	s.b.seen++
	now := s.b.seen == s.b.nth
	s.b.mu.Unlock()
	if now && s.b.point == "checkpoint.stream" {
		w = killWriter{w}
	}
	res, err := cp.Checkpoint(ctx, req, w)
	if now && s.b.point == "checkpoint.sent" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	return res, err
}

// killWriter SIGKILLs the process once it has passed on a first write.
type killWriter struct{ w io.Writer }

func (k killWriter) Write(p []byte) (int, error) {
	if _, err := k.w.Write(p); err != nil {
		return 0, err
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the process is gone
}

// pausable is a store whose writes a stalling helper can hold off: each
// write holds mu for reading, the stall holds it for writing.
type pausable struct {
	store.Store
	mu sync.RWMutex
}

func (p *pausable) UpdateRunStatus(ctx context.Context, id string, from, to event.Status) (store.Run, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.UpdateRunStatus(ctx, id, from, to)
}

func (p *pausable) Append(ctx context.Context, runID string, next int64, drafts []event.Event) ([]event.Event, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.Append(ctx, runID, next, drafts)
}

func (p *pausable) AppendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (store.Run, []event.Event, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.AppendStatus(ctx, runID, next, from, to, drafts)
}

func (p *pausable) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (store.Lease, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.AcquireLease(ctx, runID, owner, ttl)
}

func (p *pausable) RenewLease(ctx context.Context, runID, owner string, token int64, ttl time.Duration) (store.Lease, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.RenewLease(ctx, runID, owner, token, ttl)
}

func (p *pausable) ReleaseLease(ctx context.Context, runID, owner string, token int64) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.ReleaseLease(ctx, runID, owner, token)
}

func (p *pausable) PutArtifact(ctx context.Context, a store.Artifact) (store.Artifact, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.PutArtifact(ctx, a)
}

func (p *pausable) AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Store.AddLedgerEntry(ctx, e)
}

type slowModel struct{ model.Provider }

func (s slowModel) Complete(ctx context.Context, req model.Request, stream func(model.Delta)) (model.Response, error) {
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return model.Response{}, ctx.Err()
	}
	return s.Provider.Complete(ctx, req, stream)
}

// engineOn opens an engine on the files of dir, as a restarted host would.
func engineOn(t *testing.T, dir string) (*engine.Engine, *sqlite.Store, *blob.Store) {
	t.Helper()
	st, bl, b := openStack(t, dir)
	eng, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: b, LockDir: filepath.Join(dir, "locks"), LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return eng, st, bl
}

const recoveryScript = `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo one > one.txt"}
  - tool_calls:
      - name: run_command
        args: {command: "echo two >> one.txt; echo marker-%s >/dev/null; sleep 0.3; echo two > two.txt"}
      - name: read_file
        args: {path: "one.txt"}
  - tool_calls:
      - name: finish
        args: {summary: "wrote both files"}
`

// TestRecoveryAfterKill9 kills the host process at several points of a run
// and checks that a fresh process completes the run from its log: the
// chain verifies, no recorded model turn is requested again, the work of an
// incomplete step is redone exactly once in the workspace, and no process
// of the dead host's sandbox is left.
func TestRecoveryAfterKill9(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	points := []string{
		"model.request:2",       // during a model call
		"tool.started:2",        // during a command
		"tool.finished:2",       // after one of two parallel calls
		"tool.finished:3",       // results recorded, snapshot not taken
		"snapshot.taken:1",      // the workspace's start, before the first command
		"checkpoint.stream:2",   // while the first step's checkpoint streams in
		"checkpoint.sent:2",     // its chunks stored, its manifest maybe, its event not
		"snapshot.taken:3",      // between steps
		"verification.result:1", // after the checks, before the end
	}
	for _, point := range points {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			t.Cleanup(func() { _ = linux.Forget(filepath.Join(dir, "run-helper")) }) // what the killed helper left
			marker := strconv.FormatInt(time.Now().UnixNano(), 36)
			eng, st, _ := engineOn(t, dir)
			r, err := eng.Create(context.Background(), engine.Request{
				Task:   "two files",
				Config: engine.Config{Model: "script:r.yaml", Runtime: os.Getenv(testRuntimeEnv), Checks: engine.Checks{Commands: []string{"test \"$(cat one.txt)\" = \"$(printf 'one\\ntwo')\" && test -f two.txt"}}},
				Script: []byte(fmt.Sprintf(recoveryScript, marker)),
			})
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "AIRLOCK_ENGINE_CRASH="+point, "AIRLOCK_ENGINE_DIR="+dir,
				"AIRLOCK_ENGINE_RUN="+r.ID, "AIRLOCK_ENGINE_EXEC="+executorPath)
			out, err := cmd.CombinedOutput()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("helper did not die at %s: %v\n%s", point, err, out)
			}
			// The dead host's sandbox died with it (its executor has
			// the parent-death signal; its PID namespace goes with it).
			deadline := time.Now().Add(time.Minute)
			for procsWith("marker-"+marker) > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if n := procsWith("marker-" + marker); n > 0 {
				t.Errorf("%d processes of the killed host's sandbox survive", n)
			}
			before, _ := eng.Events(context.Background(), r.ID)
			o, err := eng.Drive(ctxT(t, 2*time.Minute), r.ID)
			if err != nil {
				t.Fatalf("Drive after the crash = %v", err)
			}
			if o.Status != event.StatusCompleted {
				t.Fatalf("status = %s (%s) %+v", o.Status, o.Reason, o.Verification)
			}
			if _, err := store.VerifyRun(context.Background(), st, r.ID); err != nil {
				t.Fatalf("chain: %v", err)
			}
			evs, _ := eng.Events(context.Background(), r.ID)
			wantRuntime(t, evs)
			// Each step's model turn is recorded once; a turn recorded
			// before the crash was not requested again.
			steps := map[int]int{}
			for _, e := range evs {
				if e.Type == event.TypeModelResponse {
					var p event.ModelResponse
					_ = json.Unmarshal(e.Payload, &p)
					steps[p.Step]++
				}
			}
			if len(steps) != 3 || steps[1] != 1 || steps[2] != 1 || steps[3] != 1 {
				t.Errorf("model responses per step = %v", steps)
			}
			reqBefore, reqAfter := count(before, event.TypeModelRequest), count(evs, event.TypeModelRequest)-count(before, event.TypeModelRequest)
			respBefore := count(before, event.TypeModelResponse)
			if reqBefore > respBefore+1 || reqAfter != 3-respBefore {
				t.Errorf("model requests: %d before the crash (%d answered), %d after", reqBefore, respBefore, reqAfter)
			}
			if count(evs[len(before):], event.TypeRunResumed) != 1 {
				t.Errorf("no run.resumed after the crash: %v", types(evs[len(before):]))
			}
		})
	}
}

// procsWith counts processes whose command line contains s.
func procsWith(s string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(b), s) && !strings.Contains(string(b), "AIRLOCK_ENGINE") {
			n++
		}
	}
	return n
}

// lossyBackend lets a test destroy a run's sandbox behind the engine's back,
// as a TTL, an OOM kill of the executor or a dead machine would.
type lossyBackend struct {
	sandbox.Backend
	mu  sync.Mutex
	sbs []sandbox.Sandbox
}

func (b *lossyBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err == nil {
		b.mu.Lock()
		b.sbs = append(b.sbs, sb)
		b.mu.Unlock()
	}
	return sb, err
}

func (b *lossyBackend) killLatest() {
	b.mu.Lock()
	sb := b.sbs[len(b.sbs)-1]
	b.mu.Unlock()
	_ = sb.Destroy(context.Background())
}

func TestSandboxLostMidCommand(t *testing.T) {
	var lb *lossyBackend
	h := newHarness(t, func(o *engine.Options) {
		lb = &lossyBackend{Backend: o.Backend}
		o.Backend = lb
	})
	script := `
turns:
  - tool_calls:
      - name: write_file
        args: {path: "kept.txt", content: "saved\n"}
  - tool_calls:
      - name: run_command
        args: {command: "echo lost > lost.txt; sleep 600"}
  - tool_calls:
      - name: run_command
        args: {command: "cat kept.txt; ls"}
  - tool_calls:
      - name: finish
        args: {summary: "survived"}
`
	r := h.start("survive", script, engine.Config{})
	done := make(chan engine.Outcome, 1)
	go func() {
		o, err := h.eng.Drive(ctxT(t, 2*time.Minute), r.ID)
		if err != nil {
			t.Errorf("Drive = %v", err)
		}
		done <- o
	}()
	waitForN(t, h, r.ID, event.TypeToolStarted, 2)
	time.Sleep(300 * time.Millisecond)
	lb.killLatest()
	o := <-done
	if o.Status != event.StatusCompleted {
		t.Fatalf("status = %s (%s)", o.Status, o.Reason)
	}
	fin := h.finished(r.ID)
	if len(fin) != 4 {
		t.Fatalf("%d results", len(fin))
	}
	if f := fin[1]; !f.IsError || f.Outcome != string(sandbox.OutcomeLost) || f.ExitCode != nil || !strings.Contains(f.Output, "was lost") {
		t.Errorf("the lost call's result = %+v", f)
	}
	if f := fin[2]; !strings.Contains(f.Output, "saved") || strings.Contains(f.Output, "lost.txt") {
		t.Errorf("after restore: %q", f.Output)
	}
	evs := h.verifyLog(r.ID)
	if count(evs, event.TypeSandboxLost) != 1 || count(evs, event.TypeSandboxProvisioned) != 2 {
		t.Errorf("log: %v", types(evs))
	}
}

func waitForN(t *testing.T, h *harness, id string, typ event.Type, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		evs, err := h.eng.Events(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if count(evs, typ) >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("fewer than %d %s events in a minute", n, typ)
}

// TestStalledDriverIsFencedOut: a host process that stalls (SIGSTOP) past
// its lease while driving a run loses it to another process (here, of
// another host: no shared lock directory), which completes the run; when
// the stalled one wakes up (SIGCONT) it cannot write a single event.
func TestStalledDriverIsFencedOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	dir := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(filepath.Join(dir, "run-helper")) }) // what the killed helper left
	eng0, st, bl := engineOn(t, dir)
	r, err := eng0.Create(context.Background(), engine.Request{
		Task:   "two files",
		Config: engine.Config{Model: "script:r.yaml", Checks: engine.Checks{Commands: []string{"test -f two.txt"}}},
		Script: []byte(fmt.Sprintf(recoveryScript, "stall")),
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AIRLOCK_ENGINE_CRASH=tool.started:2", "AIRLOCK_ENGINE_STOP=1", "AIRLOCK_ENGINE_DIR="+dir,
		"AIRLOCK_ENGINE_RUN="+r.ID, "AIRLOCK_ENGINE_EXEC="+executorPath)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }()
	// Wait until it has stopped itself, then past its lease.
	deadline := time.Now().Add(time.Minute)
	for !stopped(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the helper never stopped\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run-other")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: b, LeaseTTL: time.Second, Owner: "other-host:1"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := other.Drive(ctxT(t, time.Minute), r.ID)
	if err != nil || o.Status != event.StatusCompleted {
		t.Fatalf("the other host's drive: %v %s (%s)", err, o.Status, o.Reason)
	}
	final, _ := st.GetRun(context.Background(), r.ID)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Wait()
	if n, err := store.VerifyRun(context.Background(), st, r.ID); err != nil || n != final.LastSeq {
		t.Fatalf("after the stalled driver woke up: %d events (was %d), %v\n%s", n, final.LastSeq, err, out.String())
	}
	after, _ := st.GetRun(context.Background(), r.ID)
	t.Logf("the stalled driver, woken up: %s", strings.TrimSpace(out.String()))
	if after.LastSeq != final.LastSeq || after.Status != event.StatusCompleted {
		t.Errorf("the stalled driver wrote after waking up: seq %d -> %d, status %s\n%s", final.LastSeq, after.LastSeq, after.Status, out.String())
	}
}

// stopped reports whether process pid is in the stopped state.
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}

// TestWorkerKilledOnPostgres: a worker driving a run on PostgreSQL is
// killed mid-command; another worker, sharing only the database and the
// blob directory, takes the run over once the dead one's lease expires
// and completes it with a gap-free, verifying chain.
func TestWorkerKilledOnPostgres(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	ctx := context.Background()
	srv, err := pgtest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	u := srv.URL("postgres")
	st, err := postgres.Open(ctx, u, postgres.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dir := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(filepath.Join(dir, "run-helper")) }) // what the killed helper left
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run-b")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: b, LeaseTTL: time.Second, Owner: "worker-b:1"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := other.Create(ctx, engine.Request{
		Task:   "two files",
		Config: engine.Config{Model: "script:r.yaml", Checks: engine.Checks{Commands: []string{"test -f two.txt"}}},
		Script: []byte(fmt.Sprintf(recoveryScript, "pg")),
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AIRLOCK_ENGINE_CRASH=tool.started:2", "AIRLOCK_ENGINE_PG="+u, "AIRLOCK_ENGINE_DIR="+dir,
		"AIRLOCK_ENGINE_RUN="+r.ID, "AIRLOCK_ENGINE_EXEC="+executorPath)
	out, _ := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("worker a did not die: %s", out)
	}
	// Worker b is refused while a's lease lives, then takes over.
	var o engine.Outcome
	deadline := time.Now().Add(time.Minute)
	for {
		o, err = other.Drive(ctxT(t, time.Minute), r.ID)
		if !errors.Is(err, engine.ErrBusy) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || o.Status != event.StatusCompleted {
		t.Fatalf("worker b: %v, %s (%s)", err, o.Status, o.Reason)
	}
	if _, err := store.VerifyRun(ctx, st, r.ID); err != nil {
		t.Fatal(err)
	}
	got, _ := st.GetRun(ctx, r.ID)
	if got.LeaseToken != 2 {
		t.Errorf("lease token %d, want 2 (a's, then b's)", got.LeaseToken)
	}
}

// TestThreeWorkersShareRuns: three engines (three owners, as three hosts)
// on one PostgreSQL database drive six queued runs; each run is driven
// exactly once, and the work spreads across the workers.
func TestThreeWorkersShareRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	ctx := context.Background()
	srv, err := pgtest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	u := srv.URL("postgres")
	dir := t.TempDir()
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var engines []*engine.Engine
	var mu sync.Mutex
	started := map[string][]int{} // run -> the workers that started it
	for i := range 3 {
		st, err := postgres.Open(ctx, u, postgres.Options{Redactor: store.NoRedaction})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, fmt.Sprintf("run-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		e, err := engine.New(engine.Options{
			Store: st, Blobs: bl, Backend: b, LeaseTTL: 2 * time.Second, Owner: fmt.Sprintf("host-%d:1", i),
			OnEvents: engine.EachEvent(func(ev event.Event) {
				if ev.Type == event.TypeRunStarted {
					mu.Lock()
					started[ev.RunID] = append(started[ev.RunID], i)
					mu.Unlock()
				}
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	script := "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 0.3; echo ok\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	var ids []string
	for i := range 6 {
		r, err := engines[0].Create(ctx, engine.Request{Task: fmt.Sprintf("run %d", i), Config: engine.Config{Model: "script:s"}, Script: []byte(script)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	// Each worker tries every run; a run another worker holds is busy, and
	// one that ended only reports its outcome.
	var wg sync.WaitGroup
	for w, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, id := range ids {
				if _, err := e.Drive(ctxT(t, time.Minute), id); err != nil && !errors.Is(err, engine.ErrBusy) {
					t.Errorf("worker %d, run %s: %v", w, id, err)
				}
			}
		}()
	}
	wg.Wait()
	st := engines[0]
	workers := map[int]bool{}
	for _, id := range ids {
		evs, err := st.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := count(evs, event.TypeRunStarted); n != 1 {
			t.Errorf("run %s started %d times", id, n)
		}
		if count(evs, event.TypeRunCompleted) != 1 {
			t.Errorf("run %s did not complete: %v", id, types(evs))
		}
		if len(started[id]) != 1 {
			t.Errorf("run %s started by workers %v", id, started[id])
		}
		for _, w := range started[id] {
			workers[w] = true
		}
	}
	if len(workers) < 2 {
		t.Errorf("the runs did not spread: started by %v", started)
	}
}
