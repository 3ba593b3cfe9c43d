package executor

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
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

// Checkpoints: what changed in /workspace since a baseline, as an "airlock
// delta v1" stream (doc.go describes the format).
//
// A baseline is the list of keys (inode, type, mode, owner, size, mtime,
// ctime, symlink target) of the entries of a tree, in walk order. In a cow
// workspace the tree keyed is the overlay's upper layer — the sandbox's
// changes, not the host directory under them — so a delta walks only what
// the run changed; in the other modes it is /workspace itself, walked with
// stat alone, and only the entries whose keys changed are read. In a native
// rw workspace a tracker's dirty set (dirty_linux.go) narrows a delta's
// walk to what may have changed.

// keptBaselines is how many baselines the executor keeps: the last one and
// the one before, so a checkpoint the host failed to store can be taken
// again since the one before it.
const keptBaselines = 2

// checkpoints holds the baselines of /workspace and takes checkpoints.
type checkpoints struct {
	// root is the workspace: /workspace (tests use another directory).
	root string
	// upper is an O_PATH descriptor of the cow workspace's upper layer,
	// opened before pivot_root hid it; -1 in the other modes.
	upper int
	// deltaOnly refuses full streams (the root's: the merged root holds
	// the sandbox's own mounts and the image's whole tree).
	deltaOnly bool
	// opaqueAttr is the extended attribute that marks an opaque directory
	// of the upper layer: user.overlay.opaque (a Linux overlay mounted
	// with userxattr) unless set (gVisor's overlay: trusted.overlay.opaque).
	opaqueAttr string
	// prefix starts every baseline name: random per executor, so a name
	// from another sandbox is never mistaken for one of this sandbox's.
	prefix string

	// track, in an rw workspace (native), keeps the dirty sets of the
	// baselines (dirty_linux.go); nil walks the whole tree every time.
	track *tracker

	mu   sync.Mutex // held for the whole of a checkpoint: one at a time
	next uint64     // guarded by mu: the number of the next baseline
	kept []baseline // guarded by mu: the last keptBaselines, oldest first
	// sinceWhole counts the deltas since the last walk of the whole tree
	// (fullWalkEvery). Guarded by mu.
	sinceWhole int
}

type baseline struct {
	name    string
	entries []keyed // in walk order
	// specials are the FIFOs the sandbox reported (takeWith), in walk
	// order: the host keys a gvisor workspace, where they are not.
	specials []keyed
	// dirty is what changed in the tree since the baseline was taken,
	// when a tracker keeps it; nil: unknown.
	dirty *dirtySet
}

// keyed is one entry of a baseline.
type keyed struct {
	path string // relative to the walk's root, no trailing slash
	key  fileKey
}

// fileKey is what says that an entry changed. A change to a file's content
// or metadata changes its ctime, which user space cannot set, so a change
// cannot hide behind a restored mtime. The link count is in it as well:
// Linux changes the ctime of a file given another name, gVisor does not,
// and the first name of a file newly linked must come again in the delta
// for the new names to link to it.
type fileKey struct {
	ino          uint64
	nlink        uint64
	mode         uint32 // type and permission bits (st_mode)
	uid, gid     uint32
	size         int64
	mtime, ctime unix.Timespec
	link         string // a symlink's target
	opaque       bool   // an upper-layer directory marked opaque
}

func newCheckpoints(root string, upper int) *checkpoints {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &checkpoints{root: root, upper: upper, prefix: hex.EncodeToString(b[:])}
}

// errChanged marks a checkpoint that met a file changing under it. It wraps
// EAGAIN, so the host sees that errno and knows a retry may succeed.
var errChanged = fmt.Errorf("changed while checkpointing, try again: %w", unix.EAGAIN)

// checkpoint carries out a checkpoint request, with the default user's
// file-system identity (asUser) like every file operation.
func (s *stream) checkpoint() execproto.Result {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.stop:
			s.out.Close() // a send waiting for credit gives up
		case <-done:
		}
	}()
	c := s.e.ckpt
	if s.req.Tree == execproto.TreeRoot {
		if c = s.e.rootCkpt; c == nil {
			return errResult(errors.New("the root is the host's, read-only: it has no changes to checkpoint"))
		}
	}
	var r execproto.CheckpointResult
	take := func() error {
		var err error
		r, err = c.take(s.req.Since, s.req.MarkOnly, &streamWriter{s: s}, s.chunk, s.stop)
		return err
	}
	var err error
	if s.req.Tree == execproto.TreeRoot {
		// With the executor's own identity: the root holds every user's
		// files, the default user's rights reach only some. The walk is
		// confined to the upper layer all the same (openat2 beneath it,
		// no symlink followed, no mount crossed) and only reads.
		err = take()
	} else {
		err = s.asUser(take)
	}
	if err != nil {
		return errResult(err)
	}
	return execproto.Result{Checkpoint: &r}
}

// take writes the delta of /workspace since the baseline named since (the
// whole tree when it is unknown) to w, unless markOnly, and records a new
// baseline. Nothing is recorded when it fails.
func (c *checkpoints) take(since string, markOnly bool, w io.Writer, chunk int, stop <-chan struct{}) (execproto.CheckpointResult, error) {
	return c.takeWith(since, markOnly, nil, w, chunk, stop)
}

// takeWith is take with the FIFOs the sandbox sees that the tree walked
// does not hold (a gvisor sandbox's, which gVisor keeps in its memory):
// they are keyed beside the tree's entries, and those new or changed since
// the baseline (all of them in a full stream) are written in their places
// in walk order, those gone as whiteouts.
func (c *checkpoints) takeWith(since string, markOnly bool, specials []execproto.Special, w io.Writer, chunk int, stop <-chan struct{}) (execproto.CheckpointResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var base *baseline
	for i := range c.kept {
		if since != "" && c.kept[i].name == since {
			base = &c.kept[i]
		}
	}
	if base == nil && !markOnly && c.deltaOnly {
		return execproto.CheckpointResult{}, fmt.Errorf("root checkpoint since %q: no such baseline (mark one first): %w", since, unix.EINVAL)
	}
	var res execproto.CheckpointResult
	res.Full = base == nil && !markOnly
	bw := bufio.NewWriterSize(w, chunk) // a frame of the stream's size
	var tw *tarWriter
	if !markOnly {
		tw = &tarWriter{w: bw}
	}
	spKeys := specialKeys(specials)
	var baseSp []keyed
	if base != nil {
		baseSp = base.specials
	}
	sq := &specialQueue{writes: specialWrites(spKeys, baseSp, base == nil)}
	// The pending set starts before the walk: a change racing it counts
	// for the next delta too.
	var hot *hotSet
	var pending *dirtySet
	if c.track != nil && c.upper < 0 {
		var dirty *dirtySet
		if base != nil && c.sinceWhole+1 < fullWalkEvery {
			dirty = base.dirty
		}
		hot, pending = c.track.begin(dirty)
	}
	ok := false
	defer func() {
		if !ok {
			c.track.release(pending) // a failed checkpoint consumes nothing
		}
	}()
	var keys []keyed
	var err error
	if c.upper >= 0 {
		keys, err = c.cow(base, tw, sq, stop, &res)
	} else {
		keys, err = c.plain(base, hot, tw, sq, stop, &res)
	}
	if err != nil {
		return execproto.CheckpointResult{}, err
	}
	if tw != nil {
		n, err := sq.flush(tw, "", true)
		if err != nil {
			return execproto.CheckpointResult{}, err
		}
		res.Entries += n
		if err := tw.Close(); err != nil {
			return execproto.CheckpointResult{}, err
		}
		if err := bw.Flush(); err != nil {
			return execproto.CheckpointResult{}, err
		}
	}
	res.Baseline = c.prefix + "-" + strconv.FormatUint(c.next, 10)
	c.next++
	ok = true
	if hot != nil {
		c.sinceWhole++
	} else {
		c.sinceWhole = 0
	}
	c.kept = append(c.kept, baseline{name: res.Baseline, entries: keys, specials: spKeys, dirty: pending})
	if len(c.kept) > keptBaselines {
		for _, b := range c.kept[:len(c.kept)-keptBaselines] {
			c.track.release(b.dirty)
		}
		c.kept = slices.Delete(c.kept, 0, len(c.kept)-keptBaselines)
	}
	return res, nil
}

// cow checkpoints a cow workspace. Its baseline keys the upper layer. A
// delta walks the upper layer alone. A full stream walks the merged
// /workspace, after the upper layer's keys were taken: a change racing
// the stream then differs from the baseline and comes again next time.
func (c *checkpoints) cow(base *baseline, tw *tarWriter, sq *specialQueue, stop <-chan struct{}, res *execproto.CheckpointResult) ([]keyed, error) {
	upper, err := openBeneath(c.upper, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, fmt.Errorf("open the workspace's upper layer: %w", err)
	}
	defer unix.Close(upper)
	wk := &walker{root: upper, upper: -1, overlay: true, opaqueAttr: c.opaqueAttr, record: true, stop: stop, sq: sq}
	if base != nil {
		wk.base, wk.tw = base.entries, tw
	}
	if err := wk.run(); err != nil {
		return nil, err
	}
	res.Entries, res.Bytes, res.Walked = wk.entries, wk.bytes, wk.walked
	if base == nil && tw != nil {
		if _, err := c.plain(nil, nil, tw, sq, stop, res); err != nil {
			return nil, err
		}
	}
	return wk.keys, nil
}

// plain checkpoints /workspace by walking it whole, stat alone, reading
// only what changed; with hot, a delta looks only at what hot says may
// have changed. With tw nil it records keys and writes nothing. In a cow
// workspace it serves the full stream, and records nothing.
func (c *checkpoints) plain(base *baseline, hot *hotSet, tw *tarWriter, sq *specialQueue, stop <-chan struct{}, res *execproto.CheckpointResult) ([]keyed, error) {
	root, err := unix.Open(c.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", c.root, err)
	}
	defer unix.Close(root)
	wk := &walker{root: root, upper: -1, record: c.upper < 0, tw: tw, stop: stop, sq: sq}
	if base != nil {
		wk.base, wk.hot = base.entries, hot
	}
	if c.upper >= 0 {
		// The merged view reports, for a file copied up while it had one
		// name, the lower file's inode: the upper layer's says which
		// names are one file.
		upper, err := openBeneath(c.upper, ".", unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return nil, fmt.Errorf("open the workspace's upper layer: %w", err)
		}
		defer unix.Close(upper)
		wk.upper = upper
	}
	if err := wk.run(); err != nil {
		return nil, err
	}
	res.Entries, res.Bytes = wk.entries, wk.bytes
	res.Walked += wk.walked
	return wk.keys, nil
}

// walker walks one tree depth first, a directory before its children and
// children in byte order of their names (walk order), comparing each entry
// with a baseline in the same order, recording keys and writing changed
// entries.
type walker struct {
	root int // the directory walked; paths are relative to it
	// upper, when not -1, is the cow workspace's upper layer, and root
	// its merged view: hard links are told by the upper layer's inodes.
	upper int
	// overlay says root is an overlay's upper layer, where whiteouts and
	// opaque directories mean deletions.
	overlay bool
	// opaqueAttr is checkpoints.opaqueAttr.
	opaqueAttr string
	base       []keyed // the baseline compared with, in walk order; nil for none
	// hot, when not nil, says which directories may have changed since
	// base (a tracker's dirty set): a directory outside it whose key is
	// unchanged has its subtree's keys copied from base, not walked.
	hot    *hotSet
	cur    int  // the next entry of base not yet compared
	record bool // record keys in keys
	keys   []keyed
	tw     *tarWriter // where changed entries go; nil writes nothing
	stop   <-chan struct{}
	// sq holds the sandbox's FIFOs to write among the walk's entries.
	sq *specialQueue

	buf []byte
	// links maps the device and inode of each regular file with more
	// than one link, met in this walk, to the first of its names the
	// stream holds (written or unchanged), for the others to link to.
	links map[devIno]string

	entries, bytes int64
	walked         int64 // entries looked at (stat)

	// last is the walk-order key of the last entry written (wrote): each
	// must follow it, or the tree changed under the walk (a directory
	// renamed or swapped for a symlink between its listing and its
	// stat) and the stream would not be one a restore can replay.
	last  string
	wrote bool
}

type devIno struct{ dev, ino uint64 }

func (w *walker) run() error {
	w.buf = make([]byte, 64<<10)
	w.links = map[devIno]string{}
	if w.record && w.hot != nil {
		// Most keys come from the baseline.
		w.keys = make([]keyed, 0, len(w.base)+len(w.base)/16)
	}
	return w.dir(dirAt{w.root, w.upper}, "", false, w.hot != nil && w.hot.settled(""))
}

// dirAt is a directory open in the walk and, if the walk tracks the
// upper layer under a merged view, its namesake there (else -1).
type dirAt struct{ fd, upper int }

// dir walks the children of the directory open at fd, whose path is rel
// ("" for the root, else ending in "/"). With force every entry below
// counts as changed and the baseline is not consulted (an opaque directory
// made anew: every child is new). With settled, the directory's names are
// its baseline's (settledDir).
func (w *walker) dir(d dirAt, rel string, force, settled bool) error {
	if settled && !force {
		return w.settledDir(d, rel)
	}
	names, err := readNames(d.fd, w.buf)
	if err != nil {
		return fmt.Errorf("list %s: %w", quote(strings.TrimSuffix(rel, "/")), err)
	}
	for _, name := range names {
		select {
		case <-w.stop:
			return errors.New("cancelled")
		default:
		}
		p := rel + name
		if !force {
			if err := w.drain(func(q string) bool { return walkLess(q, p) }); err != nil {
				return err
			}
		}
		if err := w.entry(d, name, p, force); err != nil {
			return err
		}
	}
	if force {
		return nil
	}
	return w.drain(func(q string) bool { return strings.HasPrefix(q, rel) })
}

// settledDir walks a directory whose names are those of the baseline (the
// dirty set saw no name made, deleted or moved in it, nor anything about
// its children), from the baseline instead of a listing: it keeps each
// child's key without a stat, but looks at (stat, and walks) the child
// directories the dirty set says may have changed below, and the files
// with more than one name (one may have been written through a name
// elsewhere).
func (w *walker) settledDir(d dirAt, rel string) error {
	for w.cur < len(w.base) && strings.HasPrefix(w.base[w.cur].path, rel) {
		select {
		case <-w.stop:
			return errors.New("cancelled")
		default:
		}
		e := w.base[w.cur]
		name := e.path[len(rel):]
		isDir := e.key.mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case isDir && w.hot.skip(e.path):
			w.cur++
			if w.copyBelow(e.path, e.key) {
				continue
			}
			w.cur--
		case !isDir && !w.hot.multi(e.key):
			w.cur++
			w.keep(e.path, e.key)
			continue
		}
		if err := w.entry(d, name, e.path, false); err != nil {
			return err
		}
	}
	return nil
}

// drain takes the baseline's entries for which before holds, none of them
// present now, and writes a whiteout for each (and nothing for what was
// below it).
func (w *walker) drain(before func(string) bool) error {
	for w.cur < len(w.base) && before(w.base[w.cur].path) {
		q := w.base[w.cur].path
		w.cur++
		if err := w.whiteout(q); err != nil {
			return err
		}
		w.skipBelow(q)
	}
	return nil
}

// skipBelow passes over the baseline's entries below p: they follow p in
// walk order, and went with it (p is now no directory, or gone, or a
// directory whose old children are all gone).
func (w *walker) skipBelow(p string) {
	for w.cur < len(w.base) && strings.HasPrefix(w.base[w.cur].path, p) && len(w.base[w.cur].path) > len(p) && w.base[w.cur].path[len(p)] == '/' {
		w.cur++
	}
}

// entry compares and writes the entry name, at path p, of the directory
// open at dirfd.
func (w *walker) entry(d dirAt, name, p string, force bool) error {
	if strings.HasPrefix(name, ".wh.") {
		return fmt.Errorf("%s: a name starting with .wh. cannot be checkpointed (the stream uses it for deletions)", quote(p))
	}
	var old *fileKey
	if !force && w.cur < len(w.base) && w.base[w.cur].path == p {
		old = &w.base[w.cur].key
		w.cur++
	}
	var st unix.Stat_t
	w.walked++
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return w.gone(p, old)
		}
		return fmt.Errorf("stat %s: %w", quote(p), err)
	}
	k := keyOf(&st)
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFDIR {
		if w.hot != nil && !force && old != nil && *old == k && w.hot.skip(p) && w.copyBelow(p, k) {
			return nil
		}
		return w.directory(d, name, p, &st, old, force)
	}
	if typ == unix.S_IFLNK {
		target, err := readlinkat(d.fd, name, w.buf)
		if errors.Is(err, unix.ENOENT) {
			return w.gone(p, old)
		}
		if err != nil {
			return fmt.Errorf("read link %s: %w", quote(p), err)
		}
		k.link = target
	}
	if typ == unix.S_IFCHR && st.Rdev == 0 && w.overlay {
		// Overlay whiteouts may all be links to one inode, whose ctime
		// every new whiteout changes: one says only that p is deleted.
		k = fileKey{mode: st.Mode}
	}
	changed := force || old == nil || *old != k
	var err error
	switch {
	case typ == unix.S_IFREG && changed:
		err = w.file(d, name, p, &st, &k)
	case typ == unix.S_IFREG:
		w.link(w.identity(d, name, &st), p)
	case typ == unix.S_IFLNK && changed:
		err = w.header(tarHeader{Name: p, Type: tarSymlink, Linkname: k.link}, &st)
	case typ == unix.S_IFIFO && changed:
		err = w.header(tarHeader{Name: p, Type: tarFIFO}, &st)
	case typ == unix.S_IFCHR && st.Rdev == 0 && w.overlay && changed:
		// An overlay whiteout: p was deleted.
		err = w.whiteout(p)
	}
	if err != nil {
		return err
	}
	switch typ {
	case unix.S_IFREG, unix.S_IFLNK, unix.S_IFIFO:
		w.keep(p, k)
	case unix.S_IFCHR:
		if st.Rdev == 0 && w.overlay {
			w.keep(p, k)
			break
		}
		fallthrough
	default:
		// Sockets and device nodes are not workspace data. One that
		// took the place of an entry deletes it.
		if old != nil {
			if err := w.whiteout(p); err != nil {
				return err
			}
		}
	}
	w.skipBelow(p)
	return nil
}

// copyBelow keeps the directory at p, with key k, and its baseline's
// subtree as they are, without looking at them: nothing below p made an
// event. It does not when the subtree holds a file with more than one
// name (one may be written through a name elsewhere, and inotify reports
// that there only), and returns false.
func (w *walker) copyBelow(p string, k fileKey) bool {
	end := w.cur
	for end < len(w.base) && isBelow(w.base[end].path, p) {
		if bk := w.base[end].key; bk.mode&unix.S_IFMT != unix.S_IFDIR && w.hot.multi(bk) {
			return false
		}
		end++
	}
	w.keep(p, k)
	if w.record {
		w.keys = append(w.keys, w.base[w.cur:end]...)
	}
	w.cur = end
	return true
}

// isBelow reports whether path q is below the directory p.
func isBelow(q, p string) bool {
	return len(q) > len(p) && q[len(p)] == '/' && strings.HasPrefix(q, p)
}

// gone handles an entry that was listed and is gone before it could be
// looked at: deleted now, if the baseline had it.
func (w *walker) gone(p string, old *fileKey) error {
	if old == nil {
		return nil
	}
	w.skipBelow(p)
	return w.whiteout(p)
}

// directory writes the directory name at p (if it changed) and walks it.
func (w *walker) directory(d dirAt, name, p string, st *unix.Stat_t, old *fileKey, force bool) error {
	fd, err := openBeneath(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	switch {
	case errors.Is(err, unix.ENOENT):
		return w.gone(p, old)
	case errors.Is(err, unix.EXDEV):
		// A mount point: what is mounted there is not the workspace's.
		// It is kept as an empty directory.
		fd = -1
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s: %w", quote(p), errChanged)
	case err != nil:
		return fmt.Errorf("open %s: %w", quote(p), err)
	}
	if fd >= 0 {
		defer unix.Close(fd)
		var fst unix.Stat_t
		if err := unix.Fstat(fd, &fst); err != nil {
			return fmt.Errorf("stat %s: %w", quote(p), err)
		}
		if fst.Ino != st.Ino || fst.Dev != st.Dev {
			return fmt.Errorf("%s: %w", quote(p), errChanged)
		}
		*st = fst
	}
	k := keyOf(st)
	fresh := false
	if w.overlay && fd >= 0 {
		k.opaque = opaque(fd, w.opaqueAttr)
		// A directory made opaque since the baseline (removed and made
		// again over a lower one): its old children are all gone.
		fresh = k.opaque && (old == nil || old.mode&unix.S_IFMT != unix.S_IFDIR || old.ino != k.ino || !old.opaque)
	}
	w.keep(p, k)
	if force || old == nil || *old != k {
		if err := w.header(tarHeader{Name: p + "/", Type: tarDir}, st); err != nil {
			return err
		}
	}
	if fresh {
		if err := w.header(tarHeader{Name: p + "/.wh..wh..opq", Type: tarReg}, nil); err != nil {
			return err
		}
		w.skipBelow(p)
	}
	if fd < 0 {
		return nil
	}
	sub := dirAt{fd, -1}
	if d.upper >= 0 {
		if sub.upper, err = openBeneath(d.upper, name, unix.O_PATH|unix.O_DIRECTORY); err == nil {
			defer unix.Close(sub.upper)
		} else {
			sub.upper = -1 // not in the upper layer: nothing below it is
		}
	}
	settled := w.hot != nil && !force && !fresh && old != nil && *old == k && w.hot.settled(p)
	return w.dir(sub, p+"/", force || fresh, settled)
}

// file writes the regular file name at p, whose key is *k: as a hard link
// to a name met before when it has one, else with its content, read from
// a descriptor checked to be the file stat saw. A file that changes while
// it is read fails the checkpoint: its body would not match its header.
// *k becomes the key of the file as read.
func (w *walker) file(d dirAt, name, p string, st *unix.Stat_t, k *fileKey) error {
	id := w.identity(d, name, st)
	if first, ok := w.links[id]; ok && st.Nlink > 1 {
		return w.header(tarHeader{Name: p, Type: tarHardlink, Linkname: first}, st)
	}
	if w.tw == nil {
		return nil
	}
	fd, err := openBeneath(d.fd, name, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%s: %w", quote(p), errChanged)
		}
		return fmt.Errorf("open %s: %w", quote(p), err)
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return fmt.Errorf("stat %s: %w", quote(p), err)
	}
	if fst.Ino != st.Ino || fst.Dev != st.Dev || fst.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: %w", quote(p), errChanged)
	}
	*k = keyOf(&fst)
	if err := w.header(tarHeader{Name: p, Type: tarReg, Size: fst.Size}, &fst); err != nil {
		return err
	}
	for left := fst.Size; left > 0; {
		n, err := unix.Read(fd, w.buf[:min(left, int64(len(w.buf)))])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", quote(p), err)
		}
		if n == 0 {
			return fmt.Errorf("%s shrank while read: %w", quote(p), errChanged)
		}
		if _, err := w.tw.Write(w.buf[:n]); err != nil {
			return err
		}
		left -= int64(n)
	}
	w.bytes += fst.Size
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil {
		return fmt.Errorf("stat %s: %w", quote(p), err)
	}
	if after.Size != fst.Size || after.Ctim != fst.Ctim {
		return fmt.Errorf("%s was written while read: %w", quote(p), errChanged)
	}
	if fst.Nlink > 1 {
		w.link(id, p)
	}
	return nil
}

// identity says which file the regular file name in d is, for hard links:
// its device and inode, in the upper layer when the walk tracks it (see
// walker.upper). It is the zero devIno for a file with one name.
func (w *walker) identity(d dirAt, name string, st *unix.Stat_t) devIno {
	if st.Nlink < 2 {
		return devIno{}
	}
	if d.upper >= 0 {
		var ust unix.Stat_t
		if unix.Fstatat(d.upper, name, &ust, unix.AT_SYMLINK_NOFOLLOW) == nil && ust.Mode&unix.S_IFMT == unix.S_IFREG {
			return devIno{ust.Dev, ust.Ino}
		}
	}
	return devIno{st.Dev, st.Ino}
}

// link notes p as the name of file id that later names of it link to.
func (w *walker) link(id devIno, p string) {
	if id == (devIno{}) {
		return
	}
	if _, ok := w.links[id]; !ok {
		w.links[id] = p
	}
}

func (w *walker) keep(p string, k fileKey) {
	if w.record {
		w.keys = append(w.keys, keyed{path: p, key: k})
	}
}

// header writes h with the metadata of st (none for a whiteout).
func (w *walker) header(h tarHeader, st *unix.Stat_t) error {
	if w.tw == nil {
		return nil
	}
	if st != nil {
		h.Mode = int64(st.Mode & 0o7777)
		h.UID, h.GID = int(st.Uid), int(st.Gid)
		h.ModTime, h.ModTimeNsec = normalTime(st.Mtim)
	}
	if w.sq != nil {
		n, err := w.sq.before(w.tw, h.Name)
		w.entries += n
		if err != nil {
			return err
		}
	}
	k := orderKey(h.Name)
	if w.wrote && !walkLess(w.last, k) {
		return fmt.Errorf("%s met after %s: %w", quote(k), quote(w.last), errChanged)
	}
	w.last, w.wrote = k, true
	w.entries++
	return w.tw.WriteHeader(h)
}

// orderKey is the path an entry of the stream named name stands at in
// walk order: a whiteout's at what it deletes, an opaque directory's
// marker just after its directory.
func orderKey(name string) string {
	key, deletes := streamKey(name)
	if deletes && (name == ".wh..wh..opq" || strings.HasSuffix(name, "/.wh..wh..opq")) {
		return key + "/"
	}
	return key
}

// whiteout writes the entry that deletes p.
func (w *walker) whiteout(p string) error {
	i := strings.LastIndexByte(p, '/') + 1
	return w.header(tarHeader{Name: p[:i] + ".wh." + p[i:], Type: tarReg}, nil)
}

// quote names the workspace entry at p in an error, quoted: a name may
// hold newlines and invalid UTF-8.
func quote(p string) string {
	return strconv.Quote(workspacePath + "/" + p)
}

func keyOf(st *unix.Stat_t) fileKey {
	return fileKey{
		ino: st.Ino, nlink: uint64(st.Nlink), mode: st.Mode, uid: st.Uid, gid: st.Gid, size: st.Size,
		mtime: st.Mtim, ctime: st.Ctim,
	}
}

// opaque reports whether the upper-layer directory open at fd is opaque:
// its lower namesake's children are hidden. A Linux overlay is mounted
// with userxattr, so the mark is user.overlay.opaque; attr, when not "",
// names another (gVisor's trusted.overlay.opaque).
//
// A trusted.* attribute is read with CAP_SYS_ADMIN alone, which the walk's
// thread set aside with its effective ids (asUser under gVisor, which has
// no setfsuid: setEffectiveIDs): so it is read on another thread, which
// has the executor's own (a thread leaves asUser only with them back). It
// reads one attribute of a descriptor the walk opened, nothing else.
func opaque(fd int, attr string) bool {
	read := func(attr string) bool {
		var v [1]byte
		n, err := unix.Fgetxattr(fd, attr, v[:])
		return err == nil && n == 1 && v[0] == 'y'
	}
	if attr == "" {
		return read("user.overlay.opaque")
	}
	got := make(chan bool, 1)
	go func() { got <- read(attr) }()
	return <-got
}

// walkLess reports whether path a comes before path b in walk order: by
// components, each in byte order, a directory before what is below it.
// That is byte order with '/' below every other byte (names hold no NUL).
func walkLess(a, b string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == '/' {
			return true
		}
		if y == '/' {
			return false
		}
		return x < y
	}
	return len(a) < len(b)
}

// readNames lists the directory open at fd (from its start), sorted.
func readNames(fd int, buf []byte) ([]string, error) {
	var names []string
	err := getdents(fd, buf, func(b []byte) error {
		_, _, names = unix.ParseDirent(b, -1, names)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// getdents reads the directory open at fd to its end through buf, handing
// fn each block of linux_dirent64 records the kernel fills.
func getdents(fd int, buf []byte, fn func([]byte) error) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		if err := fn(buf[:n]); err != nil {
			return err
		}
	}
}

// readlinkat reads the target of the symlink name in dirfd.
func readlinkat(dirfd int, name string, buf []byte) (string, error) {
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		// A target is at most PATH_MAX (4096) bytes: buf holds it all.
		return "", fmt.Errorf("readlink: target longer than %d bytes", len(buf))
	}
	return string(buf[:n]), nil
}
