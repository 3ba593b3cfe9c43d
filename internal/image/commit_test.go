package image_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
)

// TestCommit: a new layer (a file added, one of the base deleted by a
// whiteout) committed over a stored base makes an image of the base's
// layers and it, with the config given, stored as a pulled one is: its
// root shows the layer applied, and it exports and imports back to the
// same digest.
func TestCommit(t *testing.T) {
	s := openStore(t, image.Options{})
	if _, err := s.Import(ctx(t), ociDir(t, twoLayers(t, runtime.GOARCH)), []string{"local/base:1"}); err != nil {
		t.Fatal(err)
	}
	release, err := s.Pin()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	layer := imagetest.Tar(t,
		imagetest.File{Name: "opt/", Typeflag: tar.TypeDir},
		imagetest.File{Name: "opt/new", Body: []byte("built")},
		imagetest.File{Name: "etc/.wh.old"},
	)
	info, err := s.AddLayer(ctx(t), bytes.NewReader(layer))
	if err != nil {
		t.Fatalf("AddLayer = %v", err)
	}
	if !s.HasLayer(info) {
		t.Fatalf("HasLayer(%+v) = false after AddLayer", info)
	}
	again, err := s.AddLayer(ctx(t), bytes.NewReader(layer))
	if err != nil || again.DiffID != info.DiffID || again.Digest != info.Digest {
		t.Fatalf("AddLayer(the same tar) = %+v, %v; want %+v", again, err, info)
	}
	cfg := image.Config{
		Env: []string{"PATH=/bin", "A=1"}, WorkingDir: "/opt", User: "1000",
		Cmd: []string{"/bin/sh"}, Labels: map[string]string{"k": "v"},
	}
	img, err := s.Commit(ctx(t), "local/base:1", []image.NewLayer{{Layer: info, CreatedBy: "RUN make"}}, cfg, []string{"localhost/built:1"})
	if err != nil {
		t.Fatalf("Commit = %v", err)
	}
	if diff := cmp.Diff(cfg, img.Config); diff != "" {
		t.Errorf("committed config (-want +got):\n%s", diff)
	}
	if len(img.Layers) != 3 || img.Layers[2].DiffID != info.DiffID || img.Layers[2].Unpacked.Entries == 0 {
		t.Fatalf("committed layers = %+v, want the base's two and %s, with its unpack stats", img.Layers, info.DiffID)
	}
	if !slices.Equal(img.Names, []string{"localhost/built:1"}) {
		t.Errorf("names = %v, want localhost/built:1", img.Names)
	}
	root, err := s.Root(ctx(t), "localhost/built:1")
	if err != nil {
		t.Fatal(err)
	}
	top := root.Layers[2]
	if b, err := os.ReadFile(filepath.Join(top, "opt/new")); err != nil || string(b) != "built" {
		t.Errorf("opt/new in the new layer = %q, %v", b, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(top, "etc/old"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/old in the new layer: want an overlay whiteout (0/0 char device), got mode %o, %v", st.Mode, err)
	}
	var buf bytes.Buffer
	if err := s.Export(ctx(t), []string{"localhost/built:1"}, image.FormatOCI, &buf); err != nil {
		t.Fatalf("Export = %v", err)
	}
	p := filepath.Join(t.TempDir(), "out.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := openStore(t, image.Options{}).Import(ctx(t), p, nil)
	if err != nil || len(back) != 1 || back[0].Digest != img.Digest {
		t.Errorf("Import(Export(committed)) = %+v, %v; want %s", back, err, img.Digest)
	}

	t.Run("scratch", func(t *testing.T) {
		img, err := s.Commit(ctx(t), "", []image.NewLayer{{Layer: info}}, image.Config{Cmd: []string{"/x"}}, nil)
		if err != nil {
			t.Fatalf("Commit(scratch) = %v", err)
		}
		if img.MediaType != string(types.OCIManifestSchema1) || len(img.Layers) != 1 || img.Platform != "linux/"+runtime.GOARCH {
			t.Errorf("Commit(scratch) = %+v", img)
		}
	})
	t.Run("missing layer", func(t *testing.T) {
		gone := info
		gone.DiffID = "sha256:" + string(bytes.Repeat([]byte("0"), 64))
		if _, err := s.Commit(ctx(t), "local/base:1", []image.NewLayer{{Layer: gone}}, cfg, nil); err == nil {
			t.Error("Commit of a layer the store lacks succeeded")
		}
	})
}

// TestAddLayerUntrusted: a new layer is checked as a pulled one is (it
// holds what a build step's commands wrote): an entry out of the layer is
// refused, naming it, and nothing of the layer is kept.
func TestAddLayerUntrusted(t *testing.T) {
	s := openStore(t, image.Options{})
	release, err := s.Pin()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	bad := imagetest.Tar(t, imagetest.File{Name: "../escape", Body: []byte("x")})
	_, err = s.AddLayer(ctx(t), bytes.NewReader(bad))
	var ee *image.EntryError
	if !errors.As(err, &ee) {
		t.Fatalf("AddLayer(../escape) = %v, want an EntryError", err)
	}
	left, _ := os.ReadDir(filepath.Join(s.Dir(), "layers"))
	if len(left) != 0 {
		t.Errorf("layers after a refused layer: %v", left)
	}
}
