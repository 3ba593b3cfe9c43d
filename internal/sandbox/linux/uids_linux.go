package linux

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
type uidAllocator struct {
	dir string
}

// acquire takes a free slot for sandbox id and returns its lock file (closing
// it frees the slot) and the host uid of root inside. The file records the id,
// so gc can tell live sandboxes from what a crash left.
func (a *uidAllocator) acquire(id string) (*os.File, uint32, error) {
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("uid slots: %w", err)
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	start := int(binary.LittleEndian.Uint32(r[:]) % uidSlots)
	for i := range uidSlots {
		k := (start + i) % uidSlots
		f, err := os.OpenFile(filepath.Join(a.dir, strconv.Itoa(k)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, 0, fmt.Errorf("uid slots: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, 0, fmt.Errorf("uid slots: %w", err)
		}
		err = f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt([]byte(id), 0)
		}
		if err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("uid slots: %w", err)
		}
		return f, uint32(uidBase + k*uidRange), nil
	}
	return nil, 0, errors.New("uid slots: every host uid range is in use")
}

// rootlessPrefix starts the names of the lock files of rootless sandboxes.
const rootlessPrefix = "rootless-"

// hold takes a lock file for the rootless sandbox id. A rootless sandbox
// needs no uid range (the invoking user's id is the only one it has), but
// live and GC must still tell it from what a crash left, so it holds a lock
// file just like a slot, named after the id. release removes it.
func (a *uidAllocator) hold(id string) (*os.File, error) {
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	name := filepath.Join(a.dir, rootlessPrefix+id)
	var f *os.File
	for {
		var err error
		if f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
			return nil, fmt.Errorf("sandbox lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("sandbox id %s is in use", id)
			}
			return nil, fmt.Errorf("sandbox lock: %w", err)
		}
		// sweep may have removed the file between the open and the lock:
		// a lock on an unlinked file protects nothing, so start again.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(name, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			break
		}
		f.Close()
	}
	err := f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(id), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox lock: %w", err)
	}
	return f, nil
}

// release frees a slot or a rootless lock file. A rootless lock file is
// removed while it is still locked, so no other process can find it held.
func (a *uidAllocator) release(f *os.File) {
	if strings.HasPrefix(filepath.Base(f.Name()), rootlessPrefix) {
		_ = os.Remove(f.Name())
	}
	f.Close()
}

// sweep removes the rootless lock files that no process holds: what
// sandboxes of killed airlock processes left.
func (a *uidAllocator) sweep() {
	ents, err := os.ReadDir(a.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), rootlessPrefix) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(a.dir, e.Name()), os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.Remove(f.Name())
		}
		f.Close()
	}
}

// live returns the ids of sandboxes whose slot is held by a running process.
func (a *uidAllocator) live() (map[string]bool, error) {
	ents, err := os.ReadDir(a.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return map[string]bool{}, nil
		}
		return nil, err
	}
	ids := map[string]bool{}
	for _, e := range ents {
		f, err := os.OpenFile(filepath.Join(a.dir, e.Name()), os.O_RDONLY, 0)
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
			b := make([]byte, 64)
			n, _ := f.ReadAt(b, 0)
			ids[string(b[:n])] = true
		}
		f.Close()
	}
	return ids, nil
}
