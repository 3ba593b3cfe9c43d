package image_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/sandbox"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func openStore(t *testing.T, o image.Options) *image.Store {
	t.Helper()
	s, err := image.Open(filepath.Join(t.TempDir(), "images"), o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// twoLayers is an image of two layers: the second deletes a file and hides
// a directory's contents of the first, with a whiteout of each form.
func twoLayers(t *testing.T, arch string) v1.Image {
	t.Helper()
	base := imagetest.Layer(t,
		imagetest.File{Name: "etc/", Typeflag: tar.TypeDir},
		imagetest.File{Name: "etc/old", Body: []byte("old")},
		imagetest.File{Name: "data/", Typeflag: tar.TypeDir},
		imagetest.File{Name: "data/a", Body: []byte("a")},
		imagetest.File{Name: "arch", Body: []byte("base " + arch)},
	)
	top := imagetest.Layer(t,
		imagetest.File{Name: "etc/.wh.old"},
		imagetest.File{Name: "data/", Typeflag: tar.TypeDir},
		imagetest.File{Name: "data/.wh..wh..opq"},
		imagetest.File{Name: "data/b", Body: []byte("b")},
		imagetest.File{Name: "arch", Body: []byte(arch)},
	)
	return imagetest.Image(t, arch, v1.Config{Env: []string{"PATH=/bin", "FROM=image"}, WorkingDir: "/data", User: "1000:1000", Cmd: []string{"/bin/sh"}}, base, top)
}

func push(t *testing.T, r *imagetest.Registry, ref string, img v1.Image) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithTransport(r.Transport), remote.WithAuth(&authn.Basic{Username: r.User, Password: r.Password})); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func digestOf(t *testing.T, img interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// TestPull: a pull over TLS with token auth stores the image by its
// digest, under its tag, with each layer unpacked (whiteouts in overlay
// form); a second pull fetches no blob; a pull without credentials is
// refused.
func TestPull(t *testing.T) {
	r := imagetest.NewRegistry(t)
	img := twoLayers(t, runtime.GOARCH)
	ref := r.Host + "/team/app:1"
	push(t, r, ref, img)
	s := openStore(t, image.Options{Transport: r.Transport})

	if _, err := s.Pull(ctx(t), ref, image.Auth{}); err == nil || !strings.Contains(err.Error(), "UNAUTHORIZED") {
		t.Fatalf("Pull without credentials = %v, want UNAUTHORIZED", err)
	}
	auth := image.Auth{Username: r.User, Password: r.Password}
	got, err := s.Pull(ctx(t), ref, auth)
	if err != nil {
		t.Fatalf("Pull(%s) = %v", ref, err)
	}
	if want := digestOf(t, img); got.Digest != want {
		t.Errorf("Pull digest = %s, want %s", got.Digest, want)
	}
	if !slices.Equal(got.Names, []string{ref}) || !slices.Equal(got.Repos, []string{r.Host + "/team/app"}) {
		t.Errorf("Pull names %v repos %v", got.Names, got.Repos)
	}
	root, err := s.Root(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(root.Layers) != 2 {
		t.Fatalf("Root layers = %v, want 2", root.Layers)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(root.Layers[1], "etc", "old"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/old in the top layer: %v, mode %o: want a whiteout", err, st.Mode)
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(filepath.Join(root.Layers[1], "data"), "user.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("data in the top layer: opaque xattr %q, %v", buf[:n], err)
	}
	if root.Ref != r.Host+"/team/app@"+got.Digest {
		t.Errorf("Root ref = %s", root.Ref)
	}
	gets := r.BlobGets()
	if _, err := s.Pull(ctx(t), ref, auth); err != nil {
		t.Fatal(err)
	}
	if n := r.BlobGets() - gets; n != 0 {
		t.Errorf("second Pull fetched %d blobs, want 0", n)
	}
}

// TestPullMultiArch: an index resolves to this machine's image, by tag and
// by the index's digest.
func TestPullMultiArch(t *testing.T) {
	r := imagetest.NewRegistry(t)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	mine, theirs := twoLayers(t, runtime.GOARCH), twoLayers(t, other)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: theirs, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
		mutate.IndexAddendum{Add: mine, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
	)
	ref, err := name.NewTag(r.Host + "/multi:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, remote.WithTransport(r.Transport), remote.WithAuth(&authn.Basic{Username: r.User, Password: r.Password})); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, image.Options{Transport: r.Transport, Credentials: func(reg string) (image.Auth, error) {
		if reg != r.Host {
			t.Errorf("Credentials(%q), want %q", reg, r.Host)
		}
		return image.Auth{Username: r.User, Password: r.Password}, nil
	}})
	got, err := s.Pull(ctx(t), ref.String(), image.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	if want := digestOf(t, mine); got.Digest != want || got.Index != digestOf(t, idx) {
		t.Errorf("Pull = %s (index %s), want %s (index %s)", got.Digest, got.Index, want, digestOf(t, idx))
	}
	if got.Platform != "linux/"+runtime.GOARCH {
		t.Errorf("Platform = %s", got.Platform)
	}
	byIndex, err := s.Inspect(r.Host + "/multi@" + digestOf(t, idx))
	if err != nil || byIndex.Digest != got.Digest {
		t.Errorf("Inspect by index digest = %s, %v", byIndex.Digest, err)
	}
}

// TestPullTampered: a blob whose bytes do not hash to its digest (a
// config, a layer) is refused, and nothing of it is kept.
func TestPullTampered(t *testing.T) {
	r := imagetest.NewRegistry(t)
	img := twoLayers(t, runtime.GOARCH)
	ref := r.Host + "/tampered:1"
	push(t, r, ref, img)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []struct {
		name, digest string
		set          func(func(string) bool)
	}{
		{"config", m.Config.Digest.String(), r.Tamper},
		{"layer", m.Layers[1].Digest.String(), r.Tamper},
		// A layer unpacks while it downloads: a download cut halfway
		// stops the unpacker too, and leaves nothing behind.
		{"cut-layer", m.Layers[1].Digest.String(), r.Cut},
	} {
		t.Run(target.name, func(t *testing.T) {
			s := openStore(t, image.Options{Transport: r.Transport})
			target.set(func(d string) bool { return d == target.digest })
			defer target.set(nil)
			_, err := s.Pull(ctx(t), ref, image.Auth{Username: r.User, Password: r.Password})
			if err == nil || !strings.Contains(err.Error(), target.digest) {
				t.Fatalf("Pull with a tampered %s = %v, want an error naming %s", target.name, err, target.digest)
			}
			if imgs, _ := s.List(); len(imgs) != 0 {
				t.Errorf("List = %v after a refused pull", imgs)
			}
			if _, err := s.GC(); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{"layers", "blobs/sha256", "tmp"} {
				if ents, _ := os.ReadDir(filepath.Join(s.Dir(), d)); len(ents) != 0 {
					t.Errorf("%s holds %d entries after a refused pull", d, len(ents))
				}
			}
		})
	}
}

// TestImportTamperedBlob: an OCI layout whose blob does not hash to its
// name is refused by the store's own check (go-containerregistry does not
// verify a layout's blobs).
func TestImportTamperedBlob(t *testing.T) {
	img := twoLayers(t, runtime.GOARCH)
	dir := ociDir(t, img)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(dir, "blobs", "sha256", m.Layers[0].Digest.Hex)
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, image.Options{})
	if _, err := s.Import(ctx(t), dir, nil); err == nil || !strings.Contains(err.Error(), "hashes to") {
		t.Fatalf("Import of a tampered layout = %v, want its blob refused", err)
	}
}

// rawImage is an image of given bytes, right or wrong, for the cases a
// well-behaved library would not build.
type rawImage struct {
	manifest, config []byte
	mediaType        types.MediaType
	layers           map[string][]byte // by digest
}

func (i *rawImage) RawManifest() ([]byte, error)        { return i.manifest, nil }
func (i *rawImage) RawConfigFile() ([]byte, error)      { return i.config, nil }
func (i *rawImage) MediaType() (types.MediaType, error) { return i.mediaType, nil }
func (i *rawImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	b, ok := i.layers[h.String()]
	if !ok {
		return nil, errors.New("no such layer")
	}
	return &rawLayer{b: b, d: h}, nil
}

type rawLayer struct {
	b []byte
	d v1.Hash
}

func (l *rawLayer) Digest() (v1.Hash, error) { return l.d, nil }
func (l *rawLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.b)), nil
}
func (l *rawLayer) Size() (int64, error)                { return int64(len(l.b)), nil }
func (l *rawLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }

func sha(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// oneLayerImage is an image of one layer blob whose config names diffID
// and arch.
func oneLayerImage(t *testing.T, blob []byte, diffID v1.Hash, arch string) v1.Image {
	t.Helper()
	cfg, _ := json.Marshal(v1.ConfigFile{OS: "linux", Architecture: arch, RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}}})
	m, _ := json.Marshal(v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cfg)), Digest: sha(cfg)},
		Layers: []v1.Descriptor{{MediaType: types.OCILayer, Size: int64(len(blob)), Digest: sha(blob)}},
	})
	img, err := partial.CompressedToImage(&rawImage{manifest: m, config: cfg, mediaType: types.OCIManifestSchema1, layers: map[string][]byte{sha(blob).String(): blob}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	z := gzip.NewWriter(&out)
	if _, err := z.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// ociDir writes img as an OCI layout directory and returns it.
func ociDir(t *testing.T, imgs ...v1.Image) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestImportRefused: images whose content does not match what names it,
// or is over a limit, are refused, and nothing of them is kept.
func TestImportRefused(t *testing.T) {
	okTar := imagetest.Tar(t, imagetest.File{Name: "f", Body: []byte("x")})
	bomb := imagetest.Tar(t, imagetest.File{Name: "zeros", Body: make([]byte, 8<<20)})
	tests := []struct {
		name string
		img  func(t *testing.T) v1.Image
		want string
	}{
		{"diff id mismatch", func(t *testing.T) v1.Image {
			return oneLayerImage(t, gz(t, okTar), sha([]byte("something else")), runtime.GOARCH)
		}, "hashes to"},
		{"gzip bomb", func(t *testing.T) v1.Image {
			return oneLayerImage(t, gz(t, bomb), sha(bomb), runtime.GOARCH)
		}, "over the limit"},
		{"data after the tar", func(t *testing.T) v1.Image {
			b := append(slices.Clone(okTar), make([]byte, 2<<20)...)
			return oneLayerImage(t, gz(t, b), sha(b), runtime.GOARCH)
		}, "after the end of the tar"},
		{"another architecture", func(t *testing.T) v1.Image {
			return oneLayerImage(t, gz(t, okTar), sha(okTar), "s390x")
		}, "this machine runs"},
		{"escaping entry", func(t *testing.T) v1.Image {
			b := imagetest.Tar(t, imagetest.File{Name: "../../../../tmp/escaped", Body: []byte("x")})
			return oneLayerImage(t, gz(t, b), sha(b), runtime.GOARCH)
		}, ".. component"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, image.Options{Limits: image.Limits{Bytes: 4 << 20}})
			_, err := s.Import(ctx(t), ociDir(t, tt.img(t)), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Import = %v, want an error with %q", err, tt.want)
			}
			if imgs, _ := s.List(); len(imgs) != 0 {
				t.Errorf("List = %v", imgs)
			}
			if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "layers")); len(ents) != 0 {
				t.Errorf("layers holds %v", ents)
			}
		})
	}
}

// TestImportExport: a docker archive, an OCI layout and an OCI tar import
// to the same digest; each export imports back to it, named as it was.
func TestImportExport(t *testing.T) {
	img := twoLayers(t, runtime.GOARCH)
	want := digestOf(t, img)
	dir := t.TempDir()
	archive := imagetest.DockerArchive(t, dir, img, "localhost/app:2")
	s := openStore(t, image.Options{})
	got, err := s.Import(ctx(t), archive, []string{"extra:tag"})
	if err != nil {
		t.Fatalf("Import(docker archive) = %v", err)
	}
	// A docker archive holds uncompressed layers: its manifest is the one
	// go-containerregistry computes for them gzipped, the same digest.
	if len(got) != 1 || got[0].Digest != want {
		t.Fatalf("Import = %+v, want one image %s", got, want)
	}
	if w := []string{"index.docker.io/library/extra:tag", "localhost/app:2"}; !slices.Equal(got[0].Names, w) {
		t.Errorf("names = %v, want %v", got[0].Names, w)
	}
	for _, format := range []string{image.FormatDocker, image.FormatOCI} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := s.Export(ctx(t), []string{"localhost/app:2"}, format, &buf); err != nil {
				t.Fatalf("Export = %v", err)
			}
			p := filepath.Join(t.TempDir(), "out.tar")
			if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			s2 := openStore(t, image.Options{})
			back, err := s2.Import(ctx(t), p, nil)
			if err != nil {
				t.Fatalf("Import(export) = %v", err)
			}
			if len(back) != 1 || back[0].Digest != want || !slices.Equal(back[0].Names, []string{"localhost/app:2"}) {
				t.Errorf("Import(export) = %+v, want %s named localhost/app:2", back, want)
			}
		})
	}
	t.Run("oci dir", func(t *testing.T) {
		s2 := openStore(t, image.Options{})
		back, err := s2.Import(ctx(t), ociDir(t, img), []string{"from/dir:1"})
		if err != nil || len(back) != 1 || back[0].Digest != want {
			t.Fatalf("Import(OCI dir) = %+v, %v", back, err)
		}
	})
}

// TestPush: a pushed image keeps its digest, and a store that lacks it
// gets it by that digest through Root (how a node gets a run's image).
func TestPush(t *testing.T) {
	r := imagetest.NewRegistry(t)
	img := twoLayers(t, runtime.GOARCH)
	s := openStore(t, image.Options{Transport: r.Transport})
	if _, err := s.Import(ctx(t), ociDir(t, img), []string{"local/app:1"}); err != nil {
		t.Fatal(err)
	}
	creds := func(string) (image.Auth, error) { return image.Auth{Username: r.User, Password: r.Password}, nil }
	d, err := s.Push(ctx(t), "local/app:1", r.Host+"/pushed/app:v1", image.Auth{Username: r.User, Password: r.Password})
	if err != nil {
		t.Fatalf("Push = %v", err)
	}
	if d != digestOf(t, img) {
		t.Errorf("Push = %s, want %s", d, digestOf(t, img))
	}
	node := openStore(t, image.Options{Transport: r.Transport, Credentials: creds})
	root, err := node.Root(ctx(t), r.Host+"/pushed/app@"+d)
	if err != nil {
		t.Fatalf("Root on a node without the image = %v", err)
	}
	if root.Digest != d || len(root.Layers) != 2 {
		t.Errorf("Root = %+v", root)
	}
}

// TestRemoveGC: removing an image removes what only it used; a shared
// layer stays while another image uses it, a layer a sandbox holds stays
// until it lets go.
func TestRemoveGC(t *testing.T) {
	shared := imagetest.Layer(t, imagetest.File{Name: "shared", Body: []byte("s")})
	a := imagetest.Image(t, "", v1.Config{}, shared, imagetest.Layer(t, imagetest.File{Name: "a", Body: []byte("a")}))
	b := imagetest.Image(t, "", v1.Config{}, shared, imagetest.Layer(t, imagetest.File{Name: "b", Body: []byte("b")}))
	s := openStore(t, image.Options{})
	if _, err := s.Import(ctx(t), ociDir(t, a), []string{"a:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx(t), ociDir(t, b), []string{"b:1"}); err != nil {
		t.Fatal(err)
	}
	layers := func() []string {
		ents, _ := os.ReadDir(filepath.Join(s.Dir(), "layers"))
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	if n := len(layers()); n != 3 {
		t.Fatalf("%d layers, want 3 (one shared)", n)
	}
	rootB, err := s.Root(ctx(t), "b:1")
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox holds b's own layer.
	lock, err := os.Open(rootB.Layers[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remove("a:1"); err != nil {
		t.Fatal(err)
	}
	if n := len(layers()); n != 2 {
		t.Errorf("after removing a: %d layers, want 2", n)
	}
	if _, err := s.Remove("b:1"); err != nil {
		t.Fatal(err)
	}
	if got := layers(); len(got) != 1 || got[0] != filepath.Base(rootB.Layers[1]) {
		t.Errorf("after removing b: layers %v, want only the one held", got)
	}
	lock.Close()
	gs, err := s.GC()
	if err != nil {
		t.Fatal(err)
	}
	if gs.Layers != 1 || len(layers()) != 0 {
		t.Errorf("GC = %+v, layers %v: want the released layer removed", gs, layers())
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "blobs", "sha256")); len(ents) != 0 {
		t.Errorf("%d blobs left", len(ents))
	}
	if _, err := s.Inspect("a:1"); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("Inspect(a:1) = %v, want ErrNotFound", err)
	}
}

// TestRemoveName: removing one of two names keeps the image; removing by
// digest removes it and every name.
func TestRemoveName(t *testing.T) {
	s := openStore(t, image.Options{})
	imgs, err := s.Import(ctx(t), ociDir(t, twoLayers(t, runtime.GOARCH)), []string{"x:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx(t), ociDir(t, twoLayers(t, runtime.GOARCH)), []string{"x:2"}); err != nil {
		t.Fatal(err)
	}
	if removed, err := s.Remove("x:1"); err != nil || len(removed) != 0 {
		t.Fatalf("Remove(x:1) = %v, %v; want the image kept under x:2", removed, err)
	}
	got, err := s.Inspect(imgs[0].Digest[:7+12])
	if err != nil || !slices.Equal(got.Names, []string{"index.docker.io/library/x:2"}) {
		t.Fatalf("Inspect(digest prefix) = %+v, %v", got.Names, err)
	}
	if removed, err := s.Remove(imgs[0].Digest); err != nil || len(removed) != 1 {
		t.Fatalf("Remove(digest) = %v, %v", removed, err)
	}
	if all, _ := s.List(); len(all) != 0 {
		t.Errorf("List = %v", all)
	}
}

// TestApply: an image's config applies where the spec says nothing, and
// never over the sandbox's own variables.
func TestApply(t *testing.T) {
	root := image.Root{Layers: []string{"/l/0", "/l/1"}, Config: image.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "LANG=C", "HTTPS_PROXY=http://image-proxy", "A=image"},
		WorkingDir: "app/", User: "app:app", Cmd: []string{"serve"}, Entrypoint: []string{"/entry"},
	}}
	spec := sandbox.Spec{Env: []string{"A=mine", "B=mine"}}
	root.Apply(&spec)
	want := sandbox.Spec{Layers: []string{"/l/0", "/l/1"}, Env: []string{"PATH=/usr/bin:/bin", "LANG=C", "A=mine", "B=mine"}, Dir: "/app", User: "app"}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("Apply (-want +got):\n%s", diff)
	}
	spec = sandbox.Spec{Dir: "/workspace", User: "root"}
	root.Apply(&spec)
	if spec.Dir != "/workspace" || spec.User != "root" {
		t.Errorf("Apply over a spec's own dir and user = %q, %q", spec.Dir, spec.User)
	}
	if argv, err := root.Command(nil); err != nil || !slices.Equal(argv, []string{"/entry", "serve"}) {
		t.Errorf("Command(nil) = %v, %v", argv, err)
	}
	if argv, _ := root.Command([]string{"ls"}); !slices.Equal(argv, []string{"ls"}) {
		t.Errorf("Command(ls) = %v", argv)
	}
	if _, err := (image.Root{}).Command(nil); err == nil {
		t.Error("Command of an image without one succeeded")
	}
}

// TestFetch: a fetch stores and verifies the blobs but unpacks nothing;
// the first use (Root) unpacks each layer to the same tree a pull makes,
// and records what it unpacked. A layer the unpacker refuses is fetched
// (its blob matches its digest) and refused at its first use, naming why,
// with nothing of it under layers/ and nothing written outside the store.
func TestFetch(t *testing.T) {
	r := imagetest.NewRegistry(t)
	auth := image.Auth{Username: r.User, Password: r.Password}
	img := twoLayers(t, runtime.GOARCH)
	ref := r.Host + "/team/lazy:1"
	push(t, r, ref, img)

	pulled := openStore(t, image.Options{Transport: r.Transport})
	if _, err := pulled.Pull(ctx(t), ref, auth); err != nil {
		t.Fatal(err)
	}
	want, err := pulled.Root(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}

	s := openStore(t, image.Options{Transport: r.Transport})
	got, err := s.Fetch(ctx(t), ref, auth)
	if err != nil {
		t.Fatalf("Fetch(%s) = %v", ref, err)
	}
	if got.Digest != digestOf(t, img) {
		t.Errorf("Fetch digest = %s, want %s", got.Digest, digestOf(t, img))
	}
	if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "layers")); len(ents) != 0 {
		t.Fatalf("layers holds %d entries after a fetch, want none", len(ents))
	}
	root, err := s.Root(ctx(t), ref)
	if err != nil {
		t.Fatalf("Root after Fetch = %v", err)
	}
	if len(root.Layers) != len(want.Layers) {
		t.Fatalf("Root layers = %v, want %d", root.Layers, len(want.Layers))
	}
	for i := range root.Layers {
		if a, b := treeOf(t, root.Layers[i]), treeOf(t, want.Layers[i]); !slices.Equal(a, b) {
			t.Errorf("layer %d unpacked at first use:\n%v\nwant, as pulled:\n%v", i, a, b)
		}
	}
	inspected, err := s.Inspect(ref)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range inspected.Layers {
		if l.Unpacked.Entries == 0 {
			t.Errorf("layer %d: no unpack recorded after its first use", i)
		}
	}

	okTar := imagetest.Tar(t, imagetest.File{Name: "f", Body: []byte("x")})
	escaping := imagetest.Tar(t, imagetest.File{Name: "../../../../tmp/escaped-fetch", Body: []byte("x")})
	for _, tt := range []struct {
		name string
		img  v1.Image
		want string
	}{
		{"escaping entry", oneLayerImage(t, gz(t, escaping), sha(escaping), runtime.GOARCH), ".. component"},
		{"diff id mismatch", oneLayerImage(t, gz(t, okTar), sha([]byte("something else")), runtime.GOARCH), "hashes to"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ref := r.Host + "/hostile:" + strings.ReplaceAll(tt.name, " ", "-")
			push(t, r, ref, tt.img)
			s := openStore(t, image.Options{Transport: r.Transport})
			if _, err := s.Fetch(ctx(t), ref, auth); err != nil {
				t.Fatalf("Fetch = %v: a blob that matches its digest is fetched", err)
			}
			_, err := s.Root(ctx(t), ref)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "first use") {
				t.Fatalf("Root = %v, want an error at first use with %q", err, tt.want)
			}
			if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "layers")); len(ents) != 0 {
				t.Errorf("layers holds %v after a refused unpack", ents)
			}
			if _, err := os.Lstat("/tmp/escaped-fetch"); err == nil {
				t.Errorf("/tmp/escaped-fetch exists: the layer wrote outside the store")
			}
		})
	}
}

// treeOf lists dir's entries: path, mode and, for files, content.
func treeOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := rel + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(b)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
