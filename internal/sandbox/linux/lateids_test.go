package linux_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestLateIDs holds the order of a vfork'd executor's start (root mode: the
// executor execs before its id maps exist and takes uid and gid 0 of its
// namespace on the host's hello) to fail closed at each step: whatever the
// host writes short of the whole maps, or maps of the host's own root, the
// sandbox is never made ready; with the maps, the executor and its
// commands hold exactly what a forked executor's do (ids, and no ambient
// or inheritable capability left from the exec).
func TestLateIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the late ids are root mode's")
	}
	if !linux.VforkSupported {
		t.Skip("no vfork start on this architecture")
	}
	shift := func(m string, by int) string { // "0 B N" -> "by B+by N-by"
		var in, out, n int
		if _, err := fmt.Sscanf(m, "%d %d %d", &in, &out, &n); err != nil {
			panic(err)
		}
		return fmt.Sprintf("%d %d %d\n", in+by, out+by, n-by)
	}
	// Each case edits the maps the host would write (uid_map, gid_map,
	// setgroups allowed): the backend writes the edited ones itself on the
	// direct path, and asks the spawner for them on the spawner's.
	type maps struct {
		uid, gid string
		sg       bool
	}
	cases := []struct {
		name string
		edit func(m maps) maps
		// refused is what the failed create's error says; "" when the
		// sandbox must start.
		refused string
	}{
		{"maps as the host writes them", func(m maps) maps { return m }, ""},
		{"no maps written", func(maps) maps { return maps{sg: true} }, "take gid 0"},
		{"uid map only", func(m maps) maps { return maps{uid: m.uid, sg: true} }, "take gid 0"},
		{"gid map only", func(m maps) maps { return maps{gid: m.gid, sg: true} }, "take uid 0"},
		{"maps that leave 0 out", func(m maps) maps { return maps{shift(m.uid, 1), shift(m.gid, 1), true} }, "take gid 0"},
		{"setgroups denied", func(m maps) maps { return maps{m.uid, m.gid, false} }, "supplementary groups"},
		{"uid 0 mapped to the host's root", func(m maps) maps { return maps{"0 0 1\n" + shift(m.uid, 1), m.gid, true} }, "host's root"},
		{"gid 0 mapped to the host's root", func(m maps) maps { return maps{m.uid, "0 0 1\n" + shift(m.gid, 1), true} }, "host's root"},
	}
	for _, mode := range []string{"direct", "spawner"} {
		t.Run(mode, func(t *testing.T) {
			spawner := mode == "spawner"
			// What a forked executor and its command hold, to compare with.
			forked := newLateBackend(t, spawner)
			linux.SetForkOnly(forked)
			wantExec, wantCmd := lateIDsState(t, forked, spawner)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					b := newLateBackend(t, spawner)
					var edits atomic.Int32
					linux.SetEditMaps(b, func(uid, gid string, sg bool) (string, string, bool) {
						edits.Add(1)
						if !sg {
							t.Errorf("the host's own maps deny setgroups")
						}
						m := c.edit(maps{uid, gid, sg})
						return m.uid, m.gid, m.sg
					})
					if c.refused != "" {
						ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
						defer cancel()
						sb, err := b.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
						if err == nil {
							sb.Destroy(context.Background())
							t.Fatalf("Create made a sandbox; want it refused with %q", c.refused)
						}
						if !strings.Contains(err.Error(), c.refused) {
							t.Fatalf("Create = %v; want it refused with %q", err, c.refused)
						}
						if n := edits.Load(); n != 1 {
							t.Fatalf("maps edited %d times; want the late path once", n)
						}
						return
					}
					gotExec, gotCmd := lateIDsState(t, b, spawner)
					if n := edits.Load(); n != 1 {
						t.Fatalf("maps edited %d times; want the late path once", n)
					}
					if gotExec != wantExec {
						t.Errorf("executor holds\n%s\nforked one\n%s", gotExec, wantExec)
					}
					if gotCmd != wantCmd {
						t.Errorf("command holds\n%s\nforked one's\n%s", gotCmd, wantCmd)
					}
				})
			}
		})
	}
}

func newLateBackend(t *testing.T, spawner bool) *linux.Backend {
	t.Helper()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir(), Spawner: spawner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// lateIDsState starts a sandbox of b and returns its executor's ids and
// capabilities as the host sees them (the ids as offsets from the
// sandbox's base, so two sandboxes compare) and those of a command run as
// root in it, as it sees them. spawner says the executor must be the
// spawner's child, else this process's.
func lateIDsState(t *testing.T, b *linux.Backend, spawner bool) (executor, command string) {
	t.Helper()
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	if parent := hostParent(t, linux.ExecutorPID(sb.(*linux.Sandbox))); (parent == os.Getpid()) == spawner {
		t.Fatalf("the executor's parent is %d (this process %d); want the spawner: %t", parent, os.Getpid(), spawner)
	}
	// Every thread's: the sets are per thread, and the leader may be the
	// one that starts commands, which drops its own.
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", linux.ExecutorPID(sb.(*linux.Sandbox))))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("executor's threads: %v %v", tasks, err)
	}
	idsCaps := regexp.MustCompile(`(?m)^(Uid|Gid|Groups|Cap\w+):.*$`)
	seen := map[string]bool{}
	base := ""
	for _, task := range tasks {
		status, err := os.ReadFile(task)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // a thread that ended since the Glob: the Go runtime's to end
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range idsCaps.FindAllString(string(status), -1) {
			f := strings.Fields(l)
			if f[0] == "Uid:" {
				base = f[1]
			}
			if base != "" && (f[0] == "Uid:" || f[0] == "Gid:") {
				l = strings.ReplaceAll(l, base, "BASE")
			}
			seen[l] = true
		}
	}
	if base == "" || base == "0" {
		t.Fatalf("executor's uid on the host is %q: want its range's base", base)
	}
	lines := slices.Sorted(maps.Keys(seen))
	res := attackRun(t, sb, "root", `grep -E '^(Uid|Gid|Groups|Cap[A-Za-z]+):' /proc/self/status`)
	if !res.ok() {
		t.Fatalf("command: %v", res)
	}
	return strings.Join(lines, "\n"), res.stdout
}

// TestLateReserve: in root mode a sandbox without id-mapped trees starts
// its executor before its uid range is taken and its cgroup's limits are
// written (Backend.lateReserve), and a failure there fails Create with the
// executor ended and collected and its id free, after which the next
// Create works; a sandbox with a workspace (an id-mapped tree) takes its
// range before the executor starts. TestLateIDs's direct cases write the
// maps on the late path too.
func TestLateReserve(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the late ids are root mode's")
	}
	if !linux.VforkSupported {
		t.Skip("no vfork start on this architecture")
	}
	b := newLateBackend(t, false)
	if !linux.LateReserve(b, sandbox.Spec{}) {
		t.Fatal("a plain sandbox takes its uid range before its executor starts")
	}
	if linux.LateReserve(b, sandbox.Spec{Workspace: t.TempDir()}) {
		t.Fatal("a sandbox with a workspace takes its uid range after its executor starts")
	}
	var pid atomic.Int64
	linux.SetFailLate(b, func(p int) error {
		pid.Store(int64(p))
		return errors.New("injected late failure")
	})
	ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
	if err == nil {
		sb.Destroy(context.Background())
		t.Fatal("Create made a sandbox past a failure after its executor started")
	}
	if !strings.Contains(err.Error(), "injected late failure") {
		t.Fatalf("Create = %v; want the injected failure", err)
	}
	p := pid.Load()
	if p == 0 {
		t.Fatal("the failure was not reached")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the executor (pid %d) is still there after the failed Create: %v", p, err)
	}
	if live, err := b.Live(); err != nil || len(live) != 0 {
		t.Errorf("ids held after the failed Create: %v %v", live, err)
	}
	linux.SetFailLate(b, nil)
	ok := sandboxtest.Create(t, b, sandbox.Spec{Limits: sandbox.DefaultLimits})
	res, err := sandbox.Run(ctx, ok, sandbox.Command{Argv: []string{"sh", "-c", "id -u; cat /proc/self/uid_map"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("a command in the next sandbox: %v %+v", err, res)
	}
}
