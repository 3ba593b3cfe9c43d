package executor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// sigactionT is the kernel's struct sigaction for rt_sigaction(2).
type sigactionT struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const sigIgn = 1 // SIG_IGN

// resetIgnoredSignals gives every signal that the executor inherited as
// ignored its default action again. An ignored disposition survives fork and
// exec, so whatever the host's parent ignored (a shell, a CI harness: signal
// 32 was seen) would be ignored by every command. Handlers are reset on exec
// and need nothing. The kernel drops default-action signals sent to a PID
// namespace's init from inside, so the executor itself stays immune.
func resetIgnoredSignals() {
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		var old sigactionT
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue
		}
		if old.handler != sigIgn {
			continue
		}
		dfl := sigactionT{}
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	}
}
