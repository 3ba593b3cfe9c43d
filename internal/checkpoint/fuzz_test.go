package checkpoint

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// FuzzManifest: the decoder takes any bytes without panicking, and what
// it takes it gives back, encoded again, as the same bytes (one manifest,
// one encoding). Seeds: testdata/fuzz/FuzzManifest.
func FuzzManifest(f *testing.F) {
	for _, m := range validManifests() {
		f.Add(m.encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		if again := m.encode(); !bytes.Equal(again, b) {
			t.Fatalf("decoded manifest encodes to other bytes:\n%q\n%q", b, again)
		}
	})
}

// fuzzParent is the tree the fuzzed deltas apply to.
func fuzzParent() *tree {
	t := newTree()
	id := chunk.TenantKey("fuzz").Hasher().Sum([]byte("parent"))
	for _, e := range []*Entry{
		{Kind: Dir, Name: "a", Mode: 0o755},
		{Kind: File, Name: "a/x", Size: 6, Slices: []Slice{{id, 0, 6}}},
		{Kind: Hardlink, Name: "a/y", Link: "a/x", Size: 6, Slices: []Slice{{id, 0, 6}}},
		{Kind: File, Name: "b", Size: 6, Slices: []Slice{{id, 0, 6}}},
		{Kind: Symlink, Name: "s", Link: "a"},
		{Kind: Dir, Name: "d"},
		{Kind: Dir, Name: "d/e"},
		{Kind: FIFO, Name: "d/e/p"},
	} {
		if err := t.apply(e); err != nil {
			panic(err)
		}
	}
	return t
}

// FuzzDeltaStream: the delta stream reader takes any bytes without
// panicking; and a stream it accepts makes a valid manifest, full (the
// tree) and delta (its entries, sorted), and the delta manifest applied
// to the parent gives the tree the stream gave, applied in its own order.
// Seeds: testdata/fuzz/FuzzDeltaStream.
func FuzzDeltaStream(f *testing.F) {
	f.Add(tarStream(f, dir("a"), opq("a"), reg("a/new", "4"), wh("b"), hard("c", "a/new")), false)
	f.Add(tarStream(f, reg("a", "1"), dir("d"), sym("d/s", "../.."), fifo("p")), true)
	f.Fuzz(func(t *testing.T, b []byte, full bool) {
		tr := newTree()
		if !full {
			tr = fuzzParent()
		}
		dr := newDeltaReader(bytes.NewReader(b), tr, full)
		if err := dr.run(); err != nil {
			return
		}
		// Stand-in chunks, a MiB each, for the content.
		var refs []*chunkRef
		for off := int64(0); off < dr.bytes; off += 1 << 20 {
			id := chunk.TenantKey("fuzz").Hasher().Sum(fmt.Append(nil, off))
			refs = append(refs, &chunkRef{start: off, length: uint32(min(1<<20, dr.bytes-off)), id: id})
		}
		fillSlices(dr.files, refs)
		for _, l := range dr.links {
			l.e.Slices = l.target.Slices
		}
		list, size := tr.normalize()
		checkCounts(t, tr, list, size)
		fm := &Manifest{Key: testKey, Full: true}
		for _, e := range list {
			fm.Entries = append(fm.Entries, *e)
		}
		if _, err := decodeManifest(fm.encode()); err != nil {
			t.Fatalf("the tree of an accepted stream makes a bad full manifest: %v", err)
		}
		if full {
			return
		}
		dm := &Manifest{Key: testKey, Parent: digest, Depth: 1}
		for _, e := range dr.entries {
			dm.Entries = append(dm.Entries, *e)
		}
		slices.SortFunc(dm.Entries, func(a, b Entry) int { return compareNames(a.Name, b.Name) })
		got, err := decodeManifest(dm.encode())
		if err != nil {
			t.Fatalf("an accepted stream makes a bad delta manifest: %v", err)
		}
		again := fuzzParent()
		for i := range got.Entries {
			if err := again.apply(&got.Entries[i]); err != nil {
				t.Fatalf("the delta manifest does not apply: %s: %v", got.Entries[i].Name, err)
			}
		}
		list2, size2 := again.normalize()
		checkCounts(t, again, list2, size2)
		if !reflect.DeepEqual(values(list2), values(list)) {
			t.Fatalf("the delta manifest applied gives another tree:\n%v\nwant\n%v", values(list2), values(list))
		}
	})
}

// checkCounts fails t unless what tr keeps count of (entries, content
// bytes, hard links) is what a walk of it finds: list and size, its
// normal form.
func checkCounts(t *testing.T, tr *tree, list []*Entry, size int64) {
	t.Helper()
	var files, links int64
	for e := range tr.walk() {
		switch e.Kind {
		case File:
			files += e.Size
		case Hardlink:
			links++
		}
	}
	if tr.n != int64(len(list)) || tr.fileBytes != files || tr.links != links {
		t.Fatalf("the tree counts %d entries, %d bytes of files, %d hard links; a walk finds %d, %d, %d", tr.n, tr.fileBytes, tr.links, len(list), files, links)
	}
	if got := tr.contentBytes(); got != size {
		t.Fatalf("contentBytes() = %d, the normal form holds %d", got, size)
	}
}

func values(es []*Entry) []Entry {
	out := make([]Entry, len(es))
	for i, e := range es {
		out[i] = *e
	}
	return out
}
