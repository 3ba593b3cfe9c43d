package executor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// neutralReadOnly makes the read-only directory mount just attached at dst
// (a tree cloned from a host path) an overlay whose top layer is a detached
// clone of that mount, so that the sandbox's mountinfo no longer names the
// source's path on the host: a bind's root field is its source's path within
// its file system (the kernel has no other name for it), while an overlay's
// root is "/" and a layer given as a detached mount is listed as
// "lowerdir+=/" (its root has no path above it). It runs only for a sandbox
// whose host leaves its read-only directories unchanged (Setup.
// StaticReadOnly): overlayfs caches names, so a change the host makes to a
// layer under it may not show. It reports whether it did.
//
// It leaves the bind as it is, and reports false, when
//   - the kernel does not take an overlay layer by descriptor (fsconfig
//     FSCONFIG_SET_FD of "lowerdir+", Linux 6.13): detected by trying, as
//     the EINVAL of an unknown parameter or of a string-only one;
//   - the kernel refuses the overlay of that layer (a file system overlayfs
//     does not stack on, or too deep a stack): the bind is what it was
//     before;
//   - the tree has mounts below its root: an overlay's layer is one mount,
//     so they would vanish from view.
//
// The overlay is read-only (no upper layer; its second layer is an empty
// directory, as overlayfs wants two then) and keeps the bind's nosuid,
// nodev, noexec and nosymfollow and its id-mapping (the layer's). What
// differs from the bind: st_dev and statfs are the overlay's, and a
// whiteout (a 0/0 character device) in the source hides its name.
func neutralReadOnly(dst string) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dst, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return false, fmt.Errorf("statx %s: %w", dst, err)
	}
	if stx.Mask&unix.STATX_MNT_ID == 0 {
		return false, nil
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	if hasChildMount(info, stx.Mnt_id) {
		return false, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", dst, err)
	}
	attr := int(unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if st.Flags&unix.ST_NOEXEC != 0 {
		attr |= unix.MOUNT_ATTR_NOEXEC
	}
	if st.Flags&stNoSymfollow != 0 {
		attr |= unix.MOUNT_ATTR_NOSYMFOLLOW
	}
	// One mount (no AT_RECURSIVE: there is none below it), detached, with
	// the bind's flags and id-mapping.
	layer, err := unix.OpenTree(unix.AT_FDCWD, dst, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return false, fmt.Errorf("open_tree %s: %w", dst, err)
	}
	defer unix.Close(layer)
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false, fmt.Errorf("open overlay: %w", err)
	}
	defer unix.Close(fsfd)
	// Without an upper layer overlayfs wants two layers: the second is an
	// empty directory of the scratch tmpfs, detached the same way.
	empty, err := emptyLayer()
	if err != nil {
		return false, err
	}
	defer unix.Close(empty)
	for _, l := range []int{layer, empty} {
		if err := unix.FsconfigSetFd(fsfd, "lowerdir+", l); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return false, nil // before Linux 6.13
			}
			return false, fmt.Errorf("overlay lowerdir+: %w", err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return false, nil // a layer overlayfs does not take: the bind stays
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attr)
	if err != nil {
		return false, fmt.Errorf("mount overlay: %w", err)
	}
	defer unix.Close(mnt)
	// The overlay holds its own reference to its layer.
	if err := unix.Unmount(dst, unix.MNT_DETACH); err != nil {
		return false, fmt.Errorf("detach the bind at %s: %w", dst, err)
	}
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return false, fmt.Errorf("attach the overlay at %s: %w", dst, err)
	}
	return true, nil
}

// emptyLayer returns a detached mount of an empty directory of the scratch
// tmpfs, made the first time.
func emptyLayer() (int, error) {
	dir := scratchDir + "/empty-layer"
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return -1, err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", dir, err)
	}
	return fd, nil
}

// stNoSymfollow is statfs's flag of a nosymfollow mount (linux/statfs.h),
// which x/sys does not name.
const stNoSymfollow = 0x2000

// hasChildMount reports whether a line of mountinfo (proc(5): mount ID,
// parent ID, ...) has parent id. Lines it cannot read are not children.
func hasChildMount(mountinfo []byte, id uint64) bool {
	for len(mountinfo) > 0 {
		line := mountinfo
		if i := bytes.IndexByte(mountinfo, '\n'); i >= 0 {
			line, mountinfo = mountinfo[:i], mountinfo[i+1:]
		} else {
			mountinfo = nil
		}
		f := bytes.Fields(line)
		if len(f) < 2 {
			continue
		}
		if p, err := strconv.ParseUint(string(f[1]), 10, 64); err == nil && p == id {
			if m, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil && m != id {
				return true
			}
		}
	}
	return false
}
