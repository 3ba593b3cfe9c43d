package linux_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// freezeBackend returns a backend whose sandboxes freeze with kind,
// skipping when this machine has no such freezer.
func freezeBackend(t *testing.T, kind string) *linux.Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	switch kind {
	case cgroup.FreezerV1:
		if _, err := os.Stat("/sys/fs/cgroup/freezer/freezer.state"); err != nil && !hasV1Freezer() {
			t.Skip("no v1 freezer hierarchy here")
		}
	case cgroup.FreezerV2:
		if md, err := cgroup.Detect(); err != nil || md.Unified == "" {
			t.Skip("no cgroup2 tree here")
		}
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir(), Spawner: true, Freezer: kind})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// hasV1Freezer reports whether a v1 freezer hierarchy is mounted.
func hasV1Freezer() bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if _, after, ok := strings.Cut(line, " - cgroup "); ok && strings.Contains(after, "freezer") {
			return true
		}
	}
	return false
}

// sandboxCounter reads the counter a sandbox's counting shell keeps in its
// /tmp, through its executor's root (the host's view; a frozen sandbox
// answers nothing itself).
func sandboxCounter(t *testing.T, sb sandbox.Sandbox) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/tmp/counter", linux.ExecutorPID(sb.(*linux.Sandbox))))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func waitSandboxCounter(t *testing.T, sb sandbox.Sandbox, over int) int {
	t.Helper()
	var c int
	if !attackPoll(30*time.Second, func() bool { c = sandboxCounter(t, sb); return c > over }) {
		t.Fatalf("the sandbox's counter stayed at %d", c)
	}
	return c
}

// counterScript counts in the shell's own memory, writing each value out,
// and keeps its pid in /tmp/pid.
const counterScript = `echo $$ > /tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.02; done`

// TestFreeze: a frozen sandbox's processes stop where they are and go on
// after the thaw, the same processes (PID, memory); operations on a frozen
// sandbox fail fast with ErrFrozen; a frozen sandbox is destroyed as a
// running one. Both freezers, where this machine has them.
func TestFreeze(t *testing.T) {
	for _, kind := range []string{cgroup.FreezerV2, cgroup.FreezerV1} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := freezeBackend(t, kind)
			sb := sandboxtest.Create(t, b, sandbox.Spec{})
			fz, ok := sb.(sandbox.Freezer)
			if !ok {
				t.Fatal("a linux sandbox is not a sandbox.Freezer")
			}
			if k, err := fz.FreezeKind(); k != "cgroup-"+kind || err != nil {
				t.Fatalf("FreezeKind() = %q, %v, want cgroup-%s", k, err, kind)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Started and left running: its stream stays open across the
			// freeze.
			var out sandboxtest.SyncBuffer
			p, err := sb.Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", counterScript}, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatal(err)
			}
			before := waitSandboxCounter(t, sb, 2)
			pid := strings.TrimSpace(attackMust(t, sb, "", "cat /tmp/pid"))
			if err := fz.Freeze(ctx); err != nil {
				t.Fatalf("Freeze() = %v", err)
			}
			frozen := sandboxCounter(t, sb)
			if frozen < before {
				t.Fatalf("counter went back from %d to %d", before, frozen)
			}
			time.Sleep(300 * time.Millisecond)
			if c := sandboxCounter(t, sb); c != frozen {
				t.Fatalf("the counter moved from %d to %d while frozen", frozen, c)
			}
			if _, err := sb.ReadFile(ctx, "/tmp/pid", 100); !errors.Is(err, sandbox.ErrFrozen) || errors.Is(err, sandbox.ErrLost) {
				t.Errorf("ReadFile on a frozen sandbox = %v, want ErrFrozen", err)
			}
			if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrFrozen) {
				t.Errorf("Start on a frozen sandbox = %v, want ErrFrozen", err)
			}
			if err := fz.Thaw(ctx); err != nil {
				t.Fatalf("Thaw() = %v", err)
			}
			// The same shell counts on from where it stood: a new one
			// would start at 1 and have another pid.
			waitSandboxCounter(t, sb, frozen)
			if got := strings.TrimSpace(attackMust(t, sb, "", "cat /tmp/pid; kill -0 $(cat /tmp/pid) && echo alive >&2")); got != pid {
				t.Errorf("pid after the thaw = %s, want %s", got, pid)
			}
			if err := p.Signal(9); err != nil {
				t.Errorf("Signal(KILL) after the thaw = %v", err)
			}
			if r, err := p.Wait(ctx); err != nil || r.Outcome != sandbox.OutcomeSignaled {
				t.Errorf("Wait() = %+v, %v, want signaled", r, err)
			}
			// Frozen again, then destroyed: the v1 freezer's tasks die
			// only once thawed, which Destroy sees to.
			if err := fz.Freeze(ctx); err != nil {
				t.Fatalf("second Freeze() = %v", err)
			}
			dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
			defer dcancel()
			if err := sb.Destroy(dctx); err != nil {
				t.Fatalf("Destroy() of a frozen sandbox = %v", err)
			}
			select {
			case <-sb.Done():
			case <-dctx.Done():
				t.Fatal("a destroyed frozen sandbox is not done")
			}
			if err := fz.Thaw(ctx); !errors.Is(err, sandbox.ErrLost) {
				t.Errorf("Thaw() after Destroy = %v, want ErrLost", err)
			}
		})
	}
}

// TestFreezeFromInside: nothing in the sandbox can freeze or thaw its
// cgroup: the freeze files are not in its view, and it can mount no
// cgroup file system to reach them (no capability in the host's user
// namespace, seccomp). The host's freezer reads unfrozen throughout.
func TestFreezeFromInside(t *testing.T) {
	for _, kind := range []string{cgroup.FreezerV2, cgroup.FreezerV1} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := freezeBackend(t, kind)
			sb := sandboxtest.Create(t, b, sandbox.Spec{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			fz := sb.(sandbox.Freezer)
			probe := `for f in /sys/fs/cgroup/cgroup.freeze /sys/fs/cgroup/unified/cgroup.freeze /sys/fs/cgroup/freezer/freezer.state; do
  (echo 1 > $f) 2>/dev/null && echo "wrote $f"
  (echo FROZEN > $f) 2>/dev/null && echo "wrote $f"
done
for fs in cgroup2 cgroup; do
  mkdir -p /tmp/cg-$fs
  mount -t $fs -o freezer none /tmp/cg-$fs 2>/dev/null && echo "mounted $fs"
  mount -t $fs none /tmp/cg-$fs 2>/dev/null && echo "mounted $fs"
done
find /sys /dev /run \( -name cgroup.freeze -o -name freezer.state \) 2>/dev/null | sed 's/^/found /'
true`
			for _, user := range []string{"", "root"} {
				got := attackMust(t, sb, user, probe)
				if strings.TrimSpace(got) != "" {
					t.Errorf("as %q the sandbox reached a freezer:\n%s", user, got)
				}
			}
			// And frozen, it can do nothing at all; the host thaws it.
			if err := fz.Freeze(ctx); err != nil {
				t.Fatal(err)
			}
			if err := fz.Thaw(ctx); err != nil {
				t.Fatal(err)
			}
			attackMust(t, sb, "", "true")
		})
	}
}
