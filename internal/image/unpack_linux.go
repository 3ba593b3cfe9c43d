package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/imageroot"
)

// Limits bound what one layer may hold. Layers are untrusted input: a
// registry, an archive or a crafted tar decides what they say, and the
// unpacker runs on the host. The zero value of a field means its default.
type Limits struct {
	// Bytes bounds a layer's uncompressed tar stream and, separately, the
	// sum of its files' sizes (a sparse file counts at its full size,
	// which is what it takes on disk here). Default 8 GiB.
	Bytes int64
	// Entries bounds a layer's tar entries. Default 1,000,000.
	Entries int
}

// Default limits.
const (
	DefaultLayerBytes   = 8 << 30
	DefaultLayerEntries = 1_000_000
)

func (l Limits) withDefaults() Limits {
	if l.Bytes <= 0 {
		l.Bytes = DefaultLayerBytes
	}
	if l.Entries <= 0 {
		l.Entries = DefaultLayerEntries
	}
	return l
}

// LayerStats says what unpacking a layer did beyond creating its files.
type LayerStats = imageroot.LayerStats

// EntryError is a layer entry the unpacker refused.
type EntryError struct {
	Name string // as the tar names it
	Err  error
}

func (e *EntryError) Error() string { return fmt.Sprintf("layer entry %q: %v", e.Name, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// ErrLimit is wrapped by the errors of a layer over a Limits bound.
var ErrLimit = errors.New("over the limit")

// whiteoutPrefix and opaqueName are the OCI (and AUFS) whiteout forms.
const (
	whiteoutPrefix = ".wh."
	opaqueName     = ".wh..wh..opq"
	// opaqueXattr marks an opaque directory for an overlay mounted with
	// userxattr, as sandboxes mount theirs (in a user namespace the
	// trusted.* form cannot be read).
	opaqueXattr = "user.overlay.opaque"
)

// maxIDs is how many uids and gids a sandbox maps (0..65535): an id beyond
// could not show inside as itself.
const maxIDs = 65536

// resolveBeneath is how every path of a layer is opened below the layer's
// directory: never through a symbolic link (the layer's own included), a
// magic link or a mount point, never above the directory.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// UnpackLayer extracts the uncompressed layer tar r into dir, which it
// creates (its parent must exist; dir must not), with whiteouts in
// overlayfs form. chown applies the entries' owners (root only); without it
// every file is the caller's. On error, dir is removed.
//
// The rules, each an answer to what a hostile layer may try:
//
//   - Every entry is created relative to the layer directory's descriptor,
//     its parent opened with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
//     RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV) and the entry itself with
//     O_NOFOLLOW: no path ever resolves through a symbolic link, not even
//     one the layer itself created, so nothing is written outside dir.
//   - Names are refused when absolute, with a ".." component, with NUL, or
//     longer than PATH_MAX (255 bytes a component); "." components and
//     repeated slashes are dropped. Bytes that are not UTF-8 are kept as
//     they are: a Linux name is bytes, and the image means these.
//   - An entry whose path leads through something that is not a directory
//     (a link included) is refused, naming the entry.
//   - Duplicate entries: the last one wins, as in a tar extraction (a
//     directory over a directory keeps its contents and takes the new
//     owner, mode and time; anything else first removes what was there).
//   - Hard links must name, by the same rules, a regular file, a symbolic
//     link or a FIFO this layer created before them; anything else (a
//     directory, a whiteout, a missing entry, one outside) is refused.
//   - Symbolic links are created with whatever target they name, absolute
//     or with "..": they are never followed here, and inside a sandbox they
//     resolve in its own root.
//   - Device nodes are skipped (and counted), but for the 0/0 character
//     device, which is overlayfs's whiteout and is applied as one. A
//     sandbox's /dev is its own and its layers are mounted nodev anyway.
//   - Whiteouts: .wh.NAME becomes a 0/0 character device NAME; .wh..wh..opq
//     marks its directory opaque with the user.overlay.opaque="y" xattr;
//     other .wh..wh.* entries (AUFS's bookkeeping) are skipped.
//   - Owners must be ids 0..65535, what a sandbox maps (refused
//     otherwise). Modes are applied as the image says, setuid and setgid
//     bits included, after the owner (chown clears them); inside a sandbox
//     they grant nothing (its layers are mounted nosuid and its commands
//     run with no_new_privs). On the host, the store's directory is root's
//     alone (0700), so no host user can reach them.
//   - Extended attributes (file capabilities included) are not applied.
//   - Limits: entries, uncompressed bytes and file sizes (a gzip bomb
//     stops at Limits.Bytes of output).
func UnpackLayer(r io.Reader, dir string, lim Limits, chown bool) (LayerStats, error) {
	lim = lim.withDefaults()
	if err := os.Mkdir(dir, 0o700); err != nil {
		return LayerStats{}, fmt.Errorf("unpack layer: %w", err)
	}
	u := &unpacker{lim: lim, chown: chown, dirs: map[string]meta{}}
	err := u.run(r, dir)
	if err != nil {
		if rerr := removeTree(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the partial layer %s: %w", dir, rerr))
		}
	}
	return u.stats, err
}

// meta is what the unpacker applies to a directory once all its entries
// are in (a directory made read-only first could not take them).
type meta struct {
	uid, gid int
	mode     uint32
	mtime    time.Time
}

type unpacker struct {
	lim   Limits
	chown bool
	root  int // the layer directory, O_PATH
	stats LayerStats
	// dirs holds the metadata of the directories the layer names, by
	// path ("" is the layer's root).
	dirs map[string]meta
	// parent caches the last parent directory opened.
	parentPath string
	parentFD   int
}

func (u *unpacker) run(r io.Reader, dir string) error {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("unpack layer: %w", err)
	}
	u.root, u.parentFD = root, -1
	defer func() {
		u.dropParent()
		unix.Close(root)
	}()
	// The layer's root is 0755 root:root unless the layer says otherwise.
	u.dirs[""] = meta{mode: 0o755}
	stream := &limitReader{r: r, left: u.lim.Bytes}
	tr := tar.NewReader(stream)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, ErrLimit) {
				return fmt.Errorf("layer: uncompressed stream %w of %d bytes", ErrLimit, u.lim.Bytes)
			}
			return fmt.Errorf("layer: read tar: %w", err)
		}
		u.stats.Entries++
		if u.stats.Entries > u.lim.Entries {
			return fmt.Errorf("layer: more than %d entries: %w", u.lim.Entries, ErrLimit)
		}
		if err := u.entry(hdr, tr); err != nil {
			if errors.Is(err, ErrLimit) && stream.left < 0 {
				err = fmt.Errorf("uncompressed stream %w of %d bytes", ErrLimit, u.lim.Bytes)
			}
			return &EntryError{Name: hdr.Name, Err: err}
		}
	}
	return u.applyDirs()
}

// entry applies one tar entry.
func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		u.stats.Skipped++
		return nil
	}
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	dirRel, base := splitRel(rel)
	if base == "" { // the layer's root itself
		if hdr.Typeflag != tar.TypeDir {
			return errors.New("names the layer's root but is not a directory")
		}
		m, err := u.metaOf(hdr)
		if err != nil {
			return err
		}
		u.dirs[""] = m
		return nil
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(dirRel, base)
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont: // the reader reads TypeRegA as TypeReg
		if hdr.Size < 0 || hdr.Size > u.lim.Bytes-u.stats.Bytes {
			return fmt.Errorf("file of %d bytes: the layer's files would pass %d bytes: %w", hdr.Size, u.lim.Bytes, ErrLimit)
		}
	case tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	case tar.TypeChar, tar.TypeBlock:
		if hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0 {
			return u.whiteout(dirRel, whiteoutPrefix+base)
		}
		u.stats.Skipped++
		return nil
	default:
		return fmt.Errorf("unsupported entry type %q", hdr.Typeflag)
	}
	m, err := u.metaOf(hdr)
	if err != nil {
		return err
	}
	parent, err := u.openParent(dirRel)
	if err != nil {
		return err
	}
	if err := u.clear(parent, base, hdr.Typeflag == tar.TypeDir); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(parent, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir: %w", err)
		}
		u.dirs[rel] = m
		return nil
	case tar.TypeSymlink:
		return u.symlink(parent, base, hdr.Linkname, m)
	case tar.TypeLink:
		return u.hardlink(parent, base, hdr.Linkname)
	case tar.TypeFifo:
		if err := unix.Mknodat(parent, base, unix.S_IFIFO|0o600, 0); err != nil {
			return fmt.Errorf("mkfifo: %w", err)
		}
		// By name: the FIFO just made, in a directory only this unpacker
		// writes, and no descriptor of a FIFO takes fchmod without an open
		// that would block.
		if u.chown {
			if err := unix.Fchownat(parent, base, m.uid, m.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("chown: %w", err)
			}
		}
		if err := unix.Fchmodat(parent, base, m.mode, 0); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
		return nil
	}
	return u.file(parent, base, r, hdr.Size, m)
}

// metaOf reads an entry's owner, mode and time, refusing ids a sandbox
// does not map.
func (u *unpacker) metaOf(hdr *tar.Header) (meta, error) {
	if u.chown && (hdr.Uid < 0 || hdr.Uid >= maxIDs || hdr.Gid < 0 || hdr.Gid >= maxIDs) {
		return meta{}, fmt.Errorf("owner %d:%d: a sandbox maps ids 0 to %d only", hdr.Uid, hdr.Gid, maxIDs-1)
	}
	return meta{uid: hdr.Uid, gid: hdr.Gid, mode: uint32(hdr.Mode) & 0o7777, mtime: hdr.ModTime}, nil
}

// file creates a regular file of size bytes from r.
func (u *unpacker) file(parent int, base string, r io.Reader, size int64, m meta) error {
	fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	n, err := io.CopyN(f, r, size)
	u.stats.Bytes += n
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("write: %w", err)
	}
	if err := u.apply(fd, m); err != nil {
		return err
	}
	return f.Close()
}

// symlink creates a symbolic link to target, which is never followed here.
func (u *unpacker) symlink(parent int, base, target string, m meta) error {
	if target == "" || len(target) >= unix.PathMax || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("symbolic link target %.80q: empty, too long or with NUL", target)
	}
	if err := unix.Symlinkat(target, parent, base); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if u.chown {
		if err := unix.Fchownat(parent, base, m.uid, m.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(m.mtime.UnixNano()), unix.NsecToTimespec(m.mtime.UnixNano())}
	if err := unix.UtimesNanoAt(parent, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// hardlink links base to target, an entry of this layer made before it.
func (u *unpacker) hardlink(parent int, base, target string) error {
	rel, err := cleanName(target)
	if err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	tdir, tbase := splitRel(rel)
	if tbase == "" {
		return errors.New("hard link to the layer's root")
	}
	tparent, err := openBeneath(u.root, tdir)
	if err != nil {
		return fmt.Errorf("hard link target %.80q: %w", target, err)
	}
	defer unix.Close(tparent)
	var st unix.Stat_t
	if err := unix.Fstatat(tparent, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hard link target %.80q: %w", target, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFLNK, unix.S_IFIFO:
	default:
		return fmt.Errorf("hard link target %.80q is not a regular file, a symbolic link or a FIFO", target)
	}
	if err := unix.Linkat(tparent, tbase, parent, base, 0); err != nil {
		return fmt.Errorf("link: %w", err)
	}
	return nil
}

// whiteout applies a .wh. entry of directory dirRel.
func (u *unpacker) whiteout(dirRel, base string) error {
	if base == opaqueName {
		fd, err := u.mkdirs(dirRel)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		// An O_PATH descriptor takes no xattr: open the directory itself,
		// as found by the same rules.
		dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opaque directory: %w", err)
		}
		defer unix.Close(dfd)
		if err := unix.Fsetxattr(dfd, opaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("opaque directory: set %s: %w", opaqueXattr, err)
		}
		u.stats.Opaque++
		return nil
	}
	if strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix) {
		u.stats.Skipped++ // AUFS's own entries (.wh..wh.plnk, .wh..wh.aufs)
		return nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return errors.New("whiteout of no name")
	}
	parent, err := u.openParent(dirRel)
	if err != nil {
		return err
	}
	if err := u.clear(parent, name, false); err != nil {
		return err
	}
	if err := unix.Mknodat(parent, name, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("whiteout %s: %w", name, err)
	}
	u.stats.Whiteouts++
	return nil
}

// apply sets the owner of fd's file, then its mode (chown clears setuid
// and setgid bits), then its time.
func (u *unpacker) apply(fd int, m meta) error {
	if u.chown {
		if err := unix.Fchown(fd, m.uid, m.gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
	}
	if err := unix.Fchmod(fd, m.mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	tv := []unix.Timeval{unix.NsecToTimeval(m.mtime.UnixNano()), unix.NsecToTimeval(m.mtime.UnixNano())}
	if err := unix.Futimes(fd, tv); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// applyDirs sets the directories' metadata, deepest first, once every
// entry is in. A path that is no longer a directory (a later entry
// replaced it) is skipped.
func (u *unpacker) applyDirs() error {
	paths := make([]string, 0, len(u.dirs))
	for p := range u.dirs {
		paths = append(paths, p)
	}
	// Deepest first, the root last: a directory's time is set after
	// everything below it changed.
	depth := func(p string) int {
		if p == "" {
			return 0
		}
		return strings.Count(p, "/") + 1
	}
	slices.SortFunc(paths, func(a, b string) int { return depth(b) - depth(a) })
	for _, p := range paths {
		fd, err := unix.Openat2(u.root, orDot(p), &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveBeneath})
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue
		}
		if err != nil {
			return &EntryError{Name: p, Err: err}
		}
		err = u.apply(fd, u.dirs[p])
		unix.Close(fd)
		if err != nil {
			return &EntryError{Name: p, Err: err}
		}
	}
	return nil
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// openParent returns a descriptor of directory rel (the caller does not
// close it), creating missing directories on the way, as a tar that lists
// a file before its directory needs.
func (u *unpacker) openParent(rel string) (int, error) {
	if u.parentFD >= 0 && u.parentPath == rel {
		return u.parentFD, nil
	}
	fd, err := u.mkdirs(rel)
	if err != nil {
		return -1, err
	}
	u.dropParent()
	u.parentPath, u.parentFD = rel, fd
	return fd, nil
}

func (u *unpacker) dropParent() {
	if u.parentFD >= 0 {
		unix.Close(u.parentFD)
	}
	u.parentFD, u.parentPath = -1, ""
}

// mkdirs opens directory rel (O_PATH), creating what is missing of it as
// 0755 directories of the layer's root's owner; the caller closes the
// descriptor. A component that is a symbolic link or not a directory is
// refused.
func (u *unpacker) mkdirs(rel string) (int, error) {
	fd, err := openBeneath(u.root, rel)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	cur, err := unix.Dup(u.root)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(rel, "/") {
		next, err := openBeneath(cur, c)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(cur, c, 0o755); err != nil {
				unix.Close(cur)
				return -1, fmt.Errorf("mkdir %s: %w", c, err)
			}
			next, err = openBeneath(cur, c)
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = next
	}
	return cur, nil
}

// openBeneath opens directory rel below dirfd (O_PATH) by the layer's
// resolution rules, saying in words why a path is refused.
func openBeneath(dirfd int, rel string) (int, error) {
	// Without O_NOFOLLOW: RESOLVE_NO_SYMLINKS then refuses a link as the
	// last component too, with ELOOP.
	fd, err := unix.Openat2(dirfd, orDot(rel), &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveBeneath})
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, fmt.Errorf("the path %.80q leads through a symbolic link, which is never followed", rel)
	case errors.Is(err, unix.ENOTDIR):
		return -1, fmt.Errorf("the path %.80q leads through something that is not a directory", rel)
	case errors.Is(err, unix.EXDEV):
		return -1, fmt.Errorf("the path %.80q leaves the layer", rel)
	case err != nil:
		return -1, fmt.Errorf("open %.80q: %w", rel, err)
	}
	return fd, nil
}

// clear makes room for an entry named base in parent: nothing when it is
// free, or when both the old and the new are directories (dir); anything
// else is removed, a directory with all below it (the last entry wins).
func (u *unpacker) clear(parent int, base string, dir bool) error {
	var st unix.Stat_t
	err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return fmt.Errorf("stat: %w", err)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		if dir {
			return nil
		}
		// The cached parent is parent itself, above the tree removed.
		return removeAt(parent, base)
	}
	return unix.Unlinkat(parent, base, 0)
}

// removeAt removes name below dirfd and, if it is a directory, all below
// it, never following a link.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	for {
		names, err := d.Readdirnames(256)
		for _, n := range names {
			if rerr := removeAt(fd, n); rerr != nil {
				d.Close()
				return rerr
			}
		}
		if errors.Is(err, io.EOF) || len(names) == 0 {
			break
		}
		if err != nil {
			d.Close()
			return err
		}
	}
	d.Close()
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// removeTree removes dir and all below it, never following a link: it is
// how the store removes what a layer created, whatever its names.
func removeTree(dir string) error {
	parent, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	err = removeAt(parent, filepath.Base(dir))
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// cleanName turns a tar entry's name into a path relative to the layer's
// root ("" for the root itself), or refuses it.
func cleanName(name string) (string, error) {
	switch {
	case strings.IndexByte(name, 0) >= 0:
		return "", errors.New("name with a NUL byte")
	case len(name) >= unix.PathMax:
		return "", fmt.Errorf("name of %d bytes: at most %d", len(name), unix.PathMax-1)
	case strings.HasPrefix(name, "/"):
		return "", errors.New("absolute name")
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch {
		case c == "" || c == ".":
		case c == "..":
			return "", errors.New("name with a .. component")
		case len(c) > 255:
			return "", fmt.Errorf("name component of %d bytes: at most 255", len(c))
		default:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, "/"), nil
}

// splitRel splits a clean relative path into its directory ("" for the
// root) and its last component.
func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// limitReader reads from r until left bytes were read, then fails with
// ErrLimit (left goes negative).
type limitReader struct {
	r    io.Reader
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// At the bound: only the end of the stream may follow.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			l.left = -1
			return 0, fmt.Errorf("uncompressed stream: %w", ErrLimit)
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
