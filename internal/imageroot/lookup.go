package imageroot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// DigestPrefix reports whether ref is sha256:HEX or a bare hex digest
// prefix of at least 12 digits, and returns the hex.
func DigestPrefix(ref string) (string, bool) {
	hex, algo := strings.CutPrefix(ref, "sha256:")
	if len(hex) < 12 && !algo || len(hex) == 0 || len(hex) > 64 {
		return "", false
	}
	for _, c := range hex {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return hex, true
}

// MatchesPrefix reports whether an image of manifest digest, chosen from
// index (its multi-platform index's digest, or ""), is one that hex, a
// DigestPrefix, names: a prefix of its manifest digest, or the whole
// digest of its index.
func MatchesPrefix(hex, digest, index string) bool {
	return strings.HasPrefix(strings.TrimPrefix(digest, "sha256:"), hex) || len(hex) == 64 && index == "sha256:"+hex
}

// DefaultRegistry is Docker Hub's registry as a reference's canonical
// name spells it.
const DefaultRegistry = "index.docker.io"

// CanonicalTag returns the canonical name of tag reference ref as
// go-containerregistry's name.ParseReference(ref).Name() gives it
// (busybox: index.docker.io/library/busybox:latest), with ok true; false
// when ref is not a tag reference of the plain form it reads (a digest
// reference, an unusual registry): the caller then asks the registry
// client. FuzzCanonicalTag (internal/image) keeps the two in agreement.
func CanonicalTag(ref string) (string, bool) {
	if strings.ContainsAny(ref, "@") {
		return "", false
	}
	base, tag, tagged := splitTag(ref)
	if !tagged {
		tag = "latest"
	} else if len(tag) < 1 || len(tag) > 128 || strings.Trim(tag, tagChars) != "" {
		return "", false
	}
	registry, repo := DefaultRegistry, base
	if first, rest, ok := strings.Cut(base, "/"); ok && (first == "localhost" || strings.ContainsAny(first, ".:")) {
		if !plainHost(first) {
			return "", false
		}
		registry, repo = first, rest
		if registry == "docker.io" {
			registry = DefaultRegistry
		}
	}
	if len(repo) < 1 || len(repo) > 255 || strings.Trim(repo, repoChars) != "" {
		return "", false
	}
	if registry == DefaultRegistry && !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	return registry + "/" + repo + ":" + tag, true
}

const (
	tagChars  = "abcdefghijklmnopqrstuvwxyz0123456789_-.ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	repoChars = "abcdefghijklmnopqrstuvwxyz0123456789_-./"
)

// plainHost reports whether s is a host name of lower-case labels (letters,
// digits, inner dashes) with an optional decimal port.
func plainHost(s string) bool {
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort && (len(port) < 1 || len(port) > 5 || strings.Trim(port, "0123456789") != "") {
		return false
	}
	for _, l := range strings.Split(host, ".") {
		if l == "" || l[0] == '-' || l[len(l)-1] == '-' || strings.Trim(l, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}

// Lookup returns the root of the image ref names in the image store in dir
// ($AIRLOCK_HOME/images), reading it only, with ok true when it is sure
// the store's Root gives the same: ref names exactly one stored image (by
// a tag of the plain form CanonicalTag reads, sha256:HEX or a digest
// prefix), and every layer of it is unpacked. Anything else (no store, no
// such image, a reference it does not read, a layer fetched but not yet
// unpacked, a store directory whose mode Open would change, an index the
// store could not read) is ok false: the store then does the work and says
// what is wrong in its own words. It reads the store's roots file
// (WriteRoots) where that was made from the index there now, else the
// index itself.
func Lookup(dir, ref string) (Root, bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Root{}, false
	}
	// Open makes the store's directories and its mode 0700: a store that
	// lacks either is left to it.
	for _, d := range []string{abs, filepath.Join(abs, "blobs", "sha256"), filepath.Join(abs, "layers"), filepath.Join(abs, "tmp")} {
		if st, err := os.Stat(d); err != nil || !st.IsDir() || d == abs && st.Mode().Perm() != 0o700 {
			return Root{}, false
		}
	}
	ix, ok := readRoots(abs)
	if !ok {
		var err error
		if ix, err = ReadIndex(abs); err != nil {
			return Root{}, false
		}
	}
	for _, img := range ix.Images {
		if img == nil {
			return Root{}, false // the store's lookup would not survive it
		}
	}
	img, err := ix.Resolve(ref, func(ref string) (string, string, error) {
		if name, ok := CanonicalTag(ref); ok {
			return "", name, nil
		}
		return "", "", errDecline
	})
	if err != nil {
		return Root{}, false
	}
	named := ix.WithNames(img)
	if len(named.Repos) == 0 && len(named.Names) > 0 {
		if n, ok := CanonicalTag(named.Names[0]); !ok || n != named.Names[0] {
			return Root{}, false // the store reads it with its registry client
		}
	}
	r := Root{Ref: RefOf(named.Digest, named.Repos, named.Names), Digest: img.Digest, Config: img.Config}
	for _, l := range img.Layers {
		hex, ok := strings.CutPrefix(l.DiffID, "sha256:")
		if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
			return Root{}, false
		}
		p := LayerPath(abs, l.DiffID)
		if _, err := os.Stat(p); err != nil {
			return Root{}, false
		}
		r.Layers = append(r.Layers, p)
	}
	return r, true
}

var errDecline = errors.New("a reference Lookup does not read")
