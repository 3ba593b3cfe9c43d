package seccomp

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// The link filter of an rw workspace (docs/checkpoints.md, "The rw mode").
//
// The executor's dirty set of an rw workspace must hear of every second
// name a sandbox process gives a file before the process can write
// through it: inotify reports such a write at the name written through
// only, and a name made in a directory the tracker does not watch yet
// (made microseconds before) reports nothing. So in that mode the thread
// that forks every command carries a second filter, stacked on the
// sandbox filter, that sends link and linkat to the executor
// (SECCOMP_RET_USER_NOTIF); the executor notes the link and lets the call
// go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE, Linux 5.5). It decides nothing
// from the call's arguments: they are pointers into the caller's memory,
// which another thread may change before the kernel reads them again.
//
// When filters are stacked, the kernel takes the most severe of their
// answers: the sandbox filter's kill or errno beats this filter's notify,
// and its allow loses to it. A listener that goes away (the executor
// stopped serving, closed it) makes every waiting and later link fail
// with ENOSYS: the call never goes on unnoted.

// LinkSyscalls returns the numbers of the system calls that give a file
// another name on the running architecture: link and linkat on amd64,
// linkat on arm64 (which never had link).
func LinkSyscalls() ([]uint32, error) {
	a, err := nativeArch()
	if err != nil {
		return nil, err
	}
	return a.linkSyscalls(), nil
}

func (a *arch) linkSyscalls() []uint32 {
	var nrs []uint32
	for _, name := range []string{"link", "linkat"} {
		if nr, ok := a.numbers[name]; ok {
			nrs = append(nrs, nr)
		}
	}
	return nrs
}

// LinkNotifyProgram returns the link filter: link and linkat of the native
// ABI go to the listener; every other call, and every call of another ABI,
// is allowed by this filter (the sandbox filter under it still decides:
// it kills another ABI's calls and refuses x32's).
func LinkNotifyProgram() ([]unix.SockFilter, error) {
	a, err := nativeArch()
	if err != nil {
		return nil, err
	}
	return a.linkNotifyProgram()
}

func (a *arch) linkNotifyProgram() ([]unix.SockFilter, error) {
	nrs := a.linkSyscalls()
	if len(nrs) == 0 {
		return nil, fmt.Errorf("no link system call on %s", a.name)
	}
	byNr, err := oneOf(nrs, ret(unix.SECCOMP_RET_USER_NOTIF), ret(retAllow))
	if err != nil {
		return nil, err
	}
	prog, err := branch(unix.BPF_JEQ, a.audit, concat(block{load(offsetNr)}, byNr), ret(retAllow))
	if err != nil {
		return nil, err
	}
	return concat(block{load(offsetArch)}, prog), nil
}

// InstallListener sets no_new_privs and installs prog on the calling OS
// thread alone with SECCOMP_FILTER_FLAG_NEW_LISTENER, and returns the
// listener: a descriptor, close-on-exec, from which the notifications of
// prog's SECCOMP_RET_USER_NOTIF are read. Every process the thread forks
// inherits the filter. As for InstallThread, the caller must hold its
// goroutine on the thread for good.
//
// The kernel refuses (EBUSY) a second listener on one thread's chain of
// filters: a sandbox process under this filter cannot install a filter of
// its own with a listener.
func InstallListener(prog []unix.SockFilter) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("set no_new_privs: %w", err)
	}
	fd, err := setFilterListener(prog)
	if err != nil {
		return -1, fmt.Errorf("install seccomp filter with a listener: %w", err)
	}
	return fd, nil
}

// ErrNoContinue is returned by ContinueSupported on a kernel without
// SECCOMP_USER_NOTIF_FLAG_CONTINUE (before 5.5) or without listeners
// (before 5.0).
var ErrNoContinue = errors.New("the kernel cannot let a notified system call go on (SECCOMP_USER_NOTIF_FLAG_CONTINUE, Linux 5.5)")

// ContinueSupported reports whether a listener can answer
// "go on" (SECCOMP_USER_NOTIF_FLAG_CONTINUE). It asks on a thread made for
// the question and ended after it: a filter that allows everything is
// installed there with a listener, and a response with the flag for an id
// no call is waiting on is sent; a kernel that knows the flag answers
// ENOENT (no such notification), one that does not answers EINVAL. A
// filter once installed cannot be removed, so the question cannot be
// asked on a thread that lives on.
func ContinueSupported() error {
	var err error
	onThrowawayThread(func() {
		fd, ierr := InstallListener([]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: retAllow}})
		if ierr != nil {
			err = ierr
			if errors.Is(ierr, unix.EINVAL) {
				err = fmt.Errorf("%w: %w", ErrNoContinue, ierr)
			}
			return
		}
		serr := NotifContinue(fd, 0)
		unix.Close(fd)
		switch {
		case errors.Is(serr, unix.ENOENT):
		case errors.Is(serr, unix.EINVAL):
			err = ErrNoContinue
		case serr == nil:
			err = errors.New("a notification no call waits on was answered")
		default:
			err = serr
		}
	})
	return err
}

// onThrowawayThread runs f on an OS thread that ends after it, with
// whatever f did to it. The main thread cannot end (the runtime parks a
// locked goroutine's main thread for good instead): when the goroutine
// lands there, it holds it while another goroutine, which then cannot
// land there, runs f.
func onThrowawayThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked but on the main thread
		if unix.Gettid() == unix.Getpid() {
			onThrowawayThread(f)
			runtime.UnlockOSThread()
			return
		}
		f()
	}()
	<-done
}

// Notif is the kernel's struct seccomp_notif: one system call waiting for
// the listener's answer.
type Notif struct {
	ID uint64
	// Pid is the calling thread's id in the listener's PID namespace
	// (0 if it has none there).
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}
