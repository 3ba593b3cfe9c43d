package cgroup

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperEnv selects a helper mode when the test binary re-executes itself as
// a child process.
const helperEnv = "AIRLOCK_CGROUP_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(m.Run())
}

// runHelper is the child side of the tests. The touch and busy modes wait for
// one byte on stdin, so that the parent can move them into a group first.
func runHelper(mode string) int {
	switch mode {
	case "touch":
		waitStdin()
		// Touch 256 MiB, a page at a time, and stop: bounded even if the
		// limit does not work.
		const chunk = 1 << 20
		keep := make([][]byte, 0, 256)
		for range 256 {
			c := make([]byte, chunk)
			for i := 0; i < len(c); i += 4096 {
				c[i] = 1
			}
			keep = append(keep, c)
		}
		runtime.KeepAlive(keep)
		return 0
	case "busy":
		waitStdin()
		end := time.Now().Add(300 * time.Millisecond)
		for time.Now().Before(end) {
		}
		return 0
	case "rootless":
		return rootlessHelper()
	case "enable":
		return enableHelper()
	}
	fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
	return 2
}

func waitStdin() {
	var b [1]byte
	_, _ = os.Stdin.Read(b[:])
}

// rootlessResult is what the rootless helper reports on stdout.
type rootlessResult struct {
	Mode           Mode
	RequiredErr    string
	IsLimitError   bool
	IsUnsupported  bool
	OptionalErr    string
	OptionalFD     int
	OptionalEnf    []string
	OptionalDstErr string
}

func rootlessHelper() int {
	var r rootlessResult
	m, err := NewManager("airlock-rootless-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	r.Mode = m.Mode()
	_, err = m.New("required", Limits{MemoryBytes: 64 << 20, Pids: 20}, true)
	if err != nil {
		r.RequiredErr = err.Error()
		var le *LimitError
		r.IsLimitError = errors.As(err, &le)
		r.IsUnsupported = errors.Is(err, errors.ErrUnsupported)
	}
	g, err := m.New("optional", Limits{MemoryBytes: 64 << 20}, false)
	if err != nil {
		r.OptionalErr = err.Error()
	} else {
		r.OptionalFD = g.CgroupFD()
		r.OptionalEnf = g.Enforced()
		if err := g.Destroy(); err != nil {
			r.OptionalDstErr = err.Error()
		}
		_ = g.Close()
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// enableResult is what the enable helper reports on stdout.
type enableResult struct {
	Err    string
	Cgroup string // the helper's cgroup2 path afterwards
}

// enableHelper runs the v2 controller enabling of prepare with the cgroup it
// was started in as "own", the directory in $AIRLOCK_CGROUP_TEST_OWN.
func enableHelper() int {
	own, ctrl := os.Getenv("AIRLOCK_CGROUP_TEST_OWN"), os.Getenv("AIRLOCK_CGROUP_TEST_CTRL")
	m := &Manager{parent: "airlock"}
	var r enableResult
	if _, err := mkdir(own + "/airlock"); err != nil {
		r.Err = err.Error()
	} else if err := m.enableV2(own, own+"/airlock", []string{ctrl}); err != nil {
		r.Err = err.Error()
	}
	b, _ := os.ReadFile("/proc/self/cgroup")
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			r.Cgroup = p
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

// helperCmd returns a command running this test binary in helper mode.
func helperCmd(t *testing.T, mode string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	return cmd
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
}

// newTestManager returns a Manager with a parent of its own, and removes
// every group left under it and the parent itself when the test ends.
func newTestManager(t testing.TB) *Manager {
	t.Helper()
	requireRoot(t)
	m, err := NewManager(fmt.Sprintf("airlock-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		names, err := m.List()
		if err != nil {
			t.Errorf("List() = %v", err)
		}
		for _, n := range names {
			g, err := m.Open(n)
			if err != nil {
				t.Errorf("Open(%q) = %v", n, err)
				continue
			}
			if err := g.Destroy(); err != nil {
				t.Errorf("Destroy(%q) = %v", n, err)
			}
			_ = g.Close()
		}
		if err := m.removeParent(); err != nil {
			t.Errorf("remove parent: %v", err)
		}
	})
	return m
}

// requireControllers skips the test if m cannot set limits with every
// controller in ctrls.
func requireControllers(t testing.TB, m *Manager, ctrls ...string) {
	t.Helper()
	md := m.Mode()
	for _, c := range ctrls {
		if !slices.Contains(md.Controllers, c) {
			t.Skipf("needs the %s controller: %s", c, md.Reason)
		}
	}
}

// newGroup creates a group and destroys it when the test ends.
func newGroup(t testing.TB, m *Manager, name string, l Limits) *Group {
	t.Helper()
	g, err := m.New(name, l, true)
	if err != nil {
		t.Fatalf("New(%q, %+v) = %v", name, l, err)
	}
	t.Cleanup(func() {
		if err := g.Destroy(); err != nil {
			t.Errorf("Destroy() = %v", err)
		}
		if err := g.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return g
}

// dirs returns every directory of g.
func (g *Group) dirs() []string {
	var out []string
	if g.v2 != "" {
		out = append(out, g.v2)
	}
	for _, d := range g.v1 {
		out = append(out, d.dir)
	}
	return out
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// startBlocked starts cmd blocked on stdin, moves it into g and returns a
// function that releases it.
func startBlocked(t *testing.T, g *Group, cmd *exec.Cmd) (release func()) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	if err := g.AddProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddProc(%d) = %v", cmd.Process.Pid, err)
	}
	return func() {
		if _, err := stdin.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		_ = stdin.Close()
	}
}

func mustGetsid(t *testing.T, pid int) int {
	t.Helper()
	sid, err := unix.Getsid(pid)
	if err != nil {
		t.Fatalf("getsid(%d): %v", pid, err)
	}
	return sid
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
