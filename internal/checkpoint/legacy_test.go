package checkpoint

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// legacyDir holds a store written before chunk IDs were BLAKE3 (at commit
// 59c3a63, chunks named by HMAC-SHA256): a full checkpoint of
// legacyTree(0) and a delta on it that rewrites src/b.go (legacyStep),
// their digests in its file "digests". TestMakeLegacyStore made it.
const legacyDir = "testdata/legacy-hmac"

// legacyTree is the fixture's full checkpoint: a directory, text files
// (about 40 KiB: one chunk), a hard link, a symlink and an empty file.
func legacyTree() []tent {
	ents := []tent{dir("src")}
	for i := range 8 {
		ents = append(ents, reg(fmt.Sprintf("src/%c.go", 'a'+i), strings.Repeat(fmt.Sprintf("// file %d: package main\n", i), 200)))
	}
	mt := time.Unix(1_700_000_000, 0)
	for i := range ents {
		ents[i].mtime = mt
	}
	return append(ents,
		tent{typ: tar.TypeSymlink, name: "src/link", link: "a.go", mode: 0o777, mtime: mt},
		tent{typ: tar.TypeLink, name: "src/z.go", link: "src/a.go", mtime: mt},
		tent{typ: tar.TypeReg, name: "zero", mode: 0o600, mtime: mt},
	)
}

// legacyStep is the fixture's delta: src/b.go rewritten.
func legacyStep() tent {
	e := reg("src/b.go", "package main // step one\n")
	e.mtime = time.Unix(1_700_000_100, 0)
	return e
}

// TestMakeLegacyStore writes the fixture, when CKPT_MAKE_LEGACY names a
// directory to write it in; run it at a commit before BLAKE3 IDs.
func TestMakeLegacyStore(t *testing.T) {
	out := os.Getenv("CKPT_MAKE_LEGACY")
	if out == "" {
		t.Skip("CKPT_MAKE_LEGACY is not set: the fixture in testdata is kept as it is")
	}
	s := openTestStore(t, []string{"CKPT_CHILD_BLOBS=" + filepath.Join(out, "blobs"), "CKPT_CHILD_CHUNKS=" + filepath.Join(out, "chunks")})
	full := write(t, s, "acme", "", true, tarStream(t, legacyTree()...))
	delta := write(t, s, "acme", full.Digest, false, tarStream(t, legacyStep()))
	if err := os.WriteFile(filepath.Join(out, "digests"), []byte(full.Digest+"\n"+delta.Digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyLegacy copies the fixture store into a directory of t's and opens
// it; it returns the store and the fixture's digests (full, delta).
func copyLegacy(t *testing.T) (*testStore, string, string) {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(legacyDir)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dst, "digests"))
	if err != nil {
		t.Fatal(err)
	}
	d := strings.Fields(string(b))
	if len(d) != 2 {
		t.Fatalf("digests: %q", b)
	}
	s := openTestStore(t, []string{"CKPT_CHILD_BLOBS=" + filepath.Join(dst, "blobs"), "CKPT_CHILD_CHUNKS=" + filepath.Join(dst, "chunks")})
	return s, d[0], d[1]
}

// TestLegacyChunks: a store written before chunk IDs were BLAKE3 is read
// as it was (its chunks checked under HMAC-SHA256); a checkpoint written
// on it now names its new chunks by BLAKE3, and the chain that mixes both
// restores, diffs and compacts; a damaged legacy chunk is still an error,
// never content.
func TestLegacyChunks(t *testing.T) {
	ctx := context.Background()
	// The tree a fresh store makes of the same streams: what the fixture
	// must restore to.
	want := func(t *testing.T, steps ...[]tent) []rent {
		fresh := newTestStore(t)
		r := write(t, fresh, "acme", "", true, tarStream(t, steps[0]...))
		for _, st := range steps[1:] {
			r = write(t, fresh, "acme", r.Digest, false, tarStream(t, st...))
		}
		return restoreTar(t, fresh, "acme", r.Digest)
	}
	t.Run("old chain", func(t *testing.T) {
		s, full, delta := copyLegacy(t)
		for _, c := range []struct {
			digest string
			steps  [][]tent
		}{
			{full, [][]tent{legacyTree()}},
			{delta, [][]tent{legacyTree(), {legacyStep()}}},
		} {
			if got, w := restoreTar(t, s, "acme", c.digest), want(t, c.steps...); !slices.Equal(got, w) {
				t.Errorf("restore %s:\n got %v\nwant %v", c.digest, got, w)
			}
		}
		// Its chunk is HMAC-named: not its content's BLAKE3, which a
		// fresh store names it by.
		m, err := s.Manifest(ctx, "acme", full)
		if err != nil {
			t.Fatal(err)
		}
		var content strings.Builder
		for _, e := range legacyTree() {
			content.WriteString(e.body)
		}
		if ids, id := m.ChunkIDs(), chunk.TenantKey("acme").Hasher().Sum([]byte(content.String())); len(ids) != 1 || ids[0] == id {
			t.Fatalf("the fixture's chunks: %v, want one, not %s", ids, id)
		}
		fresh := newTestStore(t)
		r := write(t, fresh, "acme", "", true, tarStream(t, legacyTree()...))
		fm, err := fresh.Manifest(ctx, "acme", r.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if ids, id := fm.ChunkIDs(), chunk.TenantKey("acme").Hasher().Sum([]byte(content.String())); len(ids) != 1 || ids[0] != id {
			t.Fatalf("a fresh store's chunks: %v, want [%s]", ids, id)
		}
	})
	t.Run("new on old", func(t *testing.T) {
		s, _, delta := copyLegacy(t)
		body := "package main // written after the change of ID\n"
		next := []tent{reg("src/a.go", body), reg("src/new.go", "new\n")}
		r := write(t, s, "acme", delta, false, tarStream(t, next...))
		if r.Stats.NewChunks != 1 {
			t.Errorf("new chunks %d, want 1", r.Stats.NewChunks)
		}
		// The new chunk (the two files' content, cut as one) is named by
		// its BLAKE3.
		newID := chunk.TenantKey("acme").Hasher().Sum([]byte(body + "new\n"))
		if ok, err := s.chunks.Has(ctx, newID); err != nil || !ok {
			t.Errorf("Has(BLAKE3 of the new content) = %v, %v; want true", ok, err)
		}
		w := want(t, legacyTree(), []tent{legacyStep()}, next)
		if got := restoreTar(t, s, "acme", r.Digest); !slices.Equal(got, w) {
			t.Errorf("restore of the mixed chain:\n got %v\nwant %v", got, w)
		}
		ch, err := s.Changed(ctx, "acme", delta, r.Digest)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ch {
			names = append(names, e.Name)
		}
		// src/z.go is a hard link to src/a.go in the old tree, which the
		// new one breaks (a new file's content).
		if !slices.Contains(names, "src/a.go") || !slices.Contains(names, "src/new.go") {
			t.Errorf("Changed = %q, want src/a.go and src/new.go among them", names)
		}
		// A full checkpoint of the mixed tree (a new run's start) stores
		// the legacy content again, under BLAKE3 names: the change's
		// one-time cost to deduplication.
		var tr strings.Builder
		if err := s.Restore(ctx, "acme", r.Digest, &tr); err != nil {
			t.Fatal(err)
		}
		f := write(t, s, "acme", "", true, []byte(tr.String()))
		if f.Stats.NewChunks == 0 {
			t.Errorf("the full checkpoint stored no chunk")
		}
		if got := restoreTar(t, s, "acme", f.Digest); !slices.Equal(got, w) {
			t.Errorf("restore of the full checkpoint of the mixed tree:\n got %v\nwant %v", got, w)
		}
	})
	t.Run("legacy chunk swapped", func(t *testing.T) {
		// The full checkpoint's chunk holds the delta's (a valid frame of
		// another chunk of the tenant's): only the hash check can tell.
		s, full, delta := copyLegacy(t)
		path := func(digest string) string {
			m, err := s.Manifest(ctx, "acme", digest)
			if err != nil {
				t.Fatal(err)
			}
			h := m.ChunkIDs()[0].String()
			return filepath.Join(s.chunks.Path(), h[:2], h)
		}
		b, err := os.ReadFile(path(delta))
		if err != nil {
			t.Fatal(err)
		}
		victim := path(full)
		os.Chmod(victim, 0o600)
		if err := os.WriteFile(victim, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		err = s.Restore(ctx, "acme", delta, &out)
		if !errors.Is(err, chunk.ErrCorrupt) || !strings.Contains(err.Error(), "content hashes to") {
			t.Fatalf("Restore with a swapped legacy chunk = %v, want the hash check's error (chunk.ErrCorrupt)", err)
		}
	})
}
