package executor

import (
	"errors"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// The checkpoint walk's opens: one name beneath a directory descriptor,
// never following a symlink, never crossing a mount. Linux does it in one
// openat2 call; gVisor has no openat2 (ENOSYS), so there the same is built
// from openat with O_NOFOLLOW, as the import op walks.

// resolveBeneath confines every open of a walk to the directory it is
// relative to: no symlink, no "..", no magic link, no mount crossed. With
// O_NOFOLLOW, a name swapped for a symlink mid-walk fails to open instead
// of leading the walk out of the workspace.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// haveOpenat2 says whether the kernel below implements openat2: Linux
// since 5.6 does, gVisor (20221219) does not. Asked once; the answer is
// the kernel's and does not change while the executor runs.
var haveOpenat2 = sync.OnceValue(func() bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC})
	if err == nil {
		unix.Close(fd)
	}
	return !errors.Is(err, unix.ENOSYS)
})

// openBeneath opens name, one component, relative to the directory dirfd.
func openBeneath(dirfd int, name string, flags int) (int, error) {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY // openat2 refuses it with O_PATH
	}
	if !haveOpenat2() {
		return openComponent(dirfd, name, flags)
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: resolveBeneath}
	for range 16 {
		fd, err := unix.Openat2(dirfd, name, &how)
		// EAGAIN: a rename or mount raced the resolution.
		if !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// openComponent is openBeneath without openat2, for the same names and
// with the same errors: name is one component or "." ("" is ENOENT, ".."
// EXDEV as RESOLVE_BENEATH refuses a climb out; a name with a slash, which
// the walk never opens, is EXDEV too, more than openat2 refuses), so
// O_NOFOLLOW leaves no symlink to follow (a symlink's name is ELOOP, or
// ENOTDIR with O_DIRECTORY); and a directory it opens must be on dirfd's
// device, else it is a mount point (EXDEV, as RESOLVE_NO_XDEV says). Only
// directories: an overlay (gVisor's, as Linux's) reports a file's own
// layer's device, so a file's device says nothing of mounts; and a file
// mounted over a name of /workspace is one the sandbox's user reads anyway
// (commands have no CAP_SYS_ADMIN to mount one: only the bundle's mounts
// are there). No magic link is reached: that needs a symlink followed.
func openComponent(dirfd int, name string, flags int) (int, error) {
	if name == "" {
		return -1, unix.ENOENT
	}
	if name == ".." || strings.ContainsRune(name, '/') {
		return -1, unix.EXDEV
	}
	var dst unix.Stat_t
	if err := unix.Fstat(dirfd, &dst); err != nil {
		return -1, err
	}
	var fd int
	var err error
	for {
		fd, err = unix.Openat(dirfd, name, flags, 0)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Dev != dst.Dev {
		unix.Close(fd)
		return -1, unix.EXDEV
	}
	return fd, nil
}

// normalTime is t as seconds and nanoseconds in [0, 1e9), which a tar
// header holds. gVisor (20221219) reports a time before 1970 as seconds
// truncated toward zero and negative nanoseconds wrapped to 32 bits
// unsigned (1960-01-01 00:00:00.5 is -315619199 s and 3794967296 ns):
// nanoseconds of 2^31 or more are read as that negative int32.
func normalTime(t unix.Timespec) (sec, nsec int64) {
	sec, nsec = t.Sec, t.Nsec
	if nsec >= 1<<31 && nsec < 1<<32 {
		nsec = int64(int32(uint32(nsec)))
	}
	sec, nsec = sec+nsec/1e9, nsec%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return sec, nsec
}
