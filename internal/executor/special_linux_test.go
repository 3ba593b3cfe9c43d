package executor

import (
	"archive/tar"
	"bytes"
	"net"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// specialsOf takes a checkpoint of c with the FIFOs sp, as the host takes
// a gvisor workspace's, and reads it back with the FIFOs' headers.
func specialsOf(t *testing.T, c *checkpoints, since string, sp []execproto.Special) ([]streamEntry, []*tar.Header, string) {
	t.Helper()
	var buf bytes.Buffer
	res, err := c.takeWith(since, false, sp, &buf, execproto.ChunkSize, nil)
	if err != nil {
		t.Fatalf("takeWith(since %q) = %v", since, err)
	}
	es := readStream(t, buf.Bytes())
	if res.Entries != int64(len(es)) {
		t.Errorf("takeWith(since %q) reports %d entries, the stream holds %d", since, res.Entries, len(es))
	}
	for i := 1; i < len(es); i++ {
		a, _ := streamKey(es[i-1].name)
		b, _ := streamKey(es[i].name)
		if !walkLess(a, b) {
			t.Errorf("stream out of walk order: %q before %q", es[i-1].name, es[i].name)
		}
	}
	var fifos []*tar.Header
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for h, err := tr.Next(); err == nil; h, err = tr.Next() {
		if h.Typeflag == tar.TypeFifo {
			fifos = append(fifos, h)
		}
	}
	return es, fifos, res.Baseline
}

// TestCheckpointSpecials: FIFOs the sandbox reports that the tree walked
// does not hold (gVisor keeps them in its memory) are keyed and streamed
// in their places among the tree's entries: all in a full stream, then the
// new, the changed and whiteouts of those gone; none under a tree the walk
// deleted.
func TestCheckpointSpecials(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a/one", "1")
	write(t, dir+"/b/two", "2")
	write(t, dir+"/c/three", "3")
	c := newCheckpoints(dir, -1)
	fifo := func(p string, mode uint32, mtime int64) execproto.Special {
		return execproto.Special{Path: p, Mode: mode, UID: 1000, GID: 1001, MtimeSec: mtime, MtimeNsec: 5, CtimeSec: mtime}
	}
	sp := []execproto.Special{fifo("b/pipe", 0o600, 10), fifo("a/p", 0o644, 11), fifo("c/deep", 0o600, 12), fifo("top", 0o600, 13)}

	for _, tc := range []struct {
		name    string
		change  func()
		sp      []execproto.Special
		want    []string
		wantFIF map[string]int64 // a FIFO's mode in the stream
	}{
		{
			name: "full", sp: sp,
			want:    []string{"a/", "a/one", "a/p", "b/", "b/pipe", "b/two", "c/", "c/deep", "c/three", "top"},
			wantFIF: map[string]int64{"a/p": 0o644, "b/pipe": 0o600, "c/deep": 0o600, "top": 0o600},
		},
		{name: "nothing changed", sp: sp},
		{
			name: "new, changed, gone",
			sp:   []execproto.Special{fifo("a/p", 0o644, 11), fifo("a/q", 0o600, 20), fifo("b/pipe", 0o640, 10), fifo("c/deep", 0o600, 12)},
			want: []string{"a/q", "b/pipe", ".wh.top"}, wantFIF: map[string]int64{"a/q": 0o600, "b/pipe": 0o640},
		},
		{
			// c goes with its FIFO: the tree's whiteout deletes it, no
			// whiteout of c/deep after it.
			name:   "a tree deleted",
			change: func() { must(t, os.RemoveAll(dir+"/c")) },
			sp:     []execproto.Special{fifo("a/p", 0o644, 11), fifo("a/q", 0o600, 20), fifo("b/pipe", 0o640, 10)},
			want:   []string{".wh.c"},
		},
		{
			// A FIFO the tree holds as a file now: the tree's entry.
			name:   "a file where a FIFO was",
			change: func() { write(t, dir+"/a/q", "file") },
			sp:     []execproto.Special{fifo("a/p", 0o644, 11), fifo("b/pipe", 0o640, 10)},
			want:   []string{"a/", "a/q"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.change != nil {
				tc.change()
			}
			since := ""
			if tc.name != "full" {
				since = c.kept[len(c.kept)-1].name
			}
			es, fifos, _ := specialsOf(t, c, since, tc.sp)
			if got := entryNames(es); !slices.Equal(got, tc.want) {
				t.Fatalf("stream = %q, want %q", got, tc.want)
			}
			if len(fifos) != len(tc.wantFIF) {
				t.Errorf("%d FIFOs in the stream, want %d", len(fifos), len(tc.wantFIF))
			}
			for _, h := range fifos {
				if m, ok := tc.wantFIF[h.Name]; !ok || h.Mode != m || h.Uid != 1000 || h.Gid != 1001 {
					t.Errorf("FIFO %q: mode %o, uid %d, gid %d; want mode %o, 1000, 1001", h.Name, h.Mode, h.Uid, h.Gid, m)
				}
			}
		})
	}
}

// TestWalkSpecials: the walk inside reports every FIFO of the tree, in
// walk order, with its mode, owner and times, and nothing else: not a
// socket, a file, a symlink to a FIFO (not followed) or what is past one.
func TestWalkSpecials(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a/file", "x")
	write(t, dir+"/a-b/deep/er/file", "x")
	for _, p := range []string{"a/fifo", "a-b/deep/er/pipe", "z", "a/\nodd\xff"} {
		must(t, unix.Mkfifo(dir+"/"+p, 0o640))
	}
	must(t, os.Chmod(dir+"/z", 0o604))
	must(t, os.Symlink("a/fifo", dir+"/link"))
	must(t, os.Symlink("a-b", dir+"/dirlink"))
	l, err := net.Listen("unix", dir+"/a/sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var buf bytes.Buffer
	if _, err := walkSpecials(dir, &buf, nil, -1); err != nil {
		t.Fatal(err)
	}
	ss, err := execproto.ParseSpecials(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range ss {
		got = append(got, s.Path)
		var st unix.Stat_t
		must(t, unix.Lstat(dir+"/"+s.Path, &st))
		if s.Mode != st.Mode&0o7777 || s.UID != st.Uid || s.GID != st.Gid || s.MtimeSec != st.Mtim.Sec || s.MtimeNsec != st.Mtim.Nsec || s.CtimeSec != st.Ctim.Sec {
			t.Errorf("%q: reported %+v, stat says %+v", s.Path, s, st)
		}
	}
	want := []string{"a/\nodd\xff", "a/fifo", "a-b/deep/er/pipe", "z"}
	if !slices.Equal(got, want) {
		t.Errorf("FIFOs = %q, want %q", got, want)
	}
}

// TestSpecialCache: the FIFOs are walked again only after a name was
// made, deleted or moved, or an attribute changed, anywhere in the tree;
// a write to a file leaves the last walk's answer, which stays right.
func TestSpecialCache(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a/file", "x")
	must(t, unix.Mkfifo(dir+"/a/p", 0o600))
	var c specialCache
	get := func() []execproto.Special {
		t.Helper()
		b, err := c.get(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		ss, err := execproto.ParseSpecials(b)
		if err != nil {
			t.Fatal(err)
		}
		return ss
	}
	paths := func(ss []execproto.Special) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Path)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		change func()
		walk   bool
		want   []string
	}{
		{"first", func() {}, true, []string{"a/p"}},
		{"nothing", func() {}, false, []string{"a/p"}},
		{"a write to a file", func() { write(t, dir+"/a/file", "more") }, false, []string{"a/p"}},
		{"a FIFO made", func() { must(t, unix.Mkfifo(dir+"/a/q", 0o600)) }, true, []string{"a/p", "a/q"}},
		{"a FIFO's mode", func() { must(t, os.Chmod(dir+"/a/q", 0o644)) }, true, []string{"a/p", "a/q"}},
		{"a new tree with a FIFO", func() {
			must(t, os.MkdirAll(dir+"/b/c", 0o755))
			must(t, unix.Mkfifo(dir+"/b/c/r", 0o600))
		}, true, []string{"a/p", "a/q", "b/c/r"}},
		{"a FIFO made in the new tree", func() { must(t, unix.Mkfifo(dir+"/b/c/s", 0o600)) }, true, []string{"a/p", "a/q", "b/c/r", "b/c/s"}},
		{"a tree moved", func() { must(t, os.Rename(dir+"/b", dir+"/0")) }, true, []string{"0/c/r", "0/c/s", "a/p", "a/q"}},
		{"a FIFO made in the moved tree", func() { must(t, unix.Mkfifo(dir+"/0/c/t", 0o600)) }, true, []string{"0/c/r", "0/c/s", "0/c/t", "a/p", "a/q"}},
		{"a FIFO removed", func() { must(t, os.Remove(dir+"/a/p")) }, true, []string{"0/c/r", "0/c/s", "0/c/t", "a/q"}},
		{"nothing again", func() {}, false, []string{"0/c/r", "0/c/s", "0/c/t", "a/q"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := c.walks
			tc.change()
			ss := get()
			if got := paths(ss); !slices.Equal(got, tc.want) {
				t.Errorf("FIFOs = %q, want %q", got, tc.want)
			}
			if walked := c.walks > before; walked != tc.walk {
				t.Errorf("walked = %v, want %v", walked, tc.walk)
			}
			for _, s := range ss {
				var st unix.Stat_t
				must(t, unix.Lstat(dir+"/"+s.Path, &st))
				if s.Mode != st.Mode&0o7777 || s.CtimeSec != st.Ctim.Sec || s.CtimeNsec != st.Ctim.Nsec {
					t.Errorf("%q: reported mode %o ctime %d.%d, stat says %o %d.%d", s.Path, s.Mode, s.CtimeSec, s.CtimeNsec, st.Mode&0o7777, st.Ctim.Sec, st.Ctim.Nsec)
				}
			}
		})
	}
}
