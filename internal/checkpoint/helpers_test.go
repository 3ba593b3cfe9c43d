package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
	"github.com/airlockrun/airlock/internal/store/postgres"
)

// testStore is a Store on disk, with its parts at hand for tests that
// damage them.
type testStore struct {
	*Store
	blobs  *blob.Store
	chunks *chunk.Dir
	// reopen is the environment that makes a child process of the test
	// binary open the same store (collectChild).
	reopen []string
}

func newTestStore(t testing.TB) *testStore {
	t.Helper()
	dir := t.TempDir()
	return openTestStore(t, []string{"CKPT_CHILD_BLOBS=" + filepath.Join(dir, "blobs"), "CKPT_CHILD_CHUNKS=" + filepath.Join(dir, "chunks")})
}

// openTestStore opens the store that env names (see openStore), closed
// at t's end; a reopen of it (reopenStore, a child) opens the same.
func openTestStore(t testing.TB, env []string) *testStore {
	t.Helper()
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	ts, closeStore, err := openStore(func(k string) string { return vars[k] }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)
	ts.reopen = env
	return ts
}

// openStore opens the store the CKPT_CHILD_ variables getenv reads name:
// CKPT_CHILD_PG, a PostgreSQL database's URL (its blob and chunk tables,
// blobs spooled under spool), or else the blob directory CKPT_CHILD_BLOBS
// and the chunk directory CKPT_CHILD_CHUNKS. The tests' stores, their
// reopenings and the children they start all open theirs here. The
// function returned closes what it opened.
func openStore(getenv func(string) string, spool string) (*testStore, func(), error) {
	var bl *blob.Store
	var b chunk.Backend
	closeStore := func() {}
	if url := getenv("CKPT_CHILD_PG"); url != "" {
		st, err := postgres.Open(context.Background(), url, postgres.Options{Redactor: store.NoRedaction})
		if err != nil {
			return nil, nil, err
		}
		closeStore = func() { st.Close() }
		if bl, err = blob.New(filepath.Join(spool, "spool"), blob.Options{Backend: st.Blobs()}); err != nil {
			st.Close()
			return nil, nil, err
		}
		b = st.Chunks()
	} else {
		var err error
		if bl, err = blob.New(getenv("CKPT_CHILD_BLOBS"), blob.Options{}); err != nil {
			return nil, nil, err
		}
		if b, err = chunk.NewDir(getenv("CKPT_CHILD_CHUNKS")); err != nil {
			return nil, nil, err
		}
	}
	ts, err := storeOn(bl, b)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	return ts, closeStore, nil
}

// storeOn returns a testStore of the blobs bl and the chunk backend b.
func storeOn(bl *blob.Store, b chunk.Backend) (*testStore, error) {
	cs, err := chunk.NewStore(b)
	if err != nil {
		return nil, err
	}
	s, err := New(bl, cs)
	if err != nil {
		return nil, err
	}
	cd, _ := b.(*chunk.Dir)
	return &testStore{Store: s, blobs: bl, chunks: cd}, nil
}

func newTestStoreOn(t testing.TB, bl *blob.Store, b chunk.Backend) *testStore {
	t.Helper()
	ts, err := storeOn(bl, b)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// tent is an entry of a tar stream a test writes.
type tent struct {
	typ   byte
	name  string
	body  string
	link  string
	mode  int64
	uid   int
	mtime time.Time
	// size, when not -1 and not 0, is the header's size in place of
	// len(body) (a truncated body).
	size int64
	// pax adds PAX records.
	pax map[string]string
}

func reg(name, body string) tent { return tent{typ: tar.TypeReg, name: name, body: body, mode: 0o644} }
func dir(name string) tent       { return tent{typ: tar.TypeDir, name: name + "/", mode: 0o755} }
func sym(name, target string) tent {
	return tent{typ: tar.TypeSymlink, name: name, link: target, mode: 0o777}
}

func hard(name, target string) tent {
	return tent{typ: tar.TypeLink, name: name, link: target, mode: 0o644}
}
func fifo(name string) tent { return tent{typ: tar.TypeFifo, name: name, mode: 0o600} }
func wh(name string) tent {
	d, b := parentName(name)
	if d != "" {
		d += "/"
	}
	return tent{typ: tar.TypeReg, name: d + ".wh." + b}
}
func opq(dirName string) tent { return tent{typ: tar.TypeReg, name: dirName + "/.wh..wh..opq"} }

var epoch = time.Unix(1_700_000_000, 123_456_789)

// tarStream writes ents as a tar stream, with the end-of-archive marker.
func tarStream(t testing.TB, ents ...tent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		mt := e.mtime
		if mt.IsZero() {
			mt = epoch
		}
		h := &tar.Header{
			Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			ModTime: mt, Format: tar.FormatPAX, PAXRecords: e.pax,
		}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeXGlobalHeader {
			h = &tar.Header{Typeflag: e.typ, PAXRecords: e.pax}
		}
		if e.size > 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil && !errors.Is(err, tar.ErrWriteTooLong) {
				t.Fatal(err)
			}
		}
		if e.size > int64(len(e.body)) {
			// A truncated body: stop here, as a stream cut off does.
			tw.Flush()
			return b.Bytes()
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// rent is an entry of a restored tar stream.
type rent struct {
	typ      byte
	name     string
	link     string
	mode     int64
	uid, gid int
	mtime    int64
	size     int64
	sum      [32]byte
	body     string // the first 64 bytes
}

func (r rent) String() string {
	return fmt.Sprintf("%c %q mode %o uid %d mtime %d size %d link %q body %q", r.typ, r.name, r.mode, r.uid, r.mtime, r.size, r.link, r.body)
}

// readTar parses a tar stream into its entries, hashing the bodies.
func readTar(t testing.TB, r io.Reader) []rent {
	t.Helper()
	tr := tar.NewReader(r)
	var out []rent
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("read restored tar: %v", err)
		}
		hs := sha256.New()
		head := &limitedBuffer{n: 64}
		n, err := io.Copy(io.MultiWriter(hs, head), tr)
		if err != nil {
			t.Fatalf("read restored tar: %q: %v", h.Name, err)
		}
		e := rent{typ: h.Typeflag, name: h.Name, link: h.Linkname, mode: h.Mode, uid: h.Uid, gid: h.Gid, mtime: h.ModTime.UnixNano(), size: n, body: head.String()}
		hs.Sum(e.sum[:0])
		out = append(out, e)
	}
}

type limitedBuffer struct {
	bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// restoreTar restores digest and parses the stream.
func restoreTar(t testing.TB, s *testStore, tenant, digest string) []rent {
	t.Helper()
	var b bytes.Buffer
	if err := s.Restore(context.Background(), tenant, digest, &b); err != nil {
		t.Fatalf("Restore(%s) = %v", digest, err)
	}
	return readTar(t, &b)
}

func write(t testing.TB, s *testStore, tenant, parent string, full bool, stream []byte) Result {
	t.Helper()
	r, err := s.Write(context.Background(), tenant, parent, full, bytes.NewReader(stream))
	if err != nil {
		t.Fatalf("Write(parent %q, full %v) = %v", parent, full, err)
	}
	return r
}

// A tree on disk, walked.

// fsent is what a test compares of a file-system entry.
type fsent struct {
	name     string
	mode     os.FileMode // type and permission bits
	uid, gid uint32
	mtime    int64
	size     int64
	sum      [32]byte
	link     string
	ino      uint64 // regular files: to find hard links
}

// walkFS returns the entries below root in walk order.
func walkFS(t testing.TB, root string) []fsent {
	t.Helper()
	var out []fsent
	var walk func(rel string)
	walk = func(rel string) {
		f, err := os.Open(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		for _, n := range names {
			p := n
			if rel != "" {
				p = rel + "/" + n
			}
			full := filepath.Join(root, p)
			var st unix.Stat_t
			if err := unix.Lstat(full, &st); err != nil {
				t.Fatal(err)
			}
			e := fsent{
				name: p, uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Nano(),
				mode: os.FileMode(st.Mode & 0o777),
			}
			if st.Mode&unix.S_ISUID != 0 {
				e.mode |= os.ModeSetuid
			}
			if st.Mode&unix.S_ISGID != 0 {
				e.mode |= os.ModeSetgid
			}
			if st.Mode&unix.S_ISVTX != 0 {
				e.mode |= os.ModeSticky
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				b, err := os.ReadFile(full)
				if err != nil {
					t.Fatal(err)
				}
				e.size, e.sum, e.ino = int64(len(b)), sha256.Sum256(b), st.Ino
			case unix.S_IFDIR:
				e.mode |= os.ModeDir
			case unix.S_IFLNK:
				e.mode |= os.ModeSymlink
				if e.link, err = os.Readlink(full); err != nil {
					t.Fatal(err)
				}
				e.mode &^= 0o777 // not kept by every file system
			case unix.S_IFIFO:
				e.mode |= os.ModeNamedPipe
			default:
				t.Fatalf("%q: a file type the tests do not make", p)
			}
			out = append(out, e)
			if e.mode.IsDir() {
				walk(p)
			}
		}
	}
	walk("")
	return out
}

// tarOf writes the entries of a walk as tar entries: all of them (full),
// or, against the walk before (prev), those that are new or changed and a
// whiteout for each name gone, as the executor does. Hard links are to the
// first name of their file in the stream (a file whose other names are
// not in a delta is written with its content).
func tarOf(t testing.TB, root string, prev, cur []fsent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	old := map[string]fsent{}
	for _, e := range prev {
		old[e.name] = e
	}
	now := map[string]bool{}
	for _, e := range cur {
		now[e.name] = true
	}
	// Whiteouts first: for names gone whose directory is still there as
	// a directory (what is below a name gone goes with it).
	for _, e := range prev {
		if now[e.name] {
			continue
		}
		d, base := parentName(e.name)
		if d != "" {
			if o, ok := old[d]; !ok || !now[d] || !o.mode.IsDir() || typeChanged(o, find(cur, d)) {
				continue
			}
		}
		name := ".wh." + base
		if d != "" {
			name = d + "/" + name
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
	}
	first := map[uint64]string{}
	for _, e := range cur {
		o, had := old[e.name]
		if had && o == e && prev != nil {
			if e.ino != 0 {
				if _, ok := first[e.ino]; !ok {
					first[e.ino] = e.name
				}
			}
			continue
		}
		h := &tar.Header{
			Name: e.name, Mode: int64(e.mode.Perm()), Uid: int(e.uid), Gid: int(e.gid),
			ModTime: time.Unix(0, e.mtime), Format: tar.FormatPAX,
		}
		if e.mode&os.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if e.mode&os.ModeSetgid != 0 {
			h.Mode |= 0o2000
		}
		if e.mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		var body []byte
		switch {
		case e.mode.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		case e.mode&os.ModeSymlink != 0:
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		case e.mode&os.ModeNamedPipe != 0:
			h.Typeflag = tar.TypeFifo
		default:
			if f, ok := first[e.ino]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, f
				break
			}
			first[e.ino] = e.name
			var err error
			if body, err = os.ReadFile(filepath.Join(root, e.name)); err != nil {
				t.Fatal(err)
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("%q: %v", e.name, err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func find(es []fsent, name string) fsent {
	for _, e := range es {
		if e.name == name {
			return e
		}
	}
	return fsent{}
}

func typeChanged(a, b fsent) bool { return a.mode.Type() != b.mode.Type() }

// extract unpacks a restored tar stream into the empty directory root,
// as the sandbox does: every name checked, times set last.
func extract(t testing.TB, r io.Reader, root string) {
	t.Helper()
	tr := tar.NewReader(r)
	type dirTime struct {
		path string
		mt   time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if err := validName(name); err != nil {
			t.Fatalf("restored tar: %q: %v", h.Name, err)
		}
		p := filepath.Join(root, name)
		mode := uint32(h.Mode)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, dirTime{p, h.ModTime})
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				t.Fatal(err)
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(root, h.Linkname), p); err != nil {
				t.Fatal(err)
			}
			continue
		case tar.TypeFifo:
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("restored tar: %q: type %c", h.Name, h.Typeflag)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeSymlink {
			if err := unix.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
		ts := []unix.Timespec{unix.NsecToTimespec(h.ModTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chtimes(dirs[i].path, dirs[i].mt, dirs[i].mt); err != nil {
			t.Fatal(err)
		}
	}
}

// sameFS reports how two walks differ: entries, and which names share a
// file (hard links).
func sameFS(t testing.TB, got, want []fsent) {
	t.Helper()
	groups := func(es []fsent) map[string]string {
		first := map[uint64]string{}
		out := map[string]string{}
		for _, e := range es {
			if e.ino == 0 {
				continue
			}
			if _, ok := first[e.ino]; !ok {
				first[e.ino] = e.name
			}
			out[e.name] = first[e.ino]
		}
		return out
	}
	gg, wg := groups(got), groups(want)
	strip := func(es []fsent) []fsent {
		out := slices.Clone(es)
		for i := range out {
			out[i].ino = 0
		}
		return out
	}
	g, w := strip(got), strip(want)
	if !slices.Equal(g, w) {
		for i := 0; i < max(len(g), len(w)); i++ {
			var a, b fsent
			if i < len(g) {
				a = g[i]
			}
			if i < len(w) {
				b = w[i]
			}
			if a != b {
				t.Errorf("restored tree differs at entry %d:\n got  %+v\n want %+v", i, a, b)
				break
			}
		}
		t.Fatalf("restored tree: %d entries, want %d", len(g), len(w))
	}
	for name, f := range wg {
		if gg[name] != f {
			t.Errorf("restored %q shares its file with %q, want %q", name, gg[name], f)
		}
	}
}
