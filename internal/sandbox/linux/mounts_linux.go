package linux

import (
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// sandboxUID is the uid and gid of the unprivileged sandbox user inside.
const sandboxUID = 1000

// detachedTree clones the host tree at path into a detached mount (open_tree
// with OPEN_TREE_CLONE) that the executor attaches inside its own mount
// namespace with move_mount. The host resolves the path with its own
// privileges and hands over only the resulting tree: the executor never sees
// a host path. ro makes the tree read-only; idmap, if >= 0, is a user
// namespace fd whose mapping makes the tree's owner the sandbox user.
func detachedTree(path string, ro bool, idmap int) (int, error) {
	return detachedTreeAt(unix.AT_FDCWD, path, ro, idmap)
}

// detachedTreeAt is detachedTree of the tree at path relative to dirfd, or
// of dirfd's own when path is empty.
func detachedTreeAt(dirfd int, path string, ro bool, idmap int) (int, error) {
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC | unix.AT_RECURSIVE
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, path, uint(flags))
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount_setattr %s: %w", path, err)
	}
	if idmap >= 0 {
		// Id-mapping is applied on its own and not recursively: a tree
		// with submounts of other file systems may not support it.
		a := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(idmap)}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &a); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("id-map %s: %w", path, err)
		}
	}
	return fd, nil
}

// idmapper gives one Create the user namespaces whose mapping shows a host
// owner as the sandbox user, for id-mapped mounts. A namespace lives as long
// as a process or file descriptor refers to it, so a short-lived helper (the
// executor binary in "hold" mode) is started in it, its namespace opened, and
// the helper ended; the backend keeps the namespace (idmapCache).
type idmapper struct {
	start func(procSpec) (*proc, error) // Backend.startProc
	// direct says start clones the helper sharing this process's memory
	// (procSpec.lateMaps is available: Backend.lateMapsOK), so create
	// writes the maps itself after the exec instead of a fork that waits
	// for them.
	direct bool
	base   uint32 // host uid of uid 0 inside the sandbox
	cache  *idmapCache
	fds    []int // duplicates handed out, closed by close
}

// wholeRange, as both ids of an idmapKey, names the id-map namespace of a
// sandbox's whole uid range (idmapper.rangeFD).
const wholeRange = math.MaxUint32

// rangeFD returns a user-namespace fd whose mapping is the sandbox's own
// (0..uidRange-1 inside to its host range), valid until close: a tree
// id-mapped with it shows each file's recorded ids as the same ids inside
// the sandbox, as an image's layers must (uid 0's files are root's, uid
// 33's www-data's).
func (m *idmapper) rangeFD() (int, error) {
	return m.fd(wholeRange, wholeRange)
}

// fd returns a user-namespace fd mapping host owner uid/gid to the sandbox
// user, valid until close.
func (m *idmapper) fd(uid, gid uint32) (int, error) {
	if m.base == 0 {
		// Root mode's ranges start at uidBase: 0 is a range not yet
		// taken (a Create that takes it after its executor's start),
		// never one to map to.
		return -1, errors.New("id-mapped tree: the sandbox has no uid range yet")
	}
	key := idmapKey{uid, gid, m.base}
	ns, err := m.cache.get(key, func() (int, error) { return m.create(uid, gid) })
	if err != nil {
		return -1, err
	}
	m.fds = append(m.fds, ns)
	return ns, nil
}

// create starts a helper in a new user namespace with the map and returns
// a descriptor of that namespace.
func (m *idmapper) create(uid, gid uint32) (int, error) {
	// The helper exits when it reads EOF on its stdin.
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	uids := []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(m.base) + sandboxUID, Size: 1}}
	gids := []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(m.base) + sandboxUID, Size: 1}}
	if uid == wholeRange {
		uids = []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(m.base), Size: uidRange}}
		gids = uids
	}
	// Directly, the helper is a clone that shares this process's memory
	// and execs at once (vfork.Exec), its maps written here after the
	// exec: a fork of this process (syscall.ForkExec, which must wait
	// for the maps before the exec) copied its page tables and reset
	// each of the runtime's signal handlers in the child, about 3 ms of
	// an image sandbox's cold start (docs/benchmarks.md, image29b). The
	// helper never runs anything of a sandbox's and is killed once its
	// namespace is open, so what it holds meanwhile (the caller's ids,
	// unmapped in its namespace, and capabilities only there) is moot.
	ps := procSpec{args: []string{"airlock-exec", "hold"}, stdin: r, sys: &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER, UidMappings: uids, GidMappings: gids,
	}, lateIDs: m.direct, lateMaps: m.direct}
	p, err := m.start(ps)
	r.Close()
	if err == nil && m.direct {
		if p.writeMaps == nil {
			err = errors.New("no late id maps")
		} else {
			err = p.writeMaps(idMaps{uid: uids, gid: gids})
		}
		if err != nil {
			_ = p.kill()
			go func() {
				<-p.done
				p.close()
			}()
		}
	}
	if err != nil {
		w.Close()
		return -1, fmt.Errorf("start id-map helper: %w", err)
	}
	if m.direct {
		m.cache.direct.Add(1)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", p.pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	// The descriptor keeps the namespace alive: the helper has done its
	// part by existing. It dies now rather than after its own runtime's
	// start (5-8 ms), and is collected in the background.
	_ = p.kill()
	w.Close()
	go func() {
		<-p.done
		p.close()
	}()
	if err != nil {
		return -1, fmt.Errorf("open id-map namespace: %w", err)
	}
	return fd, nil
}

func (m *idmapper) close() {
	for _, fd := range m.fds {
		unix.Close(fd)
	}
	m.fds = nil
}

// idmapKey names an id-map namespace: the host owner it maps, and the
// sandbox uid range it maps to.
type idmapKey struct{ uid, gid, base uint32 }

// idmapCache keeps a backend's id-map namespaces. A namespace is only a
// mapping; any sandbox of the same uid range and workspace owner can use it,
// and a long-lived host reuses a few ranges (uidAllocator), so most sandboxes
// find theirs here and start no helper.
type idmapCache struct {
	mu   sync.Mutex
	fds  map[idmapKey]int // guarded by mu
	made atomic.Int64     // namespaces made, for tests
	// direct counts the namespaces made by a helper started sharing
	// this process's memory (idmapper.direct), for tests.
	direct atomic.Int64
}

// maxIdmaps bounds an idmapCache.
const maxIdmaps = 64

// get returns a duplicate of key's namespace descriptor, the caller's to
// close, making the namespace with create when the cache lacks it.
func (c *idmapCache) get(key idmapKey, create func() (int, error)) (int, error) {
	c.mu.Lock()
	fd, ok := c.fds[key]
	if ok {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		c.mu.Unlock()
		return dup, err
	}
	c.mu.Unlock()
	fd, err := create()
	if err != nil {
		return -1, err
	}
	c.made.Add(1)
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.fds[key]; ok { // made meanwhile by another create
		unix.Close(old)
	} else if len(c.fds) >= maxIdmaps {
		for k, old := range c.fds {
			unix.Close(old)
			delete(c.fds, k)
			break
		}
	}
	if c.fds == nil {
		c.fds = map[idmapKey]int{}
	}
	c.fds[key] = fd
	return dup, nil
}

// close closes every kept namespace.
func (c *idmapCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}

// owner returns the uid and gid owning path.
func owner(path string) (uint32, uint32, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Uid, st.Gid, nil
}

// checkDir reports a clear error unless path is an existing directory.
func checkDir(what, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s %s does not exist", what, path)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s is not a directory", what, path)
	}
	return nil
}

// treeFiles are the host trees a root-mode Create hands its executor:
// detached mounts (see detachedTree), passed as the extra files after the
// control socket, and the id-map namespaces they were id-mapped with. The
// caller closes both once the executor has started with its own copies.
type treeFiles struct {
	idm   *idmapper
	files []*os.File // the executor's fd 4, 5, ...
}

// sources fills setup with the sources of a root-mode sandbox of spec,
// each a tree in t: the root file system (an image's layers, opened and
// locked as locks, a template, or the host's system directories), the
// workspace, the extra mounts and the proxy socket.
func (t *treeFiles) sources(spec *sandbox.Spec, locks []*os.File, setup *execproto.Setup) error {
	var err error
	switch {
	case len(locks) > 0:
		idfd, err := t.idm.rangeFD()
		if err != nil {
			return fmt.Errorf("image layers: %w", err)
		}
		for i, l := range locks {
			fd, err := detachedTreeAt(int(l.Fd()), "", true, idfd)
			if err != nil {
				return fmt.Errorf("image layer %d: %w", i, err)
			}
			t.files = append(t.files, os.NewFile(uintptr(fd), l.Name()))
			setup.Layers = append(setup.Layers, execproto.ControlFD+len(t.files))
		}
	case spec.RootFS != "":
		if setup.RootFD, err = t.tree(spec.RootFS, true, false); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	default:
		setup.SystemDirs = existing(systemDirs)
		setup.EtcFiles = etcFiles
		if spec.WritableRoot {
			if err := t.systemTrees(setup); err != nil {
				return err
			}
		}
	}
	switch spec.Workspace {
	case "":
		setup.Workspace.Mode = execproto.WorkspaceEmpty
	default:
		mode := spec.WorkspaceMode
		if mode == "" {
			mode = sandbox.WorkspaceCOW
		}
		setup.Workspace.Mode = mode
		if setup.Workspace.FD, err = t.tree(spec.Workspace, mode == sandbox.WorkspaceRO, true); err != nil {
			return fmt.Errorf("workspace: %w", err)
		}
	}
	for _, m := range spec.Mounts {
		fi, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Source, err)
		}
		fd, err := t.tree(m.Source, m.ReadOnly, true)
		if err != nil {
			return fmt.Errorf("mount %s: %w", m.Source, err)
		}
		setup.Mounts = append(setup.Mounts, execproto.Mount{FD: fd, Target: m.Target, ReadOnly: m.ReadOnly, File: !fi.IsDir()})
	}
	if spec.Network == sandbox.NetworkProxy {
		if setup.ProxyFD, err = t.tree(spec.ProxySocket, false, true); err != nil {
			return fmt.Errorf("proxy socket: %w", err)
		}
		setup.ProxyAddr = ProxyAddr
	}
	return nil
}

// systemTrees gives a writable host root its system directories as
// read-only trees id-mapped with the sandbox's whole range (the host's
// root shows as the sandbox's root), which the executor shows through
// overlays (Setup.SystemTrees). A file system that cannot be id-mapped
// keeps its directory bound read-only: commands then cannot change it,
// as without a writable root.
func (t *treeFiles) systemTrees(setup *execproto.Setup) error {
	idfd, err := t.idm.rangeFD()
	if err != nil {
		return fmt.Errorf("system directories: %w", err)
	}
	for _, d := range setup.SystemDirs {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			continue // a usr-merged link (/bin -> usr/bin) stays a link
		}
		fd, err := detachedTree(d, true, idfd)
		if err != nil {
			continue
		}
		t.files = append(t.files, os.NewFile(uintptr(fd), d))
		setup.SystemTrees = append(setup.SystemTrees, execproto.Mount{FD: execproto.ControlFD + len(t.files), Target: d, ReadOnly: true})
	}
	return nil
}

// tree clones the host tree at path for the executor and returns the
// descriptor number it will have there. ro makes the tree read-only;
// mapOwner id-maps it so that its owner shows as the sandbox user.
func (t *treeFiles) tree(path string, ro, mapOwner bool) (int, error) {
	idfd := -1
	if mapOwner {
		uid, gid, err := owner(path)
		if err != nil {
			return -1, err
		}
		if idfd, err = t.idm.fd(uid, gid); err != nil {
			return -1, err
		}
	}
	fd, err := detachedTree(path, ro, idfd)
	if err != nil {
		return -1, err
	}
	t.files = append(t.files, os.NewFile(uintptr(fd), path))
	return execproto.ControlFD + len(t.files), nil
}

// closeFiles closes the trees handed out so far.
func (t *treeFiles) closeFiles() {
	for _, f := range t.files {
		f.Close()
	}
	t.files = nil
}

// lockLayers opens each of an image's layer directories and takes a shared
// flock(2) on it, held until the files are closed (Spec.Layers: whoever
// collects unused layers takes it exclusively, and renames a layer away
// before removing it). A directory that no longer is at its path once
// locked was collected meanwhile: the error says so.
func lockLayers(dirs []string) ([]*os.File, error) {
	var out []*os.File
	fail := func(err error) ([]*os.File, error) {
		for _, f := range out {
			f.Close()
		}
		return nil, err
	}
	for _, d := range dirs {
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("image layer %s: %w", d, err))
		}
		f := os.NewFile(uintptr(fd), d)
		out = append(out, f)
		if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
			return fail(fmt.Errorf("lock image layer %s: %w", d, err))
		}
		var held, now unix.Stat_t
		if err := unix.Fstat(fd, &held); err != nil {
			return fail(fmt.Errorf("image layer %s: %w", d, err))
		}
		if err := unix.Stat(d, &now); err != nil || now.Dev != held.Dev || now.Ino != held.Ino {
			return fail(fmt.Errorf("image layer %s was removed while the sandbox was being created (its image was garbage-collected): pull or import the image again", d))
		}
	}
	return out, nil
}

// detachedLayers reports whether this kernel takes an overlay's layer as a
// detached mount's descriptor (fsconfig FSCONFIG_SET_FD of "lowerdir+",
// Linux 6.13): the executor then mounts each read-only directory (a mount
// or the workspace) as an overlay of one such layer, which mountinfo lists
// as "lowerdir+=/" where a bind's root names the source's path on the
// host. It tries, which needs root; an error says why it could not.
func detachedLayers() (bool, error) {
	dir, err := os.MkdirTemp("", "airlock-layer-")
	if err != nil {
		return false, err
	}
	defer os.Remove(dir)
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return false, fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false, fmt.Errorf("open overlay: %w", err)
	}
	defer unix.Close(fsfd)
	err = unix.FsconfigSetFd(fsfd, "lowerdir+", tree)
	if errors.Is(err, unix.EINVAL) {
		return false, nil
	}
	return err == nil, err
}
