// Package imageroot is what a sandbox needs of a stored image, shared by
// the image store (internal/image) and the small front end's sandbox run
// (internal/sandboxcli): the image's config and layers (Root), how they
// make a sandbox's spec (Apply, Command, MergeEnv), and a read-only lookup
// of the store's index (Lookup) that either gives exactly the root the
// store's Root would give or declines. It also writes the roots file the
// lookup reads instead of the index's JSON (WriteRoots), which the store
// renews with every index it writes. It links only the standard library
// and the sandbox contract: no registry client (go-containerregistry), so
// the front end may use it.
package imageroot

import (
	"errors"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Config is what an image's config says about running it.
type Config struct {
	Env        []string          `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	User       string            `json:"user,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Created    time.Time         `json:"created,omitzero"`
}

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

// ErrNoCommand is Command's error for an image with no entrypoint or cmd
// and no command given.
var ErrNoCommand = errors.New("the image has no entrypoint or cmd: give a command")

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
		return nil, ErrNoCommand
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

// RefOf is an image by digest: NAME@sha256:HEX of the first repository it
// came from (or of its first name, a canonical tag, without the tag), else
// sha256:HEX. (The store reads a name that is not canonical with its
// registry client; Lookup declines such a name.)
func RefOf(digest string, repos, names []string) string {
	switch {
	case len(repos) > 0:
		return repos[0] + "@" + digest
	case len(names) > 0:
		if repo, _, ok := splitTag(names[0]); ok {
			return repo + "@" + digest
		}
	}
	return digest
}

// splitTag splits a reference at its tag as go-containerregistry does: at
// the last colon when no slash follows it.
func splitTag(ref string) (repo, tag string, ok bool) {
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || strings.Contains(ref[i+1:], "/") {
		return ref, "", false
	}
	return ref[:i], ref[i+1:], true
}
