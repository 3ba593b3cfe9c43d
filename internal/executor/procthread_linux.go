package executor

import (
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
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
}

func newProcThread() *procThread {
	t := &procThread{ops: make(chan func())}
	ready := make(chan struct{})
	go func() {
		// Never unlocked: the thread is dedicated for the executor's life.
		runtime.LockOSThread()
		close(ready)
		for op := range t.ops {
			op()
		}
	}()
	<-ready
	return t
}

func (t *procThread) do(f func()) {
	done := make(chan struct{})
	t.ops <- func() { f(); close(done) }
	<-done
}

func (t *procThread) forkExec(argv0 string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	t.do(func() { pid, err = syscall.ForkExec(argv0, argv, attr) })
	return pid, err
}

func (t *procThread) kill(pid int, sig unix.Signal) {
	t.do(func() { _ = unix.Kill(pid, sig) })
}

func (t *procThread) killTree(root int) {
	t.do(func() { killTree(root) })
}
