package executor

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestUnpackLikeTar: the importer's tree is GNU tar -xp's for the same
// stream, under three umasks (the importer creates a file with its mode
// where the first file of that mode in the directory kept it whole, and
// fchmods it otherwise; a FIFO too), over a destination that
// already holds some of the names (replaced, as tar replaces them), with
// entries that leave a directory and come back to it (the importer keeps
// the last directory open).
func TestUnpackLikeTar(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("tar not installed")
	}
	mt := time.Date(2022, 1, 2, 3, 4, 5, 600700800, time.UTC)
	type ent struct {
		name, body, link string
		typ              byte
		mode             int64
	}
	ents := []ent{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "a/", typ: tar.TypeDir, mode: 0o750},
		{name: "a/f644", typ: tar.TypeReg, mode: 0o644, body: "six four four\n"},
		{name: "a/f600", typ: tar.TypeReg, mode: 0o600, body: "six hundred\n"},
		{name: "a/f755", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/sh\n"},
		{name: "a/f444", typ: tar.TypeReg, mode: 0o444, body: "read only\n"},
		{name: "a/f000", typ: tar.TypeReg, mode: 0o000, body: "no access\n"},
		{name: "a/f4755", typ: tar.TypeReg, mode: 0o4755, body: "setuid bit\n"},
		{name: "a/f1777", typ: tar.TypeReg, mode: 0o1777, body: "sticky\n"},
		{name: "a/empty", typ: tar.TypeReg, mode: 0o664},
		// Second files of a mode in a directory: created as the first was.
		{name: "a/g644", typ: tar.TypeReg, mode: 0o644, body: "again\n"},
		{name: "a/g600", typ: tar.TypeReg, mode: 0o600, body: "again\n"},
		{name: "a/g4755", typ: tar.TypeReg, mode: 0o4755, body: "again\n"},
		{name: "b/", typ: tar.TypeDir, mode: 0o700},
		{name: "b/big", typ: tar.TypeReg, mode: 0o640, body: strings.Repeat("0123456789abcdef", 70000)},
		{name: "b/sym", typ: tar.TypeSymlink, link: "../a/f644"},
		{name: "a/late", typ: tar.TypeReg, mode: 0o620, body: "back in a\n"},
		{name: "a/hard", typ: tar.TypeLink, link: "b/big"},
		{name: "c/d/e/deep", typ: tar.TypeReg, mode: 0o644, body: "its directories' entries after it\n"},
		{name: "c/d/e/", typ: tar.TypeDir, mode: 0o711},
		{name: "c/", typ: tar.TypeDir, mode: 0o755},
		{name: "c/d/", typ: tar.TypeDir, mode: 0o750},
		{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		{name: "ro/in", typ: tar.TypeReg, mode: 0o644, body: "in a read-only directory\n"},
		{name: "replaced", typ: tar.TypeReg, mode: 0o644, body: "new\n"},
		{name: "fifo", typ: tar.TypeFifo, mode: 0o640},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: mt, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	stream := buf.Bytes()
	// What is there before: a file the stream replaces, a file where it
	// makes a directory's entry (a/f644), a symlink in a name it writes.
	prepare := func(t *testing.T, dir string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "a"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"replaced": "old old old\n", "a/f644": "old\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o666); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("/etc/passwd", filepath.Join(dir, "a", "f600")); err != nil {
			t.Fatal(err)
		}
	}
	// The input as a plain reader, and in frames as the stream's inbox
	// holds it (a peeker: bodies written from the frames), of sizes that
	// cut headers, bodies and padding anywhere.
	inputs := []struct {
		name string
		r    func() io.Reader
	}{
		{"reader", func() io.Reader { return bytes.NewReader(stream) }},
		{"frames", func() io.Reader { return &framedInput{rest: stream, sizes: []int{1, 511, 4099, 256 << 10, 7}} }},
	}
	for _, in := range inputs {
		for _, mask := range []int{0o022, 0o077, 0} {
			t.Run(fmt.Sprintf("%s/umask=%03o", in.name, mask), func(t *testing.T) {
				unpackLikeTar(t, mask, in.r(), stream, prepare)
			})
		}
	}
	t.Run("frames/body cut short", func(t *testing.T) {
		// The stream ends inside b/big's body.
		cut := bytes.Index(stream, []byte("0123456789abcdef")) + 1000
		rfd, err := unix.Open(t.TempDir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(rfd)
		err = unpack(rfd, &framedInput{rest: stream[:cut], sizes: []int{300, 5000}})
		if !errors.Is(err, errTarFormat) || !strings.Contains(err.Error(), "b/big") {
			t.Errorf("unpack(a stream cut inside a body) = %v, want errTarFormat naming b/big", err)
		}
	})
}

// unpackLikeTar unpacks in under umask mask, and stream with GNU tar, each
// over a destination prepare made, and compares the trees.
func unpackLikeTar(t *testing.T, mask int, in io.Reader, stream []byte, prepare func(*testing.T, string)) {
	t.Helper()
	old := syscall.Umask(mask)
	defer syscall.Umask(old)
	got, want := t.TempDir(), t.TempDir()
	prepare(t, got)
	prepare(t, want)
	rfd, err := unix.Open(got, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	if err := unpack(rfd, in); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	// As Untar runs GNU tar: directories' modes and times at the end.
	x := exec.Command("tar", "-xpf", "-", "--delay-directory-restore", "-C", want)
	x.Stdin = bytes.NewReader(stream)
	if out, err := x.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v: %s", err, out)
	}
	if g, w := treeOf(t, got), treeOf(t, want); g != w {
		t.Errorf("unpacked tree:\n%s\nGNU tar's:\n%s", g, w)
	}
}

// treeOf describes the tree at dir: each entry's name, type, mode,
// modification time, size, content or link target, and hard-link count.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %o", rel, st.Mode)
		if st.Mode&unix.S_IFMT != unix.S_IFLNK && rel != "." {
			fmt.Fprintf(&b, " %d.%09d", st.Mtim.Sec, st.Mtim.Nsec)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %d links %q sha256 %x", st.Nlink, clip(string(data)), sha256.Sum256(data))
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " -> %s", l)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func clip(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%s... (%d bytes)", s[:40], len(s))
	}
	return s
}
