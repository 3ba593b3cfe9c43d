package linux_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestV1JoinAtClone: on a host whose limits live in cgroup v1 hierarchies,
// the executor writes itself into its sandbox's v1 groups before its exec
// (the host writes no cgroup.procs), on the direct path and through the
// spawner: it runs nothing outside them. A join that fails fails the
// Create, with no executor started and none left.
func TestV1JoinAtClone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups and late ids")
	}
	if !linux.VforkSupported {
		t.Skip("no vfork start on this architecture")
	}
	for _, mode := range []string{"direct", "spawner"} {
		t.Run(mode, func(t *testing.T) {
			spawner := mode == "spawner"
			b := newLateBackend(t, spawner)
			given := 0
			linux.SetEditTasks(b, func(fds []int) { given = len(fds) })
			sb := sandboxtest.Create(t, b, sandbox.Spec{Limits: sandbox.DefaultLimits})
			pid := linux.ExecutorPID(sb.(*linux.Sandbox))
			data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			if err != nil {
				t.Fatal(err)
			}
			// The sandbox's v1 groups are its cgroup2 group's path under
			// this process's own group in each v1 hierarchy (mounted at
			// /sys/fs/cgroup/<controller> here); the executor must be in
			// each.
			own, err := os.ReadFile("/proc/self/cgroup")
			if err != nil {
				t.Fatal(err)
			}
			_, ownV1 := parseCgroups(string(own))
			group, v1 := parseCgroups(string(data))
			want := 0
			for ctrl, in := range v1 {
				dir := strings.TrimSuffix(ownV1[ctrl], "/") + group
				if _, err := os.Stat("/sys/fs/cgroup/" + ctrl + dir); err != nil || group == "/" {
					continue
				}
				want++
				if in != dir {
					t.Errorf("executor in %s:%s, want its sandbox's group %s", ctrl, in, dir)
				}
			}
			if want == 0 {
				t.Skipf("the sandbox has no v1 group here (%s)", data)
			}
			if given != want {
				t.Fatalf("executor given %d v1 tasks files to join; its sandbox has %d v1 groups (%s)", given, want, data)
			}

			// A join that fails: the last descriptor open for reading
			// only, so the child's write fails before its exec.
			b2 := newLateBackend(t, spawner)
			linux.SetEditTasks(b2, func(fds []int) {
				p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fds[len(fds)-1]))
				if err != nil {
					t.Error(err)
					return
				}
				ro, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if err := unix.Dup3(ro, fds[len(fds)-1], unix.O_CLOEXEC); err != nil {
					t.Error(err)
				}
				unix.Close(ro)
			})
			before := children(t)
			ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
			defer cancel()
			sb2, err := b2.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
			if err == nil {
				sb2.Destroy(context.Background())
				t.Fatal("Create made a sandbox whose executor could not join its v1 groups")
			}
			if !strings.Contains(err.Error(), "tasks") {
				t.Errorf("Create = %v; want the failed join named", err)
			}
			if after := children(t); after > before {
				t.Errorf("%d processes below this one after the failed Create, %d before", after, before)
			}
		})
	}
}

// children counts the processes whose parent is this process or one of
// its children (the spawner's children), spawners apart.
func children(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	self, n := os.Getpid(), 0
	for pid, pp := range parent {
		if pid == self || (pp != self && parent[pp] != self) {
			continue
		}
		if cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); string(cmd) == "airlock-exec\x00spawn\x00" {
			continue
		}
		n++
	}
	return n
}

// parseCgroups parses /proc/PID/cgroup: the cgroup2 path and the path in
// each v1 hierarchy.
func parseCgroups(data string) (v2 string, v1 map[string]string) {
	v1 = map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(data), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) < 3 {
			continue
		}
		if f[0] == "0" {
			v2 = f[2]
		} else if f[1] != "" {
			v1[f[1]] = f[2]
		}
	}
	return v2, v1
}
