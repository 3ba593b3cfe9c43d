package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteTarGz: a workspace upload holds the directories, files and
// links of the tree, as links, with no owner; nothing else. A link that
// points out of the tree is refused, naming it, as the server would
// refuse the upload.
func TestWriteTarGz(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"a.txt": "a\n", "sub/b.txt": "bb\n", "sub/deeper/c": ""} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../a.txt", filepath.Join(dir, "sub", "link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := writeTarGz(&buf, dir); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var got []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: owner %d/%d %q/%q, want none", h.Name, h.Uid, h.Gid, h.Uname, h.Gname)
		}
		got = append(got, string(rune(h.Typeflag))+" "+h.Name+" "+h.Linkname+" "+strings.TrimSpace(string(b)))
	}
	sort.Strings(got)
	want := []string{"0 a.txt  a", "0 sub/b.txt  bb", "0 sub/deeper/c  ", "2 sub/link ../a.txt ", "5 sub/  ", "5 sub/deeper/  "}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tar holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for target, reason := range map[string]string{"../../../etc/passwd": "it points outside the workspace", "/etc/passwd": "an absolute target"} {
		if err := os.Remove(filepath.Join(dir, "sub", "escape")); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "sub", "escape")); err != nil {
			t.Fatal(err)
		}
		err := writeTarGz(io.Discard, dir)
		if err == nil || !strings.Contains(err.Error(), `entry "sub/escape": a symbolic link to "`+target+`": `+reason) {
			t.Errorf("writeTarGz of a tree with a link to %s = %v, want it refused", target, err)
		}
	}
}
