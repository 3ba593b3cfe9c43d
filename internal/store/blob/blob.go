// Package blob is a content-addressed store of immutable byte strings in a
// directory: the bytes of artifacts (patches, files, workspace snapshots)
// whose metadata the run store keeps.
//
// Invariants:
//   - A blob is named by its digest, "sha256:" and 64 lowercase hex digits,
//     and lives at DIR/sha256/XX/HEX, where XX are the first two hex digits
//     (256 fan-out directories keep directories small).
//   - A blob file is complete or absent: Put writes a temporary file in
//     DIR/tmp, fsyncs it, renames it into place and fsyncs the directory, so
//     a crash never leaves a partial blob under a digest, and concurrent Puts
//     of the same content (in one process or several) are safe.
//   - Readers get the bytes checked: the reader from Open fails with
//     ErrCorrupt at the end if they do not hash to the digest.
//   - Digests are validated before they touch the file system, so a digest
//     can never name a path outside DIR.
//
// Garbage collection (deleting blobs no artifact references) is the
// caller's: Delete removes one blob.
//
// Importers: the run engine and host wiring.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
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
	// DefaultMaxSize.
	MaxSize int64
}

// Store is a blob directory. It is safe for concurrent use, also by
// several processes sharing the directory.
type Store struct {
	dir     string
	maxSize int64
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
	s := &Store{dir: abs, maxSize: opts.MaxSize}
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

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) tmpDir() string { return filepath.Join(s.dir, "tmp") }

func (s *Store) removeStaleTemps(now time.Time) error {
	entries, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
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

// Put stores the bytes r yields and returns their digest and size. Content
// already stored is not written again. More than MaxSize bytes gives an
// error wrapping ErrTooLarge, and nothing is stored; so does a read error
// or a cancelled ctx. When Put returns, the blob is durable.
func (s *Store) Put(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
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
	final := s.path(digest)
	if _, err := os.Lstat(final); err == nil {
		return digest, n, nil // already stored: content addressing
	}
	if err := f.Chmod(0o400); err != nil {
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
	return &Reader{f: f, h: sha256.New(), digest: digest, size: info.Size()}, nil
}

// Reader reads one blob and checks its digest at the end.
type Reader struct {
	f      *os.File
	h      hash.Hash
	digest string
	size   int64
	err    error // sticky result once the end is reached
}

// Size returns the blob's size in bytes.
func (r *Reader) Size() int64 { return r.size }

// Read implements io.Reader. At the end it returns io.EOF if the bytes
// read match the digest, and an error wrapping ErrCorrupt if not.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.f.Read(p)
	r.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if got := "sha256:" + hex.EncodeToString(r.h.Sum(nil)); got != r.digest {
			err = fmt.Errorf("%w: %s: content hashes to %s", ErrCorrupt, r.digest, got)
		}
		r.err = err
	}
	return n, err
}

// Close closes the blob file.
func (r *Reader) Close() error { return r.f.Close() }

// Has reports whether the blob with the given digest is stored.
func (s *Store) Has(ctx context.Context, digest string) (bool, error) {
	if err := ValidDigest(digest); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("blob: stat %s: %w", digest, err)
	}
	_, err := os.Lstat(s.path(digest))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("blob: stat %s: %w", digest, err)
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
	err := os.Remove(s.path(digest))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotFound, digest)
	}
	if err != nil {
		return fmt.Errorf("blob: delete %s: %w", digest, err)
	}
	return nil
}

// clip shortens untrusted text quoted in an error message.
func clip(s string) string {
	const max = 80
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
