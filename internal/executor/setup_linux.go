package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// scratchDir is where the scratch tmpfs is mounted while the sandbox is
// assembled. It holds the new root, the overlays' upper and work directories
// and the user's home, all under one size cap. The executor runs in a private
// copy of the host's mount namespace, so mounting over /tmp changes nothing
// outside. Host sources arrive as detached trees (file descriptors) or, in
// rootless mode, as paths that cloneHostPaths turns into trees before the
// scratch tmpfs is mounted, so a source below /tmp is never hidden by it.
// Only newRoot is visible after pivot_root: the scratch mount itself goes
// away with the old root.
const scratchDir = "/tmp"

// newRoot is where the sandbox root is assembled before pivot_root.
const newRoot = scratchDir + "/root"

const (
	workspacePath = "/workspace"
	rootHome      = "/root"
	runDir        = "/run/airlock"
	proxySocket   = runDir + "/egress.sock"
)

// writable lists the paths the sandbox may write to; Landlock allows exactly
// these (plus the user's home).
var writable = []string{workspacePath, "/tmp", "/dev/shm"}

// writablePaths are the paths Landlock lets commands write: writable, the
// user's home and the workspace's alias.
func (e *executor) writablePaths() []string {
	paths := append(append([]string{}, writable...), e.setup.User.Home)
	if e.setup.WorkspaceAlias != "" {
		paths = append(paths, e.setup.WorkspaceAlias)
	}
	if e.setup.RootHome {
		paths = append(paths, rootHome)
	}
	if podInner {
		if fi, err := os.Stat(podTrustDir); err == nil && fi.IsDir() {
			paths = append(paths, podTrustDir)
		}
	}
	if e.setup.WritableRoot {
		// The root is an overlay whose upper layer is the sandbox's own
		// (an image build's step), or a host root's scratch directory
		// with overlays of the system directories (SystemTrees): writes
		// land there, in the disk quota.
		// Devices stay out of reach (read-write grants no MAKE_CHAR,
		// MAKE_BLOCK or device ioctls), and /proc and /sys keep their
		// read-only mounts and masks.
		paths = append(paths, "/")
	}
	return paths
}

// setup builds the sandbox's filesystem, network and process attributes. It
// runs as PID 1 of fresh user, mount, PID, IPC, UTS, cgroup and network
// namespaces, before any untrusted code exists. It returns what it enforced
// and O_PATH descriptors of the upper layers that checkpoints walk (-1
// where there is none).
func setup(s *execproto.Setup) (layers []string, up uppers, err error) {
	up = uppers{ws: -1, root: -1, wsLower: -1}
	if err := s.Validate(); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	if err := rawMount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("make mounts private: %w", err)
	}
	tr := newExecTrace("setup", 0)
	defer tr.done()
	if err := cloneHostPaths(s); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	tr.mark("clones")
	if err := mountTmpfs(scratchDir, fmt.Sprintf("mode=0755,size=%d", s.DiskBytes)); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("scratch tmpfs: %w", err)
	}
	tr.mark("scratch")
	u := s.User
	home := filepath.Join(newRoot, u.Home)
	for _, d := range []string{"root", "home", "root-home", "ws-upper", "ws-work", "root-upper", "root-work", "lower", "root-lower"} {
		if err := rawMkdir(filepath.Join(scratchDir, d), 0o755); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	if err := rawChown(filepath.Join(scratchDir, "home"), u.UID, u.GID); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	if err := rawChmod(filepath.Join(scratchDir, "home"), 0o700); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	switch {
	case len(s.Layers) > 0:
		// An image root: the overlay of its layers, no copy, under a
		// scratch upper layer, as a template root below.
		if err := mountLayers(s.Layers); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("image root: %w", err)
		}
		layers = append(layers, fmt.Sprintf("rootfs:image:%d-layers", len(s.Layers)))
	case s.RootFD != 0:
		// A template root: an overlay whose upper layer is scratch, so
		// writes to / land in the sandbox's own quota and die with it.
		lower := scratchDir + "/root-lower"
		if err := moveMount(s.RootFD, lower); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("template root: %w", err)
		}
		// The overlay holds its own reference to the tree; its mount at
		// lower goes with the old root (see pivot).
		if err := mountOverlay(newRoot, lower, scratchDir+"/root-upper", scratchDir+"/root-work"); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("template root overlay: %w", err)
		}
		layers = append(layers, "rootfs:template")
	default:
		// pivot_root needs the new root to be a mount point.
		if err := bind(newRoot, newRoot, false); err != nil {
			return nil, uppers{-1, -1, -1}, err
		}
		if err := buildHostRoot(s); err != nil {
			return nil, uppers{-1, -1, -1}, err
		}
		layers = append(layers, "rootfs:host-ro")
	}
	if len(s.Layers) > 0 || s.RootFD != 0 {
		if err := realTargets(s); err != nil {
			return nil, uppers{-1, -1, -1}, err
		}
	}
	if len(s.Layers) > 0 {
		// As a container runtime does: the image's own files, if any,
		// name another machine.
		if err := writeEtc(filepath.Join(newRoot, "etc"), s, "hosts", "hostname", "resolv.conf"); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("image root: /etc: %w", err)
		}
	}
	tr.mark("root")
	for _, d := range []string{"workspace", "tmp", "proc", "dev", "run/airlock", strings.TrimPrefix(u.Home, "/"), strings.TrimPrefix(s.WorkspaceAlias, "/")} {
		if err := mkdirAll(filepath.Join(newRoot, d), 0o755); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("mkdir /%s: %w", d, err)
		}
	}
	if err := setupRunDir(); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	tr.mark("dirs")
	if u.Home != s.WorkspaceAlias {
		if err := bind(scratchDir+"/home", home, false); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("home: %w", err)
		}
	}
	if s.RootHome && u.UID != 0 {
		if err := mkdirAll(filepath.Join(newRoot, rootHome), 0o700); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("mkdir %s: %w", rootHome, err)
		}
		if err := rawChmod(scratchDir+"/root-home", 0o700); err != nil {
			return nil, uppers{-1, -1, -1}, err
		}
		if err := bind(scratchDir+"/root-home", filepath.Join(newRoot, rootHome), false); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("root's home: %w", err)
		}
	}
	if len(s.Layers) > 0 || s.RootFD != 0 {
		// Before pivot_root takes the scratch tmpfs out of view: the root's
		// changes, for root checkpoints (an image build's layers).
		if up.root, err = unix.Open(scratchDir+"/root-upper", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("open the root's upper layer: %w", err)
		}
	}
	if up.ws, up.wsLower, err = setupWorkspace(s.Workspace, u, s.StaticReadOnly); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("workspace: %w", err)
	}
	if a := s.WorkspaceAlias; a != "" {
		// The same mount, so a path below either is one file: a checkpoint
		// of /workspace keeps what was written through the alias.
		if err := bind(filepath.Join(newRoot, workspacePath), filepath.Join(newRoot, a), false); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("workspace at %s: %w", a, err)
		}
	}
	layers = append(layers, "workspace:"+s.Workspace.Mode)
	if up.wsLower >= 0 {
		layers = append(layers, execproto.LayerRestoreLayer)
	}
	tr.mark("homes-ws")
	for _, m := range s.Mounts {
		if err := setupMount(m, s.StaticReadOnly); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("mount %s: %w", m.Target, err)
		}
	}
	if s.ProxyFD != 0 {
		target := filepath.Join(newRoot, proxySocket)
		if err := writeFile(target, nil, 0o600); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("proxy socket: %w", err)
		}
		if err := moveMount(s.ProxyFD, target); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("proxy socket: %w", err)
		}
	}
	if s.WritableRoot {
		// /tmp is the root's, as in a docker build: what an earlier step
		// put there (COPY pkg.deb /tmp/) is there, and what a step leaves
		// there is in its layer. It is in the same disk quota.
		if err := ensureTmpMode(filepath.Join(newRoot, "tmp")); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("/tmp: %w", err)
		}
	} else if err := mountTmpfs(filepath.Join(newRoot, "tmp"), fmt.Sprintf("mode=1777,size=%d", s.DiskBytes)); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("/tmp: %w", err)
	}
	tr.mark("mounts-tmp")
	if err := setupProc(); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("/proc: %w", err)
	}
	tr.mark("proc")
	if err := setupDev(s.ShmBytes); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("/dev: %w", err)
	}
	tr.mark("dev")
	if err := pivot(newRoot); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	tr.mark("pivot")
	if s.RootFD == 0 && len(s.Layers) == 0 && !s.WritableRoot {
		// Nothing outside the listed writable mounts may change the root.
		if err := rawMount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return nil, uppers{-1, -1, -1}, fmt.Errorf("read-only root: %w", err)
		}
	}
	tr.mark("ro")
	if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("loopback: %w", err)
	}
	tr.mark("host-lo")
	layers = append(layers, "namespaces:user,mnt,pid,net,ipc,uts,cgroup", "network:loopback-only")
	return layers, up, nil
}

// ensureTmpMode gives a root's /tmp the mode every user may write to
// (1777) when it lacks it, as realTargets made it when the image had none.
func ensureTmpMode(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	if st.Mode&0o7777 == 0o1777 {
		return nil
	}
	return unix.Chmod(dir, 0o1777)
}

// uppers are O_PATH descriptors of a sandbox's overlay upper layers, each
// -1 where there is none.
type uppers struct {
	ws   int // a cow or empty workspace's
	root int // an image or template root's
	// wsLower is an empty workspace's lower layer, where an import
	// unpacks the restored or uploaded tree (executor.lower).
	wsLower int
}

// mountLayers mounts the overlay of an image's layers (detached trees,
// lowest first) at newRoot, with its upper and work directories in the
// scratch tmpfs.
func mountLayers(fds []int) error {
	dirs := make([]string, len(fds))
	for i, fd := range fds {
		d := fmt.Sprintf("%s/l%d", scratchDir, i)
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		if err := moveMount(fd, d); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		dirs[len(fds)-1-i] = d // overlayfs lists the top layer first
	}
	// The overlay holds its own references to the layers; their mounts go
	// with the old root (see pivot).
	if err := mountOverlay(newRoot, strings.Join(dirs, ":"), scratchDir+"/root-upper", scratchDir+"/root-work"); err != nil {
		return fmt.Errorf("overlay of %d layers: %w", len(fds), err)
	}
	return nil
}

// realTargets makes every path the setup mounts on or writes below newRoot
// a real directory (or, for a file target, a real file) when the root comes
// from a template or an image, whose symbolic links it must not follow:
// until pivot_root the executor's mount namespace still holds the host's
// tree, so a link the image planted (run -> /var/tmp, etc/airlock -> /dev/shm)
// would put a directory or a file the setup creates on the host. A link, or
// anything else not of the kind wanted, on the way to such a path is
// replaced (the overlay records the removal in its scratch upper layer; the
// image's layers never change). Nothing runs in the sandbox yet, so nothing
// can plant a link between this walk and the mounts that follow it.
func realTargets(s *execproto.Setup) error {
	dirs := []string{workspacePath, "/tmp", "/proc", "/dev", "/run/airlock", s.User.Home}
	if s.RootHome {
		dirs = append(dirs, rootHome)
	}
	if s.WorkspaceAlias != "" {
		dirs = append(dirs, s.WorkspaceAlias)
	}
	files := []string{}
	if len(s.Layers) > 0 {
		files = append(files, "/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
	}
	if s.ProxyFD != 0 {
		files = append(files, proxySocket)
	}
	for _, m := range s.Mounts {
		if m.File {
			files = append(files, m.Target)
		} else {
			dirs = append(dirs, m.Target)
		}
	}
	root, err := unix.Open(newRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open new root: %w", err)
	}
	defer unix.Close(root)
	for _, d := range dirs {
		if err := realPath(root, d, false); err != nil {
			return fmt.Errorf("mount point %s: %w", d, err)
		}
	}
	for _, f := range files {
		if err := realPath(root, f, true); err != nil {
			return fmt.Errorf("mount point %s: %w", f, err)
		}
	}
	return nil
}

// realPath walks p (absolute, inside the new root) from root one component
// at a time without following a link, replacing whatever is not a
// directory (or, for the last component when file is set, not a regular
// file) and creating what is missing.
func realPath(root int, p string, file bool) error {
	comps := strings.Split(strings.Trim(filepath.Clean(p), "/"), "/")
	dir, err := unix.Dup(root)
	if err != nil {
		return err
	}
	defer func() { unix.Close(dir) }()
	for i, c := range comps {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("bad component %q", c)
		}
		wantFile := file && i == len(comps)-1
		want := uint32(unix.S_IFDIR)
		if wantFile {
			want = unix.S_IFREG
		}
		var st unix.Stat_t
		err := unix.Fstatat(dir, c, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == nil && st.Mode&unix.S_IFMT == want:
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
			return fmt.Errorf("%s is a directory, not a file", c)
		case err == nil:
			if err := unix.Unlinkat(dir, c, 0); err != nil {
				return fmt.Errorf("replace %s: %w", c, err)
			}
			fallthrough
		case errors.Is(err, unix.ENOENT):
			if wantFile {
				fd, err := unix.Openat(dir, c, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
				if err != nil {
					return fmt.Errorf("create %s: %w", c, err)
				}
				unix.Close(fd)
			} else if err := unix.Mkdirat(dir, c, 0o755); err != nil {
				return fmt.Errorf("mkdir %s: %w", c, err)
			}
		default:
			return fmt.Errorf("stat %s: %w", c, err)
		}
		if wantFile {
			return nil
		}
		next, err := unix.Openat(dir, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", c, err)
		}
		unix.Close(dir)
		dir = next
	}
	return nil
}

func mountTmpfs(dst, opts string) error {
	if err := mkdirAll(dst, 0o755); err != nil {
		return err
	}
	return rawMount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
}

func mountOverlay(dst, lower, upper, work string) error {
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr", lower, upper, work)
	return rawMount("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
}

// moveMount attaches a detached mount tree received from the host.
func moveMount(fd int, dst string) error {
	err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("move_mount to %s: %w", dst, err)
	}
	return nil
}

// bind binds src onto dst, read-only if ro. A read-only bind is also nosuid
// and nodev (nothing bound read-only is a device or needs set-id bits), and
// so are the mounts below it: mount_setattr with AT_RECURSIVE applies the
// flags to the whole bound tree, where a remount would change only its top.
// It only adds flags, so it also works on mounts whose flags the kernel locks
// (every host mount seen from a user namespace, rootless or not).
func bind(src, dst string, ro bool) error {
	if err := rawMount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if !ro {
		return nil
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := rawMountSetattr(dst, unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW, &attr); err != nil {
		return fmt.Errorf("read-only %s: %w", dst, err)
	}
	return nil
}

// buildHostRoot fills newRoot with read-only binds of the host's system
// directories and a generated /etc. Usr-merged symlinks (/bin -> usr/bin) are
// reproduced as symlinks.
func buildHostRoot(s *execproto.Setup) error {
	for _, d := range s.SystemDirs {
		dst := filepath.Join(newRoot, d)
		if i := slices.IndexFunc(s.SystemTrees, func(m execproto.Mount) bool { return m.Target == d }); i >= 0 {
			if err := systemOverlay(i, s.SystemTrees[i].FD, dst); err != nil {
				return fmt.Errorf("system directory %s: %w", d, err)
			}
			continue
		}
		if target, err := rawReadlink(d); err == nil {
			if err := rawSymlink(target, dst); err != nil {
				return err
			}
			continue
		}
		if err := mkdirAll(dst, 0o755); err != nil {
			return err
		}
		if err := bind(d, dst, true); err != nil {
			return err
		}
	}
	etc := filepath.Join(newRoot, "etc")
	if err := mkdirAll(etc, 0o755); err != nil {
		return err
	}
	if err := writeEtc(etc, s); err != nil {
		return err
	}
	for _, f := range s.EtcFiles {
		var st unix.Stat_t
		if err := rawStat(f, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // optional: not every host has every file
		}
		dst := filepath.Join(newRoot, f)
		var err error
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := rawReadlink(f)
			if err != nil {
				return err
			}
			if err := rawSymlink(target, dst); err != nil {
				return err
			}
			continue
		case unix.S_IFDIR:
			err = mkdirAll(dst, 0o755)
		default:
			err = rawWriteFile(dst, nil, 0o644)
		}
		if err != nil {
			return err
		}
		if err := bind(f, dst, true); err != nil {
			return err
		}
	}
	return nil
}

// systemOverlay mounts at dst the overlay of a writable host root's i-th
// system tree (fd, read-only and id-mapped by the host) under an upper
// layer in the scratch tmpfs: the sandbox's root may change what it shows,
// in its own disk quota, and the host's directory never changes.
func systemOverlay(i, fd int, dst string) error {
	lower := fmt.Sprintf("%s/sys-lower-%d", scratchDir, i)
	upper := fmt.Sprintf("%s/sys-upper-%d", scratchDir, i)
	work := fmt.Sprintf("%s/sys-work-%d", scratchDir, i)
	for _, d := range []string{lower, upper, work, dst} {
		if err := mkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := moveMount(fd, lower); err != nil {
		return err
	}
	// The overlay holds its own reference to the tree; its mount at lower
	// goes with the old root (see pivot).
	if err := mountOverlay(dst, lower, upper, work); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	return nil
}

// writeEtc writes the generated /etc files into etc: the names given, or
// all of them.
func writeEtc(etc string, s *execproto.Setup, names ...string) error {
	u := s.User
	// In rootless mode the sandbox user is root itself.
	userLine, groupLine := "", ""
	if u.UID != 0 {
		userLine = fmt.Sprintf("%s:x:%d:%d:sandbox user:%s:/bin/sh\n", u.Name, u.UID, u.GID, u.Home)
	}
	if u.GID != 0 {
		groupLine = fmt.Sprintf("%s:x:%d:\n", u.Name, u.GID)
	}
	files := map[string]string{
		"passwd":        "root:x:0:0:root:/root:/bin/sh\n" + userLine + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":         "root:x:0:\ntty:x:5:\n" + groupLine + "nogroup:x:65534:\n",
		"hosts":         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + s.Hostname + "\n",
		"hostname":      s.Hostname + "\n",
		"resolv.conf":   "# airlock: no DNS inside the sandbox; names are resolved by the host's egress proxy.\noptions attempts:1 timeout:1\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	}
	if len(names) > 0 {
		for name := range files {
			if !slices.Contains(names, name) {
				delete(files, name)
			}
		}
	}
	for name, content := range files {
		if err := rawWriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// setupWorkspace mounts /workspace. For a cow workspace it returns an
// O_PATH descriptor of the overlay's upper layer, the sandbox's changes: it
// lives on the scratch tmpfs, which pivot_root takes out of view, so it is
// opened now or never. Close-on-exec, it reaches no command; O_PATH, it
// grants nothing by itself (checkpoints open beneath it, see checkpoints).
//
// An empty workspace is an overlay too, of an empty lower directory on the
// scratch tmpfs under an empty upper layer: the tree a restore or an
// upload brings is unpacked into the lower directory (its descriptor is
// the second result; see executor.lower), so the changes made after it
// are the upper layer's, as in a cow workspace, and a checkpoint reads
// them alone. Both layers are on the scratch tmpfs, in the sandbox's disk
// limit as the workspace was.
//
// The results are -1 where there is no such layer.
func setupWorkspace(w execproto.Workspace, u execproto.User, static bool) (upper, lower int, err error) {
	dst := filepath.Join(newRoot, workspacePath)
	switch w.Mode {
	case execproto.WorkspaceEmpty, "":
		// The lower directory is the user's: an import unpacks into it
		// as the user. The overlay's root takes its owner and mode from
		// the upper layer.
		for _, d := range []string{"/ws-upper", "/ws-work", "/lower"} {
			if err := rawChown(scratchDir+d, u.UID, u.GID); err != nil {
				return -1, -1, err
			}
		}
		if err := mountOverlay(dst, scratchDir+"/lower", scratchDir+"/ws-upper", scratchDir+"/ws-work"); err != nil {
			return -1, -1, fmt.Errorf("overlay: %w", err)
		}
		return openLayers(true)
	case execproto.WorkspaceCOW:
		// The overlay's root directory takes its owner from the upper
		// layer: make it the sandbox user's, like the id-mapped lower.
		for _, d := range []string{"/ws-upper", "/ws-work"} {
			if err := rawChown(scratchDir+d, u.UID, u.GID); err != nil {
				return -1, -1, err
			}
		}
		lower := scratchDir + "/lower"
		if err := moveMount(w.FD, lower); err != nil {
			return -1, -1, err
		}
		// The overlay holds its own reference to the lower tree; its
		// mount at lower goes with the old root (see pivot).
		if err := mountOverlay(dst, lower, scratchDir+"/ws-upper", scratchDir+"/ws-work"); err != nil {
			return -1, -1, fmt.Errorf("overlay: %w", err)
		}
		return openLayers(false)
	case execproto.WorkspaceRO:
		if err := moveMount(w.FD, dst); err != nil || !static {
			return -1, -1, err
		}
		_, err := neutralReadOnly(dst)
		return -1, -1, err
	case execproto.WorkspaceRW:
		return -1, -1, moveMount(w.FD, dst)
	}
	return -1, -1, fmt.Errorf("unknown mode %q", w.Mode)
}

// openLayers opens the workspace overlay's upper layer and, with lower,
// its lower directory (else -1), O_PATH and close-on-exec.
func openLayers(lower bool) (int, int, error) {
	upper, err := unix.Open(scratchDir+"/ws-upper", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, fmt.Errorf("open the upper layer: %w", err)
	}
	if !lower {
		return upper, -1, nil
	}
	fd, err := unix.Open(scratchDir+"/lower", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(upper)
		return -1, -1, fmt.Errorf("open the lower layer: %w", err)
	}
	return upper, fd, nil
}

func setupMount(m execproto.Mount, static bool) error {
	if !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target || m.Target == "/" {
		return errors.New("target must be a clean absolute path")
	}
	dst := filepath.Join(newRoot, m.Target)
	var err error
	if m.File {
		if err = mkdirAll(filepath.Dir(dst), 0o755); err == nil {
			err = createFile(dst, 0o644)
		}
	} else {
		err = mkdirAll(dst, 0o755)
	}
	if err != nil {
		return err
	}
	if err := moveMount(m.FD, dst); err != nil {
		return err
	}
	if static && m.ReadOnly && !m.File {
		_, err = neutralReadOnly(dst)
	}
	return err
}

// procMasked are hidden behind /dev/null (files) or an empty read-only tmpfs
// (directories), as container runtimes do: they leak host details or offer
// kernel interfaces a sandbox has no use for.
var (
	procMaskedFiles = []string{"kcore", "keys", "timer_list", "sched_debug", "latency_stats", "kallsyms", "kmsg", "sysrq-trigger"}
	procMaskedDirs  = []string{"acpi", "scsi", "asound", "firmware", "driver"}
	procReadOnly    = []string{"sys", "irq", "bus", "fs"}
)

func setupProc() error {
	proc := filepath.Join(newRoot, "proc")
	if err := rawMount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	// Block nested namespaces in the sandbox's user namespace as a second
	// layer under seccomp: a limit of 0 applies to every descendant.
	for _, n := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time"} {
		_ = rawWriteFile(filepath.Join(proc, "sys/user/max_"+n+"_namespaces"), []byte("0"), 0)
	}
	_ = rawWriteFile(filepath.Join(proc, "sys/net/mptcp/enabled"), []byte("0"), 0)
	for _, f := range procMaskedFiles {
		p := filepath.Join(proc, f)
		if !rawExists(p) {
			continue
		}
		if err := rawMount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: %w", f, err)
		}
	}
	for _, d := range procMaskedDirs {
		p := filepath.Join(proc, d)
		if !rawIsDir(p) {
			continue
		}
		if err := rawMount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0"); err != nil {
			return fmt.Errorf("mask %s: %w", d, err)
		}
	}
	if err := ownBootID(proc); err != nil {
		return err
	}
	for _, d := range procReadOnly {
		p := filepath.Join(proc, d)
		if !rawExists(p) {
			continue
		}
		if err := bind(p, p, true); err != nil {
			return err
		}
	}
	return nil
}

// ownBootID gives the sandbox a boot id of its own, a random UUID bound
// over the kernel's: each sandbox is a boot as its programs see it (a
// resumed sandbox, booted afresh, has a new one, as E2B's resumed
// sandboxes do), and the host's id, which names its boot, stays out.
func ownBootID(proc string) error { return ownBootIDIn(proc, scratchDir, true) }

// ownBootIDIn is ownBootID with the id's file in dir, which the sandbox
// must not be able to write; ro makes the bind read-only.
func ownBootIDIn(proc, dir string, ro bool) error {
	p := filepath.Join(proc, "sys/kernel/random/boot_id")
	if !rawExists(p) {
		return nil
	}
	var u [16]byte
	// getrandom(2) itself: crypto/rand's first call in a process sets up
	// the vDSO's per-thread state (mmap), which costs more than the one
	// read of 16 bytes the executor makes.
	if err := getRandom(u[:]); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80 // version 4, RFC 4122 variant
	id := fmt.Sprintf("%x-%x-%x-%x-%x\n", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
	f := dir + "/boot_id"
	if err := rawWriteFile(f, []byte(id), 0o444); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	if err := bind(f, p, ro); err != nil {
		return fmt.Errorf("boot id: %w", err)
	}
	return nil
}

// getRandom fills b from the kernel's random number generator, as
// crypto/rand does.
func getRandom(b []byte) error {
	for len(b) > 0 {
		n, err := unix.Getrandom(b, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// devices are the only device nodes in the sandbox. A user namespace cannot
// create device nodes, so they are binds of the host's.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

func setupDev(shm int64) error {
	dev := filepath.Join(newRoot, "dev")
	if err := mountTmpfs(dev, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, d := range devices {
		dst := filepath.Join(dev, d)
		if err := rawWriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := rawMount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	if err := rawMkdir(filepath.Join(dev, "pts"), 0o755); err != nil {
		return fmt.Errorf("mkdir pts: %w", err)
	}
	if err := rawMount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := mountTmpfs(filepath.Join(dev, "shm"), fmt.Sprintf("mode=1777,size=%d", shm)); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	links := map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	}
	for name, target := range links {
		if err := rawSymlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// setupRunDir mounts a small tmpfs of its own at /run/airlock, so that what
// the executor puts there (the egress socket's and the event socket's
// files, the airlock-event command) never lands in a root's upper layer,
// which image builds turn into layers. The executor's binary is bound
// read-only at execproto.EventHelper: called by that name, it is the
// airlock-event command (package executor's helper), and it holds nothing a
// sandboxed process could not read in airlock's source. listenEvents makes
// the directory read-only once the event socket is bound.
func setupRunDir() error { return setupRunDirIn(newRoot, true) }

// setupRunDirIn is setupRunDir in the root at root; roHelper makes the
// helper's bind read-only (false: its source mount is read-only already).
func setupRunDirIn(root string, roHelper bool) error {
	dir := filepath.Join(root, runDir)
	if err := rawMount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return fmt.Errorf("%s: %w", runDir, err)
	}
	helper := filepath.Join(root, execproto.EventHelper)
	if err := rawMkdir(filepath.Dir(helper), 0o755); err != nil {
		return fmt.Errorf("%s: %w", runDir, err)
	}
	if err := rawWriteFile(helper, nil, 0o755); err != nil {
		return fmt.Errorf("%s: %w", runDir, err)
	}
	if err := bind("/proc/self/exe", helper, roHelper); err != nil {
		return fmt.Errorf("airlock-event: %w", err)
	}
	// The same binary again: called sudo, it is the sudo command, which
	// says so when the sandbox has no sudo (Setup.Sudo: no socket).
	sudo := filepath.Join(root, execproto.SudoHelper)
	if err := rawWriteFile(sudo, nil, 0o755); err != nil {
		return fmt.Errorf("%s: %w", runDir, err)
	}
	if err := bind("/proc/self/exe", sudo, roHelper); err != nil {
		return fmt.Errorf("sudo: %w", err)
	}
	return nil
}

func pivot(root string) error {
	if err := os.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; the
	// detach then drops every host mount from this namespace, and with
	// them the scratch tmpfs and what is still mounted in it: the trees a
	// lower layer was moved to for an overlay's mount (an image's layers,
	// a template root, a cow workspace, a writable host root's system
	// trees), which nothing of the sandbox sees. Each detach of its own
	// would wait for an RCU grace period (namespace_unlock): 0.1-0.3 ms
	// median on a loaded two-core machine, milliseconds at its tail
	// (docs/benchmarks.md, cold29c), once per layer; this one takes them
	// all at once.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return os.Chdir("/")
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

func rlimitByName(name string) (int, bool) {
	m := map[string]int{
		"core": unix.RLIMIT_CORE, "nofile": unix.RLIMIT_NOFILE, "nproc": unix.RLIMIT_NPROC,
		"fsize": unix.RLIMIT_FSIZE, "stack": unix.RLIMIT_STACK, "memlock": unix.RLIMIT_MEMLOCK,
		"msgqueue": unix.RLIMIT_MSGQUEUE, "sigpending": unix.RLIMIT_SIGPENDING,
	}
	r, ok := m[name]
	return r, ok
}

func applyRlimits(limits map[string]uint64) error {
	for name, v := range limits {
		r, ok := rlimitByName(name)
		if !ok {
			return fmt.Errorf("unknown rlimit %q", name)
		}
		if err := unix.Setrlimit(r, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("rlimit %s=%s: %w", name, strconv.FormatUint(v, 10), err)
		}
	}
	return nil
}
