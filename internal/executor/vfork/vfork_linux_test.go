package vfork_test

import (
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/executor/vfork"
)

// start runs Exec on a locked thread (the child's parent-death signal is
// tied to it) and waits for the child, returning what it wrote to its
// standard output.
func start(t *testing.T, argv []string, files func(out uintptr) []uintptr, flags uintptr, after func(pid, pidfd int) error) (string, error) {
	t.Helper()
	return startTasks(t, argv, files, flags, nil, after)
}

// startTasks is start with v1 tasks descriptors for the child to join.
func startTasks(t *testing.T, argv []string, files func(out uintptr) []uintptr, flags uintptr, tasks []int, after func(pid, pidfd int) error) (string, error) {
	t.Helper()
	if !vfork.Supported {
		t.Skip("no vfork start on this architecture")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if after == nil {
		after = func(int, int) error { return nil }
	}
	runtime.LockOSThread()
	pid, pidfd, err := vfork.Exec(argv[0], argv, []string{"PATH=/usr/bin:/bin"}, files(w.Fd()), flags, -1, tasks, after)
	runtime.UnlockOSThread()
	w.Close()
	if err != nil {
		return "", err
	}
	defer unix.Close(pidfd)
	out, ws := readAndWait(t, r, pid)
	if !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("child ended %v; wrote %q", ws, out)
	}
	return out, nil
}

// readAndWait reads r, the child's output, to its end, then collects the
// child pid.
func readAndWait(t *testing.T, r io.Reader, pid int) (string, syscall.WaitStatus) {
	t.Helper()
	out, _ := io.ReadAll(r)
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	return string(out), ws
}

// TestDescriptors: the child gets exactly the descriptors it is given, in
// place (one given below its place moved up first), one given as -1
// closed, none other of the parent's; it is a session leader in /.
func TestDescriptors(t *testing.T) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	// The shell's own descriptors, tested without opening any.
	script := `pwd; printf fds; for fd in 0 1 2 3 4 5 6 7 8 9; do [ -e /proc/$$/fd/$fd ] && printf " $fd"; done; echo; [ "$(ps -o sid= -p $$ | tr -d ' ')" = $$ ] && echo leader`
	out, err := start(t, []string{"/bin/sh", "-c", script}, func(out uintptr) []uintptr {
		return []uintptr{null.Fd(), out, ^uintptr(0), out}
	}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\nfds 0 1 3\n") {
		t.Errorf("child's descriptors: %q; want 0 1 3 (2 closed)", out)
	}
	if !strings.HasSuffix(out, "leader\n") || !strings.HasPrefix(out, "/\n") {
		t.Errorf("child %q: want a session leader in /", out)
	}
}

// TestLateMaps: in a new user namespace the child execs before any map
// exists, holding its capabilities as ambient ones; afterExec runs after
// the exec and its maps are the namespace's.
func TestLateMaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a map of more than one's own id")
	}
	// The child waits for its map, then reports its ids and ambient set.
	script := `while [ -z "$(cat /proc/self/uid_map)" ]; do :; done; grep -E '^(Uid|CapAmb):' /proc/self/status; cat /proc/self/uid_map /proc/self/gid_map`
	var sawMaps string
	out, err := start(t, []string{"/bin/sh", "-c", script}, func(out uintptr) []uintptr {
		return []uintptr{0, out, out}
	}, unix.CLONE_NEWUSER, func(pid, pidfd int) error {
		// After the exec: the child is the shell, not a copy of this test.
		exe, err := os.Readlink("/proc/" + itoa(pid) + "/exe")
		if err != nil || !strings.HasSuffix(exe, "sh") {
			return errors.New("afterExec before the exec: exe " + exe)
		}
		b, _ := os.ReadFile("/proc/" + itoa(pid) + "/uid_map")
		sawMaps = string(b)
		return vfork.WriteIDMaps(pid, pidfd, "0 100000 65536\n", "0 100000 65536\n", false)
	})
	if err != nil {
		t.Fatal(err)
	}
	if sawMaps != "" {
		t.Errorf("a uid map existed before afterExec: %q", sawMaps)
	}
	f := strings.Fields(out)
	if len(f) < 11 || f[0] != "Uid:" || f[5] != "CapAmb:" || f[6] == "0000000000000000" {
		t.Fatalf("child reported %q; want its unmapped uid and a full ambient set", out)
	}
	if strings.Join(f[7:13], " ") != "0 100000 65536 0 100000 65536" {
		t.Errorf("child's maps %q, want those written", f[7:])
	}
}

// TestErrors: a binary that does not exist is the exec's error; an error
// from afterExec is returned with the child killed and collected.
func TestErrors(t *testing.T) {
	files := func(out uintptr) []uintptr { return []uintptr{0, out, out} }
	if _, err := start(t, []string{"/nonexistent/x"}, files, 0, nil); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing binary: %v, want ENOENT", err)
	}
	var child int
	refuse := errors.New("refused")
	_, err := start(t, []string{"/bin/sleep", "60"}, files, 0, func(pid, _ int) error {
		child = pid
		return refuse
	})
	if !errors.Is(err, refuse) {
		t.Fatalf("afterExec's error: %v", err)
	}
	if err := syscall.Kill(child, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("child %d after afterExec's error: kill 0 = %v; want it gone (killed and collected)", child, err)
	}
}

// TestWriteIDMapsGone: the maps of a child that exited and was collected
// are never written, not even to the process its pid names now: here
// another child in a new user namespace of its own, with no maps yet (what
// a reused pid could name), stands in for it.
func TestWriteIDMapsGone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a map of another id")
	}
	files := func(out uintptr) []uintptr { return []uintptr{0, out, out} }
	var gonePidfd int
	if _, err := start(t, []string{"/bin/true"}, files, 0, func(_, fd int) error {
		var err error
		gonePidfd, err = unix.Dup(fd)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(gonePidfd)
	// The stand-in: alive, unmapped, until this test reads its map.
	script := `read x; cat /proc/self/uid_map`
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan string, 1)
	go func() {
		out, err := start(t, []string{"/bin/sh", "-c", script}, func(out uintptr) []uintptr { return []uintptr{r.Fd(), out, out} }, unix.CLONE_NEWUSER, func(pid, _ int) error {
			if err := vfork.WriteIDMaps(pid, gonePidfd, "0 100000 1\n", "0 100000 1\n", false); err == nil {
				t.Error("WriteIDMaps wrote maps through the pidfd of a collected child")
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	w.Write([]byte("go\n"))
	w.Close()
	if out := <-done; out != "" {
		t.Errorf("the stand-in's uid map is %q; want none written", out)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestJoinTasks: the child writes itself into the v1 groups whose tasks
// descriptors it is given, before its exec (the program it runs finds
// itself there, in a new user namespace as the executor is); a write that
// fails fails Exec, with the child gone and nothing exec'd.
func TestJoinTasks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a cgroup v1 group")
	}
	hier := "/sys/fs/cgroup/pids"
	var st unix.Statfs_t
	if err := unix.Statfs(hier, &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
		t.Skip("no cgroup v1 pids hierarchy at " + hier)
	}
	dir := hier + "/vfork-test-" + itoa(os.Getpid())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(dir)
	tasks, err := unix.Open(dir+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tasks)
	files := func(out uintptr) []uintptr { return []uintptr{0, out, out} }
	out, err := startTasks(t, []string{"/bin/sh", "-c", "grep :pids: /proc/self/cgroup"}, files, unix.CLONE_NEWUSER, []int{tasks}, func(pid, pidfd int) error {
		return vfork.WriteIDMaps(pid, pidfd, "0 100000 65536\n", "0 100000 65536\n", false)
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := ":pids:/vfork-test-" + itoa(os.Getpid()) + "\n"; !strings.HasSuffix(out, want) {
		t.Errorf("child's pids group: %q, want %q", out, want)
	}

	// A descriptor open for reading only: the write fails in the child.
	ro, err := unix.Open(dir+"/tasks", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ro)
	ran := false
	_, err = startTasks(t, []string{"/bin/true"}, files, 0, []int{tasks, ro}, func(int, int) error {
		ran = true
		return nil
	})
	if !errors.Is(err, syscall.EBADF) || !strings.Contains(err.Error(), "tasks") {
		t.Errorf("a tasks write that fails: Exec returned %v, want EBADF naming the tasks write", err)
	}
	if ran {
		t.Error("afterExec ran: the child exec'd after a failed join")
	}
	if b, _ := os.ReadFile(dir + "/tasks"); len(b) != 0 {
		t.Errorf("group still holds %q after the failed start", b)
	}
}
