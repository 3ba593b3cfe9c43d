package executor

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
)

// BenchmarkAllThreadsSyscall is the CPU of one system call made on every
// thread (syscall.AllThreadsSyscall: a stop of the world, a signal to
// every other thread and a spin until each has answered), in a process
// with the executor's thread counts (3 threads when it takes its ids, 5-6
// when Landlock is applied), against the same call on one thread. The
// executor makes these calls at every start (takeIDs, landlock.Restrict);
// docs/benchmarks.md (threads29) counts them per sandbox. cpu-µs/op is
// the process's user and system time (every thread's, cpuTime) per call. It needs
// a binary without cgo: run without -race.
func BenchmarkAllThreadsSyscall(b *testing.B) {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
		b.Skip("AllThreadsSyscall is refused in a cgo binary (-race): run without -race")
	}
	prev := runtime.GOMAXPROCS(1) // as the executor runs (execproto.ExecutorEnv)
	defer runtime.GOMAXPROCS(prev)
	// Threads parked for good, as the executor's idle threads are; they
	// stay for the rest of the test binary, so the sub-benchmarks go up.
	var threads int
	for _, want := range []int{3, 5} {
		for threads < want-2 { // besides the benchmark's own and sysmon
			ready := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				close(ready)
				select {}
			}()
			<-ready
			threads++
		}
		b.Run(fmt.Sprintf("threads=%d+", want), func(b *testing.B) {
			c0 := cpuTime()
			for b.Loop() {
				if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 {
					b.Fatal(e)
				}
			}
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
	b.Run("one-thread", func(b *testing.B) {
		c0 := cpuTime()
		for b.Loop() {
			if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 {
				b.Fatal(e)
			}
		}
		b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/1e3, "cpu-µs/op")
	})
}
