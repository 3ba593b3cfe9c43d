package executor

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// specialFiles serves OpSpecialFiles: the FIFOs of /workspace, with the
// default user's file-system identity like a checkpoint.
func (s *stream) specialFiles() execproto.Result {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.stop:
			s.out.Close() // a send waiting for credit gives up
		case <-done:
		}
	}()
	err := s.asUser(func() error {
		b, err := s.e.specials.get(workspacePath, s.stop)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(&streamWriter{s: s}, s.chunk)
		if _, err := bw.Write(b); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return errResult(err)
	}
	return execproto.Result{}
}

// specialCache keeps the last walk's FIFOs and walks again only when the
// tree's names or attributes may have changed since: the walk watches each
// directory it lists (inotify, added before the directory is read, so a
// name made after the read is an event) for names made, deleted or moved
// and attributes changed (a FIFO's chmod), not for writes to files. A step
// that only writes files costs one read of the inotify descriptor; any
// event, a lost one (overflow) or an error walks the whole tree again.
// Under gVisor every call of the walk is trapped: on the checkpoint
// benchmarks' tree (560 directories) a walk cost 0.3-1.1 s at load 30.
type specialCache struct {
	mu    sync.Mutex
	fd    int // the inotify descriptor, or 0 before the first walk
	valid bool
	enc   []byte // the last walk's FIFOs, encoded
	walks int    // walks made, for tests
}

const specialEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// get returns the FIFOs below root, encoded.
func (c *specialCache) get(root string, stop <-chan struct{}) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd == 0 {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			fd = -1 // no inotify: walk every time
		}
		c.fd = fd
	}
	if c.valid && c.quiet() {
		return c.enc, nil
	}
	c.valid = false
	if c.fd >= 0 {
		// What is queued is of the tree now being walked.
		c.quiet()
	}
	var buf bytes.Buffer
	c.walks++
	watched, err := walkSpecials(root, &buf, stop, c.fd)
	if err != nil {
		return nil, err
	}
	c.enc = buf.Bytes()
	c.valid = watched
	return c.enc, nil
}

// quiet drains the inotify descriptor and says whether it held nothing.
func (c *specialCache) quiet() bool {
	var b [4096]byte
	quiet := true
	for {
		n, err := unix.Read(c.fd, b[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return quiet
		}
		if err != nil || n <= 0 {
			return false
		}
		quiet = false
	}
}

// walkSpecials writes every FIFO below root to w, encoded as
// execproto.AppendSpecial does, in walk order. It reads each directory's
// entries and looks only at what they say is a FIFO (or do not say:
// DT_UNKNOWN), one getdents64 per directory and no stat of anything else:
// under gVisor each call is trapped, and this walks the whole tree. Every
// open is one component beneath its directory, no symlink followed and no
// mount crossed, as the checkpoint's walk. With watch an inotify
// descriptor (else -1), each directory is added to it before it is read;
// watched says every one was.
func walkSpecials(root string, w io.Writer, stop <-chan struct{}, watch int) (watched bool, err error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", root, err)
	}
	sw := &specialWalker{w: w, stop: stop, buf: make([]byte, 64<<10), watch: watch}
	if err := sw.dir(fd, ""); err != nil {
		return false, err
	}
	return watch >= 0 && sw.watchErr == nil, nil
}

type specialWalker struct {
	w    io.Writer
	stop <-chan struct{}
	buf  []byte
	enc  []byte
	// watch is an inotify descriptor each directory is added to before
	// it is read (-1: none); watchErr the first failure to add one.
	watch    int
	watchErr error
}

// dir walks the directory open at fd (closed when done), whose path is
// rel ("" for the root, else ending in "/").
func (sw *specialWalker) dir(fd int, rel string) error {
	defer unix.Close(fd)
	if sw.watch >= 0 && sw.watchErr == nil {
		// By the open descriptor: the directory the walk opened beneath
		// its parent, whatever its path is now.
		if _, err := unix.InotifyAddWatch(sw.watch, "/proc/self/fd/"+strconv.Itoa(fd), specialEvents); err != nil {
			sw.watchErr = err
		}
	}
	ents, err := readTypedNames(fd, sw.buf)
	if err != nil {
		return fmt.Errorf("list %s: %w", quote(strings.TrimSuffix(rel, "/")), err)
	}
	for _, e := range ents {
		select {
		case <-sw.stop:
			return errors.New("cancelled")
		default:
		}
		p := rel + e.name
		switch e.typ {
		case unix.DT_DIR:
			err = sw.subdir(fd, e.name, p)
		case unix.DT_FIFO, unix.DT_UNKNOWN:
			err = sw.look(fd, e.name, p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// subdir walks the directory name of the directory open at fd.
func (sw *specialWalker) subdir(fd int, name, p string) error {
	sub, err := openBeneath(fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return nil // gone or replaced since it was listed
	case errors.Is(err, unix.EXDEV):
		return nil // a mount point: not the workspace's
	case err != nil:
		return fmt.Errorf("open %s: %w", quote(p), err)
	}
	return sw.dir(sub, p+"/")
}

// look reports the entry name of the directory open at fd if it is a
// FIFO (an entry of unknown type is looked at; a directory is walked).
func (sw *specialWalker) look(fd int, name, p string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", quote(p), err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return sw.subdir(fd, name, p)
	case unix.S_IFIFO:
	default:
		return nil
	}
	s := execproto.Special{Path: p, Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
	s.MtimeSec, s.MtimeNsec = normalTime(st.Mtim)
	s.CtimeSec, s.CtimeNsec = normalTime(st.Ctim)
	sw.enc = execproto.AppendSpecial(sw.enc[:0], s)
	_, err := sw.w.Write(sw.enc)
	return err
}

type typedName struct {
	name string
	typ  uint8
}

// readTypedNames reads the entries of the directory at fd with their
// types (d_type), sorted by name, "." and ".." left out.
func readTypedNames(fd int, buf []byte) ([]typedName, error) {
	var out []typedName
	err := getdents(fd, buf, func(b []byte) error {
		for len(b) >= 19 {
			// struct linux_dirent64: ino (8), off (8), reclen (2),
			// type (1), name (NUL-terminated).
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("getdents64: record of %d bytes", reclen)
			}
			typ := b[18]
			name := b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if s := string(name); s != "." && s != ".." && s != "" {
				out = append(out, typedName{name: s, typ: typ})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b typedName) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// specialKeys keys the FIFOs a sandbox reported, in walk order.
func specialKeys(ss []execproto.Special) []keyed {
	if len(ss) == 0 {
		return nil
	}
	out := make([]keyed, 0, len(ss))
	for _, s := range ss {
		out = append(out, keyed{path: s.Path, key: fileKey{
			mode: unix.S_IFIFO | s.Mode, uid: s.UID, gid: s.GID,
			mtime: unix.Timespec{Sec: s.MtimeSec, Nsec: s.MtimeNsec},
			ctime: unix.Timespec{Sec: s.CtimeSec, Nsec: s.CtimeNsec},
		}})
	}
	slices.SortFunc(out, func(a, b keyed) int {
		switch {
		case a.path == b.path:
			return 0
		case walkLess(a.path, b.path):
			return -1
		}
		return 1
	})
	return slices.CompactFunc(out, func(a, b keyed) bool { return a.path == b.path })
}

// specialWrite is one entry the sandbox's FIFOs add to a stream: a FIFO
// (fifo set) or the whiteout of one gone.
type specialWrite struct {
	path string
	fifo *fileKey
}

// specialWrites is what the FIFOs now (cur) add to a stream against those
// of the baseline (base), in walk order: every one of cur in a full
// stream, else the new and changed ones and whiteouts of those gone.
func specialWrites(cur, base []keyed, full bool) []specialWrite {
	if full {
		base = nil
	}
	var out []specialWrite
	i, j := 0, 0
	for i < len(cur) || j < len(base) {
		switch {
		case j >= len(base) || (i < len(cur) && walkLess(cur[i].path, base[j].path)):
			out = append(out, specialWrite{path: cur[i].path, fifo: &cur[i].key})
			i++
		case i >= len(cur) || walkLess(base[j].path, cur[i].path):
			out = append(out, specialWrite{path: base[j].path})
			j++
		default: // the same path
			if cur[i].key != base[j].key {
				out = append(out, specialWrite{path: cur[i].path, fifo: &cur[i].key})
			}
			i++
			j++
		}
	}
	return out
}

// specialQueue holds the sandbox's FIFO entries still to write, in walk
// order, and where the walk has deleted trees (their FIFOs' whiteouts are
// then not written: the tree's whiteout deletes them).
type specialQueue struct {
	writes  []specialWrite
	next    int
	deleted []string // paths the walk wrote a whiteout or opaque marker for
}

// before writes the queued entries that come before the walk's entry
// name, and drops one at name itself (the walk's entry replaces it). It
// returns how many it wrote.
func (q *specialQueue) before(tw *tarWriter, name string) (int64, error) {
	key, deletes := streamKey(name)
	n, err := q.flush(tw, key, false)
	if err != nil {
		return n, err
	}
	if q.next < len(q.writes) && q.writes[q.next].path == key {
		q.next++
	}
	if deletes {
		q.deleted = append(q.deleted, key)
	}
	return n, nil
}

// flush writes the queued entries before key in walk order (all with
// all) and returns how many it wrote.
func (q *specialQueue) flush(tw *tarWriter, key string, all bool) (int64, error) {
	var n int64
	for ; q.next < len(q.writes); q.next++ {
		sw := q.writes[q.next]
		if !all && !walkLess(sw.path, key) {
			break
		}
		h := tarHeader{Name: sw.path, Type: tarFIFO}
		if sw.fifo == nil {
			if q.below(sw.path) {
				continue
			}
			i := strings.LastIndexByte(sw.path, '/') + 1
			h = tarHeader{Name: sw.path[:i] + ".wh." + sw.path[i:], Type: tarReg}
		} else {
			h.Mode = int64(sw.fifo.mode & 0o7777)
			h.UID, h.GID = int(sw.fifo.uid), int(sw.fifo.gid)
			h.ModTime, h.ModTimeNsec = normalTime(sw.fifo.mtime)
		}
		if err := tw.WriteHeader(h); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// below says whether p is below a tree the walk deleted.
func (q *specialQueue) below(p string) bool {
	for _, d := range q.deleted {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// streamKey is where the stream entry named name sits in walk order: a
// whiteout where what it deletes was, an opaque marker where its
// directory is, a directory without its slash. deletes says the entry
// deletes what was below that path (a whiteout, an opaque marker).
func streamKey(name string) (key string, deletes bool) {
	name = strings.TrimSuffix(name, "/")
	i := strings.LastIndexByte(name, '/') + 1
	dir, base := name[:i], name[i:]
	if base == ".wh..wh..opq" {
		return strings.TrimSuffix(dir, "/"), true
	}
	if rest, ok := strings.CutPrefix(base, ".wh."); ok {
		return dir + rest, true
	}
	return name, false
}
