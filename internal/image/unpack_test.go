package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ent is one tar entry of a test layer.
type ent struct {
	hdr  tar.Header
	body string
}

func reg(name, body string) ent {
	return ent{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body}
}

func dir(name string, mode int64) ent {
	return ent{tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}, ""}
}

func sym(name, target string) ent {
	return ent{tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, ""}
}

func hard(name, target string) ent {
	return ent{tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}, ""}
}

func dev(name string, typ byte, major, minor int64) ent {
	return ent{tar.Header{Name: name, Typeflag: typ, Devmajor: major, Devminor: minor, Mode: 0o666}, ""}
}

// layerTar builds a tar stream of ents (GNU format for what USTAR cannot
// say, PAX where needed).
func layerTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := e.hdr
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1700000000, 0)
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("WriteHeader(%q) = %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withNUL returns a tar of one file whose PAX path has a NUL byte in it:
// archive/tar refuses to write one, so a placeholder is patched in the PAX
// record's data (which no header checksum covers).
func withNUL(t testing.TB) []byte {
	t.Helper()
	b := layerTar(t, ent{tar.Header{Name: "a\u00e9Zb", Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}, ""})
	i := bytes.Index(b, []byte("path=a\u00e9Zb"))
	if i < 0 {
		t.Fatal("no PAX path record")
	}
	b[i+len("path=a\u00e9")] = 0
	return b
}

// escapeTarget is where the corpus's escapes aim: a directory beside the
// layer's, which must stay empty.
const escapeTarget = "outside"

type layerCase struct {
	name string
	// tar builds the layer; base is the test's directory (the layer is
	// base/store/layer, the escape target base/outside).
	tar func(t testing.TB, base string) []byte
	// err is a substring of the refusal; empty: the layer is accepted and
	// check (if any) looks at it.
	err   string
	check func(t *testing.T, layer string)
}

// layerCorpus is the malicious-layer corpus: every case is refused or
// contained (TestUnpackCorpus), and is a seed of FuzzUnpackLayer.
func layerCorpus() []layerCase {
	fixed := func(ents ...ent) func(testing.TB, string) []byte {
		return func(t testing.TB, _ string) []byte { return layerTar(t, ents...) }
	}
	outside := func(f func(out string) []ent) func(testing.TB, string) []byte {
		return func(t testing.TB, base string) []byte { return layerTar(t, f(filepath.Join(base, escapeTarget))...) }
	}
	return []layerCase{
		{name: "dotdot", tar: fixed(reg("../../outside/x", "escaped")), err: ".. component"},
		{name: "dotdot inside", tar: fixed(reg("a/../../outside/x", "escaped")), err: ".. component"},
		{name: "absolute", tar: outside(func(out string) []ent { return []ent{reg(out+"/x", "escaped")} }), err: "absolute name"},
		{name: "NUL", tar: func(t testing.TB, _ string) []byte { return withNUL(t) }, err: "layer"},
		{name: "through own symlink to outside", tar: outside(func(out string) []ent {
			return []ent{sym("l", out), reg("l/x", "escaped")}
		}), err: "symbolic link"},
		{name: "through relative symlink", tar: fixed(sym("l", "../../outside"), reg("l/x", "escaped")), err: "symbolic link"},
		{name: "through symlink inside the layer", tar: fixed(dir("d", 0o755), sym("l", "d"), reg("l/x", "via link")), err: "symbolic link"},
		{name: "symlink dir then mkdir through", tar: fixed(sym("l", "/tmp"), dir("l/sub", 0o755)), err: "symbolic link"},
		{name: "file over symlink", tar: outside(func(out string) []ent {
			return []ent{sym("l", out+"/x"), reg("l", "in the layer")}
		}), check: func(t *testing.T, layer string) {
			if got := readFile(t, filepath.Join(layer, "l")); got != "in the layer" {
				t.Errorf("l = %q, want the file that replaced the link", got)
			}
		}},
		{name: "symlink targets kept as given", tar: fixed(sym("abs", "/etc/shadow"), sym("rel", "../../../../etc/shadow")), check: func(t *testing.T, layer string) {
			for n, want := range map[string]string{"abs": "/etc/shadow", "rel": "../../../../etc/shadow"} {
				if got, err := os.Readlink(filepath.Join(layer, n)); err != nil || got != want {
					t.Errorf("Readlink(%s) = %q, %v; want %q", n, got, err, want)
				}
			}
		}},
		{name: "hard link out", tar: fixed(hard("h", "../../outside/secret")), err: ".. component"},
		{name: "hard link absolute", tar: fixed(hard("h", "/etc/passwd")), err: "absolute name"},
		{name: "hard link through symlink", tar: fixed(sym("l", "/etc"), hard("h", "l/passwd")), err: "symbolic link"},
		{name: "hard link to missing", tar: fixed(hard("h", "nothing")), err: "no such file"},
		{name: "hard link to itself", tar: fixed(reg("h", "x"), hard("h", "h")), err: "no such file"},
		{name: "hard link to directory", tar: fixed(dir("d", 0o755), hard("h", "d")), err: "not a regular file"},
		{name: "hard link to whiteout", tar: fixed(reg(".wh.gone", ""), hard("h", "gone")), err: "not a regular file"},
		{name: "hard link", tar: fixed(reg("a", "same"), hard("b", "a")), check: func(t *testing.T, layer string) {
			a, b := stat(t, filepath.Join(layer, "a")), stat(t, filepath.Join(layer, "b"))
			if a.Ino != b.Ino {
				t.Errorf("b is inode %d, a %d: want one file", b.Ino, a.Ino)
			}
		}},
		{name: "devices skipped", tar: fixed(dev("sda", tar.TypeBlock, 8, 0), dev("null", tar.TypeChar, 1, 3), dev("mem", tar.TypeChar, 1, 1)), check: func(t *testing.T, layer string) {
			for _, n := range []string{"sda", "null", "mem"} {
				if _, err := os.Lstat(filepath.Join(layer, n)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("device %s: Lstat = %v, want it skipped", n, err)
				}
			}
		}},
		{name: "0/0 character device is a whiteout", tar: fixed(dev("gone", tar.TypeChar, 0, 0)), check: wantWhiteout("gone")},
		{name: "whiteout", tar: fixed(dir("etc", 0o755), reg("etc/.wh.passwd", "")), check: wantWhiteout("etc/passwd")},
		{name: "whiteout without its directory", tar: fixed(reg("a/b/.wh.c", "")), check: wantWhiteout("a/b/c")},
		{name: "whiteout replaces the layer's own file", tar: fixed(reg("f", "x"), reg(".wh.f", "")), check: wantWhiteout("f")},
		{name: "file replaces the layer's own whiteout", tar: fixed(reg(".wh.f", ""), reg("f", "back")), check: func(t *testing.T, layer string) {
			if got := readFile(t, filepath.Join(layer, "f")); got != "back" {
				t.Errorf("f = %q, want back", got)
			}
		}},
		{name: "opaque directory", tar: fixed(dir("d", 0o755), reg("d/.wh..wh..opq", ""), reg("d/new", "n")), check: func(t *testing.T, layer string) {
			buf := make([]byte, 8)
			n, err := unix.Lgetxattr(filepath.Join(layer, "d"), opaqueXattr, buf)
			if err != nil || string(buf[:n]) != "y" {
				t.Errorf("xattr %s of d = %q, %v; want y", opaqueXattr, buf[:n], err)
			}
			if _, err := os.Lstat(filepath.Join(layer, "d", opaqueName)); err == nil {
				t.Errorf("%s was created as a file", opaqueName)
			}
		}},
		{name: "AUFS entries skipped", tar: fixed(reg(".wh..wh.plnk", ""), dir(".wh..wh.aufs", 0o755)), check: func(t *testing.T, layer string) {
			ents, _ := os.ReadDir(layer)
			if len(ents) != 0 {
				t.Errorf("layer holds %v, want nothing", ents)
			}
		}},
		{name: "whiteout of nothing", tar: fixed(reg(".wh.", "")), err: "whiteout of no name"},
		{name: "whiteout of dotdot", tar: fixed(reg(".wh...", "")), err: "whiteout of no name"},
		{name: "duplicate file: last wins", tar: fixed(reg("f", "first"), reg("f", "second")), check: func(t *testing.T, layer string) {
			if got := readFile(t, filepath.Join(layer, "f")); got != "second" {
				t.Errorf("f = %q, want second", got)
			}
		}},
		{name: "directory then file", tar: fixed(dir("d", 0o755), reg("d/x", "x"), reg("d", "file now")), check: func(t *testing.T, layer string) {
			if got := readFile(t, filepath.Join(layer, "d")); got != "file now" {
				t.Errorf("d = %q, want the file", got)
			}
		}},
		{name: "directory twice keeps its content", tar: fixed(dir("d", 0o755), reg("d/x", "x"), dir("d", 0o700)), check: func(t *testing.T, layer string) {
			if got := readFile(t, filepath.Join(layer, "d", "x")); got != "x" {
				t.Errorf("d/x = %q, want x", got)
			}
			if m := stat(t, filepath.Join(layer, "d")).Mode & 0o777; m != 0o700 {
				t.Errorf("d mode %o, want the last entry's 700", m)
			}
		}},
		{name: "through a file", tar: fixed(reg("f", "x"), reg("f/y", "y")), err: "not a directory"},
		{name: "file too large", tar: fixed(reg("big", strings.Repeat("x", 2048))), err: "over the limit"},
		{name: "files too large together", tar: fixed(reg("a", strings.Repeat("x", 700)), reg("b", strings.Repeat("x", 700))), err: "over the limit"},
		{name: "too many entries", tar: func(t testing.TB, _ string) []byte {
			var ents []ent
			for i := range 40 {
				ents = append(ents, reg("f"+strings.Repeat("x", i), ""))
			}
			return layerTar(t, ents...)
		}, err: "more than 32 entries"},
		{name: "size bomb", tar: func(t testing.TB, _ string) []byte {
			// A header claiming a terabyte, and nothing after it.
			var b bytes.Buffer
			if err := tar.NewWriter(&b).WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 40}); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}, err: "over the limit"},
		{name: "owner beyond the sandbox's ids", tar: fixed(ent{tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 70000}, ""}), err: "ids 0 to 65535"},
		{name: "setuid kept", tar: fixed(ent{tar.Header{Name: "su", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 0}, ""}, ent{tar.Header{Name: "sg", Typeflag: tar.TypeReg, Mode: 0o2755, Uid: 33, Gid: 33}, ""}), check: func(t *testing.T, layer string) {
			if st := stat(t, filepath.Join(layer, "su")); st.Mode&0o7777 != 0o4755 {
				t.Errorf("su mode %o, want 4755", st.Mode&0o7777)
			}
			st := stat(t, filepath.Join(layer, "sg"))
			if st.Mode&0o7777 != 0o2755 {
				t.Errorf("sg mode %o, want 2755", st.Mode&0o7777)
			}
			if os.Geteuid() == 0 && (st.Uid != 33 || st.Gid != 33) {
				t.Errorf("sg owner %d:%d, want 33:33", st.Uid, st.Gid)
			}
		}},
		{name: "invalid UTF-8 name applied as is", tar: fixed(reg("caf\xe9/\xff\xfe", "latin-1")), check: func(t *testing.T, layer string) {
			if got := readFile(t, filepath.Join(layer, "caf\xe9", "\xff\xfe")); got != "latin-1" {
				t.Errorf("file = %q", got)
			}
		}},
		{name: "component too long", tar: fixed(reg(strings.Repeat("n", 256), "")), err: "at most 255"},
		{name: "root entry", tar: fixed(dir("./", 0o750), reg("./a", "a")), check: func(t *testing.T, layer string) {
			if m := stat(t, layer).Mode & 0o777; m != 0o750 {
				t.Errorf("root mode %o, want 750", m)
			}
		}},
		{name: "root as a file", tar: fixed(reg(".", "x")), err: "not a directory"},
		{name: "implicit parents", tar: fixed(reg("a/b/c", "c")), check: func(t *testing.T, layer string) {
			if m := stat(t, filepath.Join(layer, "a", "b")).Mode & 0o777; m != 0o755 {
				t.Errorf("a/b mode %o, want 755", m)
			}
		}},
		{name: "read-only directory filled", tar: fixed(dir("ro", 0o500), reg("ro/f", "f")), check: func(t *testing.T, layer string) {
			if m := stat(t, filepath.Join(layer, "ro")).Mode & 0o777; m != 0o500 {
				t.Errorf("ro mode %o, want 500", m)
			}
		}},
		{name: "fifo", tar: fixed(ent{tar.Header{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o640}, ""}), check: func(t *testing.T, layer string) {
			if st := stat(t, filepath.Join(layer, "p")); st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o777 != 0o640 {
				t.Errorf("p mode %o, want a FIFO 640", st.Mode)
			}
		}},
		{name: "unknown type", tar: fixed(ent{tar.Header{Name: "v", Typeflag: 'V'}, ""}), err: "unsupported entry type"},
	}
}

func wantWhiteout(rel string) func(t *testing.T, layer string) {
	return func(t *testing.T, layer string) {
		st := stat(t, filepath.Join(layer, rel))
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("%s: mode %o rdev %d, want a 0/0 character device (a whiteout)", rel, st.Mode, st.Rdev)
		}
	}
}

func stat(t *testing.T, p string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("Lstat(%s) = %v", p, err)
	}
	return st
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// corpusLimits are small, so the corpus's size cases stay small.
var corpusLimits = Limits{Bytes: 1024 + 40*1024, Entries: 32}

// TestUnpackCorpus: each malicious case is refused with an error naming
// what, or contained in the layer; nothing appears outside it, and a
// refused layer leaves no directory.
func TestUnpackCorpus(t *testing.T) {
	for _, c := range layerCorpus() {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			lim := corpusLimits
			if strings.Contains(c.name, "large") {
				lim.Bytes = 1024
			}
			stats, err := unpackContained(t, base, c.tar(t, base), lim)
			layer := filepath.Join(base, "store", "layer")
			switch {
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("UnpackLayer = %v, want an error with %q", err, c.err)
			case c.err != "":
				if _, serr := os.Lstat(layer); !errors.Is(serr, fs.ErrNotExist) {
					t.Errorf("refused layer left %s behind (Lstat: %v)", layer, serr)
				}
			case err != nil:
				t.Fatalf("UnpackLayer = %v, want it accepted", err)
			default:
				if stats.Entries == 0 {
					t.Errorf("stats %+v: no entries counted", stats)
				}
				if c.check != nil {
					c.check(t, layer)
				}
			}
		})
	}
}

// unpackContained unpacks b into base/store/layer and fails the test if
// anything was written outside base/store: base/outside (the corpus's
// target) must stay empty and base must hold nothing else.
func unpackContained(t testing.TB, base string, b []byte, lim Limits) (LayerStats, error) {
	t.Helper()
	out := filepath.Join(base, escapeTarget)
	for _, d := range []string{out, filepath.Join(base, "store")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := UnpackLayer(bytes.NewReader(b), filepath.Join(base, "store", "layer"), lim, os.Geteuid() == 0)
	if ents, _ := os.ReadDir(out); len(ents) > 0 {
		t.Fatalf("the layer wrote %s outside its directory", filepath.Join(out, ents[0].Name()))
	}
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if e.Name() != escapeTarget && e.Name() != "store" {
			t.Fatalf("the layer wrote %s outside its directory", filepath.Join(base, e.Name()))
		}
	}
	ents, _ = os.ReadDir(filepath.Join(base, "store"))
	for _, e := range ents {
		if e.Name() != "layer" {
			t.Fatalf("the layer wrote %s outside its directory", filepath.Join(base, "store", e.Name()))
		}
	}
	return stats, err
}

// FuzzUnpackLayer feeds arbitrary bytes to the unpacker (the corpus and
// testdata/fuzz are its seeds): it may refuse them, but never write
// outside the layer's directory, never leave a refused layer behind, and
// never create a device node other than a whiteout.
func FuzzUnpackLayer(f *testing.F) {
	for _, c := range layerCorpus() {
		f.Add(c.tar(f, "/fuzz-base"))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		base := t.TempDir()
		_, err := unpackContained(t, base, b, corpusLimits)
		layer := filepath.Join(base, "store", "layer")
		if err != nil {
			if _, serr := os.Lstat(layer); !errors.Is(serr, fs.ErrNotExist) {
				t.Fatalf("refused layer (%v) left its directory behind", err)
			}
			return
		}
		err = filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFBLK:
				t.Errorf("%s is a block device", p)
			case unix.S_IFCHR:
				if st.Rdev != 0 {
					t.Errorf("%s is a character device %d, not a whiteout", p, st.Rdev)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
