package image

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// Archive formats of Export.
const (
	FormatDocker = "docker" // `docker save`'s, which `docker load` reads
	FormatOCI    = "oci"    // an OCI image layout, as a tar
)

// Annotations of an OCI layout's index that name an image.
const (
	annotationRefName   = "org.opencontainers.image.ref.name"
	annotationImageName = "io.containerd.image.name"
)

// maxArchiveFiles bounds the files of an OCI layout archive.
const maxArchiveFiles = 100_000

// Import stores the images of path: a `docker save` archive (a tar,
// possibly gzipped), or an OCI image layout (a directory, or a tar of one).
// Each is named by what the archive says (docker's RepoTags, an OCI
// index's io.containerd.image.name or a full reference in its
// org.opencontainers.image.ref.name) and by tags, which need an archive of
// one image. An OCI index of several platforms resolves to this machine's.
func (s *Store) Import(ctx context.Context, path string, tags []string) ([]Image, error) {
	var names []string
	for _, t := range tags {
		n, err := canonicalTag(t)
		if err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	unlock, err := s.lock("gc.lock", unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	if fi.IsDir() {
		return s.importLayout(ctx, path, names, "import "+path)
	}
	work, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "import-")
	if err != nil {
		return nil, err
	}
	defer removeTree(work)
	path, err = s.gunzipped(ctx, path, work)
	if err != nil {
		return nil, err
	}
	kind, err := archiveKind(path)
	if err != nil {
		return nil, err
	}
	switch kind {
	case FormatDocker:
		return s.importDocker(ctx, path, names)
	case FormatOCI:
		dir := filepath.Join(work, "layout")
		if err := extractLayout(ctx, path, dir, s.o.Limits.withDefaults().Bytes); err != nil {
			return nil, err
		}
		return s.importLayout(ctx, dir, names, "import "+path)
	}
	return nil, fmt.Errorf("import %s: neither a docker archive (manifest.json) nor an OCI layout (oci-layout, index.json)", path)
}

// canonicalTag is the name a tag is stored under, or an error for what is
// not NAME[:TAG].
func canonicalTag(t string) (string, error) {
	tag, err := name.NewTag(t)
	if err != nil {
		return "", fmt.Errorf("tag %q: %w", t, err)
	}
	return tag.Name(), nil
}

// gunzipped returns path, or the tar a gzipped path holds, written into
// work.
func (s *Store) gunzipped(ctx context.Context, path, work string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	if magic, _ := br.Peek(2); len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return path, nil
	}
	z, err := gzip.NewReader(br)
	if err != nil {
		return "", fmt.Errorf("import %s: %w", path, err)
	}
	out, err := os.Create(filepath.Join(work, "archive.tar"))
	if err != nil {
		return "", err
	}
	defer out.Close()
	// An archive holds at most as many layers as an image may.
	bound := s.o.Limits.withDefaults().Bytes * 4
	n, err := io.Copy(out, &ctxReader{ctx: ctx, r: io.LimitReader(z, bound+1)})
	if err != nil {
		return "", fmt.Errorf("import %s: gunzip: %w", path, err)
	}
	if n > bound {
		return "", fmt.Errorf("import %s: more than %d bytes uncompressed: %w", path, bound, ErrLimit)
	}
	return out.Name(), out.Close()
}

// archiveKind tells a docker archive from an OCI layout by the names in
// the tar (a newer `docker save` writes both; its manifest.json is read).
func archiveKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	oci := false
	for range maxArchiveFiles {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("import %s: read tar: %w", path, err)
		}
		switch strings.TrimPrefix(hdr.Name, "./") {
		case "manifest.json":
			return FormatDocker, nil
		case "oci-layout":
			oci = true
		}
	}
	if oci {
		return FormatOCI, nil
	}
	return "", nil
}

// importDocker stores the images of a `docker save` archive.
func (s *Store) importDocker(ctx context.Context, path string, names []string) ([]Image, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(path) }
	m, err := tarball.LoadManifest(opener)
	if err != nil {
		return nil, fmt.Errorf("import %s: manifest.json: %w", path, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("import %s: no image in manifest.json", path)
	}
	if len(names) > 0 && len(m) > 1 {
		return nil, fmt.Errorf("import %s: %d images: a tag names one", path, len(m))
	}
	var out []Image
	for i, d := range m {
		o := origin{names: slices.Clone(names), source: "import " + path}
		var pick *name.Tag
		for _, t := range d.RepoTags {
			tag, err := name.NewTag(t)
			if err != nil {
				return out, fmt.Errorf("import %s: image %d: tag %q: %w", path, i, t, err)
			}
			if pick == nil {
				pick = &tag
			}
			o.names = append(o.names, tag.Name())
		}
		if pick == nil && len(m) > 1 {
			return out, fmt.Errorf("import %s: image %d has no tag to tell it from the archive's others", path, i)
		}
		img, err := tarball.Image(opener, pick)
		if err != nil {
			return out, fmt.Errorf("import %s: image %d: %w", path, i, err)
		}
		got, err := s.add(ctx, img, o)
		if err != nil {
			return out, fmt.Errorf("import %s: %w", path, err)
		}
		out = append(out, got)
	}
	return out, nil
}

// importLayout stores the images an OCI layout's index lists.
func (s *Store) importLayout(ctx context.Context, dir string, names []string, source string) ([]Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: not an OCI layout: %w", source, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", source, err)
	}
	if len(im.Manifests) == 0 {
		return nil, fmt.Errorf("%s: the layout's index lists no image", source)
	}
	if len(names) > 0 && len(im.Manifests) > 1 {
		return nil, fmt.Errorf("%s: %d images: a tag names one", source, len(im.Manifests))
	}
	var out []Image
	for _, desc := range im.Manifests {
		o := origin{names: slices.Clone(names), source: source}
		for _, k := range []string{annotationImageName, annotationRefName} {
			if n, ok := fullTag(desc.Annotations[k]); ok && !slices.Contains(o.names, n) {
				o.names = append(o.names, n)
			}
		}
		var img v1.Image
		switch {
		case desc.MediaType.IsImage():
			img, err = idx.Image(desc.Digest)
		case desc.MediaType.IsIndex():
			o.index = desc.Digest.String()
			img, err = s.platformImage(idx, desc.Digest)
		default:
			err = fmt.Errorf("media type %q is neither an image nor an index", desc.MediaType)
		}
		if err != nil {
			return out, fmt.Errorf("%s: %s: %w", source, desc.Digest, err)
		}
		got, err := s.add(ctx, img, o)
		if err != nil {
			return out, fmt.Errorf("%s: %w", source, err)
		}
		out = append(out, got)
	}
	return out, nil
}

// fullTag reads an annotation as a full NAME:TAG (with a repository: a bare
// "1.0" names no image) in canonical form.
func fullTag(v string) (string, bool) {
	if !strings.ContainsAny(v, "/:") {
		return "", false
	}
	n, err := canonicalTag(v)
	return n, err == nil
}

// platformImage picks this machine's image from the index h of idx.
func (s *Store) platformImage(idx v1.ImageIndex, h v1.Hash) (v1.Image, error) {
	child, err := idx.ImageIndex(h)
	if err != nil {
		return nil, err
	}
	im, err := child.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.MediaType.IsImage() && d.Platform != nil && d.Platform.Satisfies(*s.o.Platform) {
			return child.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("the index has no image for %s", s.o.Platform)
}

// layoutName matches the names an OCI layout tar may hold.
var layoutName = regexp.MustCompile(`^(oci-layout|index\.json|blobs/sha256/[0-9a-f]{64})$`)

// extractLayout writes the OCI layout files of the tar at path into dir:
// only oci-layout, index.json and blobs/sha256/HEX, each a regular file of
// at most limit bytes (blobs are verified against their names as they are
// stored). Anything else in the tar is ignored.
func extractLayout(ctx context.Context, path, dir string, limit int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o700); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	for n := 0; ; n++ {
		if n > maxArchiveFiles {
			return fmt.Errorf("import %s: more than %d entries: %w", path, maxArchiveFiles, ErrLimit)
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("import %s: read tar: %w", path, err)
		}
		rel := strings.TrimPrefix(hdr.Name, "./")
		if hdr.Typeflag != tar.TypeReg || !layoutName.MatchString(rel) {
			continue
		}
		if hdr.Size > limit {
			return fmt.Errorf("import %s: %s: %d bytes, at most %d: %w", path, rel, hdr.Size, limit, ErrLimit)
		}
		out, err := os.OpenFile(filepath.Join(dir, rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("import %s: %s: %w", path, rel, err)
		}
		_, err = io.Copy(out, &ctxReader{ctx: ctx, r: io.LimitReader(tr, hdr.Size)})
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("import %s: %s: %w", path, rel, err)
		}
	}
}

// Export writes the images refs name to w as an archive of format
// (FormatDocker or FormatOCI), byte for byte as stored: the same digests.
// An image is named in it by the tag given, else by all its names.
func (s *Store) Export(ctx context.Context, refs []string, format string, w io.Writer) error {
	if len(refs) == 0 {
		return errors.New("export: no image named")
	}
	st, err := s.read()
	if err != nil {
		return err
	}
	type named struct {
		img   v1.Image
		rec   *Image
		names []string
	}
	var all []named
	for _, ref := range refs {
		rec, err := resolve(st, ref)
		if err != nil {
			return err
		}
		img, err := s.image(rec)
		if err != nil {
			return err
		}
		n := withNames(st, rec).Names
		if t, err := name.NewTag(ref); err == nil && slices.Contains(n, t.Name()) {
			n = []string{t.Name()}
		}
		all = append(all, named{img, rec, n})
	}
	switch format {
	case FormatDocker, "":
		m := map[name.Reference]v1.Image{}
		for _, a := range all {
			for _, n := range a.names {
				t, err := name.NewTag(n)
				if err != nil {
					return err
				}
				m[t] = a.img
			}
			if len(a.names) == 0 {
				repo := "airlock/untagged"
				if len(a.rec.Repos) > 0 {
					repo = a.rec.Repos[0]
				}
				d, err := name.NewDigest(repo + "@" + a.rec.Digest)
				if err != nil {
					return err
				}
				m[d] = a.img
			}
		}
		return tarball.MultiRefWrite(m, w)
	case FormatOCI:
		work, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "export-")
		if err != nil {
			return err
		}
		defer removeTree(work)
		p, err := layout.Write(work, empty.Index)
		if err != nil {
			return err
		}
		for _, a := range all {
			var opts []layout.Option
			if len(a.names) > 0 {
				t, err := name.NewTag(a.names[0])
				if err != nil {
					return err
				}
				opts = append(opts, layout.WithAnnotations(map[string]string{annotationImageName: t.Name(), annotationRefName: t.TagStr()}))
			}
			if err := p.AppendImage(a.img, opts...); err != nil {
				return fmt.Errorf("export %s: %w", a.rec.Digest, err)
			}
		}
		return tarDir(ctx, work, w)
	}
	return fmt.Errorf("export: format %q: want %s or %s", format, FormatDocker, FormatOCI)
}

// tarDir writes the regular files below dir (an OCI layout this process
// wrote) to w as a tar, in name order.
func tarDir(ctx context.Context, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(files)
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: fi.Size(), Typeflag: tar.TypeReg, ModTime: fi.ModTime()})
		}
		if err == nil {
			_, err = io.Copy(tw, &ctxReader{ctx: ctx, r: f})
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("export: %s: %w", rel, err)
		}
	}
	return tw.Close()
}
