// Package blob is a content-addressed store of immutable byte strings in a
// directory, or in a Backend such as the PostgreSQL run store's tables:
// the bytes of artifacts (patches, files, workspace snapshots, uploaded
// workspaces) whose metadata the run store keeps. Several host processes
// on one PostgreSQL database keep their blobs in it, so each reads what
// any other stored.
//
// Invariants:
//   - A blob is named by its digest, "sha256:" and 64 lowercase hex digits,
//     and lives at DIR/sha256/XX/HEX, where XX are the first two hex digits
//     (256 fan-out directories keep directories small).
//   - A blob file is complete or absent: Put writes a temporary file in
//     DIR/tmp, fsyncs it, renames it into place and fsyncs the directory, so
//     a crash never leaves a partial blob under a digest, and concurrent Puts
//     of the same content (in one process or several) are safe.
//   - With a Backend, Put spools the bytes to DIR/tmp (hashing and counting
//     them), then hands the backend the digest, the size and the bytes at
//     once: a slow writer never holds a database transaction open, and a
//     backend stores a blob complete or not at all.
//   - Readers get the bytes checked: the reader from Open fails with
//     ErrCorrupt at the end if they do not hash to the digest, or as soon
//     as they run past the blob's size.
//   - Digests are validated before they touch the file system, so a digest
//     can never name a path outside DIR.
//
// Garbage collection (deleting blobs no artifact references) is the
// caller's: Delete removes one blob. A collector that cannot know every
// reference a writer is about to make (the checkpoint library's, of its
// manifests) uses Digests and Expire instead: a blob's last use is when it
// was last written or found (Has, and Put of bytes stored already), and
// Expire removes a blob only if that was before a time, atomically with
// Has, so a writer that found a blob stored keeps it for the collector's
// grace period.
//
// Importers: the run engine (internal/engine), the APIs (internal/server,
// internal/server/servertest, internal/e2b), PostgreSQL's blob backend
// (internal/store/postgres), the stores' shared SQL (internal/store/schema:
// an upload's digest is checked as a blob's name), the checkpoints
// (internal/checkpoint) and host wiring (internal/host).
package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultMaxSize is the largest blob Put accepts unless Options say
// otherwise: 1 GiB.
const DefaultMaxSize = 1 << 30

// staleTemp is the age past which New removes leftover temporary files (of
// a Put that crashed). A live Put in another process is younger.
const staleTemp = time.Hour

// Errors callers branch on.
var (
	// ErrNotFound: no blob has that digest.
	ErrNotFound = errors.New("blob: not found")
	// ErrTooLarge: Put was given more than the store's MaxSize bytes.
	ErrTooLarge = errors.New("blob: too large")
	// ErrCorrupt: a blob's bytes do not hash to its digest.
	ErrCorrupt = errors.New("blob: corrupt")
	// ErrDigest: a string is not a digest ("sha256:" and 64 lowercase hex
	// digits).
	ErrDigest = errors.New("blob: malformed digest")
)

// Options configure New.
type Options struct {
	// MaxSize is the largest blob Put accepts, in bytes; zero means
	// DefaultMaxSize. Open refuses, as corrupt, a backend's blob that
	// claims to be larger.
	MaxSize int64
	// Backend, when not nil, keeps the blobs (postgres.Store's Blobs, so
	// that every host process on one database reads every blob); the
	// directory then holds only the temporary files of Puts in flight,
	// and blobs stored in it before it had a backend, which Open, Has and
	// Delete still find.
	Backend Backend
}

// Backend keeps the bytes of a Store's blobs somewhere else than its
// directory. The Store validates digests, enforces MaxSize and checks
// what a Backend returns against the digest; a Backend only stores and
// returns bytes. Implementations must be safe for concurrent use, also
// by several processes sharing what they store in.
type Backend interface {
	// Write stores the size bytes r yields under digest, which they hash
	// to (the Store checked). It is all or nothing and durable on return;
	// writing a digest already stored succeeds and changes nothing.
	Write(ctx context.Context, digest string, size int64, r io.Reader) error
	// Read returns a reader of the bytes stored under digest and their
	// size as stored, or an error wrapping ErrNotFound. ctx bounds only
	// the opening: the reader goes on after ctx ends, until closed.
	Read(ctx context.Context, digest string) (io.ReadCloser, int64, error)
	// Has reports whether digest is stored. When it is, Has records now
	// (the wall clock, as the collector's) as the blob's last use, as
	// Write does for a blob it stores, in one step with finding it.
	Has(ctx context.Context, digest string) (bool, error)
	// Delete removes digest, or returns an error wrapping ErrNotFound.
	Delete(ctx context.Context, digest string) error
	// Expire removes digest if its last use (Write, Has) was before the
	// time before, and reports whether it did. It is atomic with Has: a
	// Has that finds the blob after the time before keeps it, and one
	// that runs after Expire removed it finds nothing (its writer stores
	// the blob again). A blob not stored is not an error.
	Expire(ctx context.Context, digest string, before time.Time) (bool, error)
	// Digests yields every stored digest once, in increasing order, and
	// stops at the first error, which it yields with "". Digests written
	// or removed while it runs may or may not be yielded.
	Digests(ctx context.Context) iter.Seq2[string, error]
}

// Store is a content-addressed blob store. It is safe for concurrent use,
// also by several processes sharing its directory or its backend.
type Store struct {
	dir     string
	maxSize int64
	backend Backend

	mu      sync.Mutex
	flights map[string]*flight // small blobs being written, by digest
}

// flight is one Put writing a small blob that other Puts of the same
// bytes wait for.
type flight struct {
	done chan struct{}
	err  error // set before done closes
}

// New opens the blob store in dir, creating it (mode 0700) if needed, and
// removes temporary files that crashed Puts left behind.
func New(dir string, opts Options) (*Store, error) {
	if opts.MaxSize <= 0 {
		opts.MaxSize = DefaultMaxSize
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", dir, err)
	}
	s := &Store{dir: abs, maxSize: opts.MaxSize, backend: opts.Backend, flights: map[string]*flight{}}
	for _, d := range []string{s.dir, s.tmpDir(), filepath.Join(s.dir, "sha256")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("blob: open %s: %w", abs, err)
		}
	}
	if err := s.removeStaleTemps(time.Now()); err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", abs, err)
	}
	return s, nil
}

// Dir returns the store's directory (with a Backend, where Puts spool).
func (s *Store) Dir() string { return s.dir }

func (s *Store) tmpDir() string { return filepath.Join(s.dir, "tmp") }

func (s *Store) removeStaleTemps(now time.Time) error {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		if d, ok := strings.CutPrefix(e.Name(), expirePrefix); ok && ValidDigest("sha256:"+d) == nil {
			// An Expire that stopped between moving a blob aside and
			// deciding: put it back; a later collection decides again.
			final := s.path("sha256:" + d)
			if err := os.MkdirAll(filepath.Dir(final), 0o700); err != nil {
				return err
			}
			if err := os.Rename(filepath.Join(s.tmpDir(), e.Name()), final); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile by its own Put
		}
		if now.Sub(info.ModTime()) > staleTemp {
			if err := os.Remove(filepath.Join(s.tmpDir(), e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// ValidDigest returns nil if d is "sha256:" and 64 lowercase hex digits,
// and an error wrapping ErrDigest otherwise.
func ValidDigest(d string) error {
	const prefix = "sha256:"
	if len(d) != len(prefix)+2*sha256.Size || d[:len(prefix)] != prefix {
		return fmt.Errorf("%w %q", ErrDigest, clip(d))
	}
	for i := len(prefix); i < len(d); i++ {
		if c := d[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("%w %q", ErrDigest, d)
		}
	}
	return nil
}

// path returns where the blob with digest d lives. d must be valid.
func (s *Store) path(d string) string {
	h := d[len("sha256:"):]
	return filepath.Join(s.dir, "sha256", h[:2], h)
}

// smallBlob is the size up to which Put hashes a blob in memory first.
const smallBlob = 64 << 10

// Put stores the bytes r yields and returns their digest and size. Content
// already stored is not written again. More than MaxSize bytes gives an
// error wrapping ErrTooLarge, and nothing is stored; so does a read error
// or a cancelled ctx. When Put returns, the blob is durable.
func (s *Store) Put(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	// A small blob is hashed in memory first: one the store holds already
	// (a hundred runs of one script) costs no file and no fsync, and one
	// that another Put in this process is writing (a hundred runs of one
	// script created at once) is written once, not a hundred times.
	head, err := io.ReadAll(io.LimitReader(&ctxReader{ctx: ctx, r: r}, smallBlob+1))
	hn := len(head)
	switch {
	case err == nil && hn <= smallBlob && int64(hn) <= s.maxSize:
		sum := sha256.Sum256(head)
		d := "sha256:" + hex.EncodeToString(sum[:])
		if ok, err := s.Has(ctx, d); err == nil && ok {
			return d, int64(hn), nil
		}
		err := s.once(ctx, d, func() error {
			if ok, err := s.Has(ctx, d); err == nil && ok {
				return nil // stored since the check above
			}
			_, _, err := s.put(ctx, bytes.NewReader(head))
			return err
		})
		if err != nil {
			return "", 0, err
		}
		return d, int64(hn), nil
	case err != nil:
		return "", 0, fmt.Errorf("blob: put: %w", err)
	}
	return s.put(ctx, io.MultiReader(bytes.NewReader(head), r))
}

// once runs write, which stores the blob d, unless another call of once
// for d is running: then it waits for that one instead, and runs write
// only if that one failed (its failure may be its own, such as its
// cancelled ctx).
func (s *Store) once(ctx context.Context, d string, write func() error) error {
	for {
		s.mu.Lock()
		f, ok := s.flights[d]
		if !ok {
			f = &flight{done: make(chan struct{})}
			s.flights[d] = f
			s.mu.Unlock()
			f.err = write()
			s.mu.Lock()
			delete(s.flights, d)
			s.mu.Unlock()
			close(f.done)
			return f.err
		}
		s.mu.Unlock()
		select {
		case <-f.done:
			if f.err == nil {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("blob: put %s: %w", d, ctx.Err())
		}
	}
}

// put writes what r yields to a temporary file, hashing and counting it,
// and stores it under its digest (in the backend, or renamed into place).
func (s *Store) put(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	f, err := os.CreateTemp(s.tmpDir(), "put-*")
	if err != nil {
		return "", 0, fmt.Errorf("blob: put: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if f != nil {
			f.Close()
		}
		if tmp != "" {
			os.Remove(tmp)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), &ctxReader{ctx: ctx, r: io.LimitReader(r, s.maxSize+1)})
	if err != nil {
		return "", 0, fmt.Errorf("blob: put: %w", err)
	}
	if n > s.maxSize {
		return "", 0, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, s.maxSize)
	}
	digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	if s.backend != nil {
		if err := s.putBackend(ctx, digest, n, f); err != nil {
			return "", 0, err
		}
		return digest, n, nil
	}
	final := s.path(digest)
	if ok, err := touch(final); err != nil {
		return "", 0, fmt.Errorf("blob: put %s: %w", digest, err)
	} else if ok {
		return digest, n, nil // already stored: content addressing
	}
	if err := f.Chmod(0o400); err != nil {
		return "", 0, fmt.Errorf("blob: put %s: %w", digest, err)
	}
	// The blob's last use (see Expire), from the wall clock.
	now := time.Now()
	if err := os.Chtimes(tmp, now, now); err != nil {
		return "", 0, fmt.Errorf("blob: put %s: %w", digest, err)
	}
	if err := f.Sync(); err != nil {
		return "", 0, fmt.Errorf("blob: put %s: sync: %w", digest, err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return "", 0, fmt.Errorf("blob: put %s: %w", digest, err)
	}
	fanout := filepath.Dir(final)
	if err := os.MkdirAll(fanout, 0o700); err != nil {
		return "", 0, fmt.Errorf("blob: put %s: %w", digest, err)
	}
	// Rename is atomic: a concurrent Put of the same content renames an
	// identical file over this one, and readers see one or the other.
	if err := os.Rename(tmp, final); err != nil {
		return "", 0, fmt.Errorf("blob: put %s: %w", digest, err)
	}
	tmp = ""
	// The rename is durable only once the directory holding the new entry
	// is synced; the fan-out directory's own entry is synced too, as it
	// may have just been created.
	for _, d := range []string{fanout, filepath.Dir(fanout)} {
		if err := syncDir(d); err != nil {
			return "", 0, fmt.Errorf("blob: put %s: %w", digest, err)
		}
	}
	return digest, n, nil
}

// putBackend hands the spooled bytes of a Put to the backend, unless it
// has them already.
func (s *Store) putBackend(ctx context.Context, digest string, size int64, f *os.File) error {
	if ok, err := s.backend.Has(ctx, digest); err != nil {
		return fmt.Errorf("blob: put %s: %w", digest, err)
	} else if ok {
		return nil // already stored: content addressing
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("blob: put %s: %w", digest, err)
	}
	if err := s.backend.Write(ctx, digest, size, &ctxReader{ctx: ctx, r: f}); err != nil {
		return fmt.Errorf("blob: put %s: %w", digest, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// ctxReader stops a copy when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Open returns a reader of the blob with the given digest. The reader
// hashes what it reads and, at the end, returns an error wrapping
// ErrCorrupt instead of io.EOF if the bytes do not match the digest: read
// to the end before acting on the data. ctx bounds only the opening.
func (s *Store) Open(ctx context.Context, digest string) (*Reader, error) {
	if err := ValidDigest(digest); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", digest, err)
	}
	if s.backend != nil {
		rc, size, err := s.backend.Read(ctx, digest)
		switch {
		case err == nil && (size < 0 || size > s.maxSize):
			rc.Close()
			return nil, fmt.Errorf("%w: %s: the backend says it holds %d bytes, the most is %d", ErrCorrupt, digest, size, s.maxSize)
		case err == nil:
			return &Reader{rc: rc, h: sha256.New(), digest: digest, size: size}, nil
		case !errors.Is(err, ErrNotFound):
			return nil, fmt.Errorf("blob: open %s: %w", digest, err)
		}
		// Not in the backend: maybe kept in the directory before there
		// was one.
	}
	f, err := os.Open(s.path(digest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, digest)
	}
	if err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", digest, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blob: open %s: %w", digest, err)
	}
	return &Reader{rc: f, h: sha256.New(), digest: digest, size: info.Size()}, nil
}

// Reader reads one blob and checks its digest at the end.
type Reader struct {
	rc     io.ReadCloser
	h      hash.Hash
	digest string
	size   int64
	read   int64
	err    error // sticky result once the end is reached
}

// Size returns the blob's size in bytes.
func (r *Reader) Size() int64 { return r.size }

// Read implements io.Reader. At the end it returns io.EOF if the bytes
// read match the digest, and an error wrapping ErrCorrupt if not; more
// bytes than Size is an ErrCorrupt at once.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.rc.Read(p)
	if r.read += int64(n); r.read > r.size {
		r.err = fmt.Errorf("%w: %s: more than its %d bytes", ErrCorrupt, r.digest, r.size)
		return 0, r.err
	}
	r.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if got := "sha256:" + hex.EncodeToString(r.h.Sum(nil)); got != r.digest {
			err = fmt.Errorf("%w: %s: content hashes to %s", ErrCorrupt, r.digest, got)
		}
		r.err = err
	}
	return n, err
}

// Close closes the blob.
func (r *Reader) Close() error { return r.rc.Close() }

// Has reports whether the blob with the given digest is stored.
func (s *Store) Has(ctx context.Context, digest string) (bool, error) {
	if err := ValidDigest(digest); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("blob: stat %s: %w", digest, err)
	}
	if s.backend != nil {
		if ok, err := s.backend.Has(ctx, digest); err != nil || ok {
			if err != nil {
				return false, fmt.Errorf("blob: stat %s: %w", digest, err)
			}
			return true, nil
		}
	}
	ok, err := touch(s.path(digest))
	if err != nil {
		return false, fmt.Errorf("blob: stat %s: %w", digest, err)
	}
	return ok, nil
}

// touch marks the blob file at path used now (its modification time, from
// the wall clock) and reports whether it is there: the one step that both
// finds the file and marks it (see Expire).
func touch(path string) (bool, error) {
	now := time.Now()
	err := os.Chtimes(path, now, now)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case errors.Is(err, os.ErrPermission):
		// Another user's file (a home shared read-only): found, not
		// marked; a collection run by its owner decides.
		if _, err := os.Lstat(path); err != nil {
			return false, err
		}
		return true, nil
	default:
		return false, err
	}
}

// expirePrefix names, in DIR/tmp, a blob Expire moved aside to decide.
const expirePrefix = "expire-"

// Expire removes the blob with the given digest if it was last written
// or found (Has, or a Put of bytes stored already) before the time before,
// and reports whether it did: what a collector calls for a blob no live
// reference names (checkpoint.Store.Collect, of unreferenced manifests).
// It is atomic with Has (Backend.Expire): a writer that finds the blob
// after before keeps it, and one that looks after it went stores it again.
//
// In the directory the blob is renamed into DIR/tmp first, atomically,
// and its time read there: a Has that marked it before the rename shows in
// that time, and the blob goes back into place; one after the rename finds
// no file. Only a blob unused since before is then removed. A process
// killed between the two steps leaves the blob aside, and New puts it back.
func (s *Store) Expire(ctx context.Context, digest string, before time.Time) (bool, error) {
	if err := ValidDigest(digest); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("blob: expire %s: %w", digest, err)
	}
	gone := false
	if s.backend != nil {
		ok, err := s.backend.Expire(ctx, digest, before)
		if err != nil {
			return false, fmt.Errorf("blob: expire %s: %w", digest, err)
		}
		gone = ok
	}
	ok, err := s.expireFile(digest, before)
	if err != nil {
		return gone, fmt.Errorf("blob: expire %s: %w", digest, err)
	}
	return gone || ok, nil
}

func (s *Store) expireFile(digest string, before time.Time) (bool, error) {
	final := s.path(digest)
	info, err := os.Lstat(final)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !info.ModTime().Before(before) {
		return false, nil // used since: no need to move it
	}
	aside := filepath.Join(s.tmpDir(), expirePrefix+digest[len("sha256:"):])
	if err := os.Rename(final, aside); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	info, err = os.Lstat(aside)
	if err == nil && info.ModTime().Before(before) {
		if err := os.Remove(aside); err != nil {
			return false, err
		}
		return true, nil
	}
	// Used in the meantime: back into place (over a copy a writer may
	// have put since, with the same bytes).
	if rerr := os.Rename(aside, final); rerr != nil {
		return false, fmt.Errorf("put it back: %w", rerr)
	}
	return false, err
}

// Digests yields the digest of every stored blob: the backend's, in
// increasing order, then those of the directory (blobs kept before there
// was a backend), in increasing order; a blob in both is yielded twice.
// It stops at the first error, which it yields with "". Blobs written or
// removed meanwhile may or may not be yielded.
func (s *Store) Digests(ctx context.Context) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if s.backend != nil {
			for d, err := range s.backend.Digests(ctx) {
				if err != nil {
					yield("", fmt.Errorf("blob: list: %w", err))
					return
				}
				if !yield(d, nil) {
					return
				}
			}
		}
		for i := range 256 {
			if err := ctx.Err(); err != nil {
				yield("", fmt.Errorf("blob: list: %w", err))
				return
			}
			fan := fmt.Sprintf("%02x", i)
			ents, err := os.ReadDir(filepath.Join(s.dir, "sha256", fan))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				yield("", fmt.Errorf("blob: list: %w", err))
				return
			}
			names := make([]string, 0, len(ents))
			for _, e := range ents {
				names = append(names, e.Name())
			}
			slices.Sort(names)
			for _, name := range names {
				d := "sha256:" + name
				if ValidDigest(d) != nil || name[:2] != fan {
					continue // not a blob's: a file someone left there
				}
				if !yield(d, nil) {
					return
				}
			}
		}
	}
}

// Delete removes the blob with the given digest, or returns an error
// wrapping ErrNotFound. A reader already open keeps reading it.
func (s *Store) Delete(ctx context.Context, digest string) error {
	if err := ValidDigest(digest); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("blob: delete %s: %w", digest, err)
	}
	found := false
	if s.backend != nil {
		err := s.backend.Delete(ctx, digest)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("blob: delete %s: %w", digest, err)
		}
		found = err == nil
	}
	err := os.Remove(s.path(digest))
	switch {
	case errors.Is(err, os.ErrNotExist) && !found:
		return fmt.Errorf("%w: %s", ErrNotFound, digest)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("blob: delete %s: %w", digest, err)
	}
	return nil
}

// clip shortens untrusted text quoted in an error message.
func clip(s string) string {
	const limit = 80
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
