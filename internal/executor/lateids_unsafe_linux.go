package executor

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// takeIDs makes an executor started with execproto.LateIDs what one forked
// the old way is at its exec: uid and gid 0 of its user namespace in every
// thread (real, effective, saved), no supplementary groups, its
// capabilities effective and permitted, none inheritable or ambient, and
// dumpable. Each change is made on every thread (AllThreadsSyscall: a stop
// of the world and a signal to every other thread; TestLateIDs compares
// every thread with a forked executor's), but the parent-death signal: the
// kernel sends it when the parent dies if any thread of the process holds
// it, so it is set on the calling thread (the caller holds its goroutine
// on it), which holds it until the command thread, which never ends, sets
// it on itself as it starts (newProcThread); TestSpawnerDies kills the
// spawner. It fails closed: without the host's maps (or with maps that
// leave 0 out) the namespace's 0 does not exist and setresgid refuses,
// and the result is checked rather than assumed.
func takeIDs() error {
	// The parent-death signal the clone's child set goes with the first
	// change of ids (the kernel clears it on every change of effective
	// ids): set again below, then checked to have lost no parent.
	parent, err := hostParent()
	if err != nil {
		return err
	}
	if err := syscall.Setresgid(0, 0, 0); err != nil {
		return fmt.Errorf("take gid 0 of the sandbox: %w", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		return fmt.Errorf("take uid 0 of the sandbox: %w", err)
	}
	// The ambient set was the only way the capabilities survived the exec;
	// the capset below clears the inheritable set on every thread, and the
	// kernel's capset lowers the ambient set to what is both permitted and
	// inheritable: none. (One stop of the world fewer than clearing it with
	// PR_CAP_AMBIENT_CLEAR_ALL first; checkIDs reads it back.)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %w", e)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// A change of ids made the process undumpable; one exec'd as root of
	// the namespace was dumpable until setup says otherwise.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	// A parent that exited before the signal was set again left this
	// process to a reaper, and would never kill it.
	now, err := hostParent()
	if err != nil {
		return err
	}
	if now != parent {
		return fmt.Errorf("the parent exited while the ids were taken (parent %d, now %d)", parent, now)
	}
	return checkIDs()
}

// hostParent returns this process's parent's pid as the host's /proc
// names it: the mount of /proc is still the host's (setup mounts the
// sandbox's own after), where the PID namespace's getppid says 0.
func hostParent() (int, error) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, fmt.Errorf("parent: %w", err)
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(data), ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 2 {
		return 0, fmt.Errorf("parent: /proc/self/stat: %q", data)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil || ppid <= 0 {
		return 0, fmt.Errorf("parent: /proc/self/stat: %q", data)
	}
	return ppid, nil
}

// checkIDs verifies what takeIDs did, from the kernel's answers, and that
// the namespace maps none of its ids to the host's root (uid or gid 0): a
// host that wrote such a map by mistake would make this executor, and
// whatever setup leaves it, the host's root on every file it touches.
func checkIDs() error {
	for _, f := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		for _, l := range lines {
			if fs := strings.Fields(l); len(fs) != 3 || fs[1] == "0" {
				return fmt.Errorf("%s: %q: no map, or one of the host's root", f, l)
			}
		}
	}
	r, e, s := unix.Getresuid()
	if r != 0 || e != 0 || s != 0 {
		return fmt.Errorf("uids %d %d %d after taking 0", r, e, s)
	}
	r, e, s = unix.Getresgid()
	if r != 0 || e != 0 || s != 0 {
		return fmt.Errorf("gids %d %d %d after taking 0", r, e, s)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Inheritable|data[1].Inheritable != 0 || data[0].Permitted&(1<<unix.CAP_SYS_ADMIN) == 0 {
		return fmt.Errorf("capabilities after taking ids: permitted %#x %#x, inheritable %#x %#x", data[0].Permitted, data[1].Permitted, data[0].Inheritable, data[1].Inheritable)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if set, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0); err == nil && set != 0 {
			return fmt.Errorf("ambient capability %d still set", c)
		}
	}
	return nil
}
