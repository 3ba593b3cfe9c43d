package imageroot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ErrNotFound is wrapped by the errors of a reference the store has no
// image for.
var ErrNotFound = errors.New("no such image")

// Image describes a stored image.
type Image struct {
	// Digest is the manifest's (sha256:...): the image's identity.
	Digest string `json:"digest"`
	// Index is the digest of the multi-platform index it was chosen from,
	// if any.
	Index string `json:"index,omitempty"`
	// Names are its tags, in canonical form (index.docker.io/library/x:1).
	Names []string `json:"names,omitempty"`
	// Repos are the repositories it came from or went to: where a node
	// that lacks it may pull it by digest.
	Repos     []string    `json:"repos,omitempty"`
	MediaType string      `json:"media_type"`
	Platform  string      `json:"platform"`
	Config    Config      `json:"config"`
	ConfigRef string      `json:"config_digest"`
	Layers    []LayerInfo `json:"layers"`
	// Size is the sum of the compressed layers' sizes.
	Size   int64     `json:"size"`
	Added  time.Time `json:"added"`
	Source string    `json:"source"`
}

// LayerInfo describes one layer of an image, lowest first.
type LayerInfo struct {
	Digest    string     `json:"digest"`  // of the compressed blob
	DiffID    string     `json:"diff_id"` // of the uncompressed tar
	MediaType string     `json:"media_type"`
	Size      int64      `json:"size"` // compressed
	Unpacked  LayerStats `json:"unpacked"`
}

// LayerStats say what unpacking a layer did.
type LayerStats struct {
	Entries   int   `json:"entries"`
	Bytes     int64 `json:"bytes"`               // of regular files' content
	Whiteouts int   `json:"whiteouts,omitempty"` // .wh.NAME and 0/0 character devices
	Opaque    int   `json:"opaque,omitempty"`    // .wh..wh..opq
	// Skipped counts entries not applied: device nodes other than the 0/0
	// whiteout, AUFS's own .wh..wh.* entries, global PAX headers.
	Skipped int `json:"skipped,omitempty"`
}

// Index is the store's images.json.
type Index struct {
	Images map[string]*Image `json:"images"` // by manifest digest
	Names  map[string]string `json:"names"`  // canonical tag -> manifest digest
}

// ReadIndex returns the index of the store in dir as it is now (writers
// replace it whole); an empty one when there is none yet.
func ReadIndex(dir string) (*Index, error) {
	ix := &Index{Images: map[string]*Image{}, Names: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return ix, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := json.Unmarshal(b, ix); err != nil {
		return nil, fmt.Errorf("image store: images.json: %w", err)
	}
	if ix.Images == nil {
		ix.Images = map[string]*Image{}
	}
	if ix.Names == nil {
		ix.Names = map[string]string{}
	}
	return ix, nil
}

// LayerPath is the unpacked directory of layer diffID in the store in dir.
func LayerPath(dir, diffID string) string {
	return filepath.Join(dir, "layers", strings.TrimPrefix(diffID, "sha256:"))
}

// WithNames returns img with its names filled in from ix.
func (ix *Index) WithNames(img *Image) Image {
	out := *img
	out.Names = nil
	for n, d := range ix.Names {
		if d == img.Digest {
			out.Names = append(out.Names, n)
		}
	}
	slices.Sort(out.Names)
	return out
}

// ParseRef reads a reference that is not a digest prefix: it returns the
// manifest (or index) digest of NAME@sha256:HEX, or the canonical name of
// a tag (index.docker.io/library/busybox:latest).
type ParseRef func(ref string) (digest, tag string, err error)

// Resolve finds ref's image in ix: sha256:HEX or a prefix of at least 12
// hex digits of one image's manifest digest (or an index's whole digest),
// else what parse reads of it.
func (ix *Index) Resolve(ref string, parse ParseRef) (*Image, error) {
	if hex, ok := DigestPrefix(ref); ok {
		var match []*Image
		for _, img := range ix.Images {
			if MatchesPrefix(hex, img.Digest, img.Index) {
				match = append(match, img)
			}
		}
		switch len(match) {
		case 1:
			return match[0], nil
		case 0:
			return nil, fmt.Errorf("image %s: %w", ref, ErrNotFound)
		}
		return nil, fmt.Errorf("image %s: %d images match; give more of the digest", ref, len(match))
	}
	digest, tag, err := parse(ref)
	if err != nil {
		return nil, err
	}
	if digest != "" {
		for _, img := range ix.Images {
			if img.Digest == digest || img.Index == digest {
				return img, nil
			}
		}
		return nil, fmt.Errorf("image %s: %w", ref, ErrNotFound)
	}
	if d, ok := ix.Names[tag]; ok {
		if img, ok := ix.Images[d]; ok {
			return img, nil
		}
	}
	return nil, fmt.Errorf("image %s: %w", ref, ErrNotFound)
}
