package executor

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRawMount mounts as unix.Mount does: a tmpfs with its options, one
// with no data (NULL, not ""), and reports the kernel's error as a
// unix.Errno.
func TestRawMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts in a mount namespace of its own")
	}
	dir := t.TempDir()
	sized, plain := filepath.Join(dir, "sized"), filepath.Join(dir, "plain")
	for _, d := range []string{sized, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		// The thread's mount namespace becomes its own and the thread is
		// never handed back (no UnlockOSThread): it ends with the goroutine.
		runtime.LockOSThread()
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return err
			}
			if err := rawMount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return err
			}
			if err := rawMount("tmpfs", sized, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m"); err != nil {
				return err
			}
			var st unix.Statfs_t
			if err := unix.Statfs(sized, &st); err != nil {
				return err
			}
			if got := st.Blocks * uint64(st.Bsize); got != 1<<20 || st.Type != unix.TMPFS_MAGIC {
				t.Errorf("tmpfs with size=1m: %d bytes, type %#x; want %d bytes of tmpfs", got, st.Type, 1<<20)
			}
			if err := rawMount("tmpfs", plain, "tmpfs", 0, ""); err != nil {
				return err
			}
			if err := unix.Statfs(plain, &st); err != nil {
				return err
			}
			if st.Type != unix.TMPFS_MAGIC {
				t.Errorf("tmpfs with no data: type %#x, want tmpfs", st.Type)
			}
			err := rawMount("tmpfs", filepath.Join(dir, "missing"), "tmpfs", 0, "")
			if !errors.Is(err, unix.ENOENT) {
				t.Errorf("rawMount on a missing directory = %v, want ENOENT", err)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
