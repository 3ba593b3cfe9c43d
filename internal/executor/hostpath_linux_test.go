package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// TestCloneHostPath checks the rootless executor's guard on host paths: it
// clones what the host named, and refuses a path that gained a symbolic link
// or now names another file. open_tree(OPEN_TREE_CLONE) needs CAP_SYS_ADMIN
// over the mount namespace, which the executor has in its own; here the test
// runs as root in the host's and closes every clone (a detached tree vanishes
// with its last descriptor).
func TestCloneHostPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("open_tree(OPEN_TREE_CLONE) needs CAP_SYS_ADMIN over the mount namespace")
	}
	dir := t.TempDir()
	for _, d := range []string{"real/ws", "other/ws", "swap/ws"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "real/file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostPath := func(p string) *execproto.HostPath {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return &execproto.HostPath{Path: p, Dev: st.Dev, Ino: st.Ino}
	}
	ws := hostPath(filepath.Join(dir, "real/ws"))
	file := hostPath(filepath.Join(dir, "real/file"))

	// What the host checked, then a component replaced by a link to a
	// directory that has the same layout.
	linked := hostPath(filepath.Join(dir, "other/ws"))
	if err := os.Rename(filepath.Join(dir, "other"), filepath.Join(dir, "other.moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("other.moved", filepath.Join(dir, "other")); err != nil {
		t.Fatal(err)
	}
	// A directory renamed into the checked place.
	swapped := hostPath(filepath.Join(dir, "swap/ws"))
	if err := os.Rename(filepath.Join(dir, "swap/ws"), filepath.Join(dir, "swap/ws.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "swap/ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The last component a link.
	if err := os.Symlink("ws", filepath.Join(dir, "real/last")); err != nil {
		t.Fatal(err)
	}
	last := &execproto.HostPath{Path: filepath.Join(dir, "real/last"), Dev: ws.Dev, Ino: ws.Ino}

	tests := []struct {
		name    string
		p       *execproto.HostPath
		ro      bool
		wantErr string
	}{
		{"dir", ws, false, ""},
		{"dir read-only", ws, true, ""},
		{"file read-only", file, true, ""},
		{"link in a component", linked, false, "symbolic link appeared"},
		{"link as last component", last, false, "symbolic link appeared"},
		{"renamed into place", swapped, false, "changed after the host checked it"},
		{"missing", &execproto.HostPath{Path: filepath.Join(dir, "nope"), Ino: 1}, false, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd, err := cloneHostPath(tt.p, tt.ro)
			if tt.wantErr != "" {
				if err == nil {
					unix.Close(fd)
					t.Fatalf("cloneHostPath(%s) = a tree, want an error containing %q", tt.p.Path, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("cloneHostPath(%s) = %v, want an error containing %q", tt.p.Path, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("cloneHostPath(%s) = %v", tt.p.Path, err)
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil || st.Ino != tt.p.Ino {
				t.Errorf("the clone is inode %d (%v), want %d", st.Ino, err, tt.p.Ino)
			}
			var fs unix.Statfs_t
			if err := unix.Fstatfs(fd, &fs); err != nil {
				t.Fatal(err)
			}
			for flag, name := range map[int64]string{unix.ST_NOSUID: "nosuid", unix.ST_NODEV: "nodev"} {
				if fs.Flags&flag == 0 {
					t.Errorf("the clone is not %s (flags %#x)", name, fs.Flags)
				}
			}
			if got := fs.Flags&unix.ST_RDONLY != 0; got != tt.ro {
				t.Errorf("the clone is read-only: %v, want %v", got, tt.ro)
			}
		})
	}
}
