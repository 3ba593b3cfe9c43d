//go:build linux

package seccomp

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setFilter calls seccomp(SECCOMP_SET_MODE_FILTER, flags, prog).
func setFilter(prog []unix.SockFilter, flags uintptr) error {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("program length %d out of range", len(prog))
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return errno
	}
	if r != 0 {
		// With TSYNC, a positive result is the ID of a thread that could
		// not be synchronized because it runs under an unrelated filter.
		return fmt.Errorf("thread %d could not be synchronized", r)
	}
	return nil
}
