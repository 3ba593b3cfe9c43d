package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/imageroot"
)

// Options configure a Store. The zero value works.
type Options struct {
	// Transport carries registry requests; nil is a clone of
	// http.DefaultTransport (the system's trust store).
	Transport http.RoundTripper
	// Platform is what a multi-platform index resolves to; nil is linux
	// and this machine's architecture.
	Platform *v1.Platform
	// Limits bound each layer.
	Limits Limits
	// Credentials returns what to log in to a registry (its host name,
	// "index.docker.io" for Docker Hub) with when a call gives none: the
	// host's secret store. Nil, or a zero Auth, is anonymous.
	Credentials func(registry string) (Auth, error)
}

// Store is a content-addressed image store in one directory. Its methods
// are safe for concurrent use, also by several processes.
type Store struct {
	dir   string
	o     Options
	chown bool // root: unpacked files take the image's owners
}

// ErrNotFound is wrapped by the errors of a reference the store has no
// image for.
var ErrNotFound = imageroot.ErrNotFound

// Image describes a stored image.
type Image = imageroot.Image

// Config is what an image's config says about running it.
type Config = imageroot.Config

// LayerInfo describes one layer of an image, lowest first.
type LayerInfo = imageroot.LayerInfo

// state is images.json.
type state = imageroot.Index

// Open opens (creating it) the store in dir.
func Open(dir string, o Options) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	for _, d := range []string{abs, filepath.Join(abs, "blobs", "sha256"), filepath.Join(abs, "layers"), filepath.Join(abs, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	// The layers hold the images' set-id binaries and their owners' files:
	// no other host user may reach them.
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if o.Platform == nil {
		o.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	}
	return &Store{dir: abs, o: o, chown: os.Geteuid() == 0}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) blobPath(digest string) string {
	return filepath.Join(s.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func (s *Store) layerPath(diffID string) string { return imageroot.LayerPath(s.dir, diffID) }

// read returns the store's index as it is now (writers replace it whole).
func (s *Store) read() (*state, error) { return imageroot.ReadIndex(s.dir) }

// update changes the index with fn under the store's lock.
func (s *Store) update(fn func(*state) error) error {
	unlock, err := s.lock("lock", unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := s.read()
	if err != nil {
		return err
	}
	if err := fn(st); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".images-*.json")
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.dir, "images.json"))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("image store: write images.json: %w", err)
	}
	// The front end's lookup reads the index from the roots file, without
	// encoding/json, when it names this images.json (imageroot.Lookup).
	// The index is written whatever becomes of it: a roots file not
	// written names another images.json (or is gone), which the lookup
	// sees, and it reads the JSON.
	_ = imageroot.WriteRoots(s.dir, b)
	return nil
}

// lock takes flock how on the store's lock file name and returns its
// release.
func (s *Store) lock(name string, how int) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("image store: lock %s: %w", name, err)
	}
	return func() { f.Close() }, nil
}

// withNames returns img with its names filled in from st.
func withNames(st *state, img *Image) Image { return st.WithNames(img) }

// List returns every stored image, newest first.
func (s *Store) List() ([]Image, error) {
	st, err := s.read()
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, img := range st.Images {
		out = append(out, withNames(st, img))
	}
	slices.SortFunc(out, func(a, b Image) int {
		if c := b.Added.Compare(a.Added); c != 0 {
			return c
		}
		return strings.Compare(a.Digest, b.Digest)
	})
	return out, nil
}

// Inspect returns the image ref names: a name (a tag, canonical or short
// as docker takes it, busybox meaning index.docker.io/library/busybox:latest),
// NAME@sha256:HEX, sha256:HEX, or a unique prefix of at least 12 hex digits
// of a manifest digest. A digest matches an image's manifest or the index it
// was chosen from.
func (s *Store) Inspect(ref string) (Image, error) {
	st, err := s.read()
	if err != nil {
		return Image{}, err
	}
	img, err := resolve(st, ref)
	if err != nil {
		return Image{}, err
	}
	return withNames(st, img), nil
}

// resolve finds ref's image in st (imageroot.Index.Resolve, the names read
// by go-containerregistry).
func resolve(st *state, ref string) (*Image, error) {
	return st.Resolve(ref, func(ref string) (string, string, error) {
		r, err := name.ParseReference(ref)
		if err != nil {
			return "", "", fmt.Errorf("image reference %q: %w", ref, err)
		}
		if d, ok := r.(name.Digest); ok {
			return d.DigestStr(), "", nil
		}
		return "", r.Name(), nil
	})
}

// digestPrefix reports whether ref is sha256:HEX or a bare hex digest
// prefix of at least 12 digits, and returns the hex.
func digestPrefix(ref string) (string, bool) { return imageroot.DigestPrefix(ref) }

// Remove removes ref: a name removes that name (and the image with its
// last name, unless it was also asked for by digest); a digest removes the
// image and all its names. Then it collects what no image references
// (GC). It returns the digests of the images removed.
func (s *Store) Remove(ref string) ([]string, error) {
	var removed []string
	err := s.update(func(st *state) error {
		img, err := resolve(st, ref)
		if err != nil {
			return err
		}
		byName := false
		if _, isDigest := digestPrefix(ref); !isDigest {
			if r, err := name.ParseReference(ref); err == nil {
				if _, ok := r.(name.Tag); ok {
					delete(st.Names, r.Name())
					byName = true
				}
			}
		}
		if byName {
			for _, d := range st.Names {
				if d == img.Digest {
					return nil // still named
				}
			}
		}
		for n, d := range st.Names {
			if d == img.Digest {
				delete(st.Names, n)
			}
		}
		delete(st.Images, img.Digest)
		removed = append(removed, img.Digest)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(removed) > 0 {
		if _, err := s.GC(); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// GCStats says what a GC removed and what it kept because it was in use.
type GCStats struct {
	Blobs, Layers int   // removed
	Bytes         int64 // of the blobs removed
	InUse         int   // unreferenced layers a live sandbox still uses
}

// GC removes the blobs and layers no stored image references, and what a
// crashed pull or import left in tmp/. It waits for pulls and imports in
// progress; a layer a live sandbox holds (see sandbox.Spec.Layers) is kept
// for a later GC.
func (s *Store) GC() (GCStats, error) {
	var gs GCStats
	unlock, err := s.lock("gc.lock", unix.LOCK_EX)
	if err != nil {
		return gs, err
	}
	defer unlock()
	st, err := s.read()
	if err != nil {
		return gs, err
	}
	blobs, layers := map[string]bool{}, map[string]bool{}
	for _, img := range st.Images {
		blobs[hexOf(img.Digest)], blobs[hexOf(img.ConfigRef)] = true, true
		for _, l := range img.Layers {
			blobs[hexOf(l.Digest)], layers[hexOf(l.DiffID)] = true, true
		}
	}
	var errs []error
	ents, _ := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	for _, e := range ents {
		if blobs[e.Name()] {
			continue
		}
		p := filepath.Join(s.dir, "blobs", "sha256", e.Name())
		fi, err := os.Lstat(p)
		if err == nil {
			err = os.Remove(p)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		gs.Blobs++
		gs.Bytes += fi.Size()
	}
	ents, _ = os.ReadDir(filepath.Join(s.dir, "layers"))
	for _, e := range ents {
		if layers[e.Name()] {
			continue
		}
		removed, err := s.removeLayer(e.Name())
		switch {
		case err != nil:
			errs = append(errs, err)
		case removed:
			gs.Layers++
		default:
			gs.InUse++
		}
	}
	// Nothing else writes tmp/ while gc.lock is held exclusively.
	ents, _ = os.ReadDir(filepath.Join(s.dir, "tmp"))
	for _, e := range ents {
		if err := removeTree(filepath.Join(s.dir, "tmp", e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	// Nor is images.json being replaced while lock is.
	if unlockIndex, err := s.lock("lock", unix.LOCK_EX); err == nil {
		left, _ := filepath.Glob(filepath.Join(s.dir, ".images-*.json"))
		roots, _ := filepath.Glob(filepath.Join(s.dir, ".roots-*"))
		for _, p := range append(left, roots...) {
			_ = os.Remove(p)
		}
		unlockIndex()
	}
	return gs, errors.Join(errs...)
}

// removeLayer removes layers/hex unless a sandbox holds it: under its own
// lock taken exclusively, it renames it into tmp/, then removes it there.
func (s *Store) removeLayer(hex string) (bool, error) {
	p := filepath.Join(s.dir, "layers", hex)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("image store: layer %s: %w", hex, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil
		}
		return false, fmt.Errorf("image store: lock layer %s: %w", hex, err)
	}
	gone := filepath.Join(s.dir, "tmp", "gc-"+hex)
	err = os.Rename(p, gone)
	unix.Close(fd)
	if err != nil {
		return false, fmt.Errorf("image store: remove layer %s: %w", hex, err)
	}
	return true, removeTree(gone)
}

func hexOf(digest string) string { return strings.TrimPrefix(digest, "sha256:") }
