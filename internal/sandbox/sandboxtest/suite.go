// Package sandboxtest is the conformance suite of sandbox.Backend: every
// backend calls Run from its own tests and must pass every case. The cases
// create real sandboxes and run real commands in them; they check the
// contract of package sandbox (streams, exit statuses, outcomes, file
// operations, workspace modes, limits, lifetime), not how a backend is built.
//
// Only tests import this package.
package sandboxtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Run runs the conformance suite against the backends newBackend returns.
// newBackend is called once per case (from the case's goroutine) and may
// register cleanups on the t it is given.
func Run(t *testing.T, newBackend func(t *testing.T) sandbox.Backend) {
	RunWith(t, newBackend, Options{})
}

// Options say how RunWith runs the suite.
type Options struct {
	// Skip maps a case's name below the suite ("Exec/TTY", or a group,
	// "Limits") to the reason it is skipped (RunSkipping).
	Skip map[string]string
	// ParallelGroups runs the groups side by side (t.Parallel per group;
	// Env, which uses t.Setenv, still runs first and alone). A backend
	// whose time goes to waiting (a pod's start, an API round trip) rather
	// than this machine's CPU gains by it; go test's -parallel bounds how
	// many cases run at once across all groups.
	ParallelGroups bool
}

// RunWith runs the conformance suite as Run does, with o.
func RunWith(t *testing.T, newBackend func(t *testing.T) sandbox.Backend, o Options) {
	if o.Skip != nil {
		next := newBackend
		newBackend = func(t *testing.T) sandbox.Backend {
			if reason, ok := skipped(t.Name(), o.Skip); ok {
				t.Skip(reason)
			}
			return next(t)
		}
	}
	s := &suite{newBackend: newBackend}
	// Cases that use t.Setenv cannot run in parallel with anything, so they
	// come first and every group below runs its own cases in parallel.
	t.Run("Env", s.testEnv)
	for _, g := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Exec", s.testExec},
		{"Concurrent", s.testConcurrent},
		{"Files", s.testFiles},
		{"Export", s.testExport},
		{"Import", s.testImport},
		{"Watch", s.testWatch},
		{"Events", s.testEvents},
		{"Checkpoint", s.testCheckpoint},
		{"Workspace", s.testWorkspace},
		{"Limits", s.testLimits},
		{"Lifetime", s.testLifetime},
		{"Network", s.testNetwork},
		{"Connect", s.testConnect},
		{"Many", s.testMany},
	} {
		t.Run(g.name, func(t *testing.T) {
			// Many (50 sandboxes, 8 at a time) runs alone, before the
			// parallel groups start (they wait for this function to
			// return): beside them it pushed the test cluster's pod
			// starts past the suite's 60 s bound under load.
			if o.ParallelGroups && g.name != "Many" {
				t.Parallel()
			}
			g.run(t)
		})
	}
}

type suite struct {
	newBackend func(t *testing.T) sandbox.Backend
}

// opTimeout bounds every single sandbox operation of the suite, so a broken
// backend fails a case instead of hanging the whole test binary.
const opTimeout = 60 * time.Second

// create makes a sandbox from spec and destroys it when the test ends.
func (s *suite) create(t *testing.T, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	return Create(t, s.newBackend(t), spec)
}

// Create makes a sandbox from spec with b (DefaultLimits when spec sets no
// limit) and destroys it when the test ends. A Create that ignores its
// context fails the test instead of hanging it. Backend tests outside the
// suite use it too.
func Create(t *testing.T, b sandbox.Backend, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	if spec.Limits == (sandbox.Limits{}) {
		spec.Limits = sandbox.DefaultLimits
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	type created struct {
		sb  sandbox.Sandbox
		err error
	}
	// Create runs on its own goroutine so that a backend that ignores its
	// context fails the case instead of hanging the test binary.
	c := make(chan created, 1)
	go func() {
		sb, err := b.Create(ctx, spec)
		c <- created{sb, err}
	}()
	var sb sandbox.Sandbox
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("Create(%+v) = %v", spec, r.err)
		}
		sb = r.sb
	case <-time.After(opTimeout + hangBound):
		t.Fatalf("Create(%+v) did not return within %v although its context ended after %v", spec, opTimeout+hangBound, opTimeout)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy(%s) = %v", sb.ID(), err)
		}
	})
	return sb
}

// opCtx returns a context for one sandbox operation.
func opCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// run runs argv in sb and returns its output and result. An error from the
// backend (not a failing command) fails the test.
func run(t *testing.T, sb sandbox.Sandbox, argv ...string) (stdout, stderr string, r sandbox.Result) {
	t.Helper()
	return runCmd(t, sb, sandbox.Command{Argv: argv})
}

// sh runs a shell script in sb.
func sh(t *testing.T, sb sandbox.Sandbox, script string) (stdout, stderr string, r sandbox.Result) {
	t.Helper()
	return runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", script}})
}

// runCmd runs c in sb, collecting output unless c has its own writers.
func runCmd(t *testing.T, sb sandbox.Sandbox, c sandbox.Command) (stdout, stderr string, r sandbox.Result) {
	t.Helper()
	var out, errb SyncBuffer
	if c.Stdout == nil {
		c.Stdout = &out
	}
	if c.Stderr == nil {
		c.Stderr = &errb
	}
	r, err := sandbox.Run(opCtx(t), sb, c)
	if err != nil {
		t.Fatalf("Run(%q) = %v (stdout %q, stderr %q)", c.Argv, err, out.String(), errb.String())
	}
	return out.String(), errb.String(), r
}

// mustSh runs a script that must exit 0 and returns its stdout.
func mustSh(t *testing.T, sb sandbox.Sandbox, script string) string {
	t.Helper()
	out, errOut, r := sh(t, sb, script)
	if r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 {
		t.Fatalf("sh -c %q: result %+v, want exit 0\nstdout: %s\nstderr: %s", script, r, out, errOut)
	}
	return out
}

// wantExit fails the test unless r is a normal exit with code.
func wantExit(t *testing.T, what string, r sandbox.Result, code int, stderr string) {
	t.Helper()
	if r.Outcome != sandbox.OutcomeExited || r.ExitCode != code {
		t.Errorf("%s: Outcome = %q, ExitCode = %d (result %+v), want %q, %d; stderr: %q",
			what, r.Outcome, r.ExitCode, r, sandbox.OutcomeExited, code, stderr)
	}
}

// SyncBuffer is a bytes.Buffer safe for a writer and a reader goroutine;
// backend tests outside the suite use it too.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes returns a copy of what was written so far.
func (b *SyncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// firstWriter records everything written and hands the first chunk, as it
// was written, to First.
type firstWriter struct {
	SyncBuffer
	once  sync.Once
	first chan []byte
}

func newFirstWriter() *firstWriter { return &firstWriter{first: make(chan []byte, 1)} }

func (w *firstWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { w.first <- bytes.Clone(p) })
	return w.SyncBuffer.Write(p)
}

// stallWriter is a countWriter whose first Write takes stall: a host slow
// to take a command's output.
type stallWriter struct {
	countWriter
	stall   time.Duration
	stalled sync.Once
}

func (w *stallWriter) Write(p []byte) (int, error) {
	w.stalled.Do(func() { time.Sleep(w.stall) })
	return w.countWriter.Write(p)
}

// countWriter counts bytes and discards them.
type countWriter struct {
	mu sync.Mutex
	n  int64
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.n += int64(len(p))
	w.mu.Unlock()
	return len(p), nil
}

func (w *countWriter) count() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// unique returns a random token for names that must not collide with
// anything else on the machine.
func unique() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// uniqueSleep returns a sleep argument that is easy to find on the host:
// a number no other process uses.
func uniqueSleep(whole int) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	frac := (int(b[0])<<16 | int(b[1])<<8 | int(b[2])) % 1000000
	return strconv.Itoa(whole) + "." + strconv.Itoa(1000000 + frac)[1:]
}

// hostProcesses returns the pids of host processes whose command line
// has arg as one of its arguments. Zombies have no command line and are
// not returned.
func hostProcesses(arg string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// HostRuns reports whether a process of this host has exactly cmdline
// as its command line (its arguments joined by single spaces): a
// sandbox's processes are the host's too, a frozen one still is.
func HostRuns(cmdline string) bool {
	ents, _ := os.ReadDir("/proc")
	want := strings.ReplaceAll(cmdline, " ", "\x00") + "\x00"
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(b) == want {
			return true
		}
	}
	return false
}

// waitFor polls cond every 50ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
