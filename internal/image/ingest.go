package image

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/klauspost/compress/gzip"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// maxDocument bounds a manifest, an index or a config.
const maxDocument = 4 << 20

// layerJobs is how many layers of one image are fetched and unpacked at
// once.
const layerJobs = 3

// origin is where an image added to the store came from.
type origin struct {
	names  []string // canonical tags to give it
	repo   string   // the repository it was pulled from, if any
	index  string   // the index digest it was chosen from, if any
	source string   // for Image.Source
	// lazy leaves each layer new to the store packed: its blob is fetched
	// and verified, and it is unpacked at its first use (Store.Fetch).
	lazy bool
}

// add stores img, whose manifest, config and layers come from wherever it
// was read (a registry, an archive), and records it under o's names. Every
// blob is verified on its way in; every layer is unpacked unless the store
// has it already, or o.lazy leaves it to its first use.
//
// Preconditions: the caller holds gc.lock shared (blobs and layers added
// here are unreferenced until the index is updated at the end).
func (s *Store) add(ctx context.Context, img v1.Image, o origin) (Image, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return Image{}, fmt.Errorf("read manifest: %w", err)
	}
	if len(raw) > maxDocument {
		return Image{}, fmt.Errorf("manifest of %d bytes: at most %d", len(raw), maxDocument)
	}
	digest := sha256Digest(raw)
	mt, err := img.MediaType()
	if err != nil {
		return Image{}, fmt.Errorf("manifest %s: %w", digest, err)
	}
	if mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2 {
		return Image{}, fmt.Errorf("manifest %s: media type %q is not an image manifest (want %s or %s)", digest, mt, types.OCIManifestSchema1, types.DockerManifestSchema2)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return Image{}, fmt.Errorf("manifest %s: %w", digest, err)
	}
	if err := checkSHA256(m.Config.Digest); err != nil {
		return Image{}, fmt.Errorf("manifest %s: config: %w", digest, err)
	}
	// A config the store has (it was verified on its way in) is not
	// fetched again.
	rawCfg, err := s.readBlob(m.Config.Digest.String())
	if err != nil {
		rawCfg, err = img.RawConfigFile()
	}
	if err != nil {
		return Image{}, fmt.Errorf("read config: %w", err)
	}
	if len(rawCfg) > maxDocument {
		return Image{}, fmt.Errorf("config of %d bytes: at most %d", len(rawCfg), maxDocument)
	}
	if d := sha256Digest(rawCfg); d != m.Config.Digest.String() {
		return Image{}, fmt.Errorf("config: its content hashes to %s, the manifest names %s: refused", d, m.Config.Digest)
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return Image{}, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	if err := s.checkPlatform(cf); err != nil {
		return Image{}, err
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return Image{}, fmt.Errorf("image %s: the config lists %d layers, the manifest %d", digest, len(cf.RootFS.DiffIDs), len(m.Layers))
	}
	if len(m.Layers) > sandbox.MaxLayers {
		return Image{}, fmt.Errorf("image %s: %d layers, at most %d", digest, len(m.Layers), sandbox.MaxLayers)
	}
	rec := &Image{
		Digest: digest, Index: o.index, MediaType: string(mt), ConfigRef: m.Config.Digest.String(),
		Platform: platformOf(cf), Added: time.Now().UTC(), Source: o.source,
		Config: Config{
			Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
			Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, Labels: cf.Config.Labels, Created: cf.Created.Time,
		},
	}
	if o.repo != "" {
		rec.Repos = []string{o.repo}
	}
	rec.Layers = make([]LayerInfo, len(m.Layers))
	lim := s.o.Limits.withDefaults()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layerJobs)
	for i, desc := range m.Layers {
		diffID := cf.RootFS.DiffIDs[i]
		rec.Layers[i] = LayerInfo{Digest: desc.Digest.String(), DiffID: diffID.String(), MediaType: string(desc.MediaType), Size: desc.Size}
		rec.Size += desc.Size
		if err := checkLayer(desc, diffID, lim); err != nil {
			return Image{}, fmt.Errorf("image %s: layer %d: %w", digest, i, err)
		}
		g.Go(func() error {
			stats, err := s.addLayer(gctx, img, desc, diffID, lim, o.lazy)
			if err != nil {
				return fmt.Errorf("image %s: layer %d (%s): %w", digest, i, desc.Digest, err)
			}
			rec.Layers[i].Unpacked = stats
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Image{}, err
	}
	if err := s.putBlob(ctx, m.Config.Digest.String(), int64(len(rawCfg)), bytesOpener(rawCfg), nil); err != nil {
		return Image{}, fmt.Errorf("image %s: config: %w", digest, err)
	}
	if err := s.putBlob(ctx, digest, int64(len(raw)), bytesOpener(raw), nil); err != nil {
		return Image{}, fmt.Errorf("image %s: manifest: %w", digest, err)
	}
	var out Image
	err = s.update(func(st *state) error {
		if old, ok := st.Images[digest]; ok {
			// Known already: keep its history, add where it came from.
			rec.Added, rec.Source = old.Added, old.Source
			if rec.Index == "" {
				rec.Index = old.Index
			}
			for _, r := range old.Repos {
				if !slices.Contains(rec.Repos, r) {
					rec.Repos = append(rec.Repos, r)
				}
			}
			for i := range rec.Layers {
				if rec.Layers[i].Unpacked.Entries == 0 {
					rec.Layers[i].Unpacked = old.Layers[i].Unpacked
				}
			}
		}
		for i := range rec.Layers {
			if rec.Layers[i].Unpacked.Entries == 0 {
				rec.Layers[i].Unpacked = knownStats(st, rec.Layers[i].DiffID)
			}
		}
		st.Images[digest] = rec
		for _, n := range o.names {
			st.Names[n] = digest
		}
		out = withNames(st, rec)
		return nil
	})
	return out, err
}

// knownStats returns what unpacking layer diffID did, as another image
// recorded it.
func knownStats(st *state, diffID string) LayerStats {
	for _, img := range st.Images {
		for _, l := range img.Layers {
			if l.DiffID == diffID && l.Unpacked.Entries > 0 {
				return l.Unpacked
			}
		}
	}
	return LayerStats{}
}

// checkPlatform refuses an image this machine cannot run.
func (s *Store) checkPlatform(cf *v1.ConfigFile) error {
	want := s.o.Platform
	if cf.OS != "" && cf.OS != want.OS || cf.Architecture != "" && cf.Architecture != want.Architecture {
		return fmt.Errorf("the image is for %s; this machine runs %s", platformOf(cf), want)
	}
	return nil
}

func platformOf(cf *v1.ConfigFile) string {
	p := cf.OS + "/" + cf.Architecture
	if cf.Variant != "" {
		p += "/" + cf.Variant
	}
	return p
}

// checkLayer refuses a layer this store does not take before anything of
// it is read.
func checkLayer(desc v1.Descriptor, diffID v1.Hash, lim Limits) error {
	switch desc.MediaType {
	case types.DockerLayer, types.DockerUncompressedLayer, types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer:
	case types.DockerForeignLayer, types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return fmt.Errorf("media type %s: foreign (non-distributable) layers are not supported", desc.MediaType)
	default:
		return fmt.Errorf("media type %q is not a layer", desc.MediaType)
	}
	if err := checkSHA256(desc.Digest); err != nil {
		return err
	}
	if err := checkSHA256(diffID); err != nil {
		return fmt.Errorf("diff id: %w", err)
	}
	if desc.Size < 0 || desc.Size > lim.Bytes {
		return fmt.Errorf("compressed size %d: at most %d: %w", desc.Size, lim.Bytes, ErrLimit)
	}
	return nil
}

func checkSHA256(h v1.Hash) error {
	if h.Algorithm != "sha256" || len(h.Hex) != 64 {
		return fmt.Errorf("digest %q: only sha256 digests are supported", h.String())
	}
	return nil
}

// addLayer stores a layer's compressed blob and its unpacked directory,
// each unless the store has it (or lazy leaves the directory to the
// layer's first use). A layer new to the store is unpacked while it
// downloads: one read of the registry's stream feeds both, so the pull
// costs the slower of the two, not their sum.
func (s *Store) addLayer(ctx context.Context, img v1.Image, desc v1.Descriptor, diffID v1.Hash, lim Limits, lazy bool) (LayerStats, error) {
	digest := desc.Digest.String()
	blob := s.blobPath(digest)
	_, err := os.Stat(blob)
	haveBlob := err == nil
	_, err = os.Stat(s.layerPath(diffID.String()))
	haveLayer := err == nil
	switch {
	case haveBlob && (haveLayer || lazy):
		return LayerStats{}, nil
	case haveBlob:
		return s.unpack(ctx, blob, diffID.String(), lim)
	}
	l, err := img.LayerByDigest(desc.Digest)
	if err != nil {
		return LayerStats{}, err
	}
	if haveLayer || lazy {
		return LayerStats{}, s.putBlob(ctx, digest, desc.Size, l.Compressed, nil)
	}
	// The unpacker verifies the uncompressed stream against diffID on its
	// own, and putBlob the compressed one against digest: a layer directory
	// is renamed into place only when what it holds hashed to its name,
	// whatever the other check finds.
	pr, pw := io.Pipe()
	var stats LayerStats
	var uerr error
	unpacked := make(chan struct{})
	go func() {
		defer close(unpacked)
		stats, uerr = s.unpackFrom(ctx, pr, diffID.String(), lim)
		// Whatever the unpacker left unread fails the download's next
		// write instead of blocking it.
		pr.CloseWithError(cmp.Or(uerr, errUnpacked))
	}()
	perr := s.putBlob(ctx, digest, desc.Size, l.Compressed, pw)
	pw.CloseWithError(perr) // nil: EOF
	<-unpacked
	// Each side fails the other: report the one that failed first (the
	// other's error wraps it).
	if perr != nil && (uerr == nil || !errors.Is(perr, uerr)) {
		return stats, perr
	}
	return stats, uerr
}

// errUnpacked is what a download's write into a finished unpacker gets.
var errUnpacked = errors.New("the layer's unpacker has stopped reading")

func bytesOpener(b []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

// putBlob stores the blob open reads under digest, unless the store has
// it: it hashes what it reads and keeps it only when it is size bytes (a
// negative size: any) that hash to digest.
// What it reads is also written to also, when not nil, as it is read.
func (s *Store) putBlob(ctx context.Context, digest string, size int64, open func() (io.ReadCloser, error), also io.Writer) error {
	dst := s.blobPath(digest)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	rc, err := open()
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	limit := s.o.Limits.withDefaults().Bytes
	if size >= 0 {
		limit = size
	}
	ws := []io.Writer{tmp, h}
	if also != nil {
		ws = append(ws, also)
	}
	n, err := io.Copy(io.MultiWriter(ws...), &ctxReader{ctx: ctx, r: io.LimitReader(rc, limit+1)})
	if err != nil {
		return fmt.Errorf("read blob %s: %w", digest, err)
	}
	if size >= 0 && n != size {
		return fmt.Errorf("blob %s: %d bytes, the manifest says %d: refused", digest, n, size)
	}
	if n > limit {
		return fmt.Errorf("blob %s: more than %d bytes: %w", digest, limit, ErrLimit)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("blob %s: its content hashes to %s: refused", digest, got)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	err = renameNoReplace(tmp.Name(), dst)
	if errors.Is(err, unix.EEXIST) {
		return nil // the same content, stored meanwhile
	}
	return err
}

// unpack unpacks the layer blob (gzip, zstd or a plain tar) into
// layers/HEX of its diff id: into tmp/ first, renamed into place once its
// uncompressed stream hashed to diffID.
func (s *Store) unpack(ctx context.Context, blob, diffID string, lim Limits) (LayerStats, error) {
	f, err := os.Open(blob)
	if err != nil {
		return LayerStats{}, err
	}
	defer f.Close()
	return s.unpackFrom(ctx, f, diffID, lim)
}

// unpackFrom unpacks the layer stream r (gzip, zstd or a plain tar) as
// unpack does.
func (s *Store) unpackFrom(ctx context.Context, f io.Reader, diffID string, lim Limits) (LayerStats, error) {
	r, err := decompress(bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		return LayerStats{}, err
	}
	defer r.Close()
	work, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "layer-")
	if err != nil {
		return LayerStats{}, err
	}
	defer removeTree(work)
	h := sha256.New()
	tee := io.TeeReader(&ctxReader{ctx: ctx, r: r}, h)
	dir := filepath.Join(work, "layer")
	stats, err := UnpackLayer(tee, dir, lim, s.chown)
	if err != nil {
		return stats, err
	}
	// The diff id covers the whole stream, the padding after the tar's end
	// included; more than padding there is not a layer.
	if n, err := io.Copy(io.Discard, io.LimitReader(tee, 1<<20+1)); err != nil {
		return stats, fmt.Errorf("read layer: %w", err)
	} else if n > 1<<20 {
		return stats, errors.New("more than 1 MiB after the end of the tar: refused")
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return stats, fmt.Errorf("its uncompressed content hashes to %s, the image config names %s: refused", got, diffID)
	}
	err = renameNoReplace(dir, s.layerPath(diffID))
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		return stats, nil // unpacked meanwhile by another pull
	}
	return stats, err
}

// renameNoReplace renames from to to unless to exists (then it fails
// with EEXIST): what is under a digest never changes.
func renameNoReplace(from, to string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("rename %s: %w", filepath.Base(to), err)
	}
	return nil
}

// decompress reads a gzip or zstd stream by its magic number, else a plain
// one.
func decompress(r *bufio.Reader) (io.ReadCloser, error) {
	magic, _ := r.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return z, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		// A window beyond 128 MiB would let a layer make the host allocate
		// it; zstd's own maximum is 2 GiB.
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(128<<20), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return z.IOReadCloser(), nil
	}
	return io.NopCloser(r), nil
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ctxReader stops a long copy when its context ends.
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
