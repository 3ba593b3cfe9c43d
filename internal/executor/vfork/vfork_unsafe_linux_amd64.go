package vfork

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Supported says that Exec is built for this architecture.
const Supported = true

// The runtime's fork hooks, which the syscall package's own fork uses
// and which the runtime keeps linkable from outside (go.dev/issue/67401):
// signals blocked and the stack guarded around the clone, and the
// child's signal handlers reset before its exec.

//go:linkname runtimeBeforeFork syscall.runtime_BeforeFork
func runtimeBeforeFork()

//go:linkname runtimeAfterFork syscall.runtime_AfterFork
func runtimeAfterFork()

//go:linkname runtimeAfterForkInChild syscall.runtime_AfterForkInChild
func runtimeAfterForkInChild()

// rawVfork is in vfork_linux_amd64.s.
func rawVfork(trap, a1, a2, a3 uintptr) (r1 uintptr, err syscall.Errno)

// cloneArgs is struct clone_args (linux/sched.h) up to cgroup.
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

// execArgs are a child's exec arguments and working directory as the
// system calls take them, made by the parent: a vfork's child shares the
// parent's memory and may not allocate. Exec's and Spawn's children both
// embed them.
type execArgs struct {
	path       *byte
	argv, envv []*byte
	dir        *byte
}

func newExecArgs(path string, argv, env []string, dir string) (a execArgs, err error) {
	if a.path, err = syscall.BytePtrFromString(path); err != nil {
		return a, err
	}
	if a.argv, err = syscall.SlicePtrFromStrings(argv); err != nil {
		return a, err
	}
	if a.envv, err = syscall.SlicePtrFromStrings(env); err != nil {
		return a, err
	}
	a.dir, err = syscall.BytePtrFromString(dir)
	return a, err
}

// collect waits for the child pid to end (it has been killed, or exited
// before its exec) and closes its pidfd.
func collect(pid, pidfd int) {
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	unix.Close(pidfd)
}

// vforkChild is what the child of Exec needs, all of it made by the
// parent: the child shares the parent's memory and may not allocate.
type vforkChild struct {
	execArgs
	fds    []int // descriptors 0, 1, 2, ...: moved into place in the child
	nextfd int   // above every descriptor in fds
	// tasks are the v1 `tasks` files the child writes "0" to (itself).
	tasks []int
	zero  *byte // "0"
	// inTasks: err is a write to one of tasks.
	inTasks bool
	clone   cloneArgs
	// err is the child's error, written before it exits (the parent reads
	// it once the clone has returned: a vfork's parent resumes only
	// after its child has exec'd or exited).
	err syscall.Errno
}

// Exec starts path in new namespaces with a clone that shares this
// process's memory: CLONE_VM|CLONE_VFORK into the namespaces of
// cloneflags (a user namespace among them), which Go's syscall.ForkExec
// never does with CLONE_NEWUSER because its child waits for the parent to
// write the id maps. Here the child execs at once, before any id map
// exists: it raises every capability it holds in the new user namespace
// into the ambient set (the only way they survive an exec by a uid the
// namespace does not map), and afterExec writes the maps once the exec is
// done (WriteIDMaps). The process started must be an executor started
// with execproto's late-ids argument, which takes uid and gid 0 of the
// namespace only after the host's hello, which comes after the maps;
// until then it holds the caller's ids, unmapped in its namespace, and
// every capability only there. So the caller's memory is never copied: no
// page tables duplicated, no copy-on-write faults on each page it writes
// afterwards (about 130 a start in the front end).
//
// files are the child's descriptors 0, 1, 2, ...; one of -1 (as uintptr)
// is closed in the child; every other descriptor must be close-on-exec.
// The child is made a session leader, with its working directory /.
// cgroupFD >= 0 places the child in that cgroup2 group at the clone.
// tasks are descriptors of cgroup v1 `tasks` files, opened for writing by
// the caller: the child writes "0" to each before its exec, which moves
// it (its one thread, so the whole process) into those groups. A thread
// that moves itself through `tasks` is the one migration the kernel does
// without taking cgroup_threadgroup_rwsem for writing, whose writer waits
// for an RCU grace period (milliseconds) on a v1 hierarchy mounted
// without favordynmods, as any write of a pid to cgroup.procs does; and
// everything the process charges from its exec on is charged there. A
// failed write fails Exec before the exec. The parent-death signal is SIGKILL, tied to the calling thread (callers
// lock it, and it must outlive the child). afterExec gets the child's pid
// and pidfd; on its error, or any error after the clone, the child is
// killed and collected here (unless another waiter collects it first).
//
// Users: the sandbox backend's direct start (the CLI) and the spawner.
func Exec(path string, argv, env []string, files []uintptr, cloneflags uintptr, cgroupFD int, tasks []int, afterExec func(pid, pidfd int) error) (pid, pidfd int, err error) {
	c := &vforkChild{fds: make([]int, len(files)), tasks: tasks}
	if c.zero, err = syscall.BytePtrFromString("0"); err != nil {
		return 0, -1, err
	}
	if c.execArgs, err = newExecArgs(path, argv, env, "/"); err != nil {
		return 0, -1, err
	}
	c.nextfd = len(files)
	for i, f := range files {
		c.fds[i] = int(f) // -1 stays -1: closed in the child
		c.nextfd = max(c.nextfd, int(f))
	}
	c.nextfd++
	var fd int32 = -1
	c.clone = cloneArgs{
		flags:      uint64(cloneflags) | unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD,
		pidfd:      uint64(uintptr(unsafe.Pointer(&fd))),
		exitSignal: uint64(syscall.SIGCHLD),
	}
	if cgroupFD >= 0 {
		c.clone.flags |= unix.CLONE_INTO_CGROUP
		c.clone.cgroup = uint64(cgroupFD)
	}
	// No descriptor made without close-on-exec by another goroutine
	// may leak into the child (the syscall package's rule for forks).
	syscall.ForkLock.Lock()
	p, errno := vforkAndExec(c)
	syscall.ForkLock.Unlock()
	if errno != 0 {
		return 0, -1, errno
	}
	pid, pidfd = int(p), int(fd)
	fail := func(err error) (int, int, error) {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		collect(pid, pidfd)
		return 0, -1, err
	}
	if c.err != 0 && c.inTasks {
		return fail(&os.SyscallError{Syscall: "join cgroup v1 (write 0 to tasks)", Err: c.err})
	}
	if c.err != 0 {
		return fail(c.err)
	}
	if err := afterExec(pid, pidfd); err != nil {
		return fail(err)
	}
	return pid, pidfd, nil
}

// vforkAndExec clones c's child and returns in the parent once the child
// has exec'd or exited. The child never returns from it.
//
// Everything the child does is in this one frame and in functions that
// never grow the stack: it runs on the parent's stack, which the parent
// uses again once it resumes.
//
//go:noinline
//go:norace
//go:nocheckptr
func vforkAndExec(c *vforkChild) (pid uintptr, err1 syscall.Errno) {
	const (
		prCapAmbient      = 0x2f // linux/prctl.h
		prCapAmbientRaise = 0x2
	)
	var (
		i    int
		capc uintptr
		hdr  unix.CapUserHeader
		data [2]unix.CapUserData
	)
	// No allocation and no call that may grow the stack from here on.
	runtimeBeforeFork()
	pid, err1 = rawVfork(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&c.clone)), unsafe.Sizeof(c.clone), 0)
	if err1 != 0 || pid != 0 {
		// The parent: return at once, out of the child's frame.
		runtimeAfterFork()
		return
	}

	// The child, in its new namespaces, root of none yet.
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0); err1 != 0 {
		goto childerror
	}
	runtimeAfterForkInChild() // signal handlers reset, the mask restored

	// Into the v1 groups, before the descriptors move (a tasks descriptor
	// may be one of the numbers they move onto) and before the exec.
	for i = 0; i < len(c.tasks); i++ {
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_WRITE, uintptr(c.tasks[i]), uintptr(unsafe.Pointer(c.zero)), 1); err1 != 0 {
			c.inTasks = true
			goto childerror
		}
	}

	// Every capability this process holds in its new user namespace into
	// the inheritable and then the ambient set: the exec keeps the ambient
	// set for a process the namespace does not map as root.
	hdr.Version = unix.LINUX_CAPABILITY_VERSION_3
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err1 != 0 {
		goto childerror
	}
	data[0].Inheritable, data[1].Inheritable = data[0].Permitted, data[1].Permitted
	if _, _, err1 = syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err1 != 0 {
		goto childerror
	}
	for capc = 0; capc < 64; capc++ {
		if data[capc>>5].Permitted&(1<<(capc&31)) == 0 {
			continue
		}
		if _, _, err1 = syscall.RawSyscall6(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientRaise, capc, 0, 0, 0); err1 != 0 {
			goto childerror
		}
	}

	// Descriptors: first those below their place move above every one
	// (so the second pass cannot close one still to be moved), then each
	// onto its place, without close-on-exec.
	for i = 0; i < len(c.fds); i++ {
		if c.fds[i] >= 0 && c.fds[i] < i {
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(c.fds[i]), uintptr(c.nextfd), syscall.O_CLOEXEC); err1 != 0 {
				goto childerror
			}
			c.fds[i] = c.nextfd
			c.nextfd++
		}
	}
	for i = 0; i < len(c.fds); i++ {
		if c.fds[i] < 0 {
			syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(i), 0, 0)
			continue
		}
		if c.fds[i] == i {
			if _, _, err1 = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(i), syscall.F_SETFD, 0); err1 != 0 {
				goto childerror
			}
			continue
		}
		if _, _, err1 = syscall.RawSyscall(syscall.SYS_DUP3, uintptr(c.fds[i]), uintptr(i), 0); err1 != 0 {
			goto childerror
		}
	}

	if _, _, err1 = syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(c.dir)), 0, 0); err1 != 0 {
		goto childerror
	}
	// The parent thread blocks in the clone until the exec: it cannot have
	// ended before this point without taking the whole process with it,
	// whose end closes the executor's control socket (it then exits).
	if _, _, err1 = syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0, 0); err1 != 0 {
		goto childerror
	}
	_, _, err1 = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(c.path)), uintptr(unsafe.Pointer(&c.argv[0])), uintptr(unsafe.Pointer(&c.envv[0])))

childerror:
	c.err = err1
	for {
		syscall.RawSyscall(syscall.SYS_EXIT, 253, 0, 0)
	}
}
