package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Making images (an image build): a builder pins the store (Pin), adds
// each new layer as it makes it (AddLayer; a sandbox of the next step runs
// on it: LayerDirs), and commits the image of a base, its new layers and a
// config (Commit), which is then stored, exported and pushed as a pulled
// one is.

// Pin holds off garbage collection until release is called: a caller that
// adds layers no image references yet (AddLayer) holds it until it has
// committed them (Commit) or given up. Preconditions: the caller does not
// remove images (Remove collects garbage) while it holds a pin.
func (s *Store) Pin() (release func(), err error) {
	return s.lock("gc.lock", unix.LOCK_SH)
}

// AddLayer stores the layer whose uncompressed tar r streams (OCI form:
// deletions as .wh. whiteouts) as a gzipped blob, and unpacks it as any
// pulled layer, with the same checks: its content is untrusted (an image
// build's layers hold what a build step's commands wrote). A layer the
// store has already is not stored again. The result's MediaType is
// types.OCILayer; Commit gives it the base's form.
//
// Preconditions: the caller holds a Pin.
func (s *Store) AddLayer(ctx context.Context, r io.Reader) (LayerInfo, error) {
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "new-layer-")
	if err != nil {
		return LayerInfo{}, fmt.Errorf("add layer: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	lim := s.o.Limits.withDefaults()
	zh, th := sha256.New(), sha256.New()
	cw := &countWriter{w: io.MultiWriter(tmp, zh)}
	zw, err := gzip.NewWriterLevel(cw, gzip.BestSpeed)
	if err != nil {
		return LayerInfo{}, err
	}
	n, err := io.Copy(io.MultiWriter(zw, th), &limitReader{r: &ctxReader{ctx: ctx, r: r}, left: lim.Bytes})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return LayerInfo{}, fmt.Errorf("add layer: %w", err)
	}
	info := LayerInfo{
		Digest:    "sha256:" + hex.EncodeToString(zh.Sum(nil)),
		DiffID:    "sha256:" + hex.EncodeToString(th.Sum(nil)),
		MediaType: string(types.OCILayer),
		Size:      cw.n,
	}
	open := func() (io.ReadCloser, error) { return os.Open(tmp.Name()) }
	if err := s.putBlob(ctx, info.Digest, info.Size, open, nil); err != nil {
		return LayerInfo{}, fmt.Errorf("add layer %s: %w", info.DiffID, err)
	}
	if _, err := os.Stat(s.layerPath(info.DiffID)); err == nil {
		info.Unpacked = LayerStats{Bytes: n}
		return info, nil
	}
	stats, err := s.unpack(ctx, s.blobPath(info.Digest), info.DiffID, lim)
	if err != nil {
		return LayerInfo{}, fmt.Errorf("add layer %s: %w", info.DiffID, err)
	}
	info.Unpacked = stats
	return info, nil
}

// HasLayer reports whether the store holds layer l, blob and unpacked
// directory both (what a build's cache entry names may have been
// collected since).
func (s *Store) HasLayer(l LayerInfo) bool {
	if checkDigestString(l.Digest) != nil || checkDigestString(l.DiffID) != nil {
		return false
	}
	_, errBlob := os.Stat(s.blobPath(l.Digest))
	_, errDir := os.Stat(s.layerPath(l.DiffID))
	return errBlob == nil && errDir == nil
}

// LayerDirs are the unpacked directories of layers (sandbox.Spec.Layers),
// lowest first; layers fetched but not yet unpacked (Fetch) are unpacked
// now, as many at once as a pull does.
func (s *Store) LayerDirs(ctx context.Context, layers []LayerInfo) ([]string, error) {
	dirs := make([]string, len(layers))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layerJobs)
	for i, l := range layers {
		if err := checkDigestString(l.DiffID); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		g.Go(func() error {
			dir, err := s.layerDir(gctx, l)
			if err != nil {
				return fmt.Errorf("layer %d: %w", i, err)
			}
			dirs[i] = dir
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return dirs, nil
}

// layerDir returns layer l's unpacked directory, unpacking it from its
// stored blob first if a Fetch left it packed (verified against its diff
// id as a pull's unpack is; another process unpacking it meanwhile is
// fine: the first rename wins and both are the same content).
func (s *Store) layerDir(ctx context.Context, l LayerInfo) (string, error) {
	dir := s.layerPath(l.DiffID)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := checkDigestString(l.Digest); err != nil {
		return "", err
	}
	blob := s.blobPath(l.Digest)
	if _, err := os.Stat(blob); err != nil {
		return "", fmt.Errorf("layer %s is missing from the store (remove the image and pull it again): %w", l.DiffID, err)
	}
	// The unpack writes tmp/, which GC clears only while it holds
	// gc.lock exclusively.
	unlock, err := s.lock("gc.lock", unix.LOCK_SH)
	if err != nil {
		return "", err
	}
	defer unlock()
	stats, err := s.unpack(ctx, blob, l.DiffID, s.o.Limits.withDefaults())
	if err != nil {
		return "", fmt.Errorf("unpack layer %s at its first use: %w", l.Digest, err)
	}
	// What the unpack did, for `image inspect`; the layer is there whether
	// or not this is recorded.
	_ = s.update(func(st *state) error {
		for _, img := range st.Images {
			for i := range img.Layers {
				if img.Layers[i].DiffID == l.DiffID && img.Layers[i].Unpacked.Entries == 0 {
					img.Layers[i].Unpacked = stats
				}
			}
		}
		return nil
	})
	return dir, nil
}

// NewLayer is a layer a Commit adds: one AddLayer stored, and the
// instruction that made it (the image history's created_by).
type NewLayer struct {
	Layer     LayerInfo
	CreatedBy string
}

// Commit stores the image made of base's layers (base "" is an empty
// image: FROM scratch) and then layers, with cfg as its config (cfg
// replaces base's), and names it tags. Its manifest takes base's form
// (Docker or OCI; OCI for scratch), its new layers the matching layer
// media type.
//
// Preconditions: the caller holds a Pin (the layers were added under it).
func (s *Store) Commit(ctx context.Context, base string, layers []NewLayer, cfg Config, tags []string) (Image, error) {
	var names []string
	for _, t := range tags {
		n, err := canonicalTag(t)
		if err != nil {
			return Image{}, err
		}
		names = append(names, n)
	}
	img := empty.Image
	layerType := types.OCILayer
	if base != "" {
		st, err := s.read()
		if err != nil {
			return Image{}, err
		}
		rec, err := resolve(st, base)
		if err != nil {
			return Image{}, err
		}
		if img, err = s.image(rec); err != nil {
			return Image{}, err
		}
		if types.MediaType(rec.MediaType) == types.DockerManifestSchema2 {
			layerType = types.DockerLayer
		}
	} else {
		img = mutate.MediaType(img, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	}
	adds := make([]mutate.Addendum, len(layers))
	for i, nl := range layers {
		if !s.HasLayer(nl.Layer) {
			return Image{}, fmt.Errorf("commit: layer %s is missing from the store (added without a pin?)", nl.Layer.DiffID)
		}
		l := nl.Layer
		l.MediaType = string(layerType)
		cl, err := partial.CompressedToLayer(&storedLayer{s: s, l: l})
		if err != nil {
			return Image{}, err
		}
		adds[i] = mutate.Addendum{Layer: cl, MediaType: layerType, History: v1.History{CreatedBy: nl.CreatedBy}}
	}
	img, err := mutate.Append(img, adds...)
	if err != nil {
		return Image{}, fmt.Errorf("commit: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("commit: %w", err)
	}
	cf = cf.DeepCopy()
	if cf.OS == "" {
		cf.OS, cf.Architecture, cf.Variant = s.o.Platform.OS, s.o.Platform.Architecture, s.o.Platform.Variant
	}
	cf.Config.Env, cf.Config.WorkingDir, cf.Config.User = cfg.Env, cfg.WorkingDir, cfg.User
	cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.Labels = cfg.Entrypoint, cfg.Cmd, cfg.Labels
	if !cfg.Created.IsZero() {
		cf.Created = v1.Time{Time: cfg.Created}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return Image{}, fmt.Errorf("commit: %w", err)
	}
	out, err := s.add(ctx, img, origin{names: names, source: "build"})
	if err != nil {
		return Image{}, fmt.Errorf("commit: %w", err)
	}
	// add knows what unpacking did only for layers it unpacked itself.
	err = s.update(func(st *state) error {
		rec := st.Images[out.Digest]
		for i := range rec.Layers {
			for _, nl := range layers {
				if rec.Layers[i].DiffID == nl.Layer.DiffID && rec.Layers[i].Unpacked.Entries == 0 {
					rec.Layers[i].Unpacked = nl.Layer.Unpacked
				}
			}
		}
		out = withNames(st, rec)
		return nil
	})
	return out, err
}

// checkDigestString reports whether d is sha256:HEX, as a store path may
// be made of.
func checkDigestString(d string) error {
	h, err := v1.NewHash(d)
	if err != nil {
		return err
	}
	return checkSHA256(h)
}

// countWriter counts what passes to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
