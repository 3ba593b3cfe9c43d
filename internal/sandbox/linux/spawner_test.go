package linux_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// hostParent returns the parent pid of host process pid.
func hostParent(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("stat of %d: %q", pid, b)
	}
	return ppid
}

// newBackend returns a backend of executor exe, closed when t ends.
func newBackend(t *testing.T, exe string, spawner bool) *linux.Backend {
	t.Helper()
	b, err := linux.New(linux.Config{Executor: exe, StateDir: t.TempDir(), Spawner: spawner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// TestSpawnerDies: when the spawner dies (here SIGKILL), its sandboxes die
// with it and are reported lost, and the next sandbox starts a new spawner.
func TestSpawnerDies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	b := newBackend(t, executorPath, true)
	ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
	defer cancel()
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	marker := attackMarker(1007)
	attackKillLeftovers(t, marker)
	if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"sleep", marker}}); err != nil {
		t.Fatal(err)
	}
	var sleeps []int
	if !attackPoll(time.Minute, func() bool { sleeps = attackHostProcs(marker); return len(sleeps) == 1 }) {
		t.Fatalf("control: the sandboxed sleep %s is not visible on the host (pids %v)", marker, sleeps)
	}
	executor := hostParent(t, sleeps[0])
	spawner := hostParent(t, executor)
	if spawner == os.Getpid() {
		t.Fatal("the executor is a child of the test process, not of a spawner")
	}
	if got := hostParent(t, spawner); got != os.Getpid() {
		t.Fatalf("the spawner %d is a child of %d, want the test process %d", spawner, got, os.Getpid())
	}
	// The spawner's end of its socket (fd 3) is its own: no process it
	// starts may hold it and talk to it.
	sock, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", spawner))
	if err != nil || !strings.HasPrefix(sock, "socket:") {
		t.Fatalf("the spawner's fd 3 = %q, %v; want its socket", sock, err)
	}
	for _, pid := range []int{executor, sleeps[0]} {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); l == sock {
				t.Errorf("process %d holds the spawner's socket as fd %s", pid, fd.Name())
			}
		}
	}
	if err := syscall.Kill(spawner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Done():
	case <-time.After(time.Minute):
		t.Fatal("the sandbox lives on a minute after its spawner was killed")
	}
	if !attackPoll(time.Minute, func() bool { return len(attackHostProcs(marker)) == 0 }) {
		t.Errorf("sleep %s still runs after its spawner was killed", marker)
	}
	if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "lost") {
		t.Errorf("a command in the lost sandbox: %v, want it refused as lost", err)
	}
	sb2 := sandboxtest.Create(t, b, sandbox.Spec{}) // after the spawner died
	res := attackRun(t, sb2, "", "echo ok")
	if !res.ok() || strings.TrimSpace(res.stdout) != "ok" {
		t.Errorf("a command in the sandbox of the new spawner: %v", res)
	}
}

// TestCreatorThreadExits: a sandbox outlives the OS thread that created it
// (the runtime ends a thread whose goroutine exits while locked to it; a
// parent-death signal tied to that thread would kill the sandbox).
func TestCreatorThreadExits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	for _, spawner := range []bool{false, true} {
		b := newBackend(t, executorPath, spawner)
		ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
		defer cancel()
		type created struct {
			sb  sandbox.Sandbox
			err error
		}
		c := make(chan created, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			sb, err := b.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
			c <- created{sb, err}
		}()
		got := <-c
		if got.err != nil {
			t.Fatal(got.err)
		}
		defer got.sb.Destroy(context.Background())
		time.Sleep(200 * time.Millisecond) // for the thread to be gone
		select {
		case <-got.sb.Done():
			t.Fatalf("spawner %v: the sandbox ended with the thread that created it", spawner)
		default:
		}
		if res := attackRun(t, got.sb, "", "echo ok"); !res.ok() || strings.TrimSpace(res.stdout) != "ok" {
			t.Errorf("spawner %v: a command after the creating thread ended: %v", spawner, res)
		}
	}
}

// TestRelativeExecutor: an executor named relative to the working directory
// (AIRLOCK_EXEC=./airlock-exec) starts, directly and through the spawner,
// though both start their processes in /. The test runs itself again in the
// executor's directory.
func TestRelativeExecutor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if os.Getenv("AIRLOCK_TEST_RELATIVE") == "" {
		t.Parallel()
		cmd := exec.Command(os.Args[0], "-test.run=^TestRelativeExecutor$", "-test.v")
		cmd.Dir = filepath.Dir(executorPath)
		cmd.Env = append(os.Environ(), "AIRLOCK_TEST_RELATIVE=1", prebuiltExecutorEnv+"="+executorPath)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS: TestRelativeExecutor") {
			t.Fatalf("in %s: %v\n%s", cmd.Dir, err, out)
		}
		return
	}
	rel := "./" + filepath.Base(executorPath)
	for _, spawner := range []bool{false, true} {
		sb := sandboxtest.Create(t, newBackend(t, rel, spawner), sandbox.Spec{})
		if res := attackRun(t, sb, "", "echo ok"); !res.ok() || strings.TrimSpace(res.stdout) != "ok" {
			t.Errorf("spawner %v: %v", spawner, res)
		}
	}
}

// TestExecutorEnv: the executor (PID 1), started directly or through the
// spawner, has exactly execproto.ExecutorEnv for its environment, and no
// command it runs inherits any of it.
func TestExecutorEnv(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	for _, spawner := range []bool{false, true} {
		t.Run(fmt.Sprintf("spawner=%v", spawner), func(t *testing.T) {
			t.Parallel()
			sb := sandboxtest.Create(t, newBackend(t, executorPath, spawner), sandbox.Spec{})
			// From the host: inside, not even root may read PID 1's
			// environment (the executor is not dumpable).
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", linux.ExecutorPID(sb.(*linux.Sandbox))))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), execproto.ExecutorEnv; !slices.Equal(got, want) {
				t.Errorf("the executor's environment: %q, want %q", got, want)
			}
			for _, user := range []string{"", "root"} {
				res := attackRun(t, sb, user, `env; tr '\0' '\n' < /proc/self/environ`)
				for _, kv := range execproto.ExecutorEnv {
					if !res.ok() || strings.Contains(res.stdout, kv) {
						t.Errorf("user %q: a command sees the executor's %s:\n%v", user, kv, res)
					}
				}
			}
		})
	}
}
