package image

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Root is what a sandbox needs of a stored image: its layers' directories
// and its config.
type Root struct {
	// Ref is the image by digest, NAME@sha256:HEX when the store knows a
	// repository it came from (where another node may pull it), else
	// sha256:HEX: what a run records.
	Ref    string
	Digest string
	// Layers are the unpacked layers' directories, lowest first.
	Layers []string
	Config Config
}

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
	switch {
	case len(img.Repos) > 0:
		return img.Repos[0] + "@" + img.Digest
	case len(img.Names) > 0:
		if t, err := name.NewTag(img.Names[0]); err == nil {
			return t.Context().Name() + "@" + img.Digest
		}
	}
	return img.Digest
}

// Apply makes spec's root the image's: its layers, and its config where
// spec says nothing: the image's environment first, then spec's own (a
// variable spec sets wins; the variables the sandbox sets for its proxy and
// trust store never come from the image), its working directory as the
// commands' default, its user as the default user. An image that names no
// user runs commands as airlock's unprivileged sandbox user, not as the
// root Docker would take: a sandbox's root has no capabilities and does not
// own /workspace.
func (r Root) Apply(spec *sandbox.Spec) {
	spec.Layers = slices.Clone(r.Layers)
	var env []string
	for _, e := range r.Config.Env {
		k, _, _ := strings.Cut(e, "=")
		if k != "" && !sandbox.OwnEnv(k) {
			env = append(env, e)
		}
	}
	spec.Env = MergeEnv(env, spec.Env)
	if spec.Dir == "" && r.Config.WorkingDir != "" {
		spec.Dir = path.Clean("/" + r.Config.WorkingDir)
	}
	if spec.User == "" && r.Config.User != "" {
		// USER may say uid:gid or name:group; a sandbox's commands take a
		// user, whose group comes from the image's /etc/passwd.
		spec.User, _, _ = strings.Cut(r.Config.User, ":")
	}
}

// Command is the command a sandbox of the image runs when it is given
// none: the image's entrypoint, then its cmd. A command given replaces
// both (unlike `docker run IMAGE ARGS`, which keeps the entrypoint): a
// sandbox runs many commands, each as given.
func (r Root) Command(args []string) ([]string, error) {
	if len(args) > 0 {
		return args, nil
	}
	argv := append(slices.Clone(r.Config.Entrypoint), r.Config.Cmd...)
	if len(argv) == 0 {
		return nil, errors.New("the image has no entrypoint or cmd: give a command")
	}
	return argv, nil
}

// MergeEnv returns base with over applied: a variable of over replaces the
// one of base in place, the rest of over follows in order.
func MergeEnv(base, over []string) []string {
	out := slices.Clone(base)
	at := map[string]int{}
	for i, e := range out {
		k, _, _ := strings.Cut(e, "=")
		at[k] = i
	}
	for _, e := range over {
		k, _, _ := strings.Cut(e, "=")
		if i, ok := at[k]; ok {
			out[i] = e
			continue
		}
		at[k] = len(out)
		out = append(out, e)
	}
	return out
}

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
