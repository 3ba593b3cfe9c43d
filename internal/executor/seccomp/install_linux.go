package seccomp

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Install sets PR_SET_NO_NEW_PRIVS and installs Program() (compiled into the
// binary where a table exists, see TestBuiltProgram) on every thread of the calling
// process (SECCOMP_FILTER_FLAG_TSYNC via the seccomp(2) syscall). The filter is inherited
// across fork and execve. Called once by the executor (PID 1 of the sandbox) after its
// mount setup and before any untrusted code runs; the executor itself keeps running under it.
//
// Filters cannot be removed, and the executor is bound by this one too: it
// must finish everything the filter denies (mounts, namespaces) before
// calling Install. If Install returns an error, the process may already
// have no_new_privs set but has no filter; the caller must not go on to run
// untrusted code.
func Install() error {
	prog := builtProgram
	if prog == nil {
		var err error
		if prog, err = Program(); err != nil {
			return err
		}
	}

	// no_new_privs is a per-thread flag, and seccomp(2) without it requires
	// CAP_SYS_ADMIN. Both calls must therefore run on the same OS thread.
	// TSYNC then copies the filter and no_new_privs to every other thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// no_new_privs stops execve from granting privileges (setuid bits, file
	// capabilities), so nothing in the sandbox gains privileges by exec.
	// The kernel demands it (or CAP_SYS_ADMIN) before accepting a filter,
	// so that a filter cannot trick a setuid program by failing calls it
	// relies on; with it, installing works unprivileged too.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := setFilter(prog, unix.SECCOMP_FILTER_FLAG_TSYNC); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}
