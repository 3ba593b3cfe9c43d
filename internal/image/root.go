package image

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/airlockrun/airlock/internal/imageroot"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Root is what a sandbox needs of a stored image: its layers' directories
// and its config (imageroot.Root: Apply makes a spec's root the image's,
// Command is its default command).
type Root = imageroot.Root

// Root returns the root of the image ref names (as Inspect reads it). An
// image the store lacks, named NAME@sha256:HEX, is pulled by that digest
// first (with Options.Credentials): how a node gets the image a run started
// with on another.
func (s *Store) Root(ctx context.Context, ref string) (Root, error) {
	img, err := s.Inspect(ref)
	if errors.Is(err, ErrNotFound) {
		if r, perr := name.ParseReference(ref); perr == nil {
			if _, byDigest := r.(name.Digest); byDigest {
				if _, err = s.Pull(ctx, ref, Auth{}); err == nil {
					img, err = s.Inspect(ref)
				}
			}
		}
	}
	if err != nil {
		return Root{}, err
	}
	dirs, err := s.LayerDirs(ctx, img.Layers)
	if err != nil {
		return Root{}, fmt.Errorf("image %s: %w", ref, err)
	}
	return Root{Ref: refOf(img), Digest: img.Digest, Config: img.Config, Layers: dirs}, nil
}

// refOf is img by digest: NAME@sha256:HEX of the first repository it came
// from (or of its first name), else sha256:HEX.
func refOf(img Image) string {
	if len(img.Repos) == 0 && len(img.Names) > 0 {
		if t, err := name.NewTag(img.Names[0]); err == nil {
			return t.Context().Name() + "@" + img.Digest
		}
	}
	return imageroot.RefOf(img.Digest, img.Repos, nil)
}

// MergeEnv returns base with over applied: a variable of over replaces the
// one of base in place, the rest of over follows in order.
func MergeEnv(base, over []string) []string { return imageroot.MergeEnv(base, over) }

// Resolve returns the image ref names by digest, as a run records it
// (Root.Ref). A NAME@sha256:HEX the store lacks is returned as it is: the
// node that makes a sandbox of it pulls it by that digest (Root). Anything
// else the store lacks is ErrNotFound.
func (s *Store) Resolve(ctx context.Context, ref string) (string, error) {
	img, err := s.Inspect(ref)
	if errors.Is(err, ErrNotFound) {
		if r, perr := name.ParseReference(ref); perr == nil {
			if d, ok := r.(name.Digest); ok {
				return d.Context().Name() + "@" + d.DigestStr(), nil
			}
		}
		return "", fmt.Errorf("%w (airlock image pull or import it first)", err)
	}
	if err != nil {
		return "", err
	}
	return refOf(img), nil
}

// Apply makes spec's root the image ref names (Root, then Root.Apply).
func (s *Store) Apply(ctx context.Context, ref string, spec *sandbox.Spec) error {
	root, err := s.Root(ctx, ref)
	if err != nil {
		return err
	}
	root.Apply(spec)
	return nil
}
