package executor

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The dirty set of an rw workspace (docs/checkpoints.md, "The rw mode").
//
// An rw workspace is the host's directory bound read-write: there is no
// upper layer to read a step's change from. A tracker keeps, per kept
// baseline, the directories in which something changed since it was taken,
// from one inotify descriptor with a watch on every directory of the tree,
// and a delta walks only those and their ancestors, copying the keys of
// every other subtree from its baseline. Anything the tracker cannot vouch
// for makes the next delta walk the whole tree: a missed change would be
// a silent hole in a checkpoint, a walk too many only costs time.

// trackMask is what a tracker watches on each directory. IN_EXCL_UNLINK is
// not in it: a file written through a descriptor of a name since deleted is
// still reported (the file may have another name). IN_CLOSE_WRITE reports
// the end of writes made through a shared mapping, which send no
// IN_MODIFY.
const trackMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF |
	unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

const (
	// maxTrackedDirs bounds the watches of one tracker; a larger tree is
	// walked whole.
	maxTrackedDirs = 1 << 16
	// maxDirtyDirs bounds a dirty set; past it the set says "everything".
	maxDirtyDirs = 1 << 14
	// fullWalkEvery: every fullWalkEvery-th delta of a tracked workspace
	// walks the whole tree anyway, a backstop for what no event reports
	// (a process on the host writing a file of the tree through a shared
	// mapping).
	fullWalkEvery = 64
)

// tracker watches an rw workspace's directories for the dirty sets of its
// baselines.
type tracker struct {
	root string // the workspace's path (tests: another directory)
	// alias is another path of the workspace (Setup.WorkspaceAlias), or "".
	alias string
	dev   uint64 // the workspace's device
	// pids lists the processes whose shared mappings may write the tree.
	pids func() ([]int, error)

	f         *os.File
	rc        syscall.RawConn
	closeOnce sync.Once
	started   chan struct{} // closed once the first walk is over

	mu     sync.Mutex
	ready  bool // guarded by mu: every directory is watched
	broken bool // guarded by mu: a watch failed; every delta walks the whole tree
	// wds maps watch descriptors to directories, relative to root ("" is
	// root). Guarded by mu.
	wds  map[int32]string
	sets map[*dirtySet]struct{} // guarded by mu: the sets events go into
	buf  []byte                 // guarded by mu

	// linked holds the inodes seen with more than one name since the
	// tracker started: a descriptor opened through a name since removed
	// still writes such a file, reported at that old name only, so the
	// walk always looks at them. Guarded by mu.
	linked map[uint64]bool

	// seen holds, per name, the inode the tracker's last lstat of it
	// found and the batch of events that lstat was made in. Guarded by mu.
	seen map[nameAt]seenIno
	// batch counts the reads of events. Guarded by mu.
	batch uint64
	// afterRead, for tests, runs after each read of events and before
	// they are handled. Guarded by mu.
	afterRead func()

	// events counts the events handled, for tests. Guarded by mu.
	events int

	// links is what the link notifier noted (linknotify_linux.go). Its
	// own lock: the notifier never waits for mu.
	links linkState
}

// nameAt is a name in a watched directory: the watch and the name.
type nameAt struct {
	wd   int32
	name string
}

type seenIno struct {
	ino   uint64
	batch uint64
}

// maxSeen bounds tracker.seen; past it, the names of batches older than
// seenBatches are forgotten, and if that is not enough, the next delta
// walks everything.
const (
	maxSeen     = 1 << 13
	seenBatches = 16
)

// maxLinked bounds a tracker's linked inodes; past it, it turns off.
const maxLinked = 1 << 14

// dirtySet is what changed since one baseline (or, pending, since a
// checkpoint in progress began).
type dirtySet struct {
	all bool // walk everything
	// gen is the count of links noted when the set was registered: a
	// link noted since makes the set "everything" (linkState).
	gen uint64
	// dirs maps each dirty directory (relative to the root, "" the root)
	// to whether it is deep: walked whole, every entry below stat'ed.
	dirs map[string]bool
}

func (s *dirtySet) mark(dir string, deep bool) {
	if s.all {
		return
	}
	if d, ok := s.dirs[dir]; ok && (d || !deep) {
		return
	}
	if len(s.dirs) >= maxDirtyDirs {
		s.all, s.dirs = true, nil
		return
	}
	s.dirs[dir] = deep
}

// newTracker makes a tracker of the workspace at root and starts watching
// it in the background. It is ready (begin returns sets) once every
// directory is watched. It returns nil when inotify is not available.
func newTracker(root, alias string, pids func() ([]int, error)) *tracker {
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return nil
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "inotify")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	if pids == nil {
		pids = allPids
	}
	t := &tracker{
		root: strings.TrimSuffix(root, "/"), alias: alias, dev: st.Dev, pids: pids, f: f, rc: rc,
		started: make(chan struct{}), wds: map[int32]string{}, sets: map[*dirtySet]struct{}{}, linked: map[uint64]bool{},
		seen:  map[nameAt]seenIno{},
		buf:   make([]byte, 64<<10),
		links: linkState{inflight: map[int]struct{}{}},
	}
	go t.run()
	return t
}

// run watches every directory of the tree, then handles events as they
// come until the tracker is closed or broken.
func (t *tracker) run() {
	t.addTree("", true, false)
	t.mu.Lock()
	t.ready = !t.broken
	t.mu.Unlock()
	close(t.started)
	for {
		done := false
		err := t.rc.Read(func(fd uintptr) bool {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.drainFD(int(fd))
			done = t.broken
			return done // false: wait for more
		})
		if err != nil || done {
			t.close()
			return
		}
	}
}

// close stops the tracker: its watches go with the descriptor.
func (t *tracker) close() {
	t.closeOnce.Do(func() { t.f.Close() })
}

// disable makes every set, and every delta from now on, walk the whole
// tree. Preconditions: t.mu held.
func (t *tracker) disable() {
	t.broken = true
	t.ready = false
	t.markAll()
}

func (t *tracker) markAll() {
	for s := range t.sets {
		s.all, s.dirs = true, nil
	}
}

func (t *tracker) mark(dir string, deep bool) {
	for s := range t.sets {
		s.mark(dir, deep)
	}
}

// drain handles every event queued now. Preconditions: t.mu held.
func (t *tracker) drain() {
	if err := t.rc.Control(func(fd uintptr) { t.drainFD(int(fd)) }); err != nil {
		t.disable()
	}
}

func (t *tracker) drainFD(fd int) {
	for !t.broken {
		n, err := unix.Read(fd, t.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil || n <= 0 {
			t.disable()
			return
		}
		evs, err := parseInotify(t.buf[:n])
		if err != nil {
			t.disable()
			return
		}
		t.batch++
		if t.afterRead != nil {
			t.afterRead()
		}
		for i := range evs {
			t.handle(evs[i:])
		}
	}
}

// handle marks what the first of evs says may have changed; the others
// are the events after it, read with it. Preconditions: t.mu held.
func (t *tracker) handle(evs []inotifyEvent) {
	ev := evs[0]
	t.events++
	if ev.mask&unix.IN_Q_OVERFLOW != 0 {
		// Events were lost: the sets cannot say what changed.
		t.markAll()
		return
	}
	dir, ok := t.wds[ev.wd]
	if !ok {
		return // a watch already dropped
	}
	if ev.mask&unix.IN_UNMOUNT != 0 || (dir == "" && ev.mask&(unix.IN_IGNORED|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0) {
		t.disable()
		return
	}
	if ev.mask&unix.IN_IGNORED != 0 {
		// The kernel dropped the watch (the directory was deleted; its
		// parent reported that). Were the directory still there, it
		// would be watched again and walked whole.
		delete(t.wds, ev.wd)
		t.mark(parentOf(dir), false)
		t.mark(dir, true)
		t.addTree(dir, false, true)
		return
	}
	t.mark(dir, false)
	if ev.name == "" {
		return // the directory itself: its attributes, or its move (the parent says where)
	}
	p := joinRel(dir, ev.name)
	if ev.mask&unix.IN_ISDIR != 0 {
		switch {
		case ev.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			// What was made in it before its watch made no event:
			// it is walked whole.
			t.mark(p, true)
			t.addTree(p, false, true)
		case ev.mask&(unix.IN_MOVED_FROM|unix.IN_DELETE) != 0:
			t.forget(p)
		}
		return
	}
	if ev.mask&(unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_MODIFY|unix.IN_ATTRIB|unix.IN_CLOSE_WRITE) != 0 {
		// A file with another name may be written through this one,
		// and inotify reports that here only: the walk must then look
		// at every name. A name gone already may have been such a
		// file (a hard link made, written through and removed).
		var st unix.Stat_t
		err := unix.Lstat(t.root+"/"+p, &st)
		if err == nil {
			t.sawAt(nameAt{ev.wd, ev.name}, ev.mask, st.Ino)
		} else {
			// Renamed since (a temporary file renamed over the file
			// it replaces): where the events read with this one took
			// it.
			if q, ok := t.renamedTo(evs); ok {
				err = unix.Lstat(t.root+"/"+q, &st)
			}
		}
		if err != nil || (st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1) {
			t.markAll()
		}
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
			t.addLinked(st.Ino)
		}
	}
}

// sawAt records that an lstat of the name at n, for an event of mask,
// found inode ino. An event that put a file at n (made or moved there)
// whose lstat finds the inode an earlier lstat of n found says that the
// earlier one came after that file took n's place: what the earlier event
// was about (a second name of a file, written through) was gone by then,
// unseen, so everything is marked. A replacement seen after the earlier
// lstat has an inode of its own (both files existed at once).
// Preconditions: t.mu held.
func (t *tracker) sawAt(n nameAt, mask uint32, ino uint64) {
	if old, ok := t.seen[n]; ok && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && old.ino == ino {
		t.markAll()
	}
	if len(t.seen) >= maxSeen {
		for k, v := range t.seen {
			if v.batch+seenBatches < t.batch {
				delete(t.seen, k)
			}
		}
		if len(t.seen) >= maxSeen {
			t.markAll()
			clear(t.seen)
		}
	}
	t.seen[n] = seenIno{ino: ino, batch: t.batch}
}

// renamedTo follows the name of evs[0] through the renames of the events
// after it, and returns its last path; false when one of them deleted it,
// or put another file in its place, or the chain cannot be followed.
// Preconditions: t.mu held.
func (t *tracker) renamedTo(evs []inotifyEvent) (string, bool) {
	wd, name := evs[0].wd, evs[0].name
	for j := 1; j < len(evs); j++ {
		e := evs[j]
		if e.wd != wd || e.name != name {
			continue
		}
		switch {
		case e.mask&unix.IN_MOVED_FROM != 0:
			k := j + 1
			for k < len(evs) && (evs[k].mask&unix.IN_MOVED_TO == 0 || evs[k].cookie != e.cookie) {
				k++
			}
			if k == len(evs) {
				return "", false // moved out of the tree, or the pair not read yet
			}
			wd, name, j = evs[k].wd, evs[k].name, k
		case e.mask&(unix.IN_DELETE|unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			return "", false
		}
	}
	dir, ok := t.wds[wd]
	return joinRel(dir, name), ok
}

// addLinked notes ino as a file with more than one name. Preconditions:
// t.mu held.
func (t *tracker) addLinked(ino uint64) {
	if len(t.linked) >= maxLinked {
		t.disable()
		return
	}
	t.linked[ino] = true
}

// forget drops the watches of dir and of everything below it (moved or
// deleted: its paths are no longer right). Preconditions: t.mu held.
func (t *tracker) forget(dir string) {
	for wd, p := range t.wds {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			delete(t.wds, wd)
			_ = t.rc.Control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
		}
	}
}

// addTree watches dir and every directory below it, breadth first, each
// before it is listed (a name made after the listing is an event). A
// watch the kernel refuses (the limit of watches, a directory the
// executor cannot read) disables the tracker; a directory gone or replaced
// by something else is passed over (what took its place made an event).
// With lock, it takes t.mu for each directory (the first walk, which must
// not hold a checkpoint up); else t.mu is held. With fresh (a directory
// new to the tree), a file below with more than one name marks everything:
// it may have been linked there before the watch, with no event, from a
// name the walk would not look at.
func (t *tracker) addTree(dir string, lock, fresh bool) {
	queue := []string{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if lock {
			t.mu.Lock()
		}
		below, ok := t.addDir(d, fresh)
		if lock {
			t.mu.Unlock()
		}
		if !ok {
			return
		}
		queue = append(queue, below...)
	}
}

// addDir watches d and returns its subdirectories; false when the tracker
// is broken. Preconditions: t.mu held.
func (t *tracker) addDir(d string, fresh bool) ([]string, bool) {
	if t.broken {
		return nil, false
	}
	abs := t.root
	if d != "" {
		abs += "/" + d
	}
	if len(t.wds) >= maxTrackedDirs {
		t.disable()
		return nil, false
	}
	var wd int
	var err error
	if cerr := t.rc.Control(func(fd uintptr) { wd, err = unix.InotifyAddWatch(int(fd), abs, trackMask) }); cerr != nil {
		t.disable()
		return nil, false
	}
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return nil, true
	case err != nil:
		t.disable()
		return nil, false
	}
	// A directory watched already (moved within the tree) takes its new
	// path, and so does what is below it as the walk goes on.
	t.wds[int32(wd)] = d
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil, true
		}
		t.disable()
		return nil, false
	}
	defer unix.Close(fd)
	var below []string
	err = getdents(fd, t.buf, func(b []byte) error {
		for len(b) > 0 {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen == 0 || reclen > len(b) {
				return errors.New("bad dirent")
			}
			typ := b[18]
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			n := string(name)
			if n == "." || n == ".." {
				continue
			}
			if typ == unix.DT_UNKNOWN || (fresh && typ != unix.DT_DIR) {
				var st unix.Stat_t
				if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
					if fresh {
						t.markAll() // gone: it may have been such a file
					}
					continue
				}
				if st.Mode&unix.S_IFMT != unix.S_IFDIR {
					if fresh && st.Nlink > 1 {
						t.markAll()
						t.addLinked(st.Ino)
					}
					continue
				}
				typ = unix.DT_DIR
			}
			if typ == unix.DT_DIR {
				below = append(below, joinRel(d, n))
			}
		}
		return nil
	})
	if err != nil {
		t.disable()
		return nil, false
	}
	return below, true
}

// begin is called before a checkpoint's walk. It takes in the events
// queued so far and the files that shared writable mappings may be
// writing, takes what the walk needs to look at since base (nil:
// everything), and registers the pending set of the baseline the
// checkpoint will record, which it returns (nil when the tracker is not
// ready: that baseline is then untracked). All of it under t.mu, which the
// reader of events holds to read and handle them: an event not read by
// the drain here is handled once the pending set takes it, and what the
// drain read happened before the walk, which sees it.
//
// The links first, before the drain: a link noted since base was
// registered makes base "everything"; one that may still be in flight
// now makes the pending set "everything" (its name may land in a
// directory made after the drain). A link that returned before this look
// made its name in a directory whose event was queued by then, which the
// drain reads; one noted after it counts against the pending set's gen.
func (t *tracker) begin(base *dirtySet) (*hotSet, *dirtySet) {
	gen, busy, lost := t.links.check()
	t.mu.Lock()
	defer t.mu.Unlock()
	if lost {
		t.disable()
	}
	if !t.ready || t.broken {
		return nil, nil
	}
	t.drain()
	t.scanMaps()
	if t.broken {
		return nil, nil
	}
	var hot *hotSet
	if base != nil && !base.all && base.gen == gen {
		hot = newHotSet(base)
		for ino := range t.linked {
			hot.linked[ino] = true
		}
	}
	pending := &dirtySet{dirs: map[string]bool{}, gen: gen, all: busy}
	if busy {
		pending.dirs = nil
	}
	t.sets[pending] = struct{}{}
	return hot, pending
}

// release stops filling s (a baseline dropped, a checkpoint failed).
func (t *tracker) release(s *dirtySet) {
	if t == nil || s == nil {
		return
	}
	t.mu.Lock()
	delete(t.sets, s)
	t.mu.Unlock()
}

// scanMaps marks the directories of the files that the processes map
// shared and writable: their writes send no events. A process whose
// mappings cannot be read, a mapping of the workspace's device outside
// its paths, or a path that cannot be read back marks everything.
// Preconditions: t.mu held.
func (t *tracker) scanMaps() {
	pids, err := t.pids()
	if err != nil {
		t.markAll()
		return
	}
	for _, pid := range pids {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
				continue // gone: its mappings went, and their files' close was an event
			}
			t.markAll()
			return
		}
		err = t.scanMapsOf(f)
		f.Close()
		if err != nil && !errors.Is(err, unix.ESRCH) {
			t.markAll()
			return
		}
	}
}

func (t *tracker) scanMapsOf(f *os.File) error {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 6 || len(fields[1]) != 4 || fields[1][1] != 'w' || fields[1][3] != 's' || fields[4] == "0" {
			continue
		}
		path := strings.TrimLeft(fields[5], " ")
		rel, ok := t.relPath(path)
		if !ok {
			if t.onDev(fields[3]) {
				t.markAll()
			}
			continue
		}
		if strings.ContainsRune(rel, '\\') || strings.HasSuffix(rel, " (deleted)") {
			// A name with a newline (shown as \012), or a file
			// deleted (which may have another name).
			t.markAll()
			continue
		}
		t.mark(parentOf(rel), false)
	}
	return sc.Err()
}

// relPath turns a path of the sandbox into one relative to the workspace.
func (t *tracker) relPath(p string) (string, bool) {
	for _, r := range []string{t.root, t.alias} {
		if r != "" && strings.HasPrefix(p, r+"/") {
			return p[len(r)+1:], true
		}
	}
	return "", false
}

// onDev reports whether dev, as /proc/PID/maps shows it (major:minor in
// hex), is the workspace's device (or cannot be read).
func (t *tracker) onDev(dev string) bool {
	major, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return true
	}
	a, err1 := strconv.ParseUint(major, 16, 32)
	b, err2 := strconv.ParseUint(minor, 16, 32)
	if err1 != nil || err2 != nil {
		return true
	}
	return unix.Mkdev(uint32(a), uint32(b)) == t.dev
}

// allPids lists the processes of the sandbox: its pid namespace's /proc.
func allPids() ([]int, error) {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, de := range des {
		if pid, err := strconv.Atoi(de.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// hotSet is what a delta walk looks at: the dirty directories and their
// ancestors are hot (listed, each child stat'ed); below a deep directory
// everything is.
type hotSet struct {
	hot   map[string]bool
	dirty map[string]bool
	deep  map[string]bool
	// linked holds the inodes of files that had more than one name
	// (tracker.linked): the walk looks at them as at files that do.
	linked map[uint64]bool
}

// multi reports whether the baseline's non-directory key k may be a file
// with another name.
func (h *hotSet) multi(k fileKey) bool {
	return k.nlink > 1 || h.linked[k.ino]
}

func newHotSet(s *dirtySet) *hotSet {
	h := &hotSet{hot: map[string]bool{"": true}, dirty: map[string]bool{}, deep: map[string]bool{}, linked: map[uint64]bool{}}
	for d, deep := range s.dirs {
		h.dirty[d] = true
		if deep {
			h.deep[d] = true
		}
		for p := d; !h.hot[p]; p = parentOf(p) {
			h.hot[p] = true
		}
	}
	return h
}

// skip reports whether the directory at p (relative to the root) is
// neither hot nor below a deep directory: its subtree may be copied from
// the baseline.
func (h *hotSet) skip(p string) bool {
	if h.hot[p] {
		return false
	}
	for q := p; q != ""; {
		q = parentOf(q)
		if h.deep[q] {
			return false
		}
	}
	return !h.deep[p]
}

// settled reports whether the directory at p is neither dirty nor below
// (or at) a deep one: its names and its children's keys are its
// baseline's, but for the child directories hot and files with more than
// one name.
func (h *hotSet) settled(p string) bool {
	if h.dirty[p] || h.deep[p] {
		return false
	}
	for q := p; q != ""; {
		q = parentOf(q)
		if h.deep[q] {
			return false
		}
	}
	return true
}

// parentOf is the directory of the relative path p ("" for a name of the
// root).
func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
