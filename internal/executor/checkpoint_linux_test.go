package executor

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// These tests walk a directory of the test's own, as a workspace in the
// modes other than cow (the sandbox tests, sandbox/sandboxtest, cover every
// mode in real sandboxes).

func TestWalkLess(t *testing.T) {
	// In walk order: a directory, then what is below it, then its next
	// sibling, whatever bytes the names hold.
	order := []string{"a", "a/b", "a/b/c", "a/z", "a!", "a-b", "a-b/x", "a.txt", "ab", "b", "b\n", "b\xff", "\xffz"}
	for i, a := range order {
		for j, b := range order {
			if got, want := walkLess(a, b), i < j; got != want {
				t.Errorf("walkLess(%q, %q) = %v, want %v", a, b, got, want)
			}
		}
	}
}

// TestWalkerOrderGuard: a walk whose tree changed under it (a directory
// swapped for a symlink between its listing and its stat, as
// sandboxtest's SymlinkSwapRace does) would write an entry out of walk
// order; the walker refuses to, and the checkpoint fails instead of
// handing on a stream no restore can replay. Entries in walk order, with
// whiteouts at what they delete and an opaque marker right after its
// directory, pass.
func TestWalkerOrderGuard(t *testing.T) {
	ok := []string{"a/", "a/.wh..wh..opq", "a/b", "a/.wh.c", "a/d/", "a/d/e", ".wh.b", "c"}
	var buf bytes.Buffer
	w := &walker{tw: &tarWriter{w: &buf}}
	for _, n := range ok {
		if err := w.header(tarHeader{Name: n, Type: tarReg}, nil); err != nil {
			t.Fatalf("header(%q) in walk order = %v", n, err)
		}
	}
	for _, bad := range [][]string{
		{"d/", "d/x", "d"},        // d a directory, then a symlink
		{"d", "d/"},               // the same name twice
		{"b", "a"},                // backwards
		{"d/x", "d/.wh..wh..opq"}, // opaque after a child
		{"x", ".wh.x"},            // a whiteout after its own name
	} {
		w := &walker{tw: &tarWriter{w: io.Discard}}
		var err error
		for _, n := range bad {
			if err = w.header(tarHeader{Name: n, Type: tarReg}, nil); err != nil {
				break
			}
		}
		if !errors.Is(err, errChanged) {
			t.Errorf("entries %q: header = %v, want the tree-changed error", bad, err)
		}
	}
}

// streamEntry is what a test reads of a stream entry.
type streamEntry struct {
	name, link string
	typ        byte
	body       string
}

func readStream(t *testing.T, b []byte) []streamEntry {
	t.Helper()
	var es []streamEntry
	eachEntry(t, b, func(h *tar.Header, body string) {
		es = append(es, streamEntry{h.Name, h.Linkname, h.Typeflag, body})
	})
	return es
}

// eachEntry reads the stream b with archive/tar, handing fn each entry's
// header and body.
func eachEntry(t *testing.T, b []byte, fn func(h *tar.Header, body string)) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("read the stream with archive/tar: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		fn(h, string(body))
	}
}

func entryNames(es []streamEntry) []string {
	var ns []string
	for _, e := range es {
		ns = append(ns, e.name)
	}
	return ns
}

// checkpointOf takes a checkpoint of c and reads it back.
func checkpointOf(t *testing.T, c *checkpoints, since string) ([]streamEntry, string, bool) {
	t.Helper()
	var buf bytes.Buffer
	res, err := c.take(since, false, &buf, execproto.ChunkSize, nil)
	if err != nil {
		t.Fatalf("take(since %q) = %v", since, err)
	}
	es := readStream(t, buf.Bytes())
	if res.Entries != int64(len(es)) {
		t.Errorf("take(since %q) reports %d entries, the stream holds %d", since, res.Entries, len(es))
	}
	return es, res.Baseline, res.Full
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointDelta(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a/one", "1")
	write(t, dir+"/a/two", "2")
	write(t, dir+"/b/three", "3")
	write(t, dir+"/c/sub/four", "4")
	if err := os.Symlink("/etc/passwd", dir+"/link"); err != nil {
		t.Fatal(err)
	}
	// A socket: not workspace data, skipped.
	l, err := net.Listen("unix", dir+"/a/sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := newCheckpoints(dir, -1)

	es, b1, full := checkpointOf(t, c, "")
	want := []string{"a/", "a/one", "a/two", "b/", "b/three", "c/", "c/sub/", "c/sub/four", "link"}
	if got := entryNames(es); !full || !slices.Equal(got, want) {
		t.Fatalf("full checkpoint = %q (full %v), want %q", got, full, want)
	}
	if es[8].typ != tar.TypeSymlink || es[8].link != "/etc/passwd" || es[8].body != "" {
		t.Errorf("link = %+v, want a symlink to /etc/passwd, not followed", es[8])
	}

	// Delete a file, a tree; change a file; make one; a file over a
	// directory; a hard link.
	must(t, os.Remove(dir+"/a/two"))
	must(t, os.RemoveAll(dir+"/c"))
	write(t, dir+"/b/three", "33")
	write(t, dir+"/b/new", "n")
	must(t, os.RemoveAll(dir+"/a/sock"))
	must(t, os.Link(dir+"/b/new", dir+"/d"))
	es, b2, full := checkpointOf(t, c, b1)
	want = []string{"a/", "a/.wh.two", "b/", "b/new", "b/three", ".wh.c", "d"}
	if got := entryNames(es); full || !slices.Equal(got, want) {
		t.Fatalf("delta = %q (full %v), want %q", got, full, want)
	}
	if d := es[6]; d.typ != tar.TypeLink || d.link != "b/new" {
		t.Errorf("d = %+v, want a hard link to b/new", d)
	}

	// Nothing changed: an empty delta.
	es, b3, _ := checkpointOf(t, c, b2)
	if len(es) != 0 {
		t.Errorf("delta of an unchanged tree = %q, want nothing", entryNames(es))
	}

	// The last two baselines are kept: b2 still is, b1 is not.
	if es, _, full := checkpointOf(t, c, b2); full || len(es) != 0 {
		t.Errorf("delta since the baseline before the last = %q (full %v), want an empty delta", entryNames(es), full)
	}
	if _, _, full := checkpointOf(t, c, b1); !full {
		t.Errorf("checkpoint since the third baseline back is a delta, want a full stream (only two are kept)")
	}
	if b3 == b2 || !strings.HasPrefix(b3, c.prefix+"-") {
		t.Errorf("baselines %q, %q: want distinct names with the executor's prefix %q", b2, b3, c.prefix)
	}
}

func TestCheckpointMarkOnly(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/f", "x")
	c := newCheckpoints(dir, -1)
	var buf bytes.Buffer
	res, err := c.take("", true, &buf, execproto.ChunkSize, nil)
	if err != nil || res.Full || res.Entries != 0 || buf.Len() != 0 {
		t.Fatalf("take(mark only) = %+v, %v, %d bytes; want a baseline and nothing written", res, err, buf.Len())
	}
	write(t, dir+"/g", "y")
	if es, _, full := checkpointOf(t, c, res.Baseline); full || !slices.Equal(entryNames(es), []string{"g"}) {
		t.Errorf("delta since the mark = %q (full %v), want [g]", entryNames(es), full)
	}
}

func TestCheckpointRefuses(t *testing.T) {
	for _, name := range []string{".wh.x", "d/.wh..wh..opq"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir+"/"+name, "")
			c := newCheckpoints(dir, -1)
			_, err := c.take("", false, io.Discard, execproto.ChunkSize, nil)
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("take of a tree holding %s = %v, want an error naming it", name, err)
			}
			if len(c.kept) != 0 {
				t.Errorf("a failed checkpoint recorded a baseline")
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		dir := t.TempDir()
		write(t, dir+"/f", "")
		stop := make(chan struct{})
		close(stop)
		if _, err := newCheckpoints(dir, -1).take("", false, io.Discard, execproto.ChunkSize, stop); err == nil {
			t.Error("take with stop closed = nil error")
		}
	})
}

// TestCheckpointUnreadable: the walk runs with the sandbox user's
// identity (asUser); a file that user cannot read is an error naming it,
// not a hole in the stream. As root, the test takes nobody's identity.
func TestCheckpointUnreadable(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Chmod(filepath.Dir(dir), 0o755))
	must(t, os.Chmod(dir, 0o755))
	write(t, dir+"/secret", "x")
	must(t, os.Chmod(dir+"/secret", 0o600))
	c := newCheckpoints(dir, -1)
	var err error
	if os.Geteuid() == 0 {
		runtime.LockOSThread() // not unlocked: the thread's identity is changed
		if err := setfsid(65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err = c.take("", false, io.Discard, execproto.ChunkSize, nil)
		if setfsid(0, 0) == nil {
			runtime.UnlockOSThread()
		}
	} else {
		must(t, os.Chmod(dir+"/secret", 0))
		_, err = c.take("", false, io.Discard, execproto.ChunkSize, nil)
	}
	if !errors.Is(err, unix.EACCES) || !strings.Contains(err.Error(), "secret") {
		t.Errorf("take of an unreadable file = %v, want EACCES naming it", err)
	}
}
