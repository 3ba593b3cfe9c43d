package linux_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// cgroupLeft returns the cgroup directories b's state directory has on
// the machine: its parent in every hierarchy and the groups in it.
func cgroupLeft(t *testing.T, b *linux.Backend) []string {
	t.Helper()
	parents, err := linux.CgroupParentDirs(b)
	if err != nil {
		t.Fatalf("cgroup parents: %v", err)
	}
	var left []string
	for _, p := range parents {
		ents, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, p)
		for _, e := range ents {
			if e.IsDir() {
				left = append(left, p+"/"+e.Name())
			}
		}
	}
	return left
}

// waitNoCgroup waits, for a minute at most, until b's state directory has
// no cgroup directory left; each round runs gc first when it is set.
func waitNoCgroup(t *testing.T, b *linux.Backend, gc bool) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if gc {
			if _, err := b.GC(); err != nil {
				t.Logf("GC() = %v", err)
			}
		}
		if left = cgroupLeft(t, b); len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("%d cgroup directories left a minute after the last sandbox was gone: %s", len(left), strings.Join(left, " "))
}

// liveSandbox makes a sandbox of another state directory, alive for the
// whole test, and returns it with the cgroup directories it has.
func liveSandbox(t *testing.T, spec sandbox.Spec) (sandbox.Sandbox, *linux.Backend, []string) {
	t.Helper()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sb := sandboxtest.Create(t, b, spec)
	dirs := cgroupLeft(t, b)
	if len(dirs) == 0 {
		t.Fatal("control: the live sandbox has no cgroup")
	}
	return sb, b, dirs
}

// checkLive fails unless the live sandbox still runs a command and has
// every cgroup directory it had.
func checkLive(t *testing.T, sb sandbox.Sandbox, b *linux.Backend, dirs []string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a live sandbox's cgroup directory is gone: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, sandbox.Command{Argv: []string{"true"}})
	if err != nil {
		t.Errorf("the live sandbox's Start(true) = %v", err)
		return
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Errorf("the live sandbox's true: %+v, %v; want exit 0", res, err)
	}
}

// TestCgroupsLeftNone: sandboxes created and destroyed, fully or detached,
// leave no cgroup directory behind, their state directory's parent
// included, while the host goes on and without Backend.Close (a
// long-lived host, a test's throwaway home); a sandbox of another state
// directory keeps its group meanwhile, GC included.
func TestCgroupsLeftNone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	runtimes := []string{sandbox.RuntimeNative}
	if os.Getenv(linux.RunscEnv) != "" {
		runtimes = append(runtimes, sandbox.RuntimeGVisor)
	}
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			spec := sandbox.Spec{Runtime: rt, Limits: sandbox.DefaultLimits}
			live, lb, liveDirs := liveSandbox(t, spec)
			state := t.TempDir()
			t.Cleanup(func() { _ = linux.Forget(state) }) // what a failure left
			b, err := linux.New(linux.Config{Executor: executorPath, StateDir: state})
			if err != nil {
				t.Fatalf("linux.New = %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			const n = 4
			for i := range n {
				sb, err := b.Create(ctx, spec)
				if err != nil {
					t.Fatalf("Create() = %v", err)
				}
				if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"sleep", "600"}}); err != nil {
					t.Errorf("Start(sleep) = %v", err)
				}
				if i%2 == 0 {
					err = sb.Destroy(ctx)
				} else {
					err = sb.(*linux.Sandbox).DestroyDetached(ctx)
				}
				if err != nil {
					t.Errorf("destroy = %v", err)
				}
			}
			waitNoCgroup(t, b, false)
			checkLive(t, live, lb, liveDirs)
			if _, err := b.GC(); err != nil {
				t.Errorf("GC() = %v", err)
			}
			checkLive(t, live, lb, liveDirs)
		})
	}
}

// TestCgroupsLeftNoneKill9: after a host holding sandboxes is killed with
// SIGKILL, the gc of its state directory leaves no cgroup directory of
// it, and keeps a live sandbox's of another.
func TestCgroupsLeftNoneKill9(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	t.Parallel()
	live, lb, liveDirs := liveSandbox(t, sandbox.Spec{Limits: sandbox.DefaultLimits})
	state := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(state) }) // what a failure left
	cmd, lines := attackStartHelper(t, nil, "TestCgroupsLeftNoneHelper", attackHelperEnv+"=cgleak", attackStateEnv+"="+state)
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("helper ended before it was ready")
		}
		// The helper's TestMain built its own executor; it cannot remove
		// it when killed.
		if exe, ok := strings.CutPrefix(l, "ready exec="); ok {
			if dir := filepath.Dir(exe); strings.HasPrefix(filepath.Base(dir), sandboxtest.ExecutorDirPrefix) && filepath.Dir(dir) == filepath.Clean(os.TempDir()) {
				t.Cleanup(func() { os.RemoveAll(dir) })
			}
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("helper did not get ready within 2 minutes")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: state})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	if len(cgroupLeft(t, b)) == 0 {
		t.Fatal("control: the helper's sandboxes have no cgroup")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waited = true
	waitNoCgroup(t, b, true)
	checkLive(t, live, lb, liveDirs)
}

// TestCgroupsLeftNoneHelper is the host TestCgroupsLeftNoneKill9 kills:
// it makes three sandboxes, each running a command, and waits.
func TestCgroupsLeftNoneHelper(t *testing.T) {
	if os.Getenv(attackHelperEnv) != "cgleak" {
		t.Skip("helper process of TestCgroupsLeftNoneKill9")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: os.Getenv(attackStateEnv)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		sb, err := b.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"sleep", "600"}}); err != nil {
			t.Fatal(err)
		}
	}
	attackHelperSay("ready exec=%s", executorPath)
	time.Sleep(10 * time.Minute)
}
