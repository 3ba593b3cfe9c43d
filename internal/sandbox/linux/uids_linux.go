package linux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"

	"golang.org/x/sys/unix"
)

// uidRange is the number of ids mapped into each sandbox: 0..65535 inside.
const uidRange = 65536

// uidBase is the first host uid handed to sandboxes. Slot k maps sandbox uid
// 0 to uidBase + k*uidRange. The range sits far above the ids of real users
// and of the subordinate ranges tools like useradd hand out.
const uidBase = 1 << 30

// uidSlots is the number of slots: up to uidBase + uidSlots*uidRange < 2^31.
const uidSlots = 16384

// uidAllocator hands out a distinct host uid range to every live sandbox, even
// across airlock processes: a slot is held by an flock on its lock file, which
// the kernel releases when the holder dies, so a crash never leaks a range.
//
// A process tries the slots it released last before a random one, so that a
// long-lived host keeps using a few ranges, for which it keeps the id-map
// namespaces of workspaces (see idmapCache).
type uidAllocator struct {
	dir string

	mu     sync.Mutex
	recent []int // guarded by mu: slots this process released, newest last
}

// recentSlots bounds uidAllocator.recent.
const recentSlots = 64

// acquire takes a free slot for sandbox id and returns its lock file (closing
// it frees the slot) and the host uid of root inside. The file records the id,
// so gc can tell live sandboxes from what a crash left.
func (a *uidAllocator) acquire(id string) (*os.File, uint32, error) {
	a.mu.Lock()
	recent := slices.Clone(a.recent)
	a.mu.Unlock()
	for i := len(recent) - 1; i >= 0; i-- {
		f, err := a.take(recent[i], id)
		if err != nil {
			return nil, 0, err
		}
		a.forget(recent[i]) // taken now, by this process or another
		if f != nil {
			return f, slotBase(recent[i]), nil
		}
	}
	var r [4]byte
	sandbox.Random(r[:])
	start := int(binary.LittleEndian.Uint32(r[:]) % uidSlots)
	for i := range uidSlots {
		k := (start + i) % uidSlots
		f, err := a.take(k, id)
		if err != nil {
			return nil, 0, err
		}
		if f != nil {
			return f, slotBase(k), nil
		}
	}
	return nil, 0, errors.New("uid slots: every host uid range is in use")
}

// take locks slot k for sandbox id, or returns nil if another holds it:
// a process holds its lock, or the cgroup its last holder bound to it still
// holds a process (see bind).
func (a *uidAllocator) take(k int, id string) (*os.File, error) {
	path := filepath.Join(a.dir, strconv.Itoa(k))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(a.dir, 0o700); err != nil {
			return nil, fmt.Errorf("uid slots: %w", err)
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("uid slots: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("uid slots: %w", err)
	}
	if slotStillUsed(f) {
		f.Close()
		return nil, nil
	}
	if err := rewrite(f, id); err != nil {
		f.Close()
		return nil, fmt.Errorf("uid slots: %w", err)
	}
	return f, nil
}

// rewrite makes rec the whole content of the slot file f: cut to rec's
// length, then written over. A file is never cut to nothing: that frees
// its data block, which on a file system mounted with discard (ext4 here)
// waits for the device's discard in the ftruncate, 1-5 ms twice a Create.
// Cut first, a crash between the two leaves a prefix of the old record or
// rec with a hole after it, neither naming a cgroup that rec does not.
func rewrite(f *os.File, rec string) error {
	if err := f.Truncate(int64(len(rec))); err != nil {
		return err
	}
	_, err := f.WriteAt([]byte(rec), 0)
	return err
}

func slotBase(k int) uint32 { return uint32(uidBase + k*uidRange) }

// slotRecordMax bounds what slotStillUsed reads of a slot's file: an id and
// a cgroup2 path.
const slotRecordMax = 8192

// bind records in the slot file f (locked, holding the sandbox's id) the
// cgroup2 directory dir that every process of the sandbox is in. A sandbox
// whose host exits before its processes are gone (Sandbox.DestroyDetached)
// drops the slot's lock with them still dying: the slot stays taken while
// dir holds a process (slotStillUsed), so no other sandbox gets the same
// host ids until the last of them has exited.
func (a *uidAllocator) bind(f *os.File, id, dir string) error {
	if strings.ContainsRune(dir, '\n') || len(id)+len(dir)+2 > slotRecordMax {
		return fmt.Errorf("uid slots: cgroup %.60q cannot be recorded", dir)
	}
	if err := rewrite(f, id+"\n"+dir+"\n"); err != nil {
		return fmt.Errorf("uid slots: %w", err)
	}
	return nil
}

// slotStillUsed reports whether the slot file f, just locked, names a
// cgroup (bind) that still holds a process, or cannot tell: then the slot
// is not free. A file of a sandbox that never bound one (its host held the
// lock until its processes were gone) or is empty names none.
func slotStillUsed(f *os.File) bool {
	var buf [slotRecordMax]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return true
	}
	_, rest, ok := strings.Cut(string(buf[:n]), "\n")
	dir, _, _ := strings.Cut(rest, "\n")
	if !ok || dir == "" {
		return false
	}
	if !filepath.IsAbs(dir) {
		return true
	}
	busy, err := cgroup.DirPopulated(dir)
	return busy || err != nil
}

// forget drops slot k from the recently released ones.
func (a *uidAllocator) forget(k int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drop(k)
}

// drop removes slot k from recent. Preconditions: a.mu held.
func (a *uidAllocator) drop(k int) {
	a.recent = slices.DeleteFunc(a.recent, func(r int) bool { return r == k })
}

// release frees the slot whose root is host uid base.
func (a *uidAllocator) release(f *os.File, base uint32) {
	f.Close()
	k := int(base-uidBase) / uidRange
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drop(k)
	if len(a.recent) == recentSlots {
		a.recent = a.recent[1:]
	}
	a.recent = append(a.recent, k)
}

// idLocks tells live sandboxes from what a crash left. Every sandbox, root
// or rootless, holds an flock on a file named after its id in its home's
// state directory (dir) from before its cgroup exists until after it is
// gone; the kernel drops the lock when the holder dies.
//
// The file is not a new one per sandbox: making and freeing an inode per
// sandbox (O_TMPFILE, then its last unlink) was the host's largest
// bookkeeping cost per sandbox on ext4 under load (docs/benchmarks.md,
// idlock29). A pool of lock files beside dir (pool) is reused instead: a
// sandbox takes the first pool file no process holds and whose only name
// is its pool name, locks it, and gives it its id as a second name (a hard
// link); release removes that name while the file is still locked. So a
// file with a name in dir is always either locked by the holder of that id
// or left by a killed holder (a stale name: the file then has two names and
// no lock, and no taker uses it until a sweep has removed the stale name).
// Pool names are made once (the first time that many sandboxes of the home
// were live at once) and never removed while the home is in use (Forget).
//
// The files live in the home, not on a tmpfs: the home is what every
// airlock process that must see a sandbox's lock shares (a daemon, the
// front ends, another container with the home mounted), on whatever file
// system it is on; a tmpfs path of its own (/run is not one everywhere,
// /dev/shm is per container and writable by every user) could give one
// home two lock directories, and GC of one would take a sandbox of the
// other for a leftover. The pool needs only open, flock, link and unlink.
type idLocks struct {
	dir string

	mu     sync.Mutex
	recent []int        // guarded by mu: pool files this process released, newest last
	taken  map[int]bool // guarded by mu: pool files this process holds
	// noPool is set for a state directory whose file system refuses a
	// hard link: every sandbox gets a new unnamed file, named once locked,
	// as before the pool.
	noPool bool // guarded by mu
	// died is for tests: called at each step of hold, it
	// returns true to end there as a killed process would (the files
	// closed, nothing else undone).
	died func(step string) bool
}

// errDied is what hold returns where died ended it.
var errDied = errors.New("sandbox lock: died (test)")

// dies reports whether the test hook ends hold at step.
func (l *idLocks) dies(step string) bool { return l.died != nil && l.died(step) }

// idPoolMax bounds the pool: sandboxes beyond that many live at once in
// one home get a new file each.
const idPoolMax = 64

// heldID is a held id lock: the locked file and, when it came from the
// pool, its pool name (else -1).
type heldID struct {
	f    *os.File
	k    int
	name string // the id's name in dir
}

// pool is the directory of the pool's files: beside dir, so that a
// listing of dir holds only ids.
func (l *idLocks) pool() string { return l.dir + "-pool" }

// hold takes the lock of sandbox id; an id that a live sandbox holds is
// refused. release removes it.
//
// The file is locked before it is given the id's name: a sweep or a
// liveness probe (another process's, or this one's GC beside its own
// create) that found it named and not yet locked would take the lock for a
// moment, and the new sandbox would find its own id in use.
func (l *idLocks) hold(id string) (*heldID, error) {
	name := filepath.Join(l.dir, id)
	l.mu.Lock()
	noPool := l.noPool
	l.mu.Unlock()
	if !noPool {
		h, err := l.fromPool(id, name)
		if h != nil || err != nil {
			return h, err
		}
	}
	return l.fresh(id, name)
}

// fromPool takes a pool file for id and links it as name; nil, nil when
// none is free or the pool cannot be used (then hold makes a new file).
func (l *idLocks) fromPool(id, name string) (*heldID, error) {
	// The files this process released last first, then the pool in
	// order, but for those it holds.
	var order [idPoolMax]int
	var skip [idPoolMax]bool
	n := 0
	l.mu.Lock()
	for i := len(l.recent) - 1; i >= 0; i-- {
		order[n], skip[l.recent[i]] = l.recent[i], true
		n++
	}
	for k := range l.taken {
		skip[k] = true
	}
	l.mu.Unlock()
	for k := range idPoolMax {
		if !skip[k] {
			order[n] = k
			n++
		}
	}
	for _, k := range order[:n] {
		f, err := l.take(k)
		if err != nil {
			return nil, err
		}
		if f == nil {
			continue
		}
		if l.dies("locked") {
			f.Close()
			return nil, errDied
		}
		h := &heldID{f: f, k: k, name: name}
		err = l.name(f, id, name, func() error { return unix.Link(f.Name(), name) })
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EMLINK) {
			// No hard links here: new files, as before the pool.
			f.Close()
			l.mu.Lock()
			l.noPool = true
			l.mu.Unlock()
			return nil, nil
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		if l.dies("linked") {
			f.Close()
			return nil, errDied
		}
		l.mu.Lock()
		if l.taken == nil {
			l.taken = map[int]bool{}
		}
		l.taken[k] = true
		l.recent = slices.DeleteFunc(l.recent, func(r int) bool { return r == k })
		l.mu.Unlock()
		return h, nil
	}
	return nil, nil
}

// take locks pool file k, made if missing; nil, nil if a process holds it
// or it has a stale name (what a killed holder left, until a sweep).
func (l *idLocks) take(k int) (*os.File, error) {
	path := filepath.Join(l.pool(), strconv.Itoa(k))
	// Not a regular file (nothing airlock makes): skipped, never waited on.
	const flags = os.O_RDWR | os.O_CREATE | unix.O_NOFOLLOW | unix.O_NONBLOCK
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(l.pool(), 0o700); err != nil {
			return nil, fmt.Errorf("sandbox lock: %w", err)
		}
		f, err = os.OpenFile(path, flags, 0o600)
	}
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	if l.dies("opened") {
		f.Close()
		return nil, errDied
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 1 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		// Its other name is a killed sandbox's id, which must not look
		// live: a sweep removes that name first.
		f.Close()
		return nil, nil
	}
	return f, nil
}

// fresh makes a new unnamed file, locks it and names it id: for sandboxes
// beyond the pool, and where hard links are refused. Release unlinks it.
func (l *idLocks) fresh(id, name string) (*heldID, error) {
	fd, err := unix.Open(l.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.ENOENT) {
		if err := os.MkdirAll(l.dir, 0o700); err != nil {
			return nil, fmt.Errorf("sandbox lock: %w", err)
		}
		fd, err = unix.Open(l.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox lock: unnamed file in %s: %w", l.dir, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	if l.dies("fresh-locked") {
		f.Close()
		return nil, errDied
	}
	// An unnamed file is named through its /proc link (linkat with
	// AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH).
	err = l.name(f, id, name, func() error {
		return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	if l.dies("fresh-linked") {
		f.Close()
		return nil, errDied
	}
	return &heldID{f: f, k: -1, name: name}, nil
}

// name gives the locked file f the name of id with link, removing a stale
// file of that name first. Postconditions: on error f is still open and
// has no name of id's.
func (l *idLocks) name(f *os.File, id, name string, link func() error) error {
	for range 3 {
		err := link()
		if errors.Is(err, unix.ENOENT) {
			if err := os.MkdirAll(l.dir, 0o700); err != nil {
				return fmt.Errorf("sandbox lock: %w", err)
			}
			err = link()
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("sandbox lock: %w", err)
		}
		// The name is taken: by a live sandbox, or left by a killed one.
		if err := removeStale(name); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return fmt.Errorf("sandbox id %s is in use", id)
			}
			return fmt.Errorf("sandbox lock: %w", err)
		}
	}
	return fmt.Errorf("sandbox id %s is in use", id)
}

// removeStale removes lock file name if no process holds it; EWOULDBLOCK
// when one does.
func removeStale(name string) error {
	old, err := os.OpenFile(name, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer old.Close()
	if err := unix.Flock(int(old.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return err
	}
	// Another process may have removed it, and named its own, meanwhile.
	if !sameFile(old, name) {
		return nil
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// sameFile reports whether path names the file f has open.
func sameFile(f *os.File, path string) bool {
	var held, now unix.Stat_t
	return unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev
}

// release removes the id's name of a lock file while it is still locked,
// so no other process can find it held, then drops the lock. A pool file
// goes back to the pool with its pool name.
func (l *idLocks) release(h *heldID) {
	_ = os.Remove(h.name)
	h.f.Close()
	if h.k < 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.taken, h.k)
	l.recent = slices.DeleteFunc(l.recent, func(r int) bool { return r == h.k })
	if len(l.recent) == idPoolMax {
		l.recent = l.recent[1:]
	}
	l.recent = append(l.recent, h.k)
}

// isLive reports whether a running process holds the lock of id.
func (l *idLocks) isLive(id string) bool {
	name := filepath.Join(l.dir, id)
	f, err := os.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return false // never made, or released
	}
	defer f.Close()
	return lockedAs(f, name)
}

// lockedAs reports whether f, opened by its name in the id directory, is
// locked by the holder of that name.
func lockedAs(f *os.File, name string) bool {
	if !errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK) {
		return false
	}
	// A pool file is reused: if the holder of the id released it after it
	// was opened here, and another sandbox took it, it is locked for that
	// one. While it still has the id's name, it is locked for the id.
	return sameFile(f, name)
}

// live returns the ids whose lock a running process holds.
func (l *idLocks) live() (map[string]bool, error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ids := map[string]bool{}
	for _, e := range ents {
		if l.isLive(e.Name()) {
			ids[e.Name()] = true
		}
	}
	return ids, nil
}

// sweep removes the lock files' id names no process holds: what sandboxes
// of killed airlock processes left. A pool file's pool name stays, and the
// file is free again.
func (l *idLocks) sweep() {
	ents, _ := os.ReadDir(l.dir)
	for _, e := range ents {
		name := filepath.Join(l.dir, e.Name())
		f, err := os.OpenFile(name, os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		sweepOne(f, name)
		f.Close()
	}
}

// sweepOne removes name, in the id directory, if f, opened by that name,
// is unlocked and still the file of that name: else its holder released it
// and the name is another's now (the same id held again).
func sweepOne(f *os.File, name string) {
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && sameFile(f, name) {
		_ = os.Remove(name)
	}
}

// forget removes the pool's files no process holds, and the pool if that
// leaves it empty: for Forget, when no process uses the home any more.
func (l *idLocks) forget() {
	ents, _ := os.ReadDir(l.pool())
	for _, e := range ents {
		name := filepath.Join(l.pool(), e.Name())
		f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil && sameFile(f, name) {
			_ = os.Remove(name)
		}
		f.Close()
	}
	_ = os.Remove(l.pool())
}
