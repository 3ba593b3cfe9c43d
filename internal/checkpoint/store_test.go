package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
)

// streamOf writes a tar stream in a goroutine, for streams too large to
// build in memory; gen writes the entries.
func streamOf(t testing.TB, gen func(tw *tar.Writer) error) io.Reader {
	t.Helper()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := gen(tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// smallBody is the content of small file i: a few dozen bytes, unique.
func smallBody(i int) string { return fmt.Sprintf("file %d\n%s\n", i, strings.Repeat("x", i%50)) }

// TestManyFiles: 100,000 small files (in 1,000 directories) round trip.
func TestManyFiles(t *testing.T) {
	const dirs, per = 1000, 100
	gen := func(tw *tar.Writer) error {
		for d := range dirs {
			dn := fmt.Sprintf("d%04d", d)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dn + "/", Mode: 0o755}); err != nil {
				return err
			}
			for f := range per {
				body := smallBody(d*per + f)
				h := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%s/f%03d", dn, f), Mode: 0o644, Size: int64(len(body))}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if _, err := io.WriteString(tw, body); err != nil {
					return err
				}
			}
		}
		return nil
	}
	s := newTestStore(t)
	res, err := s.Write(t.Context(), "acme", "", true, streamOf(t, gen))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(dirs + dirs*per); res.Stats.TreeEntries != want || res.Stats.DeltaEntries != want {
		t.Errorf("Write() = %d entries in the tree, %d in the stream; want %d", res.Stats.TreeEntries, res.Stats.DeltaEntries, want)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(s.Restore(t.Context(), "acme", res.Digest, pw)) }()
	tr := tar.NewReader(pr)
	files := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		var d, f int
		if _, err := fmt.Sscanf(h.Name, "d%04d/f%03d", &d, &f); err != nil {
			t.Fatalf("restored %q: %v", h.Name, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if want := smallBody(d*per + f); string(b) != want {
			t.Fatalf("restored %q = %q, want %q", h.Name, b, want)
		}
		files++
	}
	if files != dirs*per {
		t.Errorf("restored %d files, want %d", files, dirs*per)
	}
}

// zeroReader yields zeros.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestBigSparseFile: a file of zeros (what a sparse file reads as) in a
// delta, 256 MiB (and 4 GiB when not -short): the writer holds a few
// chunks, not the file, and stores one chunk for all of it; restoring it
// streams it back.
func TestBigSparseFile(t *testing.T) {
	sizes := []int64{256 << 20}
	// 4 GiB shows the size's fields hold past 32 bits; the race detector
	// has nothing more to find in it than in 256 MiB, at ten times the cost.
	if !testing.Short() && !raceEnabled {
		sizes = append(sizes, 4<<30)
	}
	for _, size := range sizes {
		t.Run(fmt.Sprintf("%dMiB", size>>20), func(t *testing.T) {
			s := newTestStore(t)
			base := write(t, s, "acme", "", true, tarStream(t, reg("small", "x")))
			gen := func(tw *tar.Writer) error {
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "sparse", Mode: 0o600, Size: size}); err != nil {
					return err
				}
				_, err := io.CopyN(tw, zeroReader{}, size)
				return err
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			res, err := s.Write(t.Context(), "acme", base.Digest, false, streamOf(t, gen))
			if err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			// Allocated in all, not at once: a bound far below the file's
			// size shows it was never held.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 160<<20 {
				t.Errorf("Write() of a %d MiB file allocated %d MiB", size>>20, alloc>>20)
			}
			if res.Stats.NewChunks > 2 || res.Stats.DeltaBytes != size {
				t.Errorf("Write() = %d new chunks, %d bytes; want at most 2 chunks (all zeros), %d bytes", res.Stats.NewChunks, res.Stats.DeltaBytes, size)
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(s.Restore(t.Context(), "acme", res.Digest, pw)) }()
			tr := tar.NewReader(pr)
			for {
				h, err := tr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if h.Name != "sparse" {
					continue
				}
				n, nonzero := int64(0), false
				buf := make([]byte, 1<<20)
				for {
					k, err := tr.Read(buf)
					for _, c := range buf[:k] {
						nonzero = nonzero || c != 0
					}
					n += int64(k)
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				if n != size || nonzero {
					t.Errorf("restored %d bytes (some not zero: %v), want %d zeros", n, nonzero, size)
				}
			}
		})
	}
}

// treeFiles is a tree of files of n bytes in all, content from seed, as
// tar entries; file i is bigger than the one before, up to a MiB.
func treeFiles(n int, seed uint64) []tent {
	ents := []tent{dir("src")}
	for i := 0; n > 0; i++ {
		size := min(n, 4<<10+i*9973%(1<<20))
		b := make([]byte, size)
		fill(b, seed+uint64(i))
		if i%2 == 0 { // half compressible
			copy(b, bytes.Repeat([]byte("compressible "), size/13))
		}
		ents = append(ents, reg(fmt.Sprintf("src/f%04d", i), string(b)))
		n -= size
	}
	return ents
}

// TestDedup: the second checkpoint of an unchanged tree stores less than
// 1% of it; one file changed in a big tree costs a chunk or two; the same
// change as a delta stores that file only.
func TestDedup(t *testing.T) {
	const size = 24 << 20
	s := newTestStore(t)
	ents := treeFiles(size, 1)
	first := write(t, s, "acme", "", true, tarStream(t, ents...))
	if first.Stats.DeltaBytes != size || first.Stats.NewChunks == 0 {
		t.Fatalf("first Write() = %+v", first.Stats)
	}
	again := write(t, s, "acme", "", true, tarStream(t, ents...))
	if stored := again.Stats.NewBytes + again.ManifestBytes; stored*100 >= size {
		t.Errorf("second Write() of the same tree stored %d bytes, 1%% of it is %d", stored, size/100)
	}
	if again.Stats.SharedBytes != size {
		t.Errorf("second Write() shared %d bytes, want all %d", again.Stats.SharedBytes, size)
	}
	// One file in the middle changes (same size, other bytes).
	mid := len(ents) / 2
	changed := slices.Clone(ents)
	b := []byte(changed[mid].body)
	fill(b, 99)
	changed[mid].body = string(b)
	full := write(t, s, "acme", "", true, tarStream(t, changed...))
	if full.Stats.NewChunks > 3 || full.Stats.NewBytes > 3*chunk.MaxSize {
		t.Errorf("full Write() with one file changed stored %d chunks, %d bytes; want a chunk or two", full.Stats.NewChunks, full.Stats.NewBytes)
	}
	delta := write(t, s, "acme", first.Digest, false, tarStream(t, changed[mid]))
	if delta.Stats.NewBytes > int64(len(b))+1024 || delta.Stats.NewBytes == 0 {
		t.Errorf("delta Write() of one file of %d bytes stored %d", len(b), delta.Stats.NewBytes)
	}
	// Both say the same tree.
	if got, want := restoreTar(t, s, "acme", delta.Digest), restoreTar(t, s, "acme", full.Digest); !slices.Equal(got, want) {
		t.Error("the delta and the full checkpoint of one tree restore differently")
	}
}

// TestTenants: the same tree in two tenants is two sets of chunks (no
// tenant learns from what is stored new that another holds a file), and
// a tenant cannot resolve, restore, diff or build on another's checkpoint.
func TestTenants(t *testing.T) {
	s := newTestStore(t)
	ents := treeFiles(4<<20, 7)
	a := write(t, s, "alice", "", true, tarStream(t, ents...))
	b := write(t, s, "bob", "", true, tarStream(t, ents...))
	// Each tenant's chunker cuts at other places too (its polynomial is
	// the tenant's): nothing of alice's is bob's.
	if b.Stats.SharedChunks != 0 || b.Stats.SharedBytes != 0 || b.Stats.NewChunks == 0 {
		t.Errorf("bob's Write() of alice's tree: %d new, %d shared chunks; want all new, as alice's", b.Stats.NewChunks, b.Stats.SharedChunks)
	}
	ma, err := s.Manifest(t.Context(), "alice", a.Digest)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := s.Manifest(t.Context(), "bob", b.Digest)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range mb.ChunkIDs() {
		if slices.Contains(ma.ChunkIDs(), id) {
			t.Errorf("chunk %s is alice's and bob's", id)
		}
	}
	ctx := t.Context()
	checks := map[string]func() error{
		"Resolve":  func() error { _, err := s.Resolve(ctx, "bob", a.Digest); return err },
		"Restore":  func() error { return s.Restore(ctx, "bob", a.Digest, io.Discard) },
		"Manifest": func() error { _, err := s.Manifest(ctx, "bob", a.Digest); return err },
		"Changed":  func() error { _, err := s.Changed(ctx, "bob", a.Digest, b.Digest); return err },
		"Write": func() error {
			_, err := s.Write(ctx, "bob", a.Digest, false, bytes.NewReader(tarStream(t, reg("x", "1"))))
			return err
		},
	}
	for name, f := range checks {
		if err := f(); !errors.Is(err, ErrTenant) {
			t.Errorf("%s(bob, alice's checkpoint) = %v, want ErrTenant", name, err)
		}
	}
	// A chunk of alice's read as bob's fails its check even past the
	// manifest's.
	tree, err := s.Resolve(ctx, "alice", a.Digest)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tree.Entries() {
		if e.Kind == File && e.Size > 0 {
			r, err := s.Open(ctx, "bob", e)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, r)
			r.Close()
			if !errors.Is(err, chunk.ErrCorrupt) {
				t.Errorf("reading alice's file as bob = %v, want chunk.ErrCorrupt", err)
			}
			break
		}
	}
}

// TestCorrupt: a damaged or missing chunk, a damaged or missing manifest,
// a blob that is no manifest: every read fails with an error that says
// so, and never yields the bad bytes.
func TestCorrupt(t *testing.T) {
	ctx := context.Background()
	type fixture struct {
		s      *testStore
		base   Result
		delta  Result
		victim chunk.ID // a chunk of the delta
	}
	setup := func(t *testing.T) fixture {
		s := newTestStore(t)
		base := write(t, s, "acme", "", true, tarStream(t, treeFiles(2<<20, 3)...))
		delta := write(t, s, "acme", base.Digest, false, tarStream(t, reg("src/new", "new content")))
		m, err := s.Manifest(ctx, "acme", delta.Digest)
		if err != nil {
			t.Fatal(err)
		}
		return fixture{s, base, delta, m.ChunkIDs()[0]}
	}
	chunkFile := func(f fixture) string {
		h := f.victim.String()
		return filepath.Join(f.s.chunks.Path(), h[:2], h)
	}
	blobFile := func(f fixture, d string) string {
		return filepath.Join(f.s.blobs.Dir(), "sha256", d[7:9], d[7:])
	}
	overwrite := func(t *testing.T, path string, b []byte) {
		t.Helper()
		os.Chmod(path, 0o600)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, f fixture)
		want   error
	}{
		{"chunk flipped", func(t *testing.T, f fixture) {
			b, err := os.ReadFile(chunkFile(f))
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 1
			overwrite(t, chunkFile(f), b)
		}, chunk.ErrCorrupt},
		{"chunk swapped for another", func(t *testing.T, f fixture) {
			m, _ := f.s.Manifest(ctx, "acme", f.base.Digest)
			other := m.ChunkIDs()[0].String()
			b, err := os.ReadFile(filepath.Join(f.s.chunks.Path(), other[:2], other))
			if err != nil {
				t.Fatal(err)
			}
			overwrite(t, chunkFile(f), b)
		}, chunk.ErrCorrupt},
		{"chunk missing", func(t *testing.T, f fixture) { os.Remove(chunkFile(f)) }, chunk.ErrNotFound},
		{"manifest flipped", func(t *testing.T, f fixture) {
			p := blobFile(f, f.delta.Digest)
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 1
			overwrite(t, p, b)
		}, blob.ErrCorrupt},
		{"parent missing", func(t *testing.T, f fixture) { os.Remove(blobFile(f, f.base.Digest)) }, blob.ErrNotFound},
		{"parent not a manifest", func(t *testing.T, f fixture) {
			// Put under the parent's digest a blob of other bytes: the
			// blob store catches it first.
			overwrite(t, blobFile(f, f.base.Digest), []byte("not a manifest"))
		}, blob.ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t)
			c.damage(t, f)
			var out bytes.Buffer
			err := f.s.Restore(ctx, "acme", f.delta.Digest, &out)
			if !errors.Is(err, c.want) {
				t.Errorf("Restore() = %v, want %v", err, c.want)
			}
			if errors.Is(c.want, chunk.ErrCorrupt) && !strings.Contains(err.Error(), `"src/new"`) {
				t.Errorf("Restore() = %v; want it to name the file", err)
			}
		})
	}
	t.Run("blob that is no manifest", func(t *testing.T) {
		s := newTestStore(t)
		for _, b := range [][]byte{[]byte("plain text"), s.menc.EncodeAll([]byte("\x89ALCKPT\n\x02"), nil), s.menc.EncodeAll([]byte("no magic"), nil)} {
			d, _, err := s.blobs.Put(ctx, bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Resolve(ctx, "acme", d); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Resolve(%q) = %v, want ErrCorrupt", b, err)
			}
		}
	})
}

// TestCompaction: a chain past CompactDepth deltas, or whose deltas hold
// more than 1/CompactShare of its base's entries, is cut by a full
// checkpoint that refers to the chunks stored already; every checkpoint
// restores to its tree throughout.
func TestCompaction(t *testing.T) {
	t.Run("depth", func(t *testing.T) {
		s := newTestStore(t)
		var base []tent
		for i := range 200 {
			base = append(base, reg(fmt.Sprintf("f%03d", i), fmt.Sprint(i)))
		}
		res := write(t, s, "acme", "", true, tarStream(t, base...))
		tree := slices.Clone(base)
		for step := 1; step <= 2*CompactDepth+3; step++ {
			e := reg(fmt.Sprintf("f%03d", step), fmt.Sprintf("step %d", step))
			prev := res
			res = write(t, s, "acme", res.Digest, false, tarStream(t, e))
			tree[step] = e
			wantDepth := step % (CompactDepth + 1)
			if res.Depth != wantDepth || res.Compacted != (wantDepth == 0) || res.Full != res.Compacted {
				t.Fatalf("step %d: Write() = depth %d, compacted %v, full %v; want depth %d", step, res.Depth, res.Compacted, res.Full, wantDepth)
			}
			if res.Compacted && (res.Stats.NewChunks != prev.Stats.NewChunks || res.Parent != "") {
				t.Errorf("step %d: the compacted checkpoint stored %d chunks (the delta alone %d), parent %q", step, res.Stats.NewChunks, prev.Stats.NewChunks, res.Parent)
			}
			want := summary(readTar(t, bytes.NewReader(tarStream(t, tree...))))
			if got := summary(restoreTar(t, s, "acme", res.Digest)); !slices.Equal(got, want) {
				t.Fatalf("step %d: restored %q, want %q", step, got, want)
			}
		}
	})
	t.Run("depth grows with the tree", func(t *testing.T) {
		for _, c := range []struct{ base, depth int64 }{
			{0, CompactDepth},
			{200, CompactDepth},
			{17 * DepthEntries, 17},
			{19_000, MaxChain - 1},
			{MaxEntries, MaxChain - 1},
		} {
			if got := compactDepth(c.base); int64(got) != c.depth {
				t.Errorf("compactDepth(%d) = %d, want %d", c.base, got, c.depth)
			}
		}
		s := newTestStore(t)
		var base []tent
		n := 24 * DepthEntries // 24 deltas, then a compaction
		for i := range n {
			base = append(base, reg(fmt.Sprintf("f%05d", i), ""))
		}
		res := write(t, s, "acme", "", true, tarStream(t, base...))
		tree := slices.Clone(base)
		for step := 1; step <= 26; step++ {
			e := reg(fmt.Sprintf("f%05d", step), fmt.Sprintf("step %d", step))
			res = write(t, s, "acme", res.Digest, false, tarStream(t, e))
			tree[step] = e
			if wantDepth := step % 25; res.Depth != wantDepth || res.Compacted != (wantDepth == 0) {
				t.Fatalf("step %d of a %d-entry tree: Write() = depth %d, compacted %v; want depth %d", step, n, res.Depth, res.Compacted, wantDepth)
			}
			if step == 24 || step == 26 {
				want := summary(readTar(t, bytes.NewReader(tarStream(t, tree...))))
				if got := summary(restoreTar(t, s, "acme", res.Digest)); !slices.Equal(got, want) {
					t.Fatalf("step %d: the restored tree differs", step)
				}
			}
		}
	})
	t.Run("share", func(t *testing.T) {
		s := newTestStore(t)
		res := write(t, s, "acme", "", true, tarStream(t, reg("a", "1"), reg("b", "2"), reg("c", "3"), reg("d", "4"), reg("e", "5"), reg("f", "6"), reg("g", "7"), reg("h", "8")))
		var depths []int
		for i := range 4 {
			res = write(t, s, "acme", res.Digest, false, tarStream(t, reg("a", fmt.Sprint(i))))
			depths = append(depths, res.Depth)
		}
		// 8 entries: two deltas of one entry hold a quarter; the third
		// holds more.
		if want := []int{1, 2, 0, 1}; !slices.Equal(depths, want) {
			t.Errorf("depths %v, want %v", depths, want)
		}
	})
}

// TestResolveLimits: a chain past MaxChain, or a delta whose parent says a
// depth that does not fit, is refused.
func TestResolveLimits(t *testing.T) {
	s := newTestStore(t)
	ctx := t.Context()
	key := chunk.TenantKey("acme")
	full := &Manifest{Key: key.Fingerprint(), Full: true}
	d, _, err := s.putManifest(ctx, full)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= MaxChain; i++ {
		m := &Manifest{Key: key.Fingerprint(), Parent: d, Depth: i}
		if d, _, err = s.putManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
		_, err := s.Resolve(ctx, "acme", d)
		if i < MaxChain && err != nil {
			t.Fatalf("Resolve(a chain of %d) = %v", i+1, err)
		}
		if i == MaxChain && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Resolve(a chain of %d) = %v, want ErrCorrupt", i+1, err)
		}
	}
	bad := &Manifest{Key: key.Fingerprint(), Parent: d, Depth: 3}
	if d, _, err = s.putManifest(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(ctx, "acme", d); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Resolve(a delta of depth 3 on one of %d) = %v, want ErrCorrupt", MaxChain, err)
	}
	// A delta whose entries cannot apply to its parent's tree.
	orphan := &Manifest{Key: key.Fingerprint(), Parent: mustPut(t, s, full), Depth: 1, Entries: []Entry{{Kind: File, Name: "no/dir"}}}
	if _, err := s.Resolve(ctx, "acme", mustPut(t, s, orphan)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"no/dir"`) {
		t.Errorf("Resolve(an entry with no directory) = %v, want ErrCorrupt naming it", err)
	}
}

func mustPut(t *testing.T, s *testStore, m *Manifest) string {
	t.Helper()
	d, _, err := s.putManifest(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestChanged: what changed between two checkpoints, from manifests: new,
// removed, content, metadata; a file written again with its content is
// no change, even in other slices.
func TestChanged(t *testing.T) {
	s := newTestStore(t)
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB: in more than one chunk's slices
	v1 := write(t, s, "acme", "", true, tarStream(t,
		reg("a", "1"), reg("b", "2"), reg("big", big), reg("c", "same"), dir("d"), reg("d/x", "x"), sym("s", "t")))
	v2 := write(t, s, "acme", v1.Digest, false, tarStream(t,
		reg("a", "one"), tent{typ: tar.TypeReg, name: "b", body: "2", mode: 0o600}, reg("big", big), reg("c", "same"),
		wh("d/x"), reg("e", "new"), sym("s", "u")))
	got, err := s.Changed(t.Context(), "acme", v1.Digest, v2.Digest)
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, c := range got {
		desc = append(desc, fmt.Sprintf("%s from=%v to=%v content=%v", c.Name, c.From != nil, c.To != nil, c.Content))
	}
	want := []string{
		"a from=true to=true content=true",
		"b from=true to=true content=false",
		"d/x from=true to=false content=true",
		"e from=false to=true content=true",
		"s from=true to=true content=true",
	}
	if !slices.Equal(desc, want) {
		t.Errorf("Changed() =\n  %q\nwant\n  %q", desc, want)
	}
	all, err := s.Changed(t.Context(), "acme", "", v1.Digest)
	if err != nil || len(all) != 7 {
		t.Errorf("Changed(\"\", v1) = %d changes, %v; want the 7 entries", len(all), err)
	}
	// Open reads what changed.
	for _, c := range got {
		if c.Name == "a" {
			r, err := s.Open(t.Context(), "acme", c.To)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(r)
			r.Close()
			if err != nil || string(b) != "one" {
				t.Errorf("Open(a) = %q, %v", b, err)
			}
		}
	}
}

// TestOpen: a file across many chunks reads back whole.
func TestOpen(t *testing.T) {
	s := newTestStore(t)
	b := make([]byte, 5<<20+123)
	fill(b, 5)
	res := write(t, s, "acme", "", true, tarStream(t, reg("a", "x"), reg("big", string(b)), reg("z", "y")))
	tree, err := s.Resolve(t.Context(), "acme", res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	e := tree.Lookup("big")
	if e == nil || len(e.Slices) < 2 {
		t.Fatalf("Lookup(big) = %v, want a file of several slices", e)
	}
	r, err := s.Open(t.Context(), "acme", e)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	if got, want := h.Sum(nil), sha256.Sum256(b); !bytes.Equal(got, want[:]) {
		t.Error("Open(big) read other bytes")
	}
	if tree.Bytes() != int64(len(b))+2 || tree.Lookup("nope") != nil {
		t.Errorf("Bytes() = %d, Lookup(nope) = %v", tree.Bytes(), tree.Lookup("nope"))
	}
}

// TestTreeCache: a chain written by one Store (each delta on the tree the
// last Write left in its cache) and by a new Store for each Write (each
// delta on its parent read from storage) gives the same checkpoints, byte
// for byte; a failed Write leaves no tree behind to build on.
func TestTreeCache(t *testing.T) {
	steps := [][]tent{
		{dir("a"), reg("a/x", "1"), hard("a/y", "a/x"), reg("b", "2"), dir("d"), reg("d/z", "3")},
		{reg("a/x", "changed"), wh("b")},
		{dir("d"), opq("d"), reg("d/n", "4"), hard("h", "a/y")},
		{wh("a")},
		{reg("c", "5")},
		{reg("c", "6")},
	}
	cached := newTestStore(t)
	dir := t.TempDir()
	fresh := func() *testStore {
		bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cd, err := chunk.NewDir(filepath.Join(dir, "chunks"))
		if err != nil {
			t.Fatal(err)
		}
		return newTestStoreOn(t, bl, cd)
	}
	var pa, pb string
	for i, st := range steps {
		a := write(t, cached, "acme", pa, i == 0, tarStream(t, st...))
		b := write(t, fresh(), "acme", pb, i == 0, tarStream(t, st...))
		if a.Digest != b.Digest {
			t.Fatalf("step %d: %s from the cached tree, %s from storage", i, a.Digest, b.Digest)
		}
		pa, pb = a.Digest, b.Digest
	}
	// A Write that fails mid-stream takes the cached tree with it: the
	// next Write on the same parent reads it again, unchanged.
	bad := tarStream(t, reg("c", "7"), reg("../evil", "x"))
	if _, err := cached.Write(t.Context(), "acme", pa, false, bytes.NewReader(bad)); !errors.Is(err, ErrStream) {
		t.Fatalf("Write(bad stream) = %v", err)
	}
	a := write(t, cached, "acme", pa, false, tarStream(t, reg("e", "8")))
	b := write(t, fresh(), "acme", pb, false, tarStream(t, reg("e", "8")))
	if a.Digest != b.Digest {
		t.Errorf("after a failed Write: %s from the cache's store, %s from a fresh one", a.Digest, b.Digest)
	}
}

func TestTreeCacheBounds(t *testing.T) {
	var c treeCache
	mk := func(n int64) *tree { t := newTree(); t.n = n; return t }
	m := &Manifest{}
	for i := range treeCacheTrees + 3 {
		c.put("k", []string{fmt.Sprint(i)}, mk(1), m)
	}
	if len(c.trees) != treeCacheTrees || c.take("k", "0") != nil || c.take("k", fmt.Sprint(treeCacheTrees+2)) == nil {
		t.Errorf("after %d puts: %d trees kept, want the last %d", treeCacheTrees+3, len(c.trees), treeCacheTrees)
	}
	c.put("k", []string{"big"}, mk(treeCacheEntries-5), m)
	if c.entries > treeCacheEntries {
		t.Errorf("cache holds %d entries, the most is %d", c.entries, treeCacheEntries)
	}
	c.put("k", []string{"huge"}, mk(treeCacheEntries+1), m)
	if c.take("k", "huge") != nil {
		t.Error("a tree past the bound was kept")
	}
	if c.take("other", "big") != nil {
		t.Error("a tree was taken under another tenant's key")
	}
}

// cancelAfter reads r and cancels after n bytes.
type cancelAfter struct {
	r      io.Reader
	n      int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	if c.n -= int64(k); c.n <= 0 {
		c.cancel()
	}
	return k, err
}

// TestWriteCancelled: a Write whose context ends mid-stream stops, says
// why, records nothing, and leaves no goroutine behind.
func TestWriteCancelled(t *testing.T) {
	s := newTestStore(t)
	big := make([]byte, 12<<20)
	fill(big, 9)
	stream := tarStream(t, reg("a", "1"), reg("big", string(big)))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := s.Write(ctx, "acme", "", true, &cancelAfter{r: bytes.NewReader(stream), n: 3 << 20, cancel: cancel})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrStream) {
		t.Fatalf("Write(cancelled mid-stream) = %v, want context.Canceled (and not ErrStream: the stream was fine)", err)
	}
	if n := countBlobs(t, s); n != 0 {
		t.Errorf("a cancelled Write stored %d manifests", n)
	}
	if g := ours(); g != "" {
		t.Errorf("a goroutine of the Write outlives it:\n%s", g)
	}
}

// ours returns the stack of a goroutine running this package's code (but
// the test's own), or "".
func ours() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "internal/checkpoint.(*") && !strings.Contains(g, "checkpoint.TestWriteCancelled") {
			return g
		}
	}
	return ""
}

// TestConcurrent: writes, restores and diffs of several tenants and
// chains at once on one Store (its pools and cache shared) give what each
// alone gives.
func TestConcurrent(t *testing.T) {
	s := newTestStore(t)
	type chainResult struct {
		digest string
		want   []string
	}
	results := make([]chainResult, 6)
	errs := make(chan error, len(results))
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			tenant := fmt.Sprint("tenant", i%2)
			files := map[string]string{}
			var ents []tent
			for f := range 20 {
				name := fmt.Sprintf("f%02d", f)
				files[name] = fmt.Sprintf("chain %d file %d %s", i, f, strings.Repeat("x", f*1000))
				ents = append(ents, reg(name, files[name]))
			}
			res, err := s.Write(t.Context(), tenant, "", true, bytes.NewReader(tarStream(t, ents...)))
			for step := 0; err == nil && step < 8; step++ {
				name := fmt.Sprintf("f%02d", step*2)
				files[name] = fmt.Sprintf("chain %d step %d", i, step)
				res, err = s.Write(t.Context(), tenant, res.Digest, false, bytes.NewReader(tarStream(t, reg(name, files[name]))))
			}
			if err != nil {
				errs <- err
				return
			}
			var want []tent
			for _, n := range slices.Sorted(maps.Keys(files)) {
				want = append(want, reg(n, files[n]))
			}
			results[i] = chainResult{res.Digest, summary(readTar(t, bytes.NewReader(tarStream(t, want...))))}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, r := range results {
		if got := summary(restoreTar(t, s, fmt.Sprint("tenant", i%2), r.digest)); !slices.Equal(got, r.want) {
			t.Errorf("chain %d restored %q, want %q", i, got, r.want)
		}
	}
}
