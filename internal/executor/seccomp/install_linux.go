package seccomp

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Install sets PR_SET_NO_NEW_PRIVS and installs Program() (compiled into the
// binary where a table exists, see TestBuiltProgram) on every thread of the calling
// process (SECCOMP_FILTER_FLAG_TSYNC via the seccomp(2) syscall). no_new_privs is
// set on the calling thread, and the kernel sets it on every thread it
// synchronizes the filter to (seccomp_sync_threads), so no thread ends without
// it (TestInstall reads every thread's status). The filter is inherited
// across fork and execve. Called once by the executor (PID 1 of the sandbox) after its
// mount setup and before any untrusted code runs; the executor itself keeps running under it.
//
// Filters cannot be removed, and the executor is bound by this one too: it
// must finish everything the filter denies (mounts, namespaces) before
// calling Install. If Install returns an error, the process may already
// have no_new_privs set but has no filter; the caller must not go on to run
// untrusted code.
func Install() error {
	return install(unix.SECCOMP_FILTER_FLAG_TSYNC)
}

// InstallThread sets PR_SET_NO_NEW_PRIVS and installs Program() on the
// calling OS thread alone (no TSYNC): every process that thread forks
// inherits both, the process's other threads get neither. The caller must
// have locked the goroutine to its thread for good (runtime.LockOSThread,
// never unlocked), or the filtered thread could go back to the runtime's
// pool and run other goroutines while the thread that forks goes without.
//
// For the gvisor runtime, where one locked thread forks every command:
// gVisor computes a filter's per-syscall cache for each thread it lands
// on, so a filter synchronized to the executor's seven threads costs seven
// computations where this costs one (docs/gvisor.md, "Cold start").
func InstallThread() error {
	return install(0)
}

func install(flags uintptr) error {
	prog := builtProgram
	if prog == nil {
		var err error
		if prog, err = Program(); err != nil {
			return err
		}
	}

	// no_new_privs is a per-thread flag, and seccomp(2) without it requires
	// CAP_SYS_ADMIN. Both calls must therefore run on the same OS thread.
	// TSYNC (Install) then copies the filter and no_new_privs to every
	// other thread; without it (InstallThread) the caller's lock holds the
	// thread, and this one is a nested lock, undone below.
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
	if err := setFilter(prog, flags); err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return nil
}

// NoNewPrivsThread sets PR_SET_NO_NEW_PRIVS on the calling OS thread
// alone: every process it forks inherits it, and may then install a
// filter without CAP_SYS_ADMIN (ChildFilter). The caller must have locked
// its goroutine to the thread for good, as for InstallThread.
func NoNewPrivsThread() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// ChildFilter returns Program() as the seccomp(2) argument a child
// installs on itself before its exec (vfork.Spawn's Filter), for a
// process that forks from a thread without the filter: each command then
// holds the same filter as one forked from a thread of InstallThread's,
// from its first instruction. The program is kept for the process's life.
func ChildFilter() (*unix.SockFprog, error) {
	prog := builtProgram
	if prog == nil {
		var err error
		if prog, err = Program(); err != nil {
			return nil, err
		}
	}
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("program length %d out of range", len(prog))
	}
	return &unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}, nil
}
