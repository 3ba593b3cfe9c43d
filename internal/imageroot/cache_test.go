package imageroot

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// writeIndex writes index as dir's images.json and, with roots, its roots
// file.
func writeIndex(t *testing.T, dir, index string, roots bool) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "images.json"), []byte(index), 0o600); err != nil {
		t.Fatal(err)
	}
	if roots {
		if err := WriteRoots(dir, []byte(index)); err != nil {
			t.Fatal(err)
		}
	}
}

const rootsIndex = `{
 "images": {
  "sha256:aa": {"digest": "sha256:aa", "index": "sha256:ii", "repos": ["ghcr.io/o/a", "r\"q"],
   "config": {"env": ["A=1", "NL=x\ny"], "working_dir": "/w", "user": "1:2", "entrypoint": ["/bin/sh", "-c"],
    "cmd": ["echo \"hi\""], "labels": {"k": "v", "e": ""}, "created": "2026-12-08T00:01:02.123456789+01:00"},
   "layers": [{"diff_id": "sha256:l1", "digest": "sha256:c1", "size": 3}, {"diff_id": "sha256:l2"}],
   "size": 9, "added": "2026-12-08T00:00:00Z", "source": "import x"},
  "sha256:bb": {"digest": "sha256:bb", "config": {}, "layers": []}
 },
 "names": {"index.docker.io/library/a:1": "sha256:aa", "x:2": "sha256:bb"}
}`

// TestRootsRoundTrip: the roots file gives Lookup what images.json gives
// it, in each field Lookup reads, and readRoots reads it.
func TestRootsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	writeIndex(t, dir, rootsIndex, true)
	got, ok := readRoots(dir)
	if !ok {
		t.Fatal("readRoots declined the roots file WriteRoots wrote")
	}
	want, err := ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	// What Lookup reads of an image: the rest is left out of the roots.
	for _, img := range want.Images {
		img.MediaType, img.Platform, img.ConfigRef, img.Size, img.Added, img.Source = "", "", "", 0, time.Time{}, ""
		for i, l := range img.Layers {
			img.Layers[i] = LayerInfo{DiffID: l.DiffID}
		}
	}
	// An image of no layers has none either way (Lookup ranges over them).
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("the roots file's index differs from images.json's (-json +roots):\n%s", d)
	}
}

// TestRootsStale: a roots file made from another images.json (one written
// since without it), damaged, or of an index with a null image, is not
// read: Lookup reads images.json.
func TestRootsStale(t *testing.T) {
	dir := t.TempDir()
	writeIndex(t, dir, rootsIndex, true)
	other := `{"images": {}, "names": {}}`
	writeIndex(t, dir, other, false)
	if _, ok := readRoots(dir); ok {
		t.Error("readRoots read a roots file made from another images.json")
	}
	writeIndex(t, dir, rootsIndex, true)
	p := filepath.Join(dir, RootsFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{b[:len(b)-4], append(b[:len(b)-4:len(b)-4], "bogus \"x\"\nend\n"...), b[1:]} {
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, ok := readRoots(dir); ok {
			t.Errorf("readRoots read a damaged roots file:\n%s", bad)
		}
	}
	writeIndex(t, dir, rootsIndex, true)
	writeIndex(t, dir, `{"images": {"sha256:aa": null}}`, true)
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("an index with a null image left a roots file: %v", err)
	}
}
