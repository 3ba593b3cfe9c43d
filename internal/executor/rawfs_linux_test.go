package executor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMkdirAll creates as os.MkdirAll does: missing parents with the same
// mode, an existing directory or a link to one accepted, a file in the way
// refused with ENOTDIR, and the kernel's error wrapped in a PathError.
func TestMkdirAll(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "a/b/c")
	if err := mkdirAll(deep, 0o750); err != nil {
		t.Fatalf("mkdirAll(%q) = %v", deep, err)
	}
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		fi, err := os.Stat(filepath.Join(dir, d))
		if err != nil || !fi.IsDir() {
			t.Fatalf("%s after mkdirAll: %v, %v; want a directory", d, fi, err)
		}
		if got := fi.Mode().Perm() &^ 0o022; got != 0o750 {
			t.Errorf("%s: mode %v, want 0750 less the umask", d, fi.Mode().Perm())
		}
	}
	if err := mkdirAll(deep, 0o755); err != nil {
		t.Errorf("mkdirAll of an existing directory = %v, want nil", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(deep, link); err != nil {
		t.Fatal(err)
	}
	if err := mkdirAll(link, 0o755); err != nil {
		t.Errorf("mkdirAll of a link to a directory = %v, want nil", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, filepath.Join(file, "below")} {
		err := mkdirAll(p, 0o755)
		var pe *os.PathError
		if !errors.As(err, &pe) || !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("mkdirAll(%q) = %v, want a PathError of ENOTDIR", p, err)
		}
	}
}

// TestRawFileCalls checks the setup's other raw calls against what the os
// package sees: a file written and then truncated by a shorter write, its
// mode, a symbolic link and its target, existence and kind tests that do
// not follow links, chown and chmod, and errors as unix.Errno.
func TestRawFileCalls(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := rawWriteFile(f, []byte("longer content"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := rawWriteFile(f, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "short" {
		t.Errorf("after two rawWriteFile: %q, %v; want %q", b, err, "short")
	}
	if fi, _ := os.Stat(f); fi == nil || fi.Mode().Perm()&^0o022 != 0o640 {
		t.Errorf("rawWriteFile's mode: %v, want 0640 (set at creation only)", fi)
	}
	if err := rawWriteFile(filepath.Join(dir, "none/f"), nil, 0o644); !errors.Is(err, unix.ENOENT) {
		t.Errorf("rawWriteFile in a missing directory = %v, want ENOENT", err)
	}
	l := filepath.Join(dir, "l")
	if err := rawSymlink("some/where", l); err != nil {
		t.Fatal(err)
	}
	if got, err := rawReadlink(l); err != nil || got != "some/where" {
		t.Errorf("rawReadlink = %q, %v; want %q", got, err, "some/where")
	}
	if _, err := rawReadlink(f); !errors.Is(err, unix.EINVAL) {
		t.Errorf("rawReadlink of a file = %v, want EINVAL", err)
	}
	if err := rawSymlink("x", l); !errors.Is(err, unix.EEXIST) {
		t.Errorf("rawSymlink over a link = %v, want EEXIST", err)
	}
	if !rawExists(l) || rawExists(filepath.Join(dir, "none")) {
		t.Errorf("rawExists(dangling link) = %v, rawExists(missing) = %v; want true, false", rawExists(l), rawExists(filepath.Join(dir, "none")))
	}
	dl := filepath.Join(dir, "dl")
	if err := os.Symlink(dir, dl); err != nil {
		t.Fatal(err)
	}
	if !rawIsDir(dir) || rawIsDir(dl) || rawIsDir(f) {
		t.Errorf("rawIsDir(dir, link to dir, file) = %v, %v, %v; want true, false, false", rawIsDir(dir), rawIsDir(dl), rawIsDir(f))
	}
	if err := rawChmod(f, 0o604); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(f); fi == nil || fi.Mode().Perm() != 0o604 {
		t.Errorf("after rawChmod(0604): %v", fi)
	}
	if os.Geteuid() == 0 {
		if err := rawChown(f, 1234, 5678); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := rawStat(f, &st, 0); err != nil || st.Uid != 1234 || st.Gid != 5678 {
			t.Errorf("after rawChown(1234, 5678): uid %d gid %d, %v", st.Uid, st.Gid, err)
		}
	}
}

// TestReadSmallFile reads as os.ReadFile does, past its first buffer, and
// gives up on a FIFO rather than wait for a writer.
func TestReadSmallFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	want := make([]byte, 5000)
	for i := range want {
		want[i] = byte('a' + i%26)
	}
	if err := os.WriteFile(f, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readSmallFile(f); err != nil || string(got) != string(want) {
		t.Errorf("readSmallFile of %d bytes = %d bytes, %v", len(want), len(got), err)
	}
	self, err := readSmallFile("/proc/self/uid_map")
	if osSelf, _ := os.ReadFile("/proc/self/uid_map"); err != nil || string(self) != string(osSelf) {
		t.Errorf("readSmallFile(/proc/self/uid_map) = %q, %v; os.ReadFile: %q", self, err, osSelf)
	}
	if _, err := readSmallFile(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readSmallFile of a missing file = %v, want ErrNotExist", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readSmallFile(fifo); len(got) != 0 && err == nil {
		t.Errorf("readSmallFile of a FIFO with no writer = %q, %v; want nothing", got, err)
	}
}
