package sandbox_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// entry is one entry of a test archive: a type ('f' file, 'd' directory,
// 'l' symbolic link, 'h' hard link, 'c' character device, 'p' pipe), a
// name and, for links, a target.
type entry struct {
	kind         byte
	name, target string
}

func archive(t testing.TB, es ...entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Mode: 0o644, Linkname: e.target, Format: tar.FormatPAX}
		switch e.kind {
		case 'f':
			h.Typeflag, h.Size = tar.TypeReg, 2
		case 'd':
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case 'l':
			h.Typeflag = tar.TypeSymlink
		case 'h':
			h.Typeflag = tar.TypeLink
		case 'c':
			h.Typeflag = tar.TypeChar
		case 'p':
			h.Typeflag = tar.TypeFifo
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("x\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCheckWorkspaceTar: the one check of a workspace tar, which the
// API's uploads and the CLI's tars go through: what it accepts, and for
// what it refuses, the entry it names and why.
func TestCheckWorkspaceTar(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		// bad is the entry refused and part of the reason; "" accepts.
		bad, reason string
	}{
		{"plain tree", []entry{{'d', "./", ""}, {'d', "src/", ""}, {'f', "src/a.go", ""}, {'f', "./b.txt", ""}}, "", ""},
		{"links inside", []entry{
			{'f', "lib/libx.so.1.2", ""},
			{'l', "lib/libx.so.1", "libx.so.1.2"},
			{'l', "lib/libx.so", "libx.so.1"},
			{'l', "bin/x", "../lib/libx.so"},
			{'h', "lib/copy", "lib/libx.so.1.2"},
			{'l', "here", "."},
			{'l', "dangling", "nowhere/yet"},
		}, "", ""},
		{"a link to a link made later", []entry{{'l', "a", "b"}, {'l', "b", "c"}, {'f', "c", ""}}, "", ""},
		{"parent dir", []entry{{'f', "ok.txt", ""}, {'f', "../x.txt", ""}}, "../x.txt", "a .. element"},
		{"dot dot inside", []entry{{'f', "a/../../x", ""}}, "a/../../x", "a .. element"},
		{"absolute", []entry{{'f', "/etc/passwd", ""}}, "/etc/passwd", "an absolute name"},
		{"empty name", []entry{{'f', "", ""}}, "", "an empty name"},
		{"the workspace itself", []entry{{'f', ".", ""}}, ".", "names the workspace itself"},
		{"absolute symlink", []entry{{'l', "passwd", "/etc/passwd"}}, "passwd", "an absolute target"},
		{"symlink up", []entry{{'l', "up", "../.."}}, "up", "points outside the workspace"},
		{"symlink up from a dir", []entry{{'l', "a/b/up", "../../../x"}}, "a/b/up", "points outside the workspace"},
		{"symlink empty", []entry{{'l', "e", ""}}, "e", "an empty target"},
		{"write through a symlink", []entry{{'l', "d", "sub"}, {'f', "d/x", ""}}, "d/x", "below the symbolic link \"d\""},
		{"dir over a symlink", []entry{{'l', "d", "sub"}, {'d', "d/", ""}}, "d/", "replaces the symbolic link"},
		{"symlink over a dir", []entry{{'f', "d/x", ""}, {'l', "d", "."}}, "d", "replaces a directory"},
		{"up out of a symlink", []entry{{'d', "sub/", ""}, {'l', "sub/l", ".."}, {'l', "sub/a", "l/../x"}}, "sub/a", "points outside the workspace"},
		{"up out of a link's target", []entry{{'l', "t", "."}, {'l', "s/a", "../t/../x"}}, "s/a", "points outside the workspace"},
		{"a link where a target passes", []entry{{'l', "sub/a", "b/../x"}, {'l', "sub/b", ".."}}, "sub/b", "where the target of an earlier link passes"},
		{"hard link out", []entry{{'h', "h", "../etc/passwd"}}, "h", "a .. element"},
		{"hard link absolute", []entry{{'h', "h", "/etc/passwd"}}, "h", "an absolute name"},
		{"hard link to nothing", []entry{{'h', "h", "later"}, {'f', "later", ""}}, "h", "not a regular file of an earlier entry"},
		{"hard link to a symlink", []entry{{'l', "s/l", "../x"}, {'h', "h", "s/l"}}, "h", "not a regular file of an earlier entry"},
		{"device", []entry{{'c', "null", ""}}, "null", "a character device"},
		{"pipe", []entry{{'p', "fifo", ""}}, "fifo", "a named pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sandbox.CheckWorkspaceTar(bytes.NewReader(archive(t, tc.entries...)), sandbox.TarLimits{})
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("CheckWorkspaceTar = %v, want nil", err)
				}
				return
			}
			var te *sandbox.TarEntryError
			if !errors.As(err, &te) || te.Name != tc.bad || !strings.Contains(te.Reason, tc.reason) {
				t.Fatalf("CheckWorkspaceTar = %v, want entry %q refused: %s", err, tc.bad, tc.reason)
			}
		})
	}
}

// TestCheckWorkspaceTarLimits: the entries and the bytes they unpack to
// are bounded; a stream that is no tar is an error too.
func TestCheckWorkspaceTarLimits(t *testing.T) {
	three := archive(t, entry{'f', "a", ""}, entry{'f', "b", ""}, entry{'f', "c", ""})
	for _, tc := range []struct {
		lim  sandbox.TarLimits
		want string
	}{
		{sandbox.TarLimits{}, ""},
		{sandbox.TarLimits{Entries: 3, Bytes: 6}, ""},
		{sandbox.TarLimits{Entries: 2}, `entry "c": the archive has more than 2 entries`},
		{sandbox.TarLimits{Bytes: 5}, `entry "c": the files add up to more than 5 bytes`},
	} {
		err := sandbox.CheckWorkspaceTar(bytes.NewReader(three), tc.lim)
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || err.Error() != tc.want)) {
			t.Errorf("CheckWorkspaceTar(limits %+v) = %v, want %q", tc.lim, err, tc.want)
		}
	}
	if err := sandbox.CheckWorkspaceTar(strings.NewReader(strings.Repeat("not a tar ", 100)), sandbox.TarLimits{}); err == nil {
		t.Error("CheckWorkspaceTar(garbage) = nil")
	}
	// Cut short anywhere, in a header, in data or padding, at a block
	// boundary, before the end-of-archive block: an error, as tar would
	// fail on it too.
	for _, cut := range []int{100, 700, 1024, 1100, 2048, len(three) - 1024} {
		if err := sandbox.CheckWorkspaceTar(bytes.NewReader(three[:cut]), sandbox.TarLimits{}); err == nil {
			t.Errorf("CheckWorkspaceTar(the archive cut at %d of %d bytes) = nil", cut, len(three))
		}
	}
}

// FuzzCheckWorkspaceTar: no input makes the check panic or hang, and an
// archive it accepts keeps every entry and every link inside the directory
// it is unpacked into, as unpack, an independent model of the unpack
// (links followed as a file system follows them), finds.
func FuzzCheckWorkspaceTar(f *testing.F) {
	f.Add(archive(f, entry{'f', "ok.txt", ""}, entry{'f', "../x.txt", ""}))
	f.Add(archive(f, entry{'d', "src/", ""}, entry{'f', "src/a", ""}, entry{'l', "src/b", "a"}, entry{'h', "c", "src/a"}))
	f.Add(archive(f, entry{'l', "sub/a", "b/../x"}, entry{'l', "sub/b", ".."}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if sandbox.CheckWorkspaceTar(bytes.NewReader(b), sandbox.TarLimits{Entries: 256}) != nil {
			return // refusing is fine; panicking or hanging is not
		}
		if err := unpack(b); err != nil {
			t.Fatalf("an accepted archive escapes: %v", err)
		}
	})
}

// unpack models unpacking tar b into an empty directory: entries are
// created at their names, through the links already there, as tar would,
// and every link is then followed to its end. It reports an entry or a
// link that lands outside the directory.
func unpack(b []byte) error {
	links := map[string]string{} // name -> target, of each symbolic link
	// resolve follows p (elements, from the directory) through the links,
	// the last one too when last; ok is false when it lands outside. Like
	// the kernel, one resolution follows at most 40 links (then ELOOP:
	// it lands nowhere).
	resolve := func(p []string, last bool) (at []string, ok bool) {
		follows := 0
		var walk func(p []string, last bool) ([]string, bool)
		walk = func(p []string, last bool) ([]string, bool) {
			var cur []string
			for i, e := range p {
				switch e {
				case "", ".":
					continue
				case "..":
					if len(cur) == 0 {
						return nil, false
					}
					cur = cur[:len(cur)-1]
					continue
				}
				cur = append(cur, e)
				to, isLink := links[strings.Join(cur, "/")]
				if !isLink || (i == len(p)-1 && !last) {
					continue
				}
				if follows++; follows > 40 {
					return nil, true
				}
				if strings.HasPrefix(to, "/") {
					return nil, false
				}
				next, ok := walk(append(append([]string(nil), cur[:len(cur)-1]...), strings.Split(to, "/")...), true)
				if !ok || next == nil && follows > 40 {
					return nil, ok
				}
				cur = next
			}
			return cur, true
		}
		return walk(p, last)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil // the check read it to its end, so this cannot be
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		at, ok := resolve(strings.Split(h.Name, "/"), false)
		if !ok {
			return errors.New("entry " + h.Name + " is unpacked outside")
		}
		name := strings.Join(at, "/")
		delete(links, name)
		switch h.Typeflag {
		case tar.TypeSymlink:
			links[name] = h.Linkname
		case tar.TypeLink:
			if _, ok := resolve(strings.Split(h.Linkname, "/"), false); !ok {
				return errors.New("hard link " + h.Name + " links outside")
			}
		}
	}
	for name := range links {
		if _, ok := resolve(strings.Split(name, "/"), true); !ok {
			return errors.New("link " + name + " points outside")
		}
	}
	return nil
}
