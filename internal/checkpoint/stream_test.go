package checkpoint

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// summary describes a restored tree in one string per entry: type, mode,
// name, link target or content.
func summary(es []rent) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		s := fmt.Sprintf("%c %o %s", e.typ, e.mode, e.name)
		switch e.typ {
		case tar.TypeSymlink, tar.TypeLink:
			s += " -> " + e.link
		case tar.TypeReg:
			s += " = " + e.body
		}
		out = append(out, s)
	}
	return out
}

// TestApply: the semantics of deltas (the contract's replacement rules,
// whiteouts, opaque directories, hard links across checkpoints), each a
// chain of streams and the tree its last checkpoint restores to, on every
// backend.
func TestApply(t *testing.T) {
	type step []tent
	cases := []struct {
		name  string
		steps []step // the first full, the rest deltas
		want  []string
	}{
		{
			"opaque directory drops its old children",
			[]step{
				{dir("a"), reg("a/old", "1"), dir("a/sub"), reg("a/sub/x", "2"), reg("b", "3")},
				{dir("a"), opq("a"), reg("a/new", "4")},
			},
			[]string{"5 755 a/", "0 644 a/new = 4", "0 644 b = 3"},
		},
		{
			"opaque directory over a file",
			[]step{{reg("a", "file")}, {dir("a"), opq("a"), reg("a/n", "x")}},
			[]string{"5 755 a/", "0 644 a/n = x"},
		},
		{
			"opaque directory before a child that sorts before the marker",
			[]step{{dir("a"), reg("a/-old", "1")}, {dir("a"), opq("a"), reg("a/-new", "2")}},
			[]string{"5 755 a/", "0 644 a/-new = 2"},
		},
		{
			"directory over a directory keeps the children",
			[]step{
				{dir("a"), reg("a/x", "kept")},
				{{typ: tar.TypeDir, name: "a/", mode: 0o700}},
			},
			[]string{"5 700 a/", "0 644 a/x = kept"},
		},
		{
			"file over a directory drops what was below it",
			[]step{{dir("a"), dir("a/b"), reg("a/b/c", "x")}, {reg("a", "now a file")}},
			[]string{"0 644 a = now a file"},
		},
		{
			"directory over a file, and a symlink over a directory",
			[]step{{reg("a", "f"), dir("b"), reg("b/x", "y")}, {dir("a"), reg("a/in", "z"), sym("b", "a")}},
			[]string{"5 755 a/", "0 644 a/in = z", "2 777 b -> a"},
		},
		{
			"whiteouts delete files and directories with all below",
			[]step{
				{dir("d"), dir("d/e"), reg("d/e/f", "1"), reg("g", "2"), reg("h", "3")},
				{wh("d"), wh("g")},
			},
			[]string{"0 644 h = 3"},
		},
		{
			"a whiteout of a name not there changes nothing",
			[]step{{reg("a", "1")}, {wh("nothing"), wh("no/such/dir")}},
			[]string{"0 644 a = 1"},
		},
		{
			"whiteouts where their names were, not in order of theirs",
			[]step{{reg("b", "1"), reg("c", "2"), reg("d", "3")}, {reg("a", "new"), wh("c"), reg("e", "4")}},
			[]string{"0 644 a = new", "0 644 b = 1", "0 644 d = 3", "0 644 e = 4"},
		},
		{
			"rename across directories",
			[]step{{dir("x"), reg("x/f", "moved")}, {wh("x/f"), dir("y"), reg("y/f", "moved")}},
			[]string{"5 755 x/", "5 755 y/", "0 644 y/f = moved"},
		},
		{
			"a hard link to a file of the parent",
			[]step{{reg("a", "A")}, {hard("b", "a")}},
			[]string{"0 644 a = A", "1 644 b -> a"},
		},
		{
			"a hard link outlives its file's deletion",
			[]step{{reg("a", "A"), hard("b", "a")}, {wh("a")}},
			[]string{"0 644 b = A"},
		},
		{
			"hard links to one name stay together when it goes",
			[]step{{reg("a", "A"), hard("b", "a"), hard("c", "a")}, {wh("a")}},
			[]string{"0 644 b = A", "1 644 c -> b"},
		},
		{
			"a hard link keeps its content when its file is replaced",
			[]step{{reg("a", "A"), hard("b", "a")}, {reg("a", "new")}},
			[]string{"0 644 a = new", "0 644 b = A"},
		},
		{
			"a hard link to a name after it in walk order",
			[]step{{dir("z"), reg("z/f", "Z")}, {hard("a", "z/f")}},
			[]string{"0 644 a = Z", "5 755 z/", "1 644 z/f -> a"},
		},
		{
			"a hard link then its file deleted, in one stream",
			[]step{{dir("z"), reg("z/f", "Z")}, {hard("a", "z/f"), wh("z")}},
			[]string{"0 644 a = Z"},
		},
		{
			"deleted and made again",
			[]step{{reg("a", "1")}, {wh("a")}, {reg("a", "2")}},
			[]string{"0 644 a = 2"},
		},
		{
			"symlinks out of the tree, absolute, dangling, to themselves",
			[]step{{sym("abs", "/etc/shadow"), sym("dangling", "no/such"), sym("out", "../../../etc/passwd"), sym("self", "self")}},
			[]string{"2 777 abs -> /etc/shadow", "2 777 dangling -> no/such", "2 777 out -> ../../../etc/passwd", "2 777 self -> self"},
		},
		{
			"odd names and kinds",
			[]step{{
				reg("bad\xff\xfeutf8", "u"),
				{typ: tar.TypeReg, name: "modes", mode: 0o7777, uid: 4_000_000_000, body: "m"},
				reg("new\nline", "n"), fifo("pipe"), reg(strings.Repeat("x", 255), "long"),
			}},
			[]string{"0 644 bad\xff\xfeutf8 = u", "0 7777 modes = m", "0 644 new\nline = n", "6 600 pipe", "0 644 " + strings.Repeat("x", 255) + " = long"},
		},
		{
			"a delta with no entries",
			[]step{{reg("a", "1")}, {}},
			[]string{"0 644 a = 1"},
		},
		{
			"an empty tree",
			[]step{{}},
			nil,
		},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel() // each waits on its syncs most of the time
					s := b.open(t)
					parent := ""
					for i, st := range c.steps {
						res := write(t, s, "acme", parent, i == 0, tarStream(t, st...))
						parent = res.Digest
					}
					got := summary(restoreTar(t, s, "acme", parent))
					if !slices.Equal(got, c.want) {
						t.Errorf("restored:\n  %q\nwant\n  %q", got, c.want)
					}
				})
			}
		})
	}
}

// TestMetadata: owners past 16 bits, every mode bit, times to the
// nanosecond (before 1970 too) come back as written.
func TestMetadata(t *testing.T) {
	s := newTestStore(t)
	times := []time.Time{time.Unix(1_700_000_000, 1), time.Unix(-86_400*365*50, 999_999_999), time.Unix(0, 0), time.Unix(4_102_444_800, 500)}
	var ents []tent
	for i, mt := range times {
		ents = append(ents, tent{typ: tar.TypeReg, name: fmt.Sprintf("f%d", i), mode: 0o7000 | int64(i), uid: 70_000 + i, mtime: mt, body: "x"})
	}
	res := write(t, s, "acme", "", true, tarStream(t, ents...))
	for i, e := range restoreTar(t, s, "acme", res.Digest) {
		want := ents[i]
		if e.mode != want.mode || e.uid != want.uid || e.gid != want.uid || e.mtime != want.mtime.UnixNano() {
			t.Errorf("%s: mode %o uid %d gid %d mtime %d; want %o %d %d %d", e.name, e.mode, e.uid, e.gid, e.mtime, want.mode, want.uid, want.uid, want.mtime.UnixNano())
		}
	}
}

// TestRefused: streams outside the contract are refused, each with an
// error wrapping ErrStream that names the entry at fault, and store no
// checkpoint.
func TestRefused(t *testing.T) {
	long := strings.Repeat("a", MaxComponent+1)
	cases := []struct {
		name   string
		parent []tent // a full checkpoint the stream is a delta of; nil: the stream is full
		stream []tent
		raw    func([]byte) []byte // changes the stream's bytes
		entry  string              // the name the error must quote; "" for none
	}{
		{"dot-dot", nil, []tent{reg("../escape", "x")}, nil, "../escape"},
		{"inner dot-dot", nil, []tent{dir("a"), reg("a/../../x", "x")}, nil, "a/../../x"},
		{"absolute", nil, []tent{reg("/etc/passwd", "x")}, nil, "/etc/passwd"},
		{"dot", nil, []tent{reg("./a", "x")}, nil, "./a"},
		{"empty component", nil, []tent{dir("a"), reg("a//b", "x")}, nil, "a//b"},
		{"component too long", nil, []tent{reg(long, "x")}, nil, long},
		{"name too long", nil, []tent{reg(strings.Repeat("a/", MaxName/2)+"b", "x")}, nil, ""},
		{"hard link out", nil, []tent{reg("a", "x"), hard("b", "../../etc/passwd")}, nil, "b"},
		{"hard link absolute", nil, []tent{hard("b", "/etc/passwd")}, nil, "b"},
		{"hard link to a name not in the tree", nil, []tent{hard("b", "nope")}, nil, "b"},
		{"hard link to a name later in the stream", nil, []tent{hard("a", "b"), reg("b", "x")}, nil, "a"},
		{"hard link to a directory", nil, []tent{dir("d"), hard("x", "d")}, nil, "x"},
		{"hard link to a symlink", nil, []tent{sym("s", "t"), hard("x", "s")}, nil, "x"},
		{"hard link to itself", []tent{reg("x", "1")}, []tent{hard("x", "x")}, nil, "x"},
		{"hard link to a deleted name", []tent{reg("a", "1")}, []tent{wh("a"), hard("b", "a")}, nil, "b"},
		{"whiteout of dot-dot", []tent{reg("a", "1")}, []tent{{typ: tar.TypeReg, name: ".wh..."}}, nil, ".wh..."},
		{"whiteout of dot", []tent{reg("a", "1")}, []tent{{typ: tar.TypeReg, name: "a/.wh.."}}, nil, "a/.wh.."},
		{"whiteout of nothing", []tent{reg("a", "1")}, []tent{{typ: tar.TypeReg, name: ".wh."}}, nil, ".wh."},
		{"whiteout in a full stream", nil, []tent{wh("a")}, nil, ".wh.a"},
		{"opaque marker in a full stream", nil, []tent{dir("a"), opq("a")}, nil, "a/.wh..wh..opq"},
		{"whiteout with content", []tent{reg("a", "1")}, []tent{{typ: tar.TypeReg, name: ".wh.a", body: "x"}}, nil, ".wh.a"},
		{"whiteout as a directory", []tent{reg("a", "1")}, []tent{{typ: tar.TypeDir, name: ".wh.a/"}}, nil, ".wh.a/"},
		{"reserved whiteout name", []tent{reg("a", "1")}, []tent{{typ: tar.TypeReg, name: ".wh..wh.plnk"}}, nil, ".wh..wh.plnk"},
		{"opaque marker not after its directory", []tent{dir("a")}, []tent{dir("a"), reg("a/x", "1"), opq("a")}, nil, "a/.wh..wh..opq"},
		{"opaque marker with no directory", []tent{dir("a")}, []tent{opq("a")}, nil, "a/.wh..wh..opq"},
		{"opaque marker at the root", []tent{dir("a")}, []tent{{typ: tar.TypeReg, name: ".wh..wh..opq"}}, nil, ".wh..wh..opq"},
		{"whiteout of a name the stream writes", []tent{reg("a", "1")}, []tent{reg("a", "2"), wh("a")}, nil, ".wh.a"},
		{"whiteout of a directory the stream writes in", []tent{dir("a")}, []tent{reg("a/x", "2"), wh("a")}, nil, ".wh.a"},
		{"entry below a deleted directory", []tent{dir("a")}, []tent{wh("a"), reg("a/x", "2")}, nil, "a/x"},
		{"two whiteouts of one name", []tent{reg("a", "1")}, []tent{wh("a"), wh("a")}, nil, ".wh.a"},
		{"an entry twice", nil, []tent{reg("a", "1"), reg("a", "2")}, nil, "a"},
		{"a directory and a file of one name", nil, []tent{dir("a"), reg("a", "2")}, nil, "a"},
		{"out of order", nil, []tent{reg("b", "1"), reg("a", "2")}, nil, "a"},
		{"below a file", nil, []tent{reg("a", "1"), reg("a/b", "2")}, nil, "a/b"},
		{"no directory", nil, []tent{reg("x/y", "1")}, nil, "x/y"},
		{"below a symlink", nil, []tent{sym("s", "/etc"), reg("s/passwd", "2")}, nil, "s/passwd"},
		{"a device node", nil, []tent{{typ: tar.TypeChar, name: "null", mode: 0o666}}, nil, "null"},
		{"a block device", nil, []tent{{typ: tar.TypeBlock, name: "sda", mode: 0o666}}, nil, "sda"},
		{"a GNU sparse file", nil, []tent{reg("holes\xff", ""), reg("next", "x")}, withPAX(map[string]string{
			// 0.1 sparse format: one empty data region, the rest a hole of
			// a terabyte, which archive/tar would read as zeros.
			"GNU.sparse.numblocks": "1", "GNU.sparse.map": "0,0", "GNU.sparse.size": "1099511627776",
		}), "holes\xff"},
		{"a global header", nil, []tent{{typ: tar.TypeXGlobalHeader, name: "g", pax: map[string]string{"comment": "x"}}}, nil, ""},
		{"mode with type bits", nil, []tent{{typ: tar.TypeReg, name: "m", mode: 0o100644}}, nil, "m"},
		{"owner past 32 bits", nil, []tent{{typ: tar.TypeReg, name: "o", mode: 0o644, uid: 1 << 33}}, nil, "o"},
		{"a symlink with no target", nil, []tent{sym("s", "")}, nil, "s"},
		{"a symlink target too long", nil, []tent{sym("s", strings.Repeat("t", MaxLink+1))}, nil, "s"},
		{"a link name on a file", nil, []tent{{typ: tar.TypeReg, name: "f", link: "x"}}, nil, "f"},
		{"a file too large", nil, []tent{{typ: tar.TypeReg, name: "huge", size: MaxFileSize + 1}}, nil, "huge"},
		{"a truncated body", nil, []tent{reg("a", "1"), {typ: tar.TypeReg, name: "cut", body: "only ten b", size: 100}}, nil, "cut"},
		{"cut between entries", nil, []tent{reg("a", "1"), reg("b", "2")}, func(b []byte) []byte { return b[:len(b)-1024] }, ""},
		{"cut after one zero block", nil, []tent{reg("a", "1")}, func(b []byte) []byte { return b[:len(b)-512] }, ""},
		{"cut in a header", nil, []tent{reg("a", "1"), reg("b", "2")}, func(b []byte) []byte { return b[:1024+100] }, ""},
		{"empty", nil, nil, func([]byte) []byte { return nil }, ""},
		{
			"a NUL in a PAX path", nil,
			[]tent{reg("AAAA\xff", "x")},
			func(b []byte) []byte { return bytes.Replace(b, []byte("path=AAAA"), []byte("path=A\x00AA"), 1) }, "",
		},
		{"garbage", nil, nil, func([]byte) []byte { return bytes.Repeat([]byte("not a tar "), 200) }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t)
			parent := ""
			if c.parent != nil {
				parent = write(t, s, "acme", "", true, tarStream(t, c.parent...)).Digest
			}
			before := countBlobs(t, s)
			b := tarStream(t, c.stream...)
			if c.raw != nil {
				b = c.raw(b)
			}
			res, err := s.Write(t.Context(), "acme", parent, c.parent == nil, bytes.NewReader(b))
			if !errors.Is(err, ErrStream) {
				t.Fatalf("Write() = %+v, %v; want an error wrapping ErrStream", res, err)
			}
			if c.entry != "" && !strings.Contains(err.Error(), fmt.Sprintf("%q", clip(c.entry))) {
				t.Errorf("Write() = %v; want it to name %q", err, c.entry)
			}
			if n := countBlobs(t, s); n != before {
				t.Errorf("a refused Write stored %d manifests", n-before)
			}
		})
	}
}

// withPAX returns a change to a stream that adds records to its first PAX
// header (which must hold a path record, as a name that is not ASCII
// makes): archive/tar's writer will not write some records a reader
// takes, such as GNU sparse maps.
func withPAX(records map[string]string) func([]byte) []byte {
	return func(b []byte) []byte {
		size, err := strconv.ParseInt(strings.Trim(string(b[124:136]), " \x00"), 8, 64)
		if err != nil {
			panic(err)
		}
		var add []byte
		for _, k := range slices.Sorted(maps.Keys(records)) {
			add = append(add, paxRecord(k, records[k])...)
		}
		data := append(slices.Clone(b[512:512+size]), add...)
		hdr := slices.Clone(b[:512])
		copy(hdr[124:136], fmt.Sprintf("%011o\x00", len(data)))
		copy(hdr[148:156], "        ")
		sum := 0
		for _, c := range hdr {
			sum += int(c)
		}
		copy(hdr[148:156], fmt.Sprintf("%06o\x00 ", sum))
		out := append(hdr, data...)
		out = append(out, make([]byte, (512-len(data)%512)%512)...)
		return append(out, b[512+(size+511)/512*512:]...)
	}
}

// paxRecord formats a PAX record: "LEN key=value\n", LEN counting itself.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3
	for {
		r := fmt.Sprintf("%d %s=%s\n", n, k, v)
		if len(r) == n {
			return r
		}
		n = len(r)
	}
}

func countBlobs(t *testing.T, s *testStore) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(s.blobs.Dir(), "sha256"), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeltaNeedsParent: a delta names its parent.
func TestDeltaNeedsParent(t *testing.T) {
	s := newTestStore(t)
	if _, err := s.Write(t.Context(), "acme", "", false, bytes.NewReader(tarStream(t, reg("a", "1")))); err == nil {
		t.Error("Write(delta, no parent) = nil error")
	}
	if _, err := s.Write(t.Context(), "acme", "sha256:nope", false, bytes.NewReader(tarStream(t, reg("a", "1")))); err == nil {
		t.Error("Write(delta, malformed parent) = nil error")
	}
}

func TestValidName(t *testing.T) {
	good := []string{"a", "a/b", ".a", "..a", "a..", "...", "a b", "new\nline", "\xff", strings.Repeat("x", MaxComponent), ".wh.x"}
	bad := []string{"", "/", "/a", "a/", "a//b", ".", "..", "./a", "a/.", "a/..", "../a", "a/../b", "a\x00b", strings.Repeat("x", MaxComponent+1), strings.Repeat("a/", MaxName/2) + "b"}
	for _, n := range good {
		if err := validName(n); err != nil {
			t.Errorf("validName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range bad {
		if err := validName(n); err == nil {
			t.Errorf("validName(%q) = nil, want an error", n)
		}
	}
}

func TestCompareNames(t *testing.T) {
	// Walk order: a directory right before what is below it.
	order := []string{"a", "a/b", "a/b/c", "a/c", "a-b", "a.txt", "a0", "b"}
	for i := range order {
		for j := range order {
			got := compareNames(order[i], order[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("compareNames(%q, %q) = %d, want %d", order[i], order[j], got, want)
			}
		}
	}
}
