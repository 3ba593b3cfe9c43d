package linux_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
	procFile := func(pid int, name, data string) error {
		return os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, name), []byte(data), 0)
	}
	shift := func(m string, by int) string { // "0 B N" -> "by B+by N-by"
		var in, out, n int
		if _, err := fmt.Sscanf(m, "%d %d %d", &in, &out, &n); err != nil {
			panic(err)
		}
		return fmt.Sprintf("%d %d %d\n", in+by, out+by, n-by)
	}
	cases := []struct {
		name  string
		write func(pid int, uid, gid string) error
		// refused is what the failed create's error says; "" when the
		// sandbox must start.
		refused string
	}{
		{"maps as the host writes them", func(pid int, uid, gid string) error {
			return firstErr(procFile(pid, "uid_map", uid), procFile(pid, "setgroups", "allow"), procFile(pid, "gid_map", gid))
		}, ""},
		{"no maps written", func(int, string, string) error { return nil }, "take gid 0"},
		{"uid map only", func(pid int, uid, _ string) error { return procFile(pid, "uid_map", uid) }, "take gid 0"},
		{"gid map only", func(pid int, _, gid string) error {
			return firstErr(procFile(pid, "setgroups", "allow"), procFile(pid, "gid_map", gid))
		}, "take uid 0"},
		{"maps that leave 0 out", func(pid int, uid, gid string) error {
			return firstErr(procFile(pid, "uid_map", shift(uid, 1)), procFile(pid, "setgroups", "allow"), procFile(pid, "gid_map", shift(gid, 1)))
		}, "take gid 0"},
		{"setgroups denied", func(pid int, uid, gid string) error {
			return firstErr(procFile(pid, "uid_map", uid), procFile(pid, "setgroups", "deny"), procFile(pid, "gid_map", gid))
		}, "supplementary groups"},
		{"uid 0 mapped to the host's root", func(pid int, uid, gid string) error {
			return firstErr(procFile(pid, "uid_map", "0 0 1\n"+shift(uid, 1)), procFile(pid, "setgroups", "allow"), procFile(pid, "gid_map", gid))
		}, "host's root"},
		{"gid 0 mapped to the host's root", func(pid int, uid, gid string) error {
			return firstErr(procFile(pid, "uid_map", uid), procFile(pid, "setgroups", "allow"), procFile(pid, "gid_map", "0 0 1\n"+shift(gid, 1)))
		}, "host's root"},
	}
	// What a forked executor and its command hold, to compare with.
	forked := newLateBackend(t)
	linux.SetForkOnly(forked)
	wantExec, wantCmd := lateIDsState(t, forked)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := newLateBackend(t)
			wrote := 0
			linux.SetWriteMaps(b, func(pid int, uid, gid string) error {
				wrote++
				return c.write(pid, uid, gid)
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
				if wrote != 1 {
					t.Fatalf("maps written %d times; want the late path once", wrote)
				}
				return
			}
			gotExec, gotCmd := lateIDsState(t, b)
			if wrote != 1 {
				t.Fatalf("maps written %d times; want the late path once", wrote)
			}
			if gotExec != wantExec {
				t.Errorf("executor holds\n%s\nforked one\n%s", gotExec, wantExec)
			}
			if gotCmd != wantCmd {
				t.Errorf("command holds\n%s\nforked one's\n%s", gotCmd, wantCmd)
			}
		})
	}
}

func newLateBackend(t *testing.T) *linux.Backend {
	t.Helper()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// lateIDsState starts a sandbox of b and returns its executor's ids and
// capabilities as the host sees them (the ids as offsets from the
// sandbox's base, so two sandboxes compare) and those of a command run as
// root in it, as it sees them.
func lateIDsState(t *testing.T, b *linux.Backend) (executor, command string) {
	t.Helper()
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
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

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
