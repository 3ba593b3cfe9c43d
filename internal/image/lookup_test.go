package image_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/imageroot"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// The small front end's lookup (imageroot.Lookup) either declines or gives
// what the store gives: the same image, layers and spec (Root, Apply,
// Command). These tests hold the two together on stores written directly
// (images.json and the layer directories), so no reference ever reaches a
// registry: the store is asked only what the lookup accepted, and a tag
// the store lacks is never pulled.

const (
	hexA = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000001"
	hexB = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000002"
	hexC = "cccccccccccc0000000000000000000000000000000000000000000000000003"
	hexI = "1111111111110000000000000000000000000000000000000000000000000009"
	// Layers whose hex starts with 0 are left packed (no directory).
	layer1 = "1000000000000000000000000000000000000000000000000000000000000001"
	layer2 = "2000000000000000000000000000000000000000000000000000000000000002"
	layerP = "0000000000000000000000000000000000000000000000000000000000000003"
)

// testIndex is a store's images.json: A (two layers, a config of each kind,
// two names, an index), B (a digest sharing A's first 12 digits, a packed
// layer), C (a name only on a registry with a port, no repos).
var testIndex = `{
 "images": {
  "sha256:` + hexA + `": {"digest": "sha256:` + hexA + `", "index": "sha256:` + hexI + `",
   "config": {"env": ["PATH=/usr/bin", "HTTP_PROXY=x", "IMG=1"], "working_dir": "srv/app", "user": "1000:1000", "entrypoint": ["/bin/sh"], "cmd": ["-c", "echo hi"]},
   "layers": [{"diff_id": "sha256:` + layer1 + `"}, {"diff_id": "sha256:` + layer2 + `"}]},
  "sha256:` + hexB + `": {"digest": "sha256:` + hexB + `", "repos": ["ghcr.io/o/b"],
   "config": {}, "layers": [{"diff_id": "sha256:` + layer1 + `"}, {"diff_id": "sha256:` + layerP + `", "digest": "sha256:` + layerP + `"}]},
  "sha256:` + hexC + `": {"digest": "sha256:` + hexC + `",
   "config": {"cmd": ["/bin/true"]}, "layers": [{"diff_id": "sha256:` + layer2 + `"}]}
 },
 "names": {
  "index.docker.io/library/busybox:latest": "sha256:` + hexA + `",
  "index.docker.io/me/tool:1.2": "sha256:` + hexA + `",
  "ghcr.io/o/b:v1": "sha256:` + hexB + `",
  "localhost:5000/c:dev": "sha256:` + hexC + `",
  "index.docker.io/library/gone:latest": "sha256:` + hexC + `0"
 }
}`

// writeStore writes a store of indexJSON in a new directory: images.json,
// its roots file (imageroot.WriteRoots) and, for each layer of a plain digest not starting with 0, its unpacked
// directory.
func writeStore(t testing.TB, indexJSON []byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images")
	s, err := image.Open(dir, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir = s.Dir()
	if err := os.WriteFile(filepath.Join(dir, "images.json"), indexJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	// As the store's writes leave it: Lookup reads the roots file.
	if err := imageroot.WriteRoots(dir, indexJSON); err != nil {
		t.Fatal(err)
	}
	var ix struct {
		Images map[string]*struct {
			Layers []struct {
				DiffID string `json:"diff_id"`
			} `json:"layers"`
		} `json:"images"`
	}
	_ = json.Unmarshal(indexJSON, &ix)
	for _, img := range ix.Images {
		if img == nil {
			continue
		}
		for _, l := range img.Layers {
			hex, ok := strings.CutPrefix(l.DiffID, "sha256:")
			if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" || hex[0] == '0' {
				continue
			}
			if err := os.MkdirAll(filepath.Join(dir, "layers", hex), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// baseSpec is a spec of flags that meet the image's config.
func baseSpec() sandbox.Spec {
	return sandbox.Spec{Env: []string{"IMG=flag", "OWN=1"}}
}

// sameAsStore looks ref up in the store in dir both ways; it fails t when
// the lookup accepts and the store gives anything else, and returns
// whether the lookup accepted.
func sameAsStore(t testing.TB, dir, ref string) bool {
	t.Helper()
	got, ok := imageroot.Lookup(dir, ref)
	if !ok {
		return false
	}
	s, err := image.Open(dir, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Root(t.Context(), ref)
	if err != nil {
		t.Fatalf("Lookup(%q) = %+v, but the store says %v", ref, got, err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Lookup(%q) differs from the store's Root (-store +lookup):\n%s", ref, d)
	}
	gs, ws := baseSpec(), baseSpec()
	got.Apply(&gs)
	want.Apply(&ws)
	if d := cmp.Diff(ws, gs); d != "" {
		t.Fatalf("Lookup(%q).Apply differs (-store +lookup):\n%s", ref, d)
	}
	ga, gerr := got.Command(nil)
	wa, werr := want.Command(nil)
	if !cmp.Equal(ga, wa) || (gerr == nil) != (werr == nil) {
		t.Fatalf("Lookup(%q).Command = %q, %v; the store's %q, %v", ref, ga, gerr, wa, werr)
	}
	return true
}

func TestLookupSameAsStore(t *testing.T) {
	dir := writeStore(t, []byte(testIndex))
	tests := []struct {
		ref    string
		accept bool
	}{
		{"busybox", true},
		{"busybox:latest", true},
		{"docker.io/busybox", true},
		{"docker.io/library/busybox:latest", true},
		{"index.docker.io/library/busybox", true},
		{"me/tool:1.2", true},
		{"docker.io/me/tool:1.2", true},
		{"localhost:5000/c:dev", true},
		{"sha256:" + hexC, true},
		{"cccccccccccc", true},
		{"sha256:" + hexA, true},
		{"sha256:" + hexI, true},          // A's index
		{"sha256:aaaaaaaaaaaa000", false}, // A and B
		{"aaaaaaaaaaaa", false},           // A and B
		{"ghcr.io/o/b:v1", false},         // B has a packed layer
		{"sha256:" + hexB, false},         // likewise
		{"gone", false},                   // a name of no image
		{"nosuch", false},                 // no such name
		{"busybox@sha256:" + hexA, false}, // by name and digest: the store's registry client reads it
		{"Busybox", false},                // not a reference
		{"busybox:", false},               // likewise
		{"", false},                       //
		{"cccccc", false},                 // too short a prefix, and no such name
		{"https://index.docker.io/busybox", false},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			if got := sameAsStore(t, dir, tt.ref); got != tt.accept {
				t.Errorf("Lookup(%q) accepted = %v, want %v", tt.ref, got, tt.accept)
			}
		})
	}

	// What the lookup gives, spelled out: the image's env (not the
	// sandbox's own variables) under the flags', its working directory,
	// its user without the group, its entrypoint and cmd.
	root, ok := imageroot.Lookup(dir, "busybox")
	if !ok {
		t.Fatal("Lookup(busybox) declined")
	}
	spec := baseSpec()
	root.Apply(&spec)
	want := sandbox.Spec{
		Env:    []string{"PATH=/usr/bin", "IMG=flag", "OWN=1"},
		Dir:    "/srv/app",
		User:   "1000",
		Layers: []string{filepath.Join(dir, "layers", layer1), filepath.Join(dir, "layers", layer2)},
	}
	if d := cmp.Diff(want, spec); d != "" {
		t.Errorf("busybox's spec (-want +got):\n%s", d)
	}
	if argv, err := root.Command(nil); err != nil || !cmp.Equal(argv, []string{"/bin/sh", "-c", "echo hi"}) {
		t.Errorf("busybox's command = %q, %v", argv, err)
	}
	if root.Ref != "index.docker.io/library/busybox@sha256:"+hexA {
		t.Errorf("busybox's ref = %q", root.Ref)
	}
}

// A store Open would change (its mode), or that is not there, is left to
// the store.
func TestLookupDeclinesStore(t *testing.T) {
	dir := writeStore(t, []byte(testIndex))
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := imageroot.Lookup(dir, "busybox"); ok {
		t.Error("Lookup accepted a store of mode 0755, which Open makes 0700")
	}
	if _, ok := imageroot.Lookup(filepath.Join(t.TempDir(), "none"), "busybox"); ok {
		t.Error("Lookup accepted a store that is not there")
	}
	bad := writeStore(t, []byte(`{"images": {"sha256:`+hexA+`": null}, "names": {"busybox:latest": "x"}}`))
	if _, ok := imageroot.Lookup(bad, "sha256:"+hexA); ok {
		t.Error("Lookup accepted an index with a null image")
	}
	bad = writeStore(t, []byte(`{"images": {"sha256:`+hexC+`": {"digest": "sha256:`+hexC+`", "added": "yesterday", "layers": []}}}`))
	if _, ok := imageroot.Lookup(bad, "sha256:"+hexC); ok {
		t.Error("Lookup accepted an index the store cannot read")
	}
}

// FuzzLookup: for any index and reference, the lookup declines or agrees
// with the store.
func FuzzLookup(f *testing.F) {
	for _, ref := range []string{"busybox", "me/tool:1.2", "localhost:5000/c:dev", "cccccccccccc", "sha256:" + hexI, "ghcr.io/o/b:v1"} {
		f.Add([]byte(testIndex), ref)
	}
	f.Fuzz(func(t *testing.T, index []byte, ref string) {
		sameAsStore(t, writeStore(t, index), ref)
	})
}

// FuzzCanonicalTag: a reference CanonicalTag reads is a tag
// go-containerregistry reads the same.
func FuzzCanonicalTag(f *testing.F) {
	for _, ref := range []string{"busybox", "a/b:c", "docker.io/x", "localhost/x", "localhost:5000/x:y", "ghcr.io/o/r/s:1.0", "x:5000", "a.b:1/c"} {
		f.Add(ref)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		got, ok := imageroot.CanonicalTag(ref)
		if !ok {
			return
		}
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatalf("CanonicalTag(%q) = %q, but go-containerregistry refuses it: %v", ref, got, err)
		}
		if _, isTag := r.(name.Tag); !isTag || r.Name() != got {
			t.Fatalf("CanonicalTag(%q) = %q, go-containerregistry reads %T %q", ref, got, r, r.Name())
		}
	})
}

// TestLookupFollowsStore: the front end's lookup, which reads the roots
// file the store writes with its index, follows every change of the
// store: an image imported again under the same name, and removed.
func TestLookupFollowsStore(t *testing.T) {
	s := openStore(t, image.Options{})
	one := imagetest.Image(t, "", v1.Config{Cmd: []string{"/one"}}, imagetest.Layer(t, imagetest.File{Name: "one", Body: []byte("1")}))
	two := imagetest.Image(t, "", v1.Config{Cmd: []string{"/two"}}, imagetest.Layer(t, imagetest.File{Name: "two", Body: []byte("2")}))
	check := func(want []string) {
		t.Helper()
		if _, err := os.Stat(filepath.Join(s.Dir(), imageroot.RootsFile)); err != nil {
			t.Fatalf("the store wrote no roots file: %v", err)
		}
		root, ok := imageroot.Lookup(s.Dir(), "x:1")
		if want == nil {
			if ok {
				t.Fatalf("Lookup(x:1) = %+v after the image was removed", root)
			}
			return
		}
		if !ok || !cmp.Equal(root.Config.Cmd, want) {
			t.Fatalf("Lookup(x:1) = %+v, %v; want the image of cmd %q", root, ok, want)
		}
		sameAsStore(t, s.Dir(), "x:1")
	}
	if _, err := s.Import(ctx(t), ociDir(t, one), []string{"x:1"}); err != nil {
		t.Fatal(err)
	}
	check([]string{"/one"})
	if _, err := s.Import(ctx(t), ociDir(t, two), []string{"x:1"}); err != nil {
		t.Fatal(err)
	}
	check([]string{"/two"})
	if _, err := s.Remove("x:1"); err != nil {
		t.Fatal(err)
	}
	check(nil)
}
