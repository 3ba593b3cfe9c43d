package executor

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// cloneHostPaths turns the host paths of a rootless Setup into detached
// mount trees, as the host does itself when it runs as root, and records
// them as the setup's descriptors; the rest of the setup then runs the same
// in both modes.
//
// It must run first: the executor's mount namespace is still a copy of the
// host's, so the paths mean what they mean on the host, and nothing (the
// scratch tmpfs over /tmp in particular) covers any of them yet. The sandbox
// does not exist yet either, but the host user's own files may change under
// the host between its check and this clone (another sandbox of the same user
// writes a shared rw workspace, say). Two checks keep such a change from
// redirecting a bind:
//
//   - openat2 with RESOLVE_NO_SYMLINKS: the host resolved every link, so a
//     link found now in any component was planted since, and setup fails
//     instead of following it;
//   - the device and inode must be the ones the host saw, so a directory
//     renamed into place is refused too.
//
// The tree is cloned from the opened descriptor (open_tree with
// AT_EMPTY_PATH), never from the path again.
func cloneHostPaths(s *execproto.Setup) error {
	var err error
	if s.RootPath != nil {
		if s.RootFD, err = cloneHostPath(s.RootPath, true); err != nil {
			return fmt.Errorf("template root: %w", err)
		}
	}
	for i, p := range s.LayerPaths {
		fd, err := cloneHostPath(p, true)
		if err != nil {
			return fmt.Errorf("image layer %d: %w", i, err)
		}
		s.Layers = append(s.Layers, fd)
	}
	if s.Workspace.Source != nil {
		if s.Workspace.FD, err = cloneHostPath(s.Workspace.Source, s.Workspace.Mode == execproto.WorkspaceRO); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if m.Source == nil {
			continue
		}
		if m.FD, err = cloneHostPath(m.Source, m.ReadOnly); err != nil {
			return fmt.Errorf("mount %s: %w", m.Target, err)
		}
	}
	if s.ProxyPath != nil {
		if s.ProxyFD, err = cloneHostPath(s.ProxyPath, false); err != nil {
			return fmt.Errorf("proxy socket: %w", err)
		}
	}
	return nil
}

// cloneHostPath opens p without following any symbolic link, checks that it
// is the file the host named, and returns a detached, recursive clone of the
// tree there, nosuid and nodev, and read-only if ro. Flags the host's mounts
// lock (read-only, nosuid, nodev, noexec of a mount made outside this user
// namespace) stay set: a clone may only add restrictions.
func cloneHostPath(p *execproto.HostPath, ro bool) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p.Path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("open %s: a symbolic link appeared in the path after the host resolved it", p.Path)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", p.Path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -1, fmt.Errorf("stat %s: %w", p.Path, err)
	}
	if st.Dev != p.Dev || st.Ino != p.Ino {
		return -1, fmt.Errorf("%s changed after the host checked it (device %d inode %d, want %d %d)", p.Path, st.Dev, st.Ino, p.Dev, p.Ino)
	}
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", p.Path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("mount_setattr %s: %w", p.Path, err)
	}
	return tree, nil
}
