package executor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenComponent checks that the walk's open without openat2 (gVisor's
// case) gives what openat2 with resolveBeneath gives on Linux, name for
// name: the same success, or the same errno. A name of more than one
// component, which the walk never opens, it refuses (EXDEV).
func TestOpenComponent(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(os.Symlink("file", filepath.Join(dir, "link-file")))
	must(os.Symlink("sub", filepath.Join(dir, "link-dir")))
	must(os.Symlink("/", filepath.Join(dir, "link-root")))
	must(os.Symlink("/proc/self/root", filepath.Join(dir, "link-magic")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	mounted := false
	if os.Geteuid() == 0 {
		must(os.Mkdir(filepath.Join(dir, "mnt"), 0o755))
		if err := unix.Mount("tmpfs", filepath.Join(dir, "mnt"), "tmpfs", 0, "size=64k"); err == nil {
			mounted = true
			t.Cleanup(func() { _ = unix.Unmount(filepath.Join(dir, "mnt"), unix.MNT_DETACH) })
		} else {
			t.Logf("no mount point case: mount tmpfs: %v", err)
		}
	}
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(err)
	defer unix.Close(root)
	if !haveOpenat2() {
		t.Skip("this kernel has no openat2 to compare with")
	}
	type tc struct {
		name  string
		flags int
	}
	cases := []tc{}
	names := []string{"file", "sub", ".", "..", "", "link-file", "link-dir", "link-root", "link-magic", "fifo", "missing"}
	if mounted {
		names = append(names, "mnt")
	}
	for _, n := range names {
		for _, f := range []int{unix.O_RDONLY | unix.O_NONBLOCK, unix.O_RDONLY | unix.O_DIRECTORY, unix.O_PATH | unix.O_DIRECTORY} {
			cases = append(cases, tc{n, f})
		}
	}
	errno := func(err error) unix.Errno {
		var e unix.Errno
		if errors.As(err, &e) {
			return e
		}
		return 0
	}
	for _, name := range []string{"sub/..", "sub/../file", "sub/.", "/etc", "../x"} {
		if fd, err := openComponent(root, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC); !errors.Is(err, unix.EXDEV) {
			t.Errorf("openComponent(%q) = %d, %v; want EXDEV (one component only)", name, fd, err)
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	for _, c := range cases {
		flags := c.flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if flags&unix.O_PATH == 0 {
			flags |= unix.O_NOCTTY
		}
		want, werr := unix.Openat2(root, c.name, &unix.OpenHow{Flags: uint64(flags), Resolve: resolveBeneath})
		got, gerr := openComponent(root, c.name, flags)
		if errno(gerr) != errno(werr) {
			t.Errorf("openComponent(%q, %#x) = %v, want %v (openat2's)", c.name, c.flags, gerr, werr)
		}
		if werr == nil && gerr == nil {
			var a, b unix.Stat_t
			must(unix.Fstat(want, &a))
			must(unix.Fstat(got, &b))
			if a.Ino != b.Ino || a.Dev != b.Dev {
				t.Errorf("openComponent(%q) opened inode %d, openat2 %d", c.name, b.Ino, a.Ino)
			}
		}
		for _, fd := range []int{want, got} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
}

func TestNormalTime(t *testing.T) {
	for _, c := range []struct{ sec, nsec, wantSec, wantNsec int64 }{
		{0, 0, 0, 0},
		{1, 999_999_999, 1, 999_999_999},
		{-315619200, 500_000_000, -315619200, 500_000_000}, // Linux's 1960-01-01 00:00:00.5
		{-315619199, -500_000_000, -315619200, 500_000_000},
		{-315619199, 3_794_967_296, -315619200, 500_000_000}, // gVisor's 1960-01-01 00:00:00.5
		{-1, -1, -2, 999_999_999},
		{5, 2_000_000_001, 7, 1},
	} {
		sec, nsec := normalTime(unix.Timespec{Sec: c.sec, Nsec: c.nsec})
		if sec != c.wantSec || nsec != c.wantNsec {
			t.Errorf("normalTime(%d, %d) = %d, %d; want %d, %d", c.sec, c.nsec, sec, nsec, c.wantSec, c.wantNsec)
		}
	}
}
