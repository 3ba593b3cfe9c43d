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

// setFilterListener calls seccomp(SECCOMP_SET_MODE_FILTER,
// SECCOMP_FILTER_FLAG_NEW_LISTENER, prog) on the calling thread and returns
// the listener.
func setFilterListener(prog []unix.SockFilter) (int, error) {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return -1, fmt.Errorf("program length %d out of range", len(prog))
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// notifResp is the kernel's struct seccomp_notif_resp.
type notifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// NotifRecv reads the next notification of the listener fd into n. It
// blocks while none waits (the listener is readable when one does). ENOENT:
// the call that was waiting went away (its thread killed) before it was
// read.
func NotifRecv(fd int, n *Notif) error {
	// The kernel refuses a buffer that is not zeroed (Linux 5.5 on).
	*n = Notif{}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(n)))
	if errno != 0 {
		return errno
	}
	return nil
}

// NotifContinue answers the notification id: the system call goes on as
// if no filter had stopped it (SECCOMP_USER_NOTIF_FLAG_CONTINUE). ENOENT:
// no call waits under that id (its thread was killed, or it was
// answered).
func NotifContinue(fd int, id uint64) error {
	r := notifResp{id: id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&r)))
	if errno != 0 {
		return errno
	}
	return nil
}

// sizes the kernel's structs must have.
var (
	_ [80 - unsafe.Sizeof(Notif{})]struct{}
	_ [unsafe.Sizeof(Notif{}) - 80]struct{}
	_ [24 - unsafe.Sizeof(notifResp{})]struct{}
	_ [unsafe.Sizeof(notifResp{}) - 24]struct{}
)
