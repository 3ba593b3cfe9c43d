package executor

import (
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// importTar unpacks the tar stream the host sends as input into the
// directory root (execproto.OpImport). It runs as the request's user (see
// asUser), so what it makes is that user's and it can write nothing the
// user could not: the stream is the host's, but its content may be a
// sandbox's earlier output or a user's upload, and is parsed here, inside
// the sandbox, never on the host.
//
// Entries are applied as tar -x -p does for a user who is not root: files,
// directories, symlinks, hard links and FIFOs, with their permission bits
// and modification times; owners are the user's. Names are relative to
// root ("./" and leading "/" dropped); a name with a ".." component, a
// parent that is a symlink, a device node or an unknown type fails the
// import with an error that names the entry. An existing file, link or
// FIFO an entry names is replaced, an existing directory kept.
// Directories get their modes and times after their entries, so a
// read-only directory's entries still go in.
//
// The whole input is always consumed, so the host's stream ends cleanly
// whatever happened.
//
// An import into /workspace while the workspace's lower layer is open
// (lowerLayer) unpacks into that layer instead, under the overlay: what it
// brings is then no change of the upper layer, and the checkpoints after
// it read only what changed since.
func (s *stream) importTar(root string) error {
	in := &inboxReader{s: s}
	defer s.discardStdin()
	if path.Clean(root) == workspacePath {
		if fd, ok := s.e.lower.open(); ok {
			defer s.e.lower.done()
			return unpack(fd, in)
		}
	}
	// Elsewhere (or once sealed), through the overlay: it looks names
	// up there.
	s.e.lower.seal()
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	return unpack(rfd, in)
}

// lowerLayer is the lower directory of an empty workspace's overlay
// (setupWorkspace), into which imports into /workspace unpack until the
// first operation of another kind: the tree a restore or an upload brings
// is then the overlay's lower layer, and the upper layer holds only what
// changed after it (so a checkpoint's walk reads only that).
//
// An overlay's lower layer must not change under what the overlay has
// looked up already (a name looked up before it was made would stay
// missing, a listing stay old), so the layer is written only while nothing
// has looked through the overlay: no operation but imports has run. The
// first other operation seals it for good (waiting for an import under
// way to end), and later imports write through /workspace as before. The
// overlay is mounted before any command exists, and an import writes the
// layer by its descriptor, not through the overlay.
type lowerLayer struct {
	mu sync.RWMutex // held for reading by an import into the layer
	// fd is the layer's O_PATH descriptor, when set (the zero value is
	// no layer).
	fd     int
	set    bool
	sealed atomic.Bool
}

// open reports whether an import may unpack into the layer, and returns
// its descriptor; done must follow when it did.
func (l *lowerLayer) open() (int, bool) {
	if !l.set || l.sealed.Load() {
		return -1, false
	}
	l.mu.RLock()
	if l.sealed.Load() {
		l.mu.RUnlock()
		return -1, false
	}
	return l.fd, true
}

func (l *lowerLayer) done() { l.mu.RUnlock() }

// seal ends imports into the layer, once those under way have ended.
func (l *lowerLayer) seal() {
	if !l.set || l.sealed.Load() {
		return
	}
	l.mu.Lock()
	l.sealed.Store(true)
	l.mu.Unlock()
}

// unpack applies the tar stream r beneath the directory open as root (an
// O_PATH descriptor), as importTar describes.
func unpack(root int, r io.Reader) error {
	im := importer{root: root, curFD: -1, buf: make([]byte, 256<<10)}
	defer im.drop()
	tr := &tarReader{r: r}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := im.apply(h, tr); err != nil {
			return err
		}
	}
	return im.finishDirs()
}

type importer struct {
	root int       // O_PATH descriptor of the destination directory
	dirs []dirMeta // directories whose mode and time wait for the end
	// cur is the directory the last entry went into, open (O_PATH, found
	// as parent finds one) as curFD, or -1: a tar in walk order puts its
	// entries one directory after another, so most entries need no walk.
	// It stays valid: the importer never removes or replaces a directory
	// (replace and tarDir leave one in place), and a directory moved by
	// someone else meanwhile is written as the user could write it anyway.
	cur   string
	curFD int
	// modes says, per permission mode (no setuid, setgid or sticky bit),
	// whether a file created with it in cur gets it whole (modeKept), or
	// loses bits to the umask or the directory's default ACL (modeMasked),
	// or is not known yet: the first file of each mode in a directory is
	// created with it and checked (fstat), the next ones need no fchmod
	// when it was kept.
	modes [0o1000]uint8
	buf   []byte // a file's content on its way from the stream
}

// States of importer.modes.
const (
	modeUnknown = iota
	modeKept
	modeMasked
)

type dirMeta struct {
	name      string // relative to root; "" is root itself
	mode      uint32
	sec, nsec int64
}

// cleanName turns an entry's name into a path relative to the root: ""
// for the root itself.
func cleanName(name string) (string, error) {
	if name == "" || strings.IndexByte(name, 0) >= 0 || len(name) > 4096 {
		return "", fmt.Errorf("%w: entry name %.100q", errTarFormat, name)
	}
	n := strings.TrimLeft(name, "/")
	for part := range strings.SplitSeq(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("entry %.200q: a name with \"..\" is refused", name)
		}
	}
	n = path.Clean("/" + n)[1:]
	return n, nil
}

// drop closes the directory the importer holds open.
func (im *importer) drop() {
	if im.curFD >= 0 {
		unix.Close(im.curFD)
	}
	im.cur, im.curFD = "", -1
}

// dirOf returns the directory that holds name, beneath the root, open as
// parent opens it, and name's last component. The importer keeps the
// descriptor (see cur): the caller must not close it.
func (im *importer) dirOf(name string) (int, string, error) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if im.curFD >= 0 && dir == im.cur {
		return im.curFD, base, nil
	}
	fd, err := im.walk(dir)
	if err != nil {
		return -1, "", fmt.Errorf("entry %.200q: its directory %.200q: %w", name, dir, err)
	}
	im.drop()
	im.cur, im.curFD = dir, fd
	im.modes = [0o1000]uint8{}
	return fd, base, nil
}

// parent opens the directory that holds name, beneath the root, and
// returns it with name's last component. It walks one component at a
// time with O_NOFOLLOW, so no symlink (the archive's, or one already
// there) is followed and ".." never occurs (cleanName refused it); missing
// directories on the way are made (mode 0755), as tar -x makes them.
// (openat2's RESOLVE_BENEATH would do it in one call, but gVisor does not
// implement it.)
func (im *importer) parent(name string) (int, string, error) {
	dir, base := path.Split(name)
	fd, err := im.walk(strings.TrimSuffix(dir, "/"))
	if err != nil {
		return -1, "", fmt.Errorf("entry %.200q: its directory %.200q: %w", name, dir, err)
	}
	return fd, base, nil
}

// walk opens dir, relative to the root ("" is the root), as described at
// parent.
func (im *importer) walk(dir string) (int, error) {
	fd, err := unix.Dup(im.root)
	if err != nil || dir == "" {
		return fd, err
	}
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	for comp := range strings.SplitSeq(dir, "/") {
		next, err := unix.Openat(fd, comp, flags, 0)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, comp, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, comp, flags, 0)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return -1, fmt.Errorf("%.200q is not a directory (a symlink is not followed)", comp)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// replace removes what is at base in dir, unless it is a directory: the
// entry that follows takes its place, as tar -x does.
func replace(dir int, base string) error {
	err := unix.Unlinkat(dir, base, 0)
	if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EISDIR) {
		return nil
	}
	return err
}

func (im *importer) apply(h tarHeader, body *tarReader) error {
	name, err := cleanName(h.Name)
	if err != nil {
		return err
	}
	mode := uint32(h.Mode & 0o7777)
	if name == "" {
		if h.Type != tarDir {
			return fmt.Errorf("entry %.200q: only a directory may name the root", h.Name)
		}
		im.dirs = append(im.dirs, dirMeta{name: "", mode: mode, sec: h.ModTime, nsec: h.ModTimeNsec})
		return nil
	}
	dir, base, err := im.dirOf(name)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("entry %.200q: %w", h.Name, err) }
	mtime := unix.Timespec{Sec: h.ModTime, Nsec: h.ModTimeNsec}
	times := []unix.Timespec{mtime, mtime} // access time as modification time, as tar -x
	switch h.Type {
	case tarDir:
		err := unix.Mkdirat(dir, base, 0o700)
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if err := unix.Fstatat(dir, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fail(err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				if err := unix.Unlinkat(dir, base, 0); err != nil {
					return fail(err)
				}
				err = unix.Mkdirat(dir, base, 0o700)
			} else {
				err = nil
			}
		}
		if err != nil {
			return fail(err)
		}
		im.dirs = append(im.dirs, dirMeta{name: name, mode: mode, sec: h.ModTime, nsec: h.ModTimeNsec})
		return nil
	case tarReg:
		// Created with its mode where that keeps all of it (see modes: so
		// no fchmod), else owner-only until fchmod gives it its mode. The
		// name is replaced only if taken: a restore's are not.
		perm, chmod, check := uint32(0o600), true, false
		if mode&^0o777 == 0 {
			switch im.modes[mode] {
			case modeUnknown:
				perm, check = mode, true
			case modeKept:
				perm, chmod = mode, false
			}
		}
		const flags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
		fd, err := unix.Openat(dir, base, flags, perm)
		if errors.Is(err, unix.EEXIST) {
			if err := replace(dir, base); err != nil {
				return fail(err)
			}
			fd, err = unix.Openat(dir, base, flags, perm)
		}
		if err != nil {
			return fail(err)
		}
		if check {
			var st unix.Stat_t
			im.modes[mode] = modeMasked
			if unix.Fstat(fd, &st) == nil && st.Mode&0o7777 == mode {
				im.modes[mode], chmod = modeKept, false
			}
		}
		n, err := body.writeBody(fdWriter(fd), im.buf)
		if err == nil && n < h.Size {
			err = fmt.Errorf("%w: body ends %d bytes early", errTarFormat, h.Size-n)
		}
		if err == nil && chmod {
			err = unix.Fchmod(fd, mode)
		}
		if err == nil {
			err = futimens(fd, times)
		}
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		if err != nil {
			return fail(err)
		}
		return nil
	case tarSymlink:
		if err := replace(dir, base); err != nil {
			return fail(err)
		}
		if err := unix.Symlinkat(h.Linkname, dir, base); err != nil {
			return fail(err)
		}
	case tarHardlink:
		target, err := cleanName(h.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("hard link %.200q to %.200q: the target must name an entry beneath the root", h.Name, h.Linkname)
		}
		tdir, tbase, err := im.parent(target)
		if err != nil {
			return err
		}
		defer unix.Close(tdir)
		if err := replace(dir, base); err != nil {
			return fail(err)
		}
		// Without AT_SYMLINK_FOLLOW: a link to a symlink links the symlink.
		if err := unix.Linkat(tdir, tbase, dir, base, 0); err != nil {
			return fail(err)
		}
		return nil // a hard link shares its target's mode and times
	case tarFIFO:
		if err := replace(dir, base); err != nil {
			return fail(err)
		}
		if err := unix.Mknodat(dir, base, unix.S_IFIFO|mode, 0); err != nil {
			return fail(err)
		}
		// mknod's mode is masked by the umask, as open's.
		if err := unix.Fchmodat(dir, base, mode, 0); err != nil {
			return fail(err)
		}
	case tarChar, tarBlockD:
		return fmt.Errorf("entry %.200q: device nodes are not made in a sandbox", h.Name)
	default:
		return fmt.Errorf("entry %.200q: tar entry type %q is not supported", h.Name, h.Type)
	}
	if err := unix.UtimesNanoAt(dir, base, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fail(err)
	}
	return nil
}

// finishDirs gives the directories their modes and times, deepest first,
// so setting one's time is not undone by its entries and a read-only
// directory took its entries before it became read-only.
func (im *importer) finishDirs() error {
	depth := func(name string) int {
		if name == "" {
			return -1 // the root, last
		}
		return strings.Count(name, "/")
	}
	slices.SortStableFunc(im.dirs, func(a, b dirMeta) int { return depth(b.name) - depth(a.name) })
	for _, d := range im.dirs {
		fd, err := im.openDir(d.name)
		if err != nil {
			return fmt.Errorf("directory %.200q: %w", d.name, err)
		}
		t := unix.Timespec{Sec: d.sec, Nsec: d.nsec}
		err = unix.Fchmod(fd, d.mode)
		if err == nil {
			err = futimens(fd, []unix.Timespec{t, t})
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("directory %.200q: %w", d.name, err)
		}
	}
	return nil
}

// futimens sets the access and modification times of the file open as fd
// (utimensat(2) with a NULL path, as the C library's futimens does).
func futimens(fd int, ts []unix.Timespec) error {
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// openDir opens the directory name (relative to the root, "" the root)
// for reading, as parent resolves it.
func (im *importer) openDir(name string) (int, error) {
	if name == "" {
		return unix.Openat(im.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	dir, base, err := im.parent(name)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dir)
	return unix.Openat(dir, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// fdWriter writes to a descriptor.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(int(w), p[n:])
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return n, err
		}
		n += m
	}
	return n, nil
}

// inboxReader reads the stream's input, acknowledging each chunk as it is
// taken, until the host closes it.
type inboxReader struct {
	s    *stream
	cur  []byte
	done bool
}

func (r *inboxReader) Read(p []byte) (int, error) {
	b, err := r.peek()
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	r.consume(n)
	return n, nil
}

// peek returns what is left of the chunk being read, taking the next one
// when none is left, or io.EOF: so a file's content is written from the
// chunk it came in (tarReader.writeBody), not copied first. The bytes
// stay valid after consume.
func (r *inboxReader) peek() ([]byte, error) {
	for len(r.cur) == 0 {
		if r.done {
			return nil, io.EOF
		}
		c, ok := r.s.stdin.Get()
		if !ok || c.Close {
			r.done = true
			continue
		}
		_ = r.s.e.w.Write(execproto.AckFrame(r.s.id, execproto.Stdin, uint32(len(c.Data))))
		r.cur = c.Data
	}
	return r.cur, nil
}

// consume drops the first n bytes peek returned.
func (r *inboxReader) consume(n int) { r.cur = r.cur[n:] }
