package executor

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// inMountNamespace runs f on a thread of its own in a new mount namespace
// (root only), on a tmpfs at a new directory, which it is given; the
// thread ends with f, and the namespace with it.
func inMountNamespace(t *testing.T, f func(dir string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a mount namespace and mounts)")
	}
	dir := t.TempDir()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread, whose mount namespace is not the
		// process's, ends with this goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Errorf("make mounts private: %v", err)
			return
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0751"); err != nil {
			t.Errorf("tmpfs: %v", err)
			return
		}
		f(dir)
	}()
	<-done
}

// dirNames lists dir (t.Error, not Fatal: it runs off the test's
// goroutine).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Error(err)
	}
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return n
}

// TestLayeredWorkspace: an empty directory becomes an overlay whose layers
// it hides, whose root keeps the directory's mode, and whose lower layer,
// written by its descriptor before anything looked, shows through it;
// what is written through it lands in the upper layer.
func TestLayeredWorkspace(t *testing.T) {
	inMountNamespace(t, func(dir string) {
		upper, lower, err := layeredWorkspace(dir, false)
		if err != nil || upper < 0 || lower < 0 {
			t.Errorf("layeredWorkspace(empty) = %d, %d, %v; want two descriptors", upper, lower, err)
			return
		}
		defer unix.Close(upper)
		defer unix.Close(lower)
		if n := dirNames(t, dir); len(n) != 0 {
			t.Errorf("the overlay shows %q, want nothing (its layers hidden)", n)
		}
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil || st.Mode&0o7777 != 0o751 {
			t.Errorf("the overlay's root: mode %o, %v; want the directory's 751", st.Mode&0o7777, err)
		}
		fd, err := unix.Openat(lower, "restored", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Errorf("create in the lower layer: %v", err)
			return
		}
		unix.Close(fd)
		if got, err := os.ReadFile(filepath.Join(dir, "restored")); err != nil || len(got) != 0 {
			t.Errorf("the lower layer's file through the overlay: %q, %v", got, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "new"), []byte("x"), 0o644); err != nil {
			t.Error(err)
			return
		}
		var ust unix.Stat_t
		if err := unix.Fstatat(upper, "new", &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Errorf("a file written through the overlay is not in the upper layer: %v", err)
		}
		if err := unix.Fstatat(upper, "restored", &ust, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			t.Errorf("the lower layer's file is in the upper layer, unchanged")
		}
	})
}

// TestLayeredWorkspaceNotEmpty: a directory that holds anything is left as
// it is: what it holds would not be in the overlay.
func TestLayeredWorkspaceNotEmpty(t *testing.T) {
	inMountNamespace(t, func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
			t.Error(err)
			return
		}
		upper, lower, err := layeredWorkspace(dir, false)
		if upper != -1 || lower != -1 || err != nil {
			t.Errorf("layeredWorkspace(not empty) = %d, %d, %v; want -1, -1, nil", upper, lower, err)
		}
		if n := dirNames(t, dir); !slices.Equal(n, []string{"f"}) {
			t.Errorf("the directory holds %q after, want [f] alone", n)
		}
	})
}
