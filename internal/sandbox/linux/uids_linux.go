package linux

import (
	"crypto/rand"
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
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("uid slots: %w", err)
	}
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
	_, _ = rand.Read(r[:])
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
	f, err := os.OpenFile(filepath.Join(a.dir, strconv.Itoa(k)), os.O_RDWR|os.O_CREATE, 0o600)
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
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(id), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("uid slots: %w", err)
	}
	return f, nil
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
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("uid slots: %w", err)
	}
	if _, err := f.WriteAt([]byte(id+"\n"+dir+"\n"), 0); err != nil {
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
// state directory from before its cgroup exists until after it is gone; the
// kernel drops the lock when the holder dies.
type idLocks struct {
	dir string
}

// hold takes the lock of sandbox id; an id that a live sandbox holds is
// refused. release removes it.
//
// The file is made locked, then given its name: a sweep or a liveness probe
// (another process's, or this one's GC beside its own create) that found it
// named and not yet locked would take the lock for a moment, and the new
// sandbox would find its own id in use.
func (l *idLocks) hold(id string) (*os.File, error) {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	name := filepath.Join(l.dir, id)
	fd, err := unix.Open(l.dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sandbox lock: unnamed file in %s: %w", l.dir, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	for range 3 {
		// An unnamed file is named through its /proc link (linkat with
		// AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH).
		err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			f.Close()
			return nil, fmt.Errorf("sandbox lock: %w", err)
		}
		// The name is taken: by a live sandbox, or left by a killed one.
		if err := removeStale(name); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("sandbox id %s is in use", id)
			}
			return nil, fmt.Errorf("sandbox lock: %w", err)
		}
	}
	f.Close()
	return nil, fmt.Errorf("sandbox id %s is in use", id)
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
	var held, now unix.Stat_t
	if unix.Fstat(int(old.Fd()), &held) != nil || unix.Stat(name, &now) != nil || held.Ino != now.Ino || held.Dev != now.Dev {
		return nil
	}
	if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// release removes a lock file while it is still locked, so no other
// process can find it held, then drops the lock.
func (l *idLocks) release(f *os.File) {
	_ = os.Remove(f.Name())
	f.Close()
}

// isLive reports whether a running process holds the lock of id.
func (l *idLocks) isLive(id string) bool {
	f, err := os.OpenFile(filepath.Join(l.dir, id), os.O_RDONLY, 0)
	if err != nil {
		return false // never made, or released
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
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

// sweep removes the lock files no process holds: what sandboxes of killed
// airlock processes left.
func (l *idLocks) sweep() {
	ents, _ := os.ReadDir(l.dir)
	for _, e := range ents {
		f, err := os.OpenFile(filepath.Join(l.dir, e.Name()), os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.Remove(f.Name())
		}
		f.Close()
	}
}
