package executor

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// TestWriteFile holds writeFile and createFile to what os.WriteFile and
// os.OpenFile(O_CREATE|O_RDONLY) did where they were used.
func TestWriteFile(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	big := bytes.Repeat([]byte("x"), 1<<20)
	tests := []struct {
		name     string
		existing []byte // nil: no file before
		data     []byte
		perm     os.FileMode
		create   bool // createFile instead of writeFile
		want     []byte
		wantPerm os.FileMode
	}{
		{"new", nil, []byte("airlock\n"), 0o644, false, []byte("airlock\n"), 0o644},
		{"new empty", nil, nil, 0o666, false, []byte{}, 0o644}, // the umask applies
		{"truncates", []byte("a much longer old content"), []byte("new"), 0o644, false, []byte("new"), 0o600},
		{"large", nil, big, 0o600, false, big, 0o600},
		{"executable", nil, nil, 0o755, false, []byte{}, 0o755},
		{"create new", nil, nil, 0o644, true, []byte{}, 0o644},
		{"create keeps content", []byte("kept"), nil, 0o644, true, []byte("kept"), 0o600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			if tt.existing != nil {
				if err := os.WriteFile(p, tt.existing, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if tt.create {
				err = createFile(p, tt.perm)
			} else {
				err = writeFile(p, tt.data, tt.perm)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("content: got %d bytes, want %d", len(got), len(tt.want))
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tt.wantPerm {
				t.Errorf("mode %v, want %v", fi.Mode().Perm(), tt.wantPerm)
			}
		})
	}
	for _, p := range []string{filepath.Join(t.TempDir(), "missing", "f"), t.TempDir()} {
		if err := writeFile(p, []byte("x"), 0o644); err == nil {
			t.Errorf("writeFile(%s): no error", p)
		}
	}
	if err := createFile(filepath.Join(t.TempDir(), "missing", "f"), 0o644); err == nil {
		t.Error("createFile in a missing directory: no error")
	}
}

// TestSubdirs holds subdirs to filepath.Glob(parent/*/sub) with a Stat of
// each match that is a directory, which it replaced in sandboxPath.
func TestSubdirs(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(p string) {
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	mk("opt/go/bin")
	mk("opt/b-tool/bin")
	mk("opt/.hidden/bin")
	mk("opt/nobin/lib")
	mk("opt/filebin")
	touch("opt/filebin/bin") // a file named bin: not a directory
	touch("opt/plainfile")
	mk("elsewhere/bin")
	link("../elsewhere", "opt/linked") // a link to a directory with bin
	link("missing", "opt/dangling")    // a dangling link
	mk("opt/binlink")
	link("../go/bin", "opt/binlink/bin") // bin itself a link to a directory
	link("../plainfile", "opt/filebin2") // a link to a file
	tests := []struct{ parent, sub string }{
		{filepath.Join(root, "opt"), "bin"},
		{filepath.Join(root, "opt"), "lib"},
		{filepath.Join(root, "missing"), "bin"},
		{filepath.Join(root, "opt/plainfile"), "bin"},
	}
	for _, tt := range tests {
		var want []string
		m, err := filepath.Glob(tt.parent + "/*/" + tt.sub)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range m {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				want = append(want, d)
			}
		}
		got := subdirs(tt.parent, tt.sub)
		if !slices.Equal(got, want) {
			t.Errorf("subdirs(%s, %s) = %q, want %q", tt.parent, tt.sub, got, want)
		}
	}
	if got := subdirs(filepath.Join(root, "opt"), "bin"); len(got) != 5 {
		t.Errorf("subdirs found %d directories, want 5 (.hidden, b-tool, binlink, go, linked): %q", len(got), got)
	}
}
