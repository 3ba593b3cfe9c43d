package executor

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/executor/vfork"
)

// procThread starts and signals every command from one OS thread.
//
// Why: below Landlock ABI 8 the ruleset is applied to each thread separately,
// so each thread has its own, equivalent Landlock domain, and a process
// inherits the domain of the thread that forked it. With signal scoping, a
// thread may only signal processes in its own domain or below. Forking and
// signalling from the same locked thread keeps every command in that
// thread's domain and in reach of its signals.
type procThread struct {
	ops chan func()

	// Under gVisor, commands start by vfork.Spawn (spawnWith), each
	// installing filter on itself. Used and changed on the thread alone.
	spawn     bool
	broken    error // the thread could be confined neither way: no command starts
	filter    *unix.SockFprog
	mask      uint64
	onFailure func() error
}

// newProcThread starts the command thread. With pdeathsig it first sets
// the parent-death signal (SIGKILL) on itself: the thread never ends, so
// the process holds the signal for good (takeIDs sets it on its own
// thread only, which the runtime may end later).
func newProcThread(pdeathsig bool) (*procThread, error) {
	t := &procThread{ops: make(chan func())}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread is dedicated for the executor's life.
		runtime.LockOSThread()
		if pdeathsig {
			if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
				ready <- fmt.Errorf("parent-death signal: %w", err)
				return
			}
		}
		ready <- nil
		for op := range t.ops {
			op()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return t, nil
}

func (t *procThread) do(f func()) {
	done := make(chan struct{})
	t.ops <- func() { f(); close(done) }
	<-done
}

func (t *procThread) forkExec(argv0 string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	t.do(func() {
		if t.broken != nil {
			err = t.broken
			return
		}
		if t.spawn {
			if pid, err = t.spawnExec(argv0, argv, attr); !errors.Is(err, errSpawnUnavailable) {
				return
			}
		}
		pid, err = syscall.ForkExec(argv0, argv, attr)
	})
	return pid, err
}

// spawnWith makes the thread start every command by vfork.Spawn: a
// clone3 with CLONE_CLEAR_SIGHAND, whose child
// installs filter on itself just before its exec (the thread holds
// no_new_privs, which the child inherits, and no filter, which would
// refuse the clone3; docs/gvisor.md, "A command in a running sandbox").
// Where the kernel refuses that clone (no clone3, or no
// CLONE_CLEAR_SIGHAND: an older gVisor), the thread runs onFailure once,
// which must confine the thread as commands are confined
// (seccomp.InstallThread), and forks by syscall.ForkExec from then on.
// Called on the thread (do).
func (t *procThread) spawnWith(filter *unix.SockFprog, onFailure func() error) error {
	var set, old uint64
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_BLOCK, uintptr(unsafe.Pointer(&set)), uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
		return fmt.Errorf("signal mask: %w", e)
	}
	t.spawn, t.filter, t.mask, t.onFailure = true, filter, old, onFailure
	return nil
}

// errSpawnUnavailable: the kernel has no clone3 with CLONE_CLEAR_SIGHAND,
// and the thread forks as it did before spawnWith from now on.
var errSpawnUnavailable = errors.New("spawn unavailable")

// spawnExec starts a command by vfork.Spawn with attr's files, directory,
// credentials and session (the parent-death signal is SIGKILL, as every
// caller asks) and sets *attr.Sys.PidFD. Called on the thread.
func (t *procThread) spawnExec(argv0 string, argv []string, attr *syscall.ProcAttr) (int, error) {
	sys := attr.Sys
	if len(attr.Files) != 3 || sys == nil || sys.Credential == nil || sys.PidFD == nil || sys.Ctty != 0 ||
		sys.Pdeathsig != syscall.SIGKILL || len(sys.Credential.Groups) != 0 {
		return 0, errors.New("spawn: unsupported process attributes")
	}
	sa := &vfork.SpawnAttr{
		Dir:   attr.Dir,
		Files: [3]int{int(attr.Files[0]), int(attr.Files[1]), int(attr.Files[2])},
		UID:   sys.Credential.Uid, GID: sys.Credential.Gid, NoSetGroups: sys.Credential.NoSetGroups,
		Setpgid: sys.Setpgid, Setsid: sys.Setsid, Setctty: sys.Setctty,
		Filter: t.filter, Mask: t.mask,
	}
	pid, pidfd, err := vfork.Spawn(argv0, argv, attr.Env, sa)
	var serr *vfork.SpawnError
	if err != nil && !errors.As(err, &serr) && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)) {
		// The clone itself was refused: nothing started.
		t.spawn = false
		if ferr := t.onFailure(); ferr != nil {
			t.broken = fmt.Errorf("spawn unavailable (%w), and confining the command thread failed: %w", err, ferr)
			return 0, t.broken
		}
		return 0, errSpawnUnavailable
	}
	if err != nil {
		return 0, err
	}
	*sys.PidFD = pidfd
	return pid, nil
}

func (t *procThread) kill(pid int, sig unix.Signal) {
	t.do(func() { _ = unix.Kill(pid, sig) })
}

func (t *procThread) killTree(root int) {
	t.do(func() { killTree(root) })
}
