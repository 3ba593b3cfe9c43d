package executor

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawMount is unix.Mount without the runtime's system-call hooks: with
// one P, a system call that outlasts a tick of the runtime's monitor has
// its P taken and handed to another thread, which starts, finds nothing to
// run and sleeps again. The setup's mounts are of local filesystems (tmpfs,
// proc, devpts, overlay and binds of the host's directories): none waits on
// anything but the kernel, so holding the P through them is safe.
func rawMount(source, target, fstype string, flags uintptr, data string) error {
	src, err := unix.BytePtrFromString(source)
	if err != nil {
		return err
	}
	dst, err := unix.BytePtrFromString(target)
	if err != nil {
		return err
	}
	typ, err := unix.BytePtrFromString(fstype)
	if err != nil {
		return err
	}
	// No data is NULL, not "", as unix.Mount passes it: some filesystems
	// refuse an empty string.
	var opts *byte
	if data != "" {
		if opts, err = unix.BytePtrFromString(data); err != nil {
			return err
		}
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_MOUNT, uintptr(unsafe.Pointer(src)), uintptr(unsafe.Pointer(dst)), uintptr(unsafe.Pointer(typ)), flags, uintptr(unsafe.Pointer(opts)), 0); e != 0 {
		return e
	}
	return nil
}
