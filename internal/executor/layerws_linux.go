package executor

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Names, in a built root's empty workspace, of the layers layeredWorkspace
// makes there: the overlay mounted over the workspace hides them.
const (
	wsLowerName = ".airlock-lower"
	wsUpperName = ".airlock-upper"
	wsWorkName  = ".airlock-work"
)

// layeredWorkspace makes the empty workspace at dir, a directory a runtime
// built (a pod's volume, gVisor's tmpfs), the overlay an empty native workspace is
// (setupWorkspace): an empty lower directory, into which imports unpack
// the restored or uploaded tree (executor.lower), under an empty upper
// layer, so the changes made after an import are the upper layer's and a
// checkpoint walks them alone. The three directories the overlay needs
// are made in dir itself, so the tree stays where it was (in the volume,
// in its size limit), and the overlay mounted over dir hides them: nothing
// in the sandbox has a path to them. It returns O_PATH descriptors of the
// upper and lower layers, close-on-exec, as setupWorkspace does.
//
// It runs before anything has looked into dir. A dir that holds anything
// is left as it is (-1, -1 and no error): what it holds would not be in
// the overlay. On an error, dir is left as it was.
func layeredWorkspace(dir string, gvisor bool) (upper, lower int, err error) {
	d, err := os.Open(dir)
	if err != nil {
		return -1, -1, err
	}
	names, err := d.Readdirnames(1)
	d.Close()
	if len(names) > 0 {
		return -1, -1, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return -1, -1, err
	}
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	defer unix.Close(root)
	if gvisor {
		// runsc 20221219 (Debian's) is told by its statx, which fails
		// with AT_NO_AUTOMOUNT (EINVAL) on every path, its tmpfs's too.
		// Its /proc lets a command open the executor's descriptors
		// (docs/gvisor.md): the layers would be the commands' to write
		// behind the overlay's back (TestAttacks/gvisor/WorkspaceLayers
		// planted a file in them). There the workspace stays the tmpfs.
		var stx unix.Statx_t
		if serr := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT, unix.STATX_BASIC_STATS, &stx); serr != nil {
			return -1, -1, fmt.Errorf("statx with AT_NO_AUTOMOUNT: %w: runsc 20221219, whose /proc shows the executor's descriptors: no layers", serr)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return -1, -1, err
	}
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(root, &sfs); err != nil {
		return -1, -1, err
	}
	made := []string{}
	defer func() {
		if err != nil {
			for _, n := range made {
				_ = unix.Unlinkat(root, n, unix.AT_REMOVEDIR)
			}
		}
	}()
	for _, n := range []string{wsLowerName, wsUpperName, wsWorkName} {
		if err = unix.Mkdirat(root, n, 0o700); err != nil {
			return -1, -1, err
		}
		made = append(made, n)
	}
	// The overlay's root takes its owner and mode from the upper layer:
	// the mode dir had (the owner is the executor's, the sandbox's root).
	for _, n := range []string{wsLowerName, wsUpperName} {
		if err = unix.Fchmodat(root, n, st.Mode&0o7777, 0); err != nil {
			return -1, -1, err
		}
	}
	// The overlay keeps what the volume's mount forbids.
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if sfs.Flags&unix.ST_NOEXEC != 0 {
		flags |= unix.MS_NOEXEC
	}
	if sfs.Flags&unix.ST_RDONLY != 0 {
		err = errors.New("the workspace is read-only")
		return -1, -1, err
	}
	const open = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if upper, err = unix.Openat(root, wsUpperName, open, 0); err != nil {
		return -1, -1, err
	}
	if lower, err = unix.Openat(root, wsLowerName, open, 0); err != nil {
		unix.Close(upper)
		return -1, -1, err
	}
	opts := fmt.Sprintf("lowerdir=%[1]s/%[2]s,upperdir=%[1]s/%[3]s,workdir=%[1]s/%[4]s", dir, wsLowerName, wsUpperName, wsWorkName)
	if !gvisor {
		// Linux, in the executor's user namespace: the overlay's marks
		// are user.overlay.* (gVisor's are trusted.overlay.*, which it
		// lets its root write).
		opts += ",userxattr"
	}
	if err = unix.Mount("overlay", dir, "overlay", flags, opts); err != nil {
		unix.Close(upper)
		unix.Close(lower)
		return -1, -1, fmt.Errorf("overlay over %s: %w", dir, err)
	}
	return upper, lower, nil
}
