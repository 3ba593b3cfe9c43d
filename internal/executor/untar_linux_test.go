package executor

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func tarOf(t *testing.T, hs ...*tar.Header) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = h.Linkname // the test puts a file's content there
			h.Linkname, h.Size = "", int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b.Bytes())
}

// TestUntar: a whole tree extracts with modes and times (a read-only
// directory's set after its entries), links as links, hard links and
// FIFOs; what would leave the directory, through a name or a link, is
// refused and writes nothing outside.
func TestUntar(t *testing.T) {
	when := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	dir := t.TempDir()
	err := untar(tarOf(t,
		&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: when},
		&tar.Header{Typeflag: tar.TypeDir, Name: "ro/", Mode: 0o555, ModTime: when},
		&tar.Header{Typeflag: tar.TypeReg, Name: "ro/f", Mode: 0o640, ModTime: when, Linkname: "hello\n"},
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "ro-link", Linkname: "ro/f", ModTime: when},
		&tar.Header{Typeflag: tar.TypeLink, Name: "hard", Linkname: "ro/f", ModTime: when},
		&tar.Header{Typeflag: tar.TypeFifo, Name: "pipe", Mode: 0o600, ModTime: when},
		&tar.Header{Typeflag: tar.TypeReg, Name: "deep/er/x", Mode: 0o4755, ModTime: when, Linkname: "x"},
	), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		mode os.FileMode
	}{
		{"ro", os.ModeDir | 0o555},
		{"ro/f", 0o640},
		{"ro-link", os.ModeSymlink | 0o777},
		{"pipe", os.ModeNamedPipe | 0o600},
		{"deep/er/x", os.ModeSetuid | 0o755},
	} {
		fi, err := os.Lstat(filepath.Join(dir, c.name))
		if err != nil || fi.Mode() != c.mode {
			t.Errorf("%s: %v, %v; want mode %v", c.name, fi, err, c.mode)
			continue
		}
		if c.mode&os.ModeSymlink == 0 && !fi.ModTime().Equal(when) {
			t.Errorf("%s: mtime %v, want %v", c.name, fi.ModTime(), when)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "hard")); err != nil || string(b) != "hello\n" {
		t.Errorf("hard link: %q, %v", b, err)
	}

	for _, bad := range []struct {
		name string
		hs   []*tar.Header
		msg  string
	}{
		{"dotdot", []*tar.Header{{Typeflag: tar.TypeReg, Name: "../escaped", Mode: 0o644}}, "outside the directory"},
		{"absolute", []*tar.Header{{Typeflag: tar.TypeReg, Name: "/escaped", Mode: 0o644}}, "outside the directory"},
		{"through a link", []*tar.Header{
			{Typeflag: tar.TypeSymlink, Name: "out", Linkname: ".."},
			{Typeflag: tar.TypeReg, Name: "out/escaped", Mode: 0o644},
		}, "escapes"},
		{"hard link out", []*tar.Header{{Typeflag: tar.TypeLink, Name: "h", Linkname: "../escaped"}}, "outside the directory"},
		{"whiteout", []*tar.Header{{Typeflag: tar.TypeReg, Name: ".wh.gone", Mode: 0o644}}, "whiteout"},
		{"device", []*tar.Header{{Typeflag: tar.TypeChar, Name: "null", Mode: 0o666}}, "not extracted"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			parent := t.TempDir()
			inner := filepath.Join(parent, "inner")
			if err := os.Mkdir(inner, 0o755); err != nil {
				t.Fatal(err)
			}
			err := untar(tarOf(t, bad.hs...), inner)
			if err == nil || !strings.Contains(err.Error(), bad.msg) {
				t.Errorf("untar = %v, want an error with %q", err, bad.msg)
			}
			if _, err := os.Lstat(filepath.Join(parent, "escaped")); err == nil {
				t.Error("a file was written outside the directory")
			}
		})
	}
}
