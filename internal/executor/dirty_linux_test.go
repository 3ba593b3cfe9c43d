package executor

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// The dirty set of an rw workspace (dirty_linux.go): a delta that looks
// only at what the tracker says changed must be the delta of a walk of
// the whole tree, whatever the steps did.

// ownPids is the tracker's process list in these tests: the test's own
// process, which makes the shared mappings.
func ownPids() ([]int, error) { return []int{os.Getpid()}, nil }

// trackedPair returns two checkpoints of dir, each with its first (full)
// checkpoint taken, and the baselines of those: one with a ready tracker,
// one walking the whole tree every time.
func trackedPair(t *testing.T, dir string) (tracked, whole *checkpoints, trackedBase, wholeBase string) {
	t.Helper()
	tracked, whole = newCheckpoints(dir, -1), newCheckpoints(dir, -1)
	tr := newTracker(dir, "", ownPids)
	if tr == nil {
		t.Fatal("newTracker = nil")
	}
	t.Cleanup(tr.close)
	<-tr.started
	tr.mu.Lock()
	ready := tr.ready
	tr.mu.Unlock()
	if !ready {
		t.Fatal("the tracker is not ready after its first walk")
	}
	tracked.track = tr
	_, r1 := takeFull(t, tracked, "")
	_, r2 := takeFull(t, whole, "")
	return tracked, whole, r1.Baseline, r2.Baseline
}

// fullEntry is a stream entry with all its header says.
type fullEntry struct {
	name, link string
	typ        byte
	mode       int64
	uid, gid   int
	mtime      int64
	size       int64
	body       string
}

func readFull(t *testing.T, b []byte) []fullEntry {
	t.Helper()
	var es []fullEntry
	eachEntry(t, b, func(h *tar.Header, body string) {
		es = append(es, fullEntry{h.Name, h.Linkname, h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime.UnixNano(), h.Size, body})
	})
	return es
}

// takeFull takes a checkpoint of c since since and returns its entries
// and result.
func takeFull(t *testing.T, c *checkpoints, since string) ([]fullEntry, execproto.CheckpointResult) {
	t.Helper()
	var buf bytes.Buffer
	res, err := c.take(since, false, &buf, execproto.ChunkSize, nil)
	if err != nil {
		t.Fatalf("take(since %q) = %v", since, err)
	}
	return readFull(t, buf.Bytes()), res
}

// sameDelta takes a delta of both checkpoints and fails unless the streams
// and the recorded keys are the same. It returns the new baselines and
// the entries each walk looked at.
func sameDelta(t *testing.T, what string, tracked, whole *checkpoints, s1, s2 string) (string, string, int64, int64) {
	t.Helper()
	e1, r1 := takeFull(t, tracked, s1)
	e2, r2 := takeFull(t, whole, s2)
	if r1.Full || r2.Full {
		t.Fatalf("%s: a full stream (tracked %v, whole %v), want deltas", what, r1.Full, r2.Full)
	}
	if !slices.Equal(e1, e2) {
		t.Errorf("%s: the tracked delta differs from the whole walk's:\n%s", what, diffEntries(e1, e2))
	}
	k1, k2 := tracked.kept[len(tracked.kept)-1].entries, whole.kept[len(whole.kept)-1].entries
	if !slices.Equal(k1, k2) {
		t.Errorf("%s: the tracked baseline's keys differ from the whole walk's:\n%s", what, diffKeys(k1, k2))
	}
	return r1.Baseline, r2.Baseline, r1.Walked, r2.Walked
}

func diffEntries(a, b []fullEntry) string {
	var sb strings.Builder
	in := func(e fullEntry, l []fullEntry) bool { return slices.Contains(l, e) }
	for _, e := range a {
		if !in(e, b) {
			fmt.Fprintf(&sb, "  tracked only: %q %c link %q mode %o size %d\n", e.name, e.typ, e.link, e.mode, e.size)
		}
	}
	for _, e := range b {
		if !in(e, a) {
			fmt.Fprintf(&sb, "  whole only:   %q %c link %q mode %o size %d\n", e.name, e.typ, e.link, e.mode, e.size)
		}
	}
	return sb.String()
}

func diffKeys(a, b []keyed) string {
	var sb strings.Builder
	n := 0
	for _, k := range a {
		if !slices.Contains(b, k) && n < 10 {
			fmt.Fprintf(&sb, "  tracked only: %q %+v\n", k.path, k.key)
			n++
		}
	}
	for _, k := range b {
		if !slices.Contains(a, k) && n < 20 {
			fmt.Fprintf(&sb, "  whole only:   %q %+v\n", k.path, k.key)
			n++
		}
	}
	return sb.String()
}

// randTree makes a tree of about dirs*files files.
func randTree(t *testing.T, dir string, rng *rand.Rand, dirs, files int) {
	t.Helper()
	for d := range dirs {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", d%8), fmt.Sprintf("s%03d", d))
		if d%5 == 0 {
			p = filepath.Join(p, "deep", "er")
		}
		for f := range files {
			write(t, filepath.Join(p, fmt.Sprintf("f%02d", f)), strings.Repeat("x", rng.IntN(64)))
		}
	}
}

// treeOps is a random workload on an rw workspace.
type treeOps struct {
	t    *testing.T
	dir  string
	rng  *rand.Rand
	n    int
	maps [][]byte // shared mappings kept until the delta
	log  []string

	files, dirs []string // the tree, as list found it
}

// list lists the tree's regular files and directories for pick (once a
// batch: an operation on a name gone since fails, and does nothing).
func (o *treeOps) list() {
	o.files, o.dirs = nil, nil
	_ = filepath.WalkDir(o.dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == o.dir {
			return nil
		}
		rel, _ := filepath.Rel(o.dir, p)
		switch {
		case d.IsDir():
			o.dirs = append(o.dirs, rel)
		case d.Type().IsRegular():
			o.files = append(o.files, rel)
		}
		return nil
	})
}

// pick returns a random entry of the tree (relative), a directory when
// dirs, or "" for none.
func (o *treeOps) pick(dirs bool) string {
	all := o.files
	if dirs {
		all = o.dirs
	}
	if len(all) == 0 {
		return ""
	}
	return all[o.rng.IntN(len(all))]
}

func (o *treeOps) newName(parent string) string {
	o.n++
	return filepath.Join(parent, fmt.Sprintf("n%04d", o.n))
}

func (o *treeOps) abs(rel string) string { return filepath.Join(o.dir, rel) }

// step does one random operation; errors (a name gone) are ignored: the
// tree is what it is.
func (o *treeOps) step() {
	f, d := o.pick(false), o.pick(true)
	op := o.rng.IntN(18)
	o.log = append(o.log, fmt.Sprintf("%d %s %s", op, f, d))
	switch op {
	case 0: // create
		_ = os.WriteFile(o.abs(o.newName(d)), []byte("new"), 0o644)
	case 1: // write
		if f != "" {
			_ = os.WriteFile(o.abs(f), []byte(fmt.Sprint(o.rng.Int())), 0o644)
		}
	case 2: // append
		if fh, err := os.OpenFile(o.abs(f), os.O_WRONLY|os.O_APPEND, 0); err == nil {
			_, _ = fh.WriteString("more")
			fh.Close()
		}
	case 3: // truncate
		_ = os.Truncate(o.abs(f), int64(o.rng.IntN(4)))
	case 4: // chmod a file or a directory
		if o.rng.IntN(2) == 0 {
			_ = os.Chmod(o.abs(f), 0o600)
		} else if d != "" {
			_ = os.Chmod(o.abs(d), 0o750)
		}
	case 5: // rename a file into another directory
		if f != "" {
			_ = os.Rename(o.abs(f), o.abs(o.newName(d)))
		}
	case 6: // rename a directory (not into itself)
		to := o.newName(o.pick(true))
		if d != "" && !strings.HasPrefix(to+"/", d+"/") {
			_ = os.Rename(o.abs(d), o.abs(to))
		}
	case 7: // delete a file
		_ = os.Remove(o.abs(f))
	case 8: // delete a directory
		if d != "" && o.rng.IntN(3) == 0 {
			_ = os.RemoveAll(o.abs(d))
		}
	case 9: // mkdir deep, filled at once
		p := o.abs(filepath.Join(o.newName(d), "a", "b"))
		if os.MkdirAll(p, 0o755) == nil {
			_ = os.WriteFile(filepath.Join(p, "x"), []byte("deep"), 0o644)
			_ = os.WriteFile(filepath.Join(filepath.Dir(p), "y"), []byte("mid"), 0o644)
		}
	case 10: // hard link into another directory
		if f != "" {
			_ = os.Link(o.abs(f), o.abs(o.newName(d)))
		}
	case 11: // symlink
		_ = os.Symlink("../"+f, o.abs(o.newName(d)))
	case 12: // a shared mapping written, kept until the delta
		if m := o.mmap(f); m != nil {
			o.maps = append(o.maps, m)
		}
	case 13: // a shared mapping written and gone before the delta
		if m := o.mmap(f); m != nil {
			_ = unix.Munmap(m)
		}
	case 14: // a file replaced by a directory and back
		if f != "" {
			p := o.abs(f)
			if os.Remove(p) == nil && os.Mkdir(p, 0o755) == nil {
				_ = os.WriteFile(filepath.Join(p, "in"), []byte("in"), 0o644)
				if o.rng.IntN(2) == 0 {
					_ = os.RemoveAll(p)
					_ = os.WriteFile(p, []byte("back"), 0o644)
				}
			}
		}
	case 15: // a hard link made, written through and removed
		if f != "" {
			l := o.abs(o.newName(d))
			if os.Link(o.abs(f), l) == nil {
				if fh, err := os.OpenFile(l, os.O_WRONLY|os.O_APPEND, 0); err == nil {
					_, _ = fh.WriteString("via link")
					fh.Close()
				}
				_ = os.Remove(l)
			}
		}
	case 16: // mtime put back: the ctime changes all the same
		if fi, err := os.Stat(o.abs(f)); err == nil {
			_ = os.WriteFile(o.abs(f), []byte("same size?"), 0o644)
			_ = os.Chtimes(o.abs(f), fi.ModTime(), fi.ModTime())
		}
	case 17: // a temporary file made and renamed over another
		if f != "" {
			tmp := o.abs(o.newName(filepath.Dir(f)))
			if os.WriteFile(tmp, []byte("atomic"), 0o644) == nil {
				_ = os.Rename(tmp, o.abs(f))
			}
		}
	}
}

// mmap maps the regular file rel shared and writable and writes through
// the mapping; nil if it could not.
func (o *treeOps) mmap(rel string) []byte {
	if rel == "" {
		return nil
	}
	fh, err := os.OpenFile(o.abs(rel), os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	m, err := unix.Mmap(int(fh.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	m[0] ^= 0x20 // through the mapping: no write(2), no IN_MODIFY
	return m
}

func (o *treeOps) unmap() {
	for _, m := range o.maps {
		_ = unix.Munmap(m)
	}
	o.maps = nil
}

// TestDirtyDifferential: a seeded random workload on a tree of a few
// thousand entries; after each batch, the delta of the tracked
// checkpoints and that of a whole walk, each since its own baseline of
// the same tree, are the same stream and record the same keys.
func TestDirtyDifferential(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(seed, 22))
			randTree(t, dir, rng, 120, 20)
			tracked, whole, s1, s2 := trackedPair(t, dir)
			o := &treeOps{t: t, dir: dir, rng: rng}
			defer o.unmap()
			var walked1, walked2 int64
			small := 0 // deltas that walked less than a quarter of the tree
			for batch := range 30 {
				o.list()
				for range 1 + rng.IntN(8) {
					o.step()
				}
				var w1, w2 int64
				s1, s2, w1, w2 = sameDelta(t, fmt.Sprintf("batch %d (ops %q)", batch, o.log), tracked, whole, s1, s2)
				walked1, walked2 = walked1+w1, walked2+w2
				if w1*4 < w2 {
					small++
				}
				o.log = nil
				if batch%3 == 2 {
					o.unmap()
				}
				if t.Failed() {
					break
				}
			}
			t.Logf("walked %d entries with the dirty set, %d without; %d of 30 deltas walked less than a quarter", walked1, walked2, small)
			// A hard link made walks everything, and a subtree holding
			// a file with two names is always walked: the workload makes
			// some; most steps still walk little.
			if small < 10 {
				t.Errorf("%d of 30 tracked deltas walked less than a quarter of the tree: the dirty set was not used", small)
			}
		})
	}
}

// oneStep checks, for one targeted case, that the tracked delta after
// change is the whole walk's and holds want.
func oneStep(t *testing.T, dir string, change func(tr *tracker), want ...string) {
	t.Helper()
	tracked, whole, b1, b2 := trackedPair(t, dir)
	change(tracked.track)
	e1, _ := takeFull(t, tracked, b1)
	takeFull(t, whole, b2)
	var got []string
	for _, e := range e1 {
		got = append(got, e.name)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("tracked delta = %q, want %s in it", got, w)
		}
	}
	k1, k2 := tracked.kept[len(tracked.kept)-1].entries, whole.kept[len(whole.kept)-1].entries
	if !slices.Equal(k1, k2) {
		t.Errorf("the tracked baseline's keys differ from the whole walk's:\n%s", diffKeys(k1, k2))
	}
}

func TestDirtyHoles(t *testing.T) {
	tree := func(t *testing.T) string {
		dir := t.TempDir()
		randTree(t, dir, rand.New(rand.NewPCG(7, 7)), 20, 10)
		return dir
	}
	t.Run("MmapKept", func(t *testing.T) {
		// Written through a shared mapping still in place: no event;
		// the scan of the processes' mappings finds it.
		dir := tree(t)
		var m []byte
		oneStep(t, dir, func(*tracker) {
			o := &treeOps{dir: dir}
			m = o.mmap("d01/s001/f03")
		}, "d01/s001/f03")
		if m == nil {
			t.Fatal("no mapping made")
		}
		_ = unix.Munmap(m)
	})
	t.Run("MmapGone", func(t *testing.T) {
		// Written through a shared mapping, unmapped and closed
		// before the delta: the close of a writable file is an event.
		dir := tree(t)
		oneStep(t, dir, func(*tracker) {
			o := &treeOps{dir: dir}
			m := o.mmap("d01/s001/f03")
			if m == nil {
				t.Fatal("no mapping made")
			}
			_ = unix.Munmap(m)
		}, "d01/s001/f03")
	})
	t.Run("HardLinkOld", func(t *testing.T) {
		// Two names at the baseline, written through one: inotify
		// reports the other's directory alone.
		dir := tree(t)
		must(t, os.Link(dir+"/d02/s002/f01", dir+"/d03/s003/link"))
		oneStep(t, dir, func(*tracker) {
			must(t, os.WriteFile(dir+"/d03/s003/link", []byte("through the link"), 0o644))
		}, "d02/s002/f01", "d03/s003/link")
	})
	t.Run("HardLinkNew", func(t *testing.T) {
		// A name made after the baseline, written through and removed.
		dir := tree(t)
		oneStep(t, dir, func(*tracker) {
			must(t, os.Link(dir+"/d02/s002/f01", dir+"/d03/s003/link"))
			must(t, os.WriteFile(dir+"/d03/s003/link", []byte("through the link"), 0o644))
			must(t, os.Remove(dir+"/d03/s003/link"))
		}, "d02/s002/f01")
	})
	t.Run("HardLinkKept", func(t *testing.T) {
		// A name made after the baseline, kept: the first name comes
		// again for the new one to link to.
		dir := tree(t)
		oneStep(t, dir, func(*tracker) {
			must(t, os.Link(dir+"/d02/s002/f01", dir+"/d03/s003/link"))
		}, "d02/s002/f01", "d03/s003/link")
	})
	t.Run("HardLinkStaleDescriptor", func(t *testing.T) {
		// A descriptor opened through a second name, kept across
		// checkpoints; the name removed and made again as another
		// file; the first file written through the descriptor: the
		// event names the new file, whose one name says nothing.
		dir := tree(t)
		tracked, whole, b1, b2 := trackedPair(t, dir)
		must(t, os.Link(dir+"/d02/s002/f01", dir+"/d03/s003/link"))
		fh, err := os.OpenFile(dir+"/d03/s003/link", os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		s1, s2, _, _ := sameDelta(t, "after the link", tracked, whole, b1, b2)
		must(t, os.Remove(dir+"/d03/s003/link"))
		write(t, dir+"/d03/s003/link", "another file")
		s1, s2, _, _ = sameDelta(t, "after the link was made again", tracked, whole, s1, s2)
		if _, err := fh.WriteString("through the old descriptor"); err != nil {
			t.Fatal(err)
		}
		sameDelta(t, "after a write through the old descriptor", tracked, whole, s1, s2)
	})
	t.Run("HardLinkReplaced", func(t *testing.T) {
		// A second name for a file of an untouched directory, written
		// through, and another file renamed over that name, all before
		// the tracker looked (held off here): when it looks, the name
		// is neither gone nor linked.
		dir := tree(t)
		oneStep(t, dir, func(tr *tracker) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			must(t, os.Link(dir+"/d02/s002/f01", dir+"/d03/s003/link"))
			must(t, os.WriteFile(dir+"/d03/s003/link", []byte("through the link"), 0o644))
			write(t, dir+"/d03/s003/other", "another file")
			must(t, os.Rename(dir+"/d03/s003/other", dir+"/d03/s003/link"))
		}, "d02/s002/f01")
	})
	t.Run("HardLinkReplacedAfterRead", func(t *testing.T) {
		// The same, the other file renamed over the name after the
		// tracker read the link's events and before it looked at the
		// name: the rename's events come in a later read.
		dir := tree(t)
		oneStep(t, dir, func(tr *tracker) {
			done := make(chan error, 1)
			tr.mu.Lock()
			tr.afterRead = func() {
				tr.afterRead = nil
				err := os.WriteFile(dir+"/d03/s003/other", []byte("another file"), 0o644)
				if err == nil {
					err = os.Rename(dir+"/d03/s003/other", dir+"/d03/s003/link")
				}
				done <- err
			}
			must(t, os.Link(dir+"/d02/s002/f01", dir+"/d03/s003/link"))
			must(t, os.WriteFile(dir+"/d03/s003/link", []byte("through the link"), 0o644))
			tr.mu.Unlock()
			must(t, <-done)
		}, "d02/s002/f01")
	})
	t.Run("NewDirBeforeWatch", func(t *testing.T) {
		// A directory made and filled before the tracker could watch
		// it (held off here): its files made no event.
		dir := tree(t)
		oneStep(t, dir, func(tr *tracker) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			write(t, dir+"/d04/new/a/b/x", "x")
			write(t, dir+"/d04/new/y", "y")
		}, "d04/new/", "d04/new/a/b/x", "d04/new/y")
	})
	t.Run("NewDirLinkBeforeWatch", func(t *testing.T) {
		// A hard link made in a new directory before its watch: no
		// event names it, its first name is elsewhere.
		dir := tree(t)
		oneStep(t, dir, func(tr *tracker) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			must(t, os.Mkdir(dir+"/d04/new", 0o755))
			must(t, os.Link(dir+"/d02/s002/f01", dir+"/d04/new/l"))
		}, "d02/s002/f01", "d04/new/l")
	})
	t.Run("RenamedDir", func(t *testing.T) {
		// A directory renamed, then written below: its watches must
		// take the new paths.
		dir := tree(t)
		tracked, whole, b1, b2 := trackedPair(t, dir)
		must(t, os.Rename(dir+"/d05/s005", dir+"/d06/moved"))
		s1, s2, _, _ := sameDelta(t, "after the rename", tracked, whole, b1, b2)
		s1, s2, _, _ = sameDelta(t, "after the rename, nothing since", tracked, whole, s1, s2)
		// A directory made below it: no file's name is checked, the
		// event's path alone says where.
		must(t, os.Mkdir(dir+"/d06/moved/deep/made", 0o755))
		s1, s2, _, _ = sameDelta(t, "after a mkdir below the renamed directory", tracked, whole, s1, s2)
		write(t, dir+"/d06/moved/deep/er/f02", "changed below")
		e1, _ := takeFull(t, tracked, s1)
		takeFull(t, whole, s2)
		if len(e1) == 0 || e1[len(e1)-1].name != "d06/moved/deep/er/f02" {
			t.Errorf("delta after a write below the renamed directory = %v, want d06/moved/deep/er/f02", e1)
		}
	})
	t.Run("DirMovedOutAndBack", func(t *testing.T) {
		// A directory moved away and back, written below while away,
		// before the tracker handled the moves (held off here): it
		// forgets the directory's watches at the first move, so the
		// write is no event; the directory is back at its path, with
		// the same inode, and must be walked whole.
		dir := tree(t)
		oneStep(t, dir, func(tr *tracker) {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			must(t, os.Rename(dir+"/d05/s005", dir+"/away"))
			must(t, os.WriteFile(dir+"/away/deep/er/f03", []byte("while away"), 0o644))
			must(t, os.Rename(dir+"/away", dir+"/d05/s005"))
		}, "d05/s005/deep/er/f03")
	})
	t.Run("Overflow", func(t *testing.T) {
		// Events lost: the next delta walks everything.
		dir := tree(t)
		tracked, whole, b1, b2 := trackedPair(t, dir)
		tr := tracked.track
		tr.mu.Lock()
		tr.handle([]inotifyEvent{{wd: -1, mask: unix.IN_Q_OVERFLOW}})
		tr.mu.Unlock()
		_, _, w1, w2 := sameDelta(t, "after an overflow", tracked, whole, b1, b2)
		if w1 != w2 {
			t.Errorf("delta after an overflow walked %d entries, want the whole tree's %d", w1, w2)
		}
	})
	t.Run("WatchLimit", func(t *testing.T) {
		// A watch refused: the tracker is off, every delta walks the
		// whole tree, and is right.
		dir := tree(t)
		tracked, whole, b1, b2 := trackedPair(t, dir)
		tr := tracked.track
		tr.mu.Lock()
		tr.disable()
		tr.mu.Unlock()
		write(t, dir+"/d00/s000/f00", "changed")
		s1, s2, w1, w2 := sameDelta(t, "with the tracker off", tracked, whole, b1, b2)
		if w1 != w2 {
			t.Errorf("delta with the tracker off walked %d entries, want the whole tree's %d", w1, w2)
		}
		write(t, dir+"/d00/s000/f01", "changed")
		if _, _, w1, w2 := sameDelta(t, "with the tracker off, again", tracked, whole, s1, s2); w1 != w2 {
			t.Errorf("second delta with the tracker off walked %d entries, want %d", w1, w2)
		}
	})
}

// TestDirtyBaselines: each kept baseline has its own dirty set; a delta
// since the one before the last holds both intervals' changes; a failed
// checkpoint consumes nothing.
func TestDirtyBaselines(t *testing.T) {
	dir := t.TempDir()
	randTree(t, dir, rand.New(rand.NewPCG(9, 9)), 20, 10)
	tracked, whole, b1, b2 := trackedPair(t, dir)
	write(t, dir+"/d01/s001/f01", "first")
	a1, a2, _, _ := sameDelta(t, "first", tracked, whole, b1, b2)
	write(t, dir+"/d02/s002/f02", "second")
	// Since the baseline before the last: both changes.
	sameDelta(t, "since the one before", tracked, whole, b1, b2)
	// A delta since a1 that fails (cancelled) consumes nothing.
	write(t, dir+"/d03/s003/f03", "third")
	stop := make(chan struct{})
	close(stop)
	if _, err := tracked.take(a1, false, io.Discard, execproto.ChunkSize, stop); err == nil {
		t.Fatal("take with stop closed = nil error")
	}
	e1, _ := takeFull(t, tracked, a1)
	e2, _ := takeFull(t, whole, a2)
	if !slices.Equal(e1, e2) {
		t.Errorf("delta after a failed one:\n%s", diffEntries(e1, e2))
	}
	tr := tracked.track
	tr.mu.Lock()
	n := len(tr.sets)
	tr.mu.Unlock()
	if n != keptBaselines {
		t.Errorf("the tracker fills %d sets, want %d (one per kept baseline)", n, keptBaselines)
	}
}

// TestHotSkipsLinked: the walk does not copy a subtree whose baseline
// holds a file with two names, even when the dirty set says nothing
// changed there (a write through the other name is reported only at that
// name; the tracker's own check of link counts is a second line, not
// used here).
func TestHotSkipsLinked(t *testing.T) {
	dir := t.TempDir()
	write(t, dir+"/a/sub/f", "one")
	write(t, dir+"/b/g", "x")
	must(t, os.Link(dir+"/a/sub/f", dir+"/b/link"))
	c := newCheckpoints(dir, -1)
	_, r := takeFull(t, c, "")
	must(t, os.WriteFile(dir+"/b/link", []byte("two"), 0o644))
	// The set an event on b makes.
	c.kept[0].dirty = &dirtySet{dirs: map[string]bool{"b": false}}
	var buf bytes.Buffer
	tw := &tarWriter{w: &buf}
	var res execproto.CheckpointResult
	if _, err := c.plain(&c.kept[0], newHotSet(c.kept[0].dirty), tw, &specialQueue{}, nil, &res); err != nil {
		t.Fatal(err)
	}
	must(t, tw.Close())
	var got []string
	for _, e := range readFull(t, buf.Bytes()) {
		got = append(got, e.name)
	}
	if !slices.Contains(got, "a/sub/f") {
		t.Errorf("delta = %q, want a/sub/f (written through b/link)", got)
	}
	// Without the link, a is copied: the walk looks at b (the root's
	// names are its baseline's: nothing made, deleted or moved there)
	// and b's children, not at a nor below it.
	must(t, os.Remove(dir+"/b/link"))
	_, r = takeFull(t, c, r.Baseline)
	base := &c.kept[len(c.kept)-1]
	res = execproto.CheckpointResult{}
	keys, err := c.plain(base, newHotSet(&dirtySet{dirs: map[string]bool{"b": false}}), nil, &specialQueue{}, nil, &res)
	if err != nil {
		t.Fatal(err)
	}
	if res.Walked != 2 || !slices.Equal(keys, base.entries) {
		t.Errorf("walk with b dirty looked at %d entries (want 2: b, b/g) and kept %d keys (want the baseline's %d)", res.Walked, len(keys), len(base.entries))
	}
}
