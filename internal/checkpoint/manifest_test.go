package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

const testKey = "0123456789abcdef"

var (
	chunkA = chunk.TenantKey("t").Hasher().Sum([]byte("a"))
	chunkB = chunk.TenantKey("t").Hasher().Sum([]byte("b"))
	digest = "sha256:" + strings.Repeat("ab", 32)
)

// validManifests are manifests the decoder must take, and give back as
// they were.
func validManifests() map[string]*Manifest {
	return map[string]*Manifest{
		"empty full": {Key: testKey, Full: true},
		"full, every kind": {
			Key: testKey, Full: true, BaseEntries: 7,
			Stats: Stats{TreeEntries: 7, TreeBytes: 30, DeltaEntries: 7, DeltaBytes: 30, NewChunks: 2, NewBytes: 25, SharedChunks: 1, SharedBytes: 10},
			Entries: []Entry{
				{Kind: File, Name: "a", Mode: 0o644, UID: 1000, GID: 1000, MTime: 1_700_000_000_123_456_789, Size: 20, Slices: []Slice{{chunkA, 0, 10}, {chunkB, 5, 10}}},
				{Kind: Dir, Name: "d", Mode: 0o7755, MTime: -1},
				{Kind: FIFO, Name: "d/fifo", Mode: 0o600, MTime: math.MinInt64},
				{Kind: Hardlink, Name: "d/link", Link: "a", Mode: 0o644, MTime: math.MaxInt64, Size: 20, Slices: []Slice{{chunkA, 0, 10}, {chunkB, 5, 10}}},
				{Kind: Symlink, Name: "d/sym", Link: "/etc/passwd\n\xff", UID: math.MaxUint32, GID: math.MaxUint32},
				{Kind: File, Name: "empty"},
				{Kind: File, Name: "new\nline\xff", Size: 10, Slices: []Slice{{chunkA, 10, 10}}},
			},
		},
		"delta": {
			Key: testKey, Parent: digest, Depth: 3, BaseEntries: 100, ChainEntries: 9,
			Entries: []Entry{
				{Kind: Whiteout, Name: "gone"},
				{Kind: OpaqueDir, Name: "o", Mode: 0o755},
				{Kind: File, Name: "o/x", Size: chunk.MaxSize, Slices: []Slice{{chunkA, 0, chunk.MaxSize}}},
				{Kind: Hardlink, Name: "z", Link: "elsewhere", Size: 3, Slices: []Slice{{chunkB, 1, 3}}},
			},
		},
	}
}

func TestManifestRoundTrip(t *testing.T) {
	for name, m := range validManifests() {
		b := m.encode()
		got, err := decodeManifest(b)
		if err != nil {
			t.Fatalf("%s: decodeManifest() = %v", name, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: decodeManifest(encode(m)) =\n%+v\nwant\n%+v", name, got, m)
		}
		if again := got.encode(); !bytes.Equal(again, b) {
			t.Errorf("%s: encoding again gives other bytes", name)
		}
	}
}

// TestManifestRefused: every way a manifest can be wrong is ErrCorrupt,
// with a message that says where.
func TestManifestRefused(t *testing.T) {
	full := func(es ...Entry) *Manifest { return &Manifest{Key: testKey, Full: true, Entries: es} }
	delta := func(es ...Entry) *Manifest { return &Manifest{Key: testKey, Parent: digest, Depth: 1, Entries: es} }
	file := func(name string) Entry { return Entry{Kind: File, Name: name} }
	cases := []struct {
		name string
		m    *Manifest
		want string
	}{
		{"dot-dot", full(file("..")), `".."`},
		{"inner dot-dot", full(Entry{Kind: Dir, Name: "a"}, file("a/../b")), `"a/../b"`},
		{"absolute", full(file("/etc")), `"/etc"`},
		{"NUL", full(file("a\x00b")), `"a\x00b"`},
		{"empty component", full(Entry{Kind: Dir, Name: "a"}, file("a//b")), `"a//b"`},
		{"trailing slash", full(file("a/")), `"a/"`},
		{"out of order", full(file("b"), file("a")), `"a"`},
		{"twice", full(file("a"), file("a")), `"a"`},
		{"no directory", full(file("x/y")), `"x/y"`},
		{"below a file", full(file("x"), file("x/y")), `"x/y"`},
		{"slices short of the size", full(Entry{Kind: File, Name: "a", Size: 11, Slices: []Slice{{chunkA, 0, 10}}}), `"a"`},
		{"slices past the size", full(Entry{Kind: File, Name: "a", Size: 9, Slices: []Slice{{chunkA, 0, 10}}}), `"a"`},
		{"an empty slice", full(Entry{Kind: File, Name: "a", Slices: []Slice{{chunkA, 0, 0}}}), `"a"`},
		{"a slice past a chunk", full(Entry{Kind: File, Name: "a", Size: 10, Slices: []Slice{{chunkA, chunk.MaxSize - 5, 10}}}), `"a"`},
		{"a symlink with no target", full(Entry{Kind: Symlink, Name: "s"}), `"s"`},
		{"a hard link to itself", delta(Entry{Kind: Hardlink, Name: "h", Link: "h"}), `"h"`},
		{"a hard link to nothing before it", full(Entry{Kind: Hardlink, Name: "h", Link: "z"}, file("z")), `"h"`},
		{"a hard link to other content", full(Entry{Kind: File, Name: "a", Size: 1, Slices: []Slice{{chunkA, 0, 1}}}, Entry{Kind: Hardlink, Name: "h", Link: "a"}), `"h"`},
		{"a hard link to a directory", full(Entry{Kind: Dir, Name: "a"}, Entry{Kind: Hardlink, Name: "h", Link: "a"}), `"h"`},
		{"a whiteout in a full manifest", full(Entry{Kind: Whiteout, Name: "w"}), `"w"`},
		{"an opaque directory in a full manifest", full(Entry{Kind: OpaqueDir, Name: "o"}), `"o"`},
		{"kind 0", full(Entry{Name: "k"}), `"k"`},
		{"kind 99", full(Entry{Kind: 99, Name: "k"}), "kind"},
		{"mode past 07777", full(Entry{Kind: File, Name: "m", Mode: 0o10000}), "mode"},
		{"a full manifest with a parent", &Manifest{Key: testKey, Full: true, Parent: digest}, "parent"},
		{"a full manifest of depth 1", &Manifest{Key: testKey, Full: true, Depth: 1}, "depth"},
		{"a delta with no parent", &Manifest{Key: testKey, Depth: 1}, "parent"},
		{"a delta with a malformed parent", &Manifest{Key: testKey, Depth: 1, Parent: "sha256:../x"}, "parent"},
		{"a delta of depth 0", &Manifest{Key: testKey, Parent: digest}, "depth"},
		{"a delta too deep", &Manifest{Key: testKey, Parent: digest, Depth: MaxChain + 1}, "depth"},
		{"no key", &Manifest{Full: true}, "key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeManifest(c.m.encode())
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("decodeManifest() = %v, want ErrCorrupt saying %s", err, c.want)
			}
		})
	}
	// Byte-level damage to a valid encoding.
	valid := validManifests()["full, every kind"].encode()
	at := bytes.Index(valid, chunkA[:])
	table := at - 1 // the table's count, one byte (2)
	bytesCases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "magic"},
		{"other magic", append([]byte("\x89ALCKPX\n"), valid[8:]...), "magic"},
		{"version 2", append(append([]byte(manifestMagic), 2), valid[9:]...), "version 2"},
		{"overlong version", append(append([]byte(manifestMagic), 0x81, 0x00), valid[9:]...), "shortest"},
		{"truncated", valid[:len(valid)-1], ""},
		{"a byte after the end", append(bytes.Clone(valid), 0), "after the last entry"},
		{"a chunk twice in the table", splice(valid, table, table+1+32, append([]byte{3}, append(append(bytes.Clone(chunkA[:]), chunkB[:]...), chunkA[:]...)...)), "twice"},
		{"a chunk in no slice", splice(valid, table, table+1+64, append([]byte{3}, append(append(bytes.Clone(chunkA[:]), chunkB[:]...), make([]byte, 32)...)...)), "no slice"},
		{"an absurd count", splice(valid, table, table+1, binary.AppendUvarint(nil, 1<<40)), "the most"},
		{"a count past the bytes left", splice(valid, table, table+1, binary.AppendUvarint(nil, 1<<20)), "left"},
	}
	for _, c := range bytesCases {
		if _, err := decodeManifest(c.b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: decodeManifest() = %v, want ErrCorrupt saying %s", c.name, err, c.want)
		}
	}
}

// splice returns b with b[i:j] replaced by with.
func splice(b []byte, i, j int, with []byte) []byte {
	out := append(bytes.Clone(b[:i]), with...)
	return append(out, b[j:]...)
}
