package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// Auth is what to log in to a registry with: a user name and password (or
// access token used as one), exchanged for the registry's own bearer token
// as its token service asks; or a bearer Token sent as it is. The zero
// value is anonymous.
type Auth struct {
	Username string
	Password string
	Token    string
}

// String never shows the secrets.
func (a Auth) String() string {
	switch {
	case a.Token != "":
		return "bearer token"
	case a.Username != "":
		return "user " + a.Username
	}
	return "anonymous"
}

func (a Auth) authenticator() authn.Authenticator {
	if a == (Auth{}) {
		return authn.Anonymous
	}
	return authn.FromConfig(authn.AuthConfig{Username: a.Username, Password: a.Password, RegistryToken: a.Token})
}

// remoteOptions are go-containerregistry's options for a call to reg.
func (s *Store) remoteOptions(ctx context.Context, reg name.Registry, auth Auth) ([]remote.Option, error) {
	if auth == (Auth{}) && s.o.Credentials != nil {
		var err error
		if auth, err = s.o.Credentials(reg.RegistryStr()); err != nil {
			return nil, fmt.Errorf("credentials for %s: %w", reg.RegistryStr(), err)
		}
	}
	t := s.o.Transport
	if t == nil {
		t = http.DefaultTransport.(*http.Transport).Clone()
	}
	return []remote.Option{
		remote.WithContext(ctx), remote.WithTransport(t), remote.WithAuth(auth.authenticator()),
		remote.WithPlatform(*s.o.Platform), remote.WithUserAgent("airlock"), remote.WithJobs(layerJobs),
	}, nil
}

// Pull fetches ref (NAME[:TAG], NAME@sha256:HEX; a short name is Docker
// Hub's, as docker reads it) from its registry with auth (the zero Auth:
// Options.Credentials', else anonymous), resolving a multi-platform index
// to this machine's platform, and stores it under its tag. Layers the store
// has are neither fetched nor unpacked again.
func (s *Store) Pull(ctx context.Context, ref string, auth Auth) (Image, error) {
	return s.pull(ctx, ref, auth, false)
}

// Fetch fetches ref as Pull does, every blob verified against its digest,
// but unpacks no layer: each is unpacked from its stored blob at its first
// use (Root, LayerDirs), and checked against its diff id there. A layer the
// unpacker refuses (an entry out of the layer, a diff id that does not
// match) is then reported by that use, not by the fetch. It does what
// `skopeo copy` does: for a node that fetches ahead images of which few
// will run.
func (s *Store) Fetch(ctx context.Context, ref string, auth Auth) (Image, error) {
	return s.pull(ctx, ref, auth, true)
}

func (s *Store) pull(ctx context.Context, ref string, auth Auth, lazy bool) (Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return Image{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	opts, err := s.remoteOptions(ctx, r.Context().Registry, auth)
	if err != nil {
		return Image{}, err
	}
	unlock, err := s.lock("gc.lock", unix.LOCK_SH)
	if err != nil {
		return Image{}, err
	}
	defer unlock()
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return Image{}, fmt.Errorf("pull %s: %w", r, err)
	}
	o := origin{repo: r.Context().Name(), source: "pull " + r.String(), lazy: lazy}
	if desc.MediaType.IsIndex() {
		o.index = desc.Digest.String()
	}
	img, err := desc.Image()
	if err != nil {
		return Image{}, fmt.Errorf("pull %s: %w", r, err)
	}
	if t, ok := r.(name.Tag); ok {
		o.names = []string{t.Name()}
	}
	got, err := s.add(ctx, img, o)
	if err != nil {
		return Image{}, fmt.Errorf("pull %s: %w", r, err)
	}
	if d, ok := r.(name.Digest); ok && got.Digest != d.DigestStr() && got.Index != d.DigestStr() {
		return got, fmt.Errorf("pull %s: got image %s (index %s), not the digest asked for", r, got.Digest, got.Index)
	}
	return got, nil
}

// Push sends the stored image ref to dest (NAME[:TAG] or NAME@sha256:HEX,
// the image's own digest) with auth, as it is stored: the same manifest
// and blobs, so the same digest, which it returns.
func (s *Store) Push(ctx context.Context, ref, dest string, auth Auth) (string, error) {
	st, err := s.read()
	if err != nil {
		return "", err
	}
	rec, err := resolve(st, ref)
	if err != nil {
		return "", err
	}
	d, err := name.ParseReference(dest)
	if err != nil {
		return "", fmt.Errorf("push destination %q: %w", dest, err)
	}
	if dg, ok := d.(name.Digest); ok && dg.DigestStr() != rec.Digest {
		return "", fmt.Errorf("push destination %s: the image's digest is %s", dest, rec.Digest)
	}
	img, err := s.image(rec)
	if err != nil {
		return "", err
	}
	opts, err := s.remoteOptions(ctx, d.Context().Registry, auth)
	if err != nil {
		return "", err
	}
	if err := remote.Write(d, img, opts...); err != nil {
		return "", fmt.Errorf("push %s: %w", d, err)
	}
	repo := d.Context().Name()
	err = s.update(func(st *state) error {
		if r, ok := st.Images[rec.Digest]; ok && !slices.Contains(r.Repos, repo) {
			r.Repos = append(r.Repos, repo)
		}
		return nil
	})
	return rec.Digest, err
}

// image is a stored image as go-containerregistry's v1.Image, read from
// the store's blobs.
func (s *Store) image(rec *Image) (v1.Image, error) {
	return partial.CompressedToImage(&storedImage{s: s, rec: rec})
}

// storedImage is partial.CompressedImageCore over the store's blobs.
type storedImage struct {
	s   *Store
	rec *Image
}

func (i *storedImage) RawConfigFile() ([]byte, error) { return i.s.readBlob(i.rec.ConfigRef) }
func (i *storedImage) RawManifest() ([]byte, error)   { return i.s.readBlob(i.rec.Digest) }
func (i *storedImage) MediaType() (types.MediaType, error) {
	return types.MediaType(i.rec.MediaType), nil
}

func (i *storedImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range i.rec.Layers {
		if l.Digest == h.String() {
			return &storedLayer{s: i.s, l: l}, nil
		}
	}
	return nil, fmt.Errorf("image %s has no layer %s", i.rec.Digest, h)
}

// readBlob reads a stored manifest or config.
func (s *Store) readBlob(digest string) ([]byte, error) {
	f, err := os.Open(s.blobPath(digest))
	if err != nil {
		return nil, fmt.Errorf("image store: blob %s: %w", digest, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDocument+1))
	if err == nil && len(b) > maxDocument {
		err = errors.New("too large")
	}
	if err != nil {
		return nil, fmt.Errorf("image store: blob %s: %w", digest, err)
	}
	return b, nil
}

// storedLayer is partial.CompressedLayer over a stored layer blob.
type storedLayer struct {
	s *Store
	l LayerInfo
}

func (l *storedLayer) Digest() (v1.Hash, error) { return v1.NewHash(l.l.Digest) }
func (l *storedLayer) Size() (int64, error)     { return l.l.Size, nil }
func (l *storedLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.l.MediaType), nil
}

func (l *storedLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.s.blobPath(l.l.Digest))
	if err != nil {
		return nil, fmt.Errorf("image store: layer blob %s: %w", l.l.Digest, err)
	}
	return f, nil
}

// DiffID spares go-containerregistry hashing the uncompressed layer.
func (l *storedLayer) DiffID() (v1.Hash, error) { return v1.NewHash(l.l.DiffID) }
