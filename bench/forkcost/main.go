// Command forkcost measures what a fork that makes a user namespace costs
// the forking Go process, against one the runtime may vfork: the price of
// starting a sandbox's executor from the front end (docs/benchmarks.md,
// issue 29). Go's syscall.forkExec never uses CLONE_VM|CLONE_VFORK when the
// clone flags hold CLONE_NEWUSER (the child waits for its parent to write
// its id maps), so the parent's page tables are copied and write-protected,
// and every page it writes after the fork faults once more (copy-on-write).
// On this VM (shadow paging) each of those faults traps to the hypervisor.
//
// The program keeps -heap KiB of heap touched, as the front end's is at its
// fork, forks /bin/true -n times in each mode, alternating, writes -write
// KiB of that heap after each fork (the front end writes about 130 pages
// after its fork), and prints medians: the wall time of ForkExec, and the
// parent's CPU and page faults (getrusage) in ForkExec and with the writes.
// Root: the modes make user, mount, PID, IPC, UTS and network namespaces.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 40, "forks per mode")
	heapKiB := flag.Int("heap", 1536, "KiB of heap touched before the forks")
	writeKiB := flag.Int("write", 512, "KiB of it written after each fork")
	flag.Parse()
	heap := make([]byte, *heapKiB<<10)
	write(heap)
	after := heap[:min(len(heap), *writeKiB<<10)]

	ns := syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
	modes := []struct {
		name string
		sys  syscall.SysProcAttr
	}{
		{"user namespace, id maps (airlock's; fork)", syscall.SysProcAttr{Cloneflags: uintptr(ns | syscall.CLONE_NEWUSER), UidMappings: ids, GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}},
		{"user namespace alone, no maps (fork)", syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}},
		{"the other namespaces, no user namespace (vfork)", syscall.SysProcAttr{Cloneflags: uintptr(ns)}},
		{"no namespaces (vfork)", syscall.SysProcAttr{}},
	}
	type sample struct{ wall, cpuFork, cpuAll, fltFork, fltAll []float64 }
	res := make([]sample, len(modes))
	for range *n {
		for i, m := range modes {
			sys := m.sys
			attr := &syscall.ProcAttr{Env: []string{}, Files: []uintptr{0, 1, 2}, Sys: &sys}
			c0, f0 := usage()
			t0 := time.Now()
			pid, err := syscall.ForkExec("/bin/true", []string{"true"}, attr)
			wall := time.Since(t0)
			if err != nil {
				fmt.Fprintf(os.Stderr, "forkcost: %s: %v\n", m.name, err)
				os.Exit(1)
			}
			c1, f1 := usage()
			write(after)
			c2, f2 := usage()
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
			s := &res[i]
			s.wall = append(s.wall, ms(wall))
			s.cpuFork = append(s.cpuFork, ms(c1-c0))
			s.cpuAll = append(s.cpuAll, ms(c2-c0))
			s.fltFork = append(s.fltFork, float64(f1-f0))
			s.fltAll = append(s.fltAll, float64(f2-f0))
		}
	}
	fmt.Fprintf(os.Stdout, "heap %d KiB, %d KiB written after each fork, medians of %d\n", *heapKiB, *writeKiB, *n)
	for i, m := range modes {
		s := res[i]
		fmt.Fprintf(os.Stdout, "%-48s ForkExec %6.2f ms; parent CPU %5.2f ms (%4.0f faults) in ForkExec, %5.2f ms (%4.0f faults) with the writes\n",
			m.name, median(s.wall), median(s.cpuFork), median(s.fltFork), median(s.cpuAll), median(s.fltAll))
	}
}

// write writes one byte of every page of b.
func write(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i]++
	}
}

// usage is this process's CPU time and minor page faults so far.
func usage() (time.Duration, int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Minflt
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}
