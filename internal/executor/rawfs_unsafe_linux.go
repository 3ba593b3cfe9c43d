package executor

import (
	"errors"
	"io/fs"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The setup's file system calls without the runtime's system-call hooks,
// for the reason rawMount gives: with one P, a call that outlasts a tick of
// the runtime's monitor has its P taken and handed to another thread,
// which starts, finds nothing to run and sleeps again. Each of these works
// on the scratch tmpfs, the sandbox's own /proc or /dev, or a stat or a
// readlink of the host's local system directories: none waits on anything
// but the kernel. They are for the setup only, before anything of the
// sandbox runs; the protocol's file operations, which may touch any file
// system a mount brought, keep the runtime's calls.

// atFDCWD is unix.AT_FDCWD (-100) as an unsigned system call argument.
const atFDCWD = ^uintptr(-unix.AT_FDCWD - 1)

// rawPath1 calls trap with AT_FDCWD, p and a, b, c after it, none of
// which may be a pointer converted to uintptr (the runtime would not see
// it): calls that pass one convert it in their own RawSyscall6 call.
func rawPath1(trap uintptr, p string, a, b, c uintptr) (uintptr, error) {
	ptr, err := unix.BytePtrFromString(p)
	if err != nil {
		return 0, err
	}
	r, _, e := unix.RawSyscall6(trap, atFDCWD, uintptr(unsafe.Pointer(ptr)), a, b, c, 0)
	if e != 0 {
		return 0, e
	}
	return r, nil
}

// rawMkdir is unix.Mkdir.
func rawMkdir(p string, perm uint32) error {
	_, err := rawPath1(unix.SYS_MKDIRAT, p, uintptr(perm), 0, 0)
	return err
}

// rawStat is unix.Stat, or unix.Lstat with flags AT_SYMLINK_NOFOLLOW.
func rawStat(p string, st *unix.Stat_t, flags int) error {
	ptr, err := unix.BytePtrFromString(p)
	if err != nil {
		return err
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_NEWFSTATAT, atFDCWD, uintptr(unsafe.Pointer(ptr)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0); e != 0 {
		return e
	}
	return nil
}

// rawExists reports whether p names something, a link not followed.
func rawExists(p string) bool {
	var st unix.Stat_t
	return rawStat(p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// rawIsDir reports whether p is a directory, a link not followed.
func rawIsDir(p string) bool {
	var st unix.Stat_t
	return rawStat(p, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// mkdirAll is os.MkdirAll for the setup's trees, which are new: it tries
// the directory first and looks at its parents only when that fails,
// where os.MkdirAll stats the path and each missing parent before it
// creates them.
func mkdirAll(p string, perm uint32) error {
	err := rawMkdir(p, perm)
	if errors.Is(err, unix.ENOENT) {
		if parent := filepath.Dir(p); parent != p {
			if err := mkdirAll(parent, perm); err != nil {
				return err
			}
			err = rawMkdir(p, perm)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		// As os.MkdirAll: a directory, or a link to one, is what was asked.
		var st unix.Stat_t
		if rawStat(p, &st, 0) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return nil
		}
		err = unix.ENOTDIR
	}
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: p, Err: err}
	}
	return nil
}

// rawWriteFile is writeFile: name created or truncated with perm, and data
// written to it.
func rawWriteFile(name string, data []byte, perm uint32) error {
	r, err := rawPath1(unix.SYS_OPENAT, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, uintptr(perm), 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	fd := r
	for len(data) > 0 {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)))
		if e == unix.EINTR {
			continue
		}
		if e == 0 && n == 0 {
			e = unix.EIO
		}
		if e != 0 {
			unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
			return &fs.PathError{Op: "write", Path: name, Err: e}
		}
		data = data[n:]
	}
	if _, _, e := unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0); e != 0 {
		return &fs.PathError{Op: "close", Path: name, Err: e}
	}
	return nil
}

// rawSymlink is os.Symlink.
func rawSymlink(target, name string) error {
	t, err := unix.BytePtrFromString(target)
	if err != nil {
		return err
	}
	n, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SYMLINKAT, uintptr(unsafe.Pointer(t)), atFDCWD, uintptr(unsafe.Pointer(n))); e != 0 {
		return &fs.PathError{Op: "symlink", Path: name, Err: e}
	}
	return nil
}

// rawReadlink is os.Readlink (a link's target is shorter than PATH_MAX).
func rawReadlink(p string) (string, error) {
	ptr, err := unix.BytePtrFromString(p)
	if err != nil {
		return "", err
	}
	var buf [unix.PathMax]byte
	n, _, e := unix.RawSyscall6(unix.SYS_READLINKAT, atFDCWD, uintptr(unsafe.Pointer(ptr)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return "", &fs.PathError{Op: "readlink", Path: p, Err: e}
	}
	if int(n) >= len(buf) {
		return "", &fs.PathError{Op: "readlink", Path: p, Err: unix.ENAMETOOLONG}
	}
	return string(buf[:n]), nil
}

// rawChown is os.Chown.
func rawChown(p string, uid, gid int) error {
	if _, err := rawPath1(unix.SYS_FCHOWNAT, p, uintptr(uid), uintptr(gid), 0); err != nil {
		return &fs.PathError{Op: "chown", Path: p, Err: err}
	}
	return nil
}

// rawChmod is os.Chmod of a permission (no set-id or sticky bits).
func rawChmod(p string, perm uint32) error {
	if _, err := rawPath1(unix.SYS_FCHMODAT, p, uintptr(perm), 0, 0); err != nil {
		return &fs.PathError{Op: "chmod", Path: p, Err: err}
	}
	return nil
}

// rawMountSetattr is unix.MountSetattr at a path.
func rawMountSetattr(p string, flags int, attr *unix.MountAttr) error {
	ptr, err := unix.BytePtrFromString(p)
	if err != nil {
		return err
	}
	if _, _, e := unix.RawSyscall6(unix.SYS_MOUNT_SETATTR, atFDCWD, uintptr(unsafe.Pointer(ptr)), uintptr(flags), uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr), 0); e != 0 {
		return e
	}
	return nil
}
