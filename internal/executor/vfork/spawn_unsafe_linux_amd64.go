package vfork

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spawnChild is what the child of Spawn needs, all of it made by the
// parent: the child shares the parent's memory and may not allocate.
type spawnChild struct {
	execArgs
	attr  *SpawnAttr
	clone cloneArgs
	// err is the child's error, written before it exits; step says which
	// step it failed at (the parent reads both once the clone returns).
	err  syscall.Errno
	step int
}

// The steps of the child, for Spawn's errors.
const (
	stepSession = iota + 1
	stepCredentials
	stepDir
	stepParentDeath
	stepFiles
	stepTerminal
	stepFilter
	stepMask
	stepExec
)

// Spawn starts path with argv and env as a command: a clone that shares
// this process's memory until the child's exec (CLONE_VM|CLONE_VFORK, as
// syscall.ForkExec), made with clone3 and CLONE_CLEAR_SIGHAND, so that
// the child starts with every handled signal at its default action
// instead of resetting each one itself (syscall.ForkExec's child makes a
// rt_sigaction call per signal the runtime handles: 59 of them, each a
// trapped system call under gVisor). Its exit signal is SIGCHLD, as any
// child's (a clone without one would not stay so: exec makes it SIGCHLD
// again, in Linux as in gVisor, and gVisor sets it at the clone). The child runs on this
// thread's stack and in this one frame until its exec; it makes only the
// system calls the command's attributes need, then installs attr.Filter
// and execs with attr.Mask. The parent-death signal is SIGKILL, tied to
// the calling thread (callers lock it). It returns the child's pid and
// pidfd once the exec is done, or the child's error (a *SpawnError
// wrapping the errno: ENOENT for a missing program), after it has been
// collected.
//
// The kernel must have clone3 and CLONE_CLEAR_SIGHAND (Linux 5.5; gVisor
// has both) and the calling thread's seccomp filter, if any, must allow
// clone3; otherwise the clone fails with ENOSYS or EINVAL and nothing was
// started. The original RLIMIT_NOFILE is not restored in the child (the
// Go runtime raises the soft limit to the hard one at start, and
// syscall.ForkExec lowers it again in its child): callers start
// processes whose soft and hard limits were equal from the start.
func Spawn(path string, argv, env []string, attr *SpawnAttr) (pid, pidfd int, err error) {
	c := &spawnChild{attr: attr}
	if c.execArgs, err = newExecArgs(path, argv, env, attr.Dir); err != nil {
		return 0, -1, err
	}
	var fd int32 = -1
	c.clone = cloneArgs{
		flags:      unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD | unix.CLONE_CLEAR_SIGHAND,
		pidfd:      uint64(uintptr(unsafe.Pointer(&fd))),
		exitSignal: uint64(syscall.SIGCHLD),
	}
	syscall.ForkLock.Lock()
	p, errno := spawnAndExec(c)
	syscall.ForkLock.Unlock()
	if errno != 0 {
		return 0, -1, errno
	}
	pid, pidfd = int(p), int(fd)
	if c.err != 0 {
		// It exited (status 253) without exec'ing: collect it.
		collect(pid, pidfd)
		return 0, -1, &SpawnError{Step: stepName(c.step), Err: c.err}
	}
	return pid, pidfd, nil
}

func stepName(s int) string {
	switch s {
	case stepSession:
		return "session"
	case stepCredentials:
		return "credentials"
	case stepDir:
		return "chdir"
	case stepParentDeath:
		return "parent-death signal"
	case stepFiles:
		return "descriptors"
	case stepTerminal:
		return "controlling terminal"
	case stepFilter:
		return "seccomp filter"
	case stepMask:
		return "signal mask"
	}
	return "exec"
}

// spawnAndExec clones c's child and returns in the parent once the child
// has exec'd or exited. The child never returns from it: everything it
// does is in this one frame and in calls that never grow the stack, as in
// vforkAndExec.
//
//go:noinline
//go:norace
//go:nocheckptr
func spawnAndExec(c *spawnChild) (pid uintptr, err1 syscall.Errno) {
	var (
		i    int
		fd   int
		fds  [3]int
		a    = c.attr
		mask = a.Mask
	)
	// No allocation and no call that may grow the stack from here on.
	runtimeBeforeFork()
	pid, err1 = rawVfork(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&c.clone)), unsafe.Sizeof(c.clone), 0)
	if err1 != 0 || pid != 0 {
		// The parent: return at once, out of the child's frame.
		runtimeAfterFork()
		return
	}

	// The child: every handled signal is at its default action already
	// (CLONE_CLEAR_SIGHAND), every signal blocked (runtimeBeforeFork).
	c.step = stepSession
	if a.Setsid {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0); err1 != 0 {
			goto childerror
		}
	}
	if a.Setpgid {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETPGID, 0, 0, 0); err1 != 0 {
			goto childerror
		}
	}
	c.step = stepCredentials
	if !a.NoSetGroups {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETGROUPS, 0, 0, 0); err1 != 0 {
			goto childerror
		}
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETGID, uintptr(a.GID), 0, 0); err1 != 0 {
		goto childerror
	}
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETUID, uintptr(a.UID), 0, 0); err1 != 0 {
		goto childerror
	}
	c.step = stepDir
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(c.dir)), 0, 0); err1 != 0 {
		goto childerror
	}
	// The parent thread blocks in the clone until the exec: it cannot
	// have ended before this point without taking the process with it.
	c.step = stepParentDeath
	if _, _, err1 = syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0, 0); err1 != 0 {
		goto childerror
	}

	// Descriptors: those below their place first move above 2 (so the
	// second pass cannot overwrite one still to be moved), then each onto
	// its place, without close-on-exec.
	c.step = stepFiles
	fds = a.Files
	for i = 0; i < 3; i++ {
		if fds[i] < i {
			if fd, _, err1 = rawDup(fds[i]); err1 != 0 {
				goto childerror
			}
			fds[i] = fd
		}
	}
	for i = 0; i < 3; i++ {
		if fds[i] == i {
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(i), syscall.F_SETFD, 0); err1 != 0 {
				goto childerror
			}
			continue
		}
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(fds[i]), uintptr(i), 0); err1 != 0 {
			goto childerror
		}
	}
	if a.Setctty {
		c.step = stepTerminal
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_IOCTL, 0, uintptr(syscall.TIOCSCTTY), 1); err1 != 0 {
			goto childerror
		}
	}

	// The filter last: the steps above are the executor's, under the
	// calling thread's confinement; the exec is the command's first step
	// under the filter.
	if a.Filter != nil {
		c.step = stepFilter
		if _, _, err1 = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(a.Filter))); err1 != 0 {
			goto childerror
		}
	}
	c.step = stepMask
	if _, _, err1 = syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&mask)), 0, 8, 0, 0); err1 != 0 {
		goto childerror
	}
	c.step = stepExec
	_, _, err1 = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(c.path)), uintptr(unsafe.Pointer(&c.argv[0])), uintptr(unsafe.Pointer(&c.envv[0])))

childerror:
	c.err = err1
	for {
		syscall.RawSyscall(syscall.SYS_EXIT, 253, 0, 0)
	}
}

// rawDup duplicates fd onto the lowest free descriptor above 2,
// close-on-exec.
//
//go:nosplit
func rawDup(fd int) (int, uintptr, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 3)
	return int(r), 0, e
}
