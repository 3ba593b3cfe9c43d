package chunk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var _ Backend = (*Dir)(nil)

// staleTemp is the age past which NewDir removes leftover temporary files
// (of a Put that crashed). A live Put in another process is younger.
const staleTemp = time.Hour

// Dir is a Backend in a directory of one host ($AIRLOCK_HOME/chunks): the
// chunk with ID X lives at DIR/XX/X, where XX are the first two hex digits
// of X (256 fan-out directories keep directories small).
//
// Put writes a temporary file in DIR/tmp and renames it into place, so a
// chunk is complete or absent, and concurrent Puts of one chunk (in one
// process or several) are safe; but it syncs nothing: a checkpoint puts a
// thousand chunks a gigabyte, and one fsync each would cost more than all
// the rest. It only starts each file's writeback (sync_file_range), so
// that the disk writes while the next chunks are compressed. Sync then
// makes them durable at once (syncfs(2) of the
// directory's file system). Should the machine stop before that, a file
// system that does not order a file's data before its rename may leave a
// chunk empty: Has reports an empty file as absent, so the next Put writes
// it again, and Get reports it as corrupt.
type Dir struct {
	dir string
}

// NewDir opens the chunk directory dir, creating it (mode 0700) if
// needed, and removes temporary files that crashed Puts left behind. The
// fan-out directories are made by the first Put that needs each.
func NewDir(dir string) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("chunk: open %s: %w", dir, err)
	}
	d := &Dir{dir: abs}
	if err := os.MkdirAll(d.tmpDir(), 0o700); err != nil {
		return nil, fmt.Errorf("chunk: open %s: %w", abs, err)
	}
	if err := d.removeStaleTemps(time.Now()); err != nil {
		return nil, fmt.Errorf("chunk: open %s: %w", abs, err)
	}
	return d, nil
}

// Path returns the directory.
func (d *Dir) Path() string { return d.dir }

func (d *Dir) tmpDir() string { return filepath.Join(d.dir, "tmp") }

func (d *Dir) path(id ID) string {
	h := id.String()
	return filepath.Join(d.dir, h[:2], h)
}

func (d *Dir) removeStaleTemps(now time.Time) error {
	entries, err := os.ReadDir(d.tmpDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		if name, ok := strings.CutPrefix(e.Name(), "expire-"); ok {
			// An Expire that stopped between moving a chunk aside and
			// deciding: put it back; a later collection decides again.
			if id, err := ParseID(name); err == nil {
				if err := os.MkdirAll(filepath.Dir(d.path(id)), 0o700); err != nil {
					return err
				}
				if err := os.Rename(filepath.Join(d.tmpDir(), e.Name()), d.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
				continue
			}
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile by its own Put
		}
		if now.Sub(info.ModTime()) > staleTemp {
			if err := os.Remove(filepath.Join(d.tmpDir(), e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// Put implements Backend.
func (d *Dir) Put(ctx context.Context, id ID, data []byte) error {
	if len(data) == 0 || len(data) > MaxStored {
		return fmt.Errorf("chunk dir: put %s: %d bytes, want 1 to %d", id, len(data), MaxStored)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("chunk dir: put %s: %w", id, err)
	}
	final := d.path(id)
	if ok, err := d.has(final); err != nil {
		return fmt.Errorf("chunk dir: put %s: %w", id, err)
	} else if ok {
		return nil
	}
	f, err := os.CreateTemp(d.tmpDir(), "put-*")
	if err != nil {
		return fmt.Errorf("chunk dir: put %s: %w", id, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		// Start writing it out now, without waiting: a first checkpoint
		// puts a thousand chunks a gigabyte, and its Sync would otherwise
		// wait for all of them to reach the disk at the end (a second
		// in a gigabyte's checkpoint of five), while the disk idled as
		// they were compressed. Only a hint: Sync is what makes them
		// durable, and a file system without it is no error.
		_ = unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		err = f.Chmod(0o400)
	}
	if err == nil {
		// The chunk's last use (see Has), from the wall clock.
		now := time.Now()
		err = os.Chtimes(tmp, now, now)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Atomic: a concurrent Put of the same chunk renames an identical
		// file over this one, and readers see one or the other.
		err = os.Rename(tmp, final)
		if errors.Is(err, os.ErrNotExist) {
			// The first chunk of its fan-out directory.
			if err = os.MkdirAll(filepath.Dir(final), 0o700); err == nil {
				err = os.Rename(tmp, final)
			}
		}
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("chunk dir: put %s: %w", id, err)
	}
	return nil
}

// has reports whether a chunk file is at path and not empty.
func (d *Dir) has(path string) (bool, error) {
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return info.Mode().IsRegular() && info.Size() > 0, nil
}

// Get implements Backend.
func (d *Dir) Get(ctx context.Context, id ID, dst []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return dst, fmt.Errorf("chunk dir: get %s: %w", id, err)
	}
	f, err := os.Open(d.path(id))
	if errors.Is(err, os.ErrNotExist) {
		return dst, fmt.Errorf("chunk dir: get: %w: %s", ErrNotFound, id)
	}
	if err != nil {
		return dst, fmt.Errorf("chunk dir: get %s: %w", id, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return dst, fmt.Errorf("chunk dir: get %s: %w", id, err)
	}
	size := info.Size()
	if size <= 0 || size > MaxStored {
		return dst, fmt.Errorf("chunk dir: get: %w: %s holds %d bytes, want 1 to %d", ErrCorrupt, id, size, MaxStored)
	}
	start := len(dst)
	dst = slices.Grow(dst, int(size))[:start+int(size)]
	if _, err := io.ReadFull(f, dst[start:]); err != nil {
		return dst[:start], fmt.Errorf("chunk dir: get %s: %w", id, err)
	}
	return dst, nil
}

// Has implements Backend: an empty file (see Dir) is not a chunk. A
// chunk's last use is its file's modification time, which Has sets to now
// before it looks: the one step that both finds the file and marks it
// (see Expire).
func (d *Dir) Has(ctx context.Context, id ID) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("chunk dir: stat %s: %w", id, err)
	}
	p := d.path(id)
	now := time.Now()
	err := os.Chtimes(p, now, now)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("chunk dir: stat %s: %w", id, err)
	}
	ok, err := d.has(p)
	if err != nil {
		return false, fmt.Errorf("chunk dir: stat %s: %w", id, err)
	}
	return ok, nil
}

// Expire implements Backend. It renames the chunk out of its place into
// DIR/tmp first, atomically, and reads its time there: a Has that marked
// it before the rename shows in that time, and the chunk goes back into
// place; one after the rename finds no file (its writer puts the chunk
// again). Only a chunk unused since before is then removed. The time is
// set by Has and Put from the wall clock, not the file system's coarser
// one, so it compares with before to the nanosecond.
func (d *Dir) Expire(ctx context.Context, id ID, before time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("chunk dir: expire %s: %w", id, err)
	}
	final := d.path(id)
	info, err := os.Lstat(final)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("chunk dir: expire %s: %w", id, err)
	}
	if !info.ModTime().Before(before) {
		return false, nil // used since: no need to move it
	}
	aside := filepath.Join(d.tmpDir(), "expire-"+id.String())
	if err := os.Rename(final, aside); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("chunk dir: expire %s: %w", id, err)
	}
	info, err = os.Lstat(aside)
	if err == nil && info.ModTime().Before(before) {
		if err := os.Remove(aside); err != nil {
			return false, fmt.Errorf("chunk dir: expire %s: %w", id, err)
		}
		return true, nil
	}
	// Used in the meantime: back into place (over a copy a writer may
	// have put since, with the same bytes).
	if rerr := os.Rename(aside, final); rerr != nil {
		return false, fmt.Errorf("chunk dir: expire %s: put it back: %w", id, rerr)
	}
	if err != nil {
		return false, fmt.Errorf("chunk dir: expire %s: %w", id, err)
	}
	return false, nil
}

// Delete implements Backend.
func (d *Dir) Delete(ctx context.Context, id ID) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("chunk dir: delete %s: %w", id, err)
	}
	err := os.Remove(d.path(id))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("chunk dir: delete: %w: %s", ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("chunk dir: delete %s: %w", id, err)
	}
	return nil
}

// IDs implements Backend: it reads one fan-out directory at a time, in
// order, and skips names that are not chunks' (a file someone left there).
func (d *Dir) IDs(ctx context.Context) iter.Seq2[ID, error] {
	return func(yield func(ID, error) bool) {
		for i := range 256 {
			if err := ctx.Err(); err != nil {
				yield(ID{}, fmt.Errorf("chunk dir: list: %w", err))
				return
			}
			fan := fmt.Sprintf("%02x", i)
			names, err := readNames(filepath.Join(d.dir, fan))
			if err != nil {
				yield(ID{}, fmt.Errorf("chunk dir: list: %w", err))
				return
			}
			slices.Sort(names)
			for _, name := range names {
				id, err := ParseID(name)
				if err != nil || name[:2] != fan {
					continue
				}
				if !yield(id, nil) {
					return
				}
			}
		}
	}
}

// readNames returns the names in dir, none if it does not exist.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// fewChunks is the most chunks Sync makes durable one by one; past it,
// it syncs the whole file system at once.
const fewChunks = 32

// Sync implements Backend. A few chunks (a step's checkpoint) it makes
// durable one by one: fsync(2) of each file, a quick no-op for a chunk on
// disk already, and of their directories (renames, fan-out directories
// made). Many (a first checkpoint's thousand a gigabyte) it makes durable
// with one syncfs(2) of the directory's file system, which writes every
// dirty page and inode of it, and reports a write that failed since. So a
// small checkpoint does not wait for whatever else is dirty on the file
// system, and a big one does not pay a thousand fsyncs.
func (d *Dir) Sync(ctx context.Context, ids []ID) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("chunk dir: sync: %w", err)
	}
	if len(ids) > fewChunks {
		return d.syncfs()
	}
	dirs := map[string]bool{d.dir: true}
	for _, id := range ids {
		p := d.path(id)
		if err := syncPath(p); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // not stored: nothing to keep
			}
			return fmt.Errorf("chunk dir: sync %s: %w", id, err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for dir := range dirs {
		if err := syncPath(dir); err != nil {
			return fmt.Errorf("chunk dir: sync: %w", err)
		}
	}
	return nil
}

func (d *Dir) syncfs() error {
	f, err := os.Open(d.dir)
	if err != nil {
		return fmt.Errorf("chunk dir: sync: %w", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("chunk dir: sync %s: %w", d.dir, err)
	}
	return nil
}

// syncPath fsyncs the file or directory at path.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
