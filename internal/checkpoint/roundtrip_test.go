package checkpoint

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fsStep changes the tree at root, as one step of an agent would.
type fsStep struct {
	name   string
	change func(t *testing.T, root string)
}

// TestRoundTripFS: a real tree on disk goes through a full checkpoint and
// a chain of deltas, each made the way the executor makes them (what
// changed since the last walk, whiteouts for what is gone); after each,
// the checkpoint restored and unpacked is the tree, byte for byte: types,
// modes (setuid, setgid, sticky), owners, modification times to the
// nanosecond, symlink targets (out of the tree, absolute, dangling), hard
// links, FIFOs, empty directories, names with newlines and invalid UTF-8,
// long names. On every backend.
func TestRoundTripFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the trees have files of other owners")
	}
	steps := []fsStep{
		{"full", func(t *testing.T, r string) {
			mkdir(t, r, "src", 0o755)
			mkdir(t, r, "src/pkg", 0o750)
			mkdir(t, r, "empty", 0o700)
			mkdir(t, r, "sticky", 0o1777)
			mkdir(t, r, "setgid", 0o2775)
			mkfile(t, r, "src/main.go", "package main\n", 0o644)
			mkfile(t, r, "src/pkg/lib.go", strings.Repeat("func f() {}\n", 5000), 0o600)
			mkfile(t, r, "run.sh", "#!/bin/sh\necho hi\n", 0o755)
			mkfile(t, r, "setuid", "x", 0o4755)
			mkfile(t, r, "empty.txt", "", 0o644)
			mkfile(t, r, "line\nbreak", "newline in the name", 0o644)
			mkfile(t, r, "bad\xff\xfeutf8", "invalid UTF-8 in the name", 0o644)
			mkfile(t, r, strings.Repeat("long-name-", 20), "a name past ustar's 100 bytes", 0o644)
			mkdir(t, r, "deep", 0o755)
			p := "deep"
			for i := range 30 {
				p += "/" + strings.Repeat(string(rune('a'+i%26)), 8)
				mkdir(t, r, p, 0o755)
			}
			mkfile(t, r, p+"/bottom", "deep down", 0o644)
			mkfile(t, r, "owned", "other owner", 0o640)
			chown(t, r, "owned", 1000, 1001)
			chown(t, r, "src/pkg", 65534, 65534)
			symlink(t, r, "../../etc/passwd", "out")
			symlink(t, r, "/etc/shadow", "abs")
			symlink(t, r, "nowhere/at/all", "dangling")
			symlink(t, r, "src", "src-link")
			mkfile(t, r, "a", "shared by a, b and src/c", 0o644)
			link(t, r, "a", "b")
			link(t, r, "a", "src/c")
			mkfile(t, r, "z-first", "linked from a name before it", 0o644)
			link(t, r, "z-first", "0-second")
			if err := syscall.Mkfifo(filepath.Join(r, "pipe"), 0o620); err != nil {
				t.Fatal(err)
			}
			random(t, r, "big.bin", 3<<20)
			// Enough entries that the deltas below stay deltas (see
			// CompactShare).
			mkdir(t, r, "filler", 0o755)
			for i := range 100 {
				mkfile(t, r, fmt.Sprintf("filler/%03d", i), fmt.Sprint(i), 0o644)
			}
		}},
		{"edit, delete, rename, chmod", func(t *testing.T, r string) {
			mkfile(t, r, "src/main.go", "package main\n\nfunc main() {}\n", 0o644)
			rm(t, r, "empty.txt")
			rm(t, r, "deep")
			rename(t, r, "run.sh", "src/run.sh")
			chmod(t, r, "src/pkg/lib.go", 0o644)
			touch(t, r, "big.bin", time.Unix(1_600_000_000, 42))
		}},
		{"file replaced by a directory, directory by a file", func(t *testing.T, r string) {
			rm(t, r, "src/main.go")
			mkdir(t, r, "src/main.go", 0o755)
			mkfile(t, r, "src/main.go/inside", "a directory now", 0o644)
			rm(t, r, "src/pkg")
			mkfile(t, r, "src/pkg", "a file now", 0o644)
			rm(t, r, "pipe")
			symlink(t, r, "a", "pipe")
		}},
		{"and back", func(t *testing.T, r string) {
			rm(t, r, "src/main.go")
			mkfile(t, r, "src/main.go", "a file again", 0o644)
			rm(t, r, "src/pkg")
			mkdir(t, r, "src/pkg", 0o755)
			mkdir(t, r, "src/pkg/sub", 0o755)
			rm(t, r, "pipe")
			if err := syscall.Mkfifo(filepath.Join(r, "pipe"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"hard links change", func(t *testing.T, r string) {
			rm(t, r, "a")               // b and src/c keep the content
			link(t, r, "b", "new-link") // a new name of an unchanged file
			mkfile(t, r, "z-first", "rewritten in place: both names change", 0o644)
			rm(t, r, "sticky")
			mkdir(t, r, "sticky", 0o755)
		}},
		{"empty a directory, nothing else", func(t *testing.T, r string) {
			rm(t, r, "src/pkg/sub")
			rm(t, r, "src/main.go")
			rm(t, r, "src/run.sh")
		}},
		{"no change", func(*testing.T, string) {}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { roundTripFS(t, b.open(t), steps) })
	}
}

func roundTripFS(t *testing.T, s *testStore, steps []fsStep) {
	root := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var prev []fsent
	parent := ""
	for i, st := range steps {
		st.change(t, root)
		cur := walkFS(t, root)
		stream := tarOf(t, root, prev, cur)
		res := write(t, s, "acme", parent, i == 0, stream)
		if full := i == 0; res.Full != full || res.Compacted || !full && res.Parent != parent {
			t.Errorf("step %q: Write() = full %v, compacted %v, parent %s; want full %v, parent %q", st.name, res.Full, res.Compacted, res.Parent, full, parent)
		}
		var b bytes.Buffer
		if err := s.Restore(t.Context(), "acme", res.Digest, &b); err != nil {
			t.Fatalf("step %q: Restore() = %v", st.name, err)
		}
		out := filepath.Join(t.TempDir(), "restored")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		extract(t, &b, out)
		t.Run(st.name, func(t *testing.T) { sameFS(t, walkFS(t, out), cur) })
		if res.Stats.TreeEntries != int64(len(cur)) {
			t.Errorf("step %q: TreeEntries = %d, want %d", st.name, res.Stats.TreeEntries, len(cur))
		}
		if want := fsBytes(cur); res.Stats.TreeBytes != want {
			t.Errorf("step %q: TreeBytes = %d, want %d", st.name, res.Stats.TreeBytes, want)
		}
		prev, parent = cur, res.Digest
	}
}

// fsBytes returns the bytes of the regular files of es, a file with
// several names once.
func fsBytes(es []fsent) int64 {
	seen := map[uint64]bool{}
	var n int64
	for _, e := range es {
		if e.mode.IsRegular() && !seen[e.ino] {
			seen[e.ino] = true
			n += e.size
		}
	}
	return n
}

func mkdir(t *testing.T, root, name string, mode uint32) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(root, name), 0o700); err != nil {
		t.Fatal(err)
	}
	chmod(t, root, name, mode)
}

func mkfile(t *testing.T, root, name, body string, mode uint32) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	chmod(t, root, name, mode)
}

func random(t *testing.T, root, name string, n int) {
	t.Helper()
	b := make([]byte, n)
	fill(b, 1)
	if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, root, name string, mode uint32) {
	t.Helper()
	if err := unix.Chmod(filepath.Join(root, name), mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, root, name string, uid, gid int) {
	t.Helper()
	if err := os.Lchown(filepath.Join(root, name), uid, gid); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, target, name string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
		t.Fatal(err)
	}
}

func link(t *testing.T, root, target, name string) {
	t.Helper()
	if err := os.Link(filepath.Join(root, target), filepath.Join(root, name)); err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, root, name string) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, root, from, to string) {
	t.Helper()
	if err := os.Rename(filepath.Join(root, from), filepath.Join(root, to)); err != nil {
		t.Fatal(err)
	}
}

func touch(t *testing.T, root, name string, mt time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(root, name), mt, mt); err != nil {
		t.Fatal(err)
	}
}

// fill fills b with bytes that do not compress, the same for a seed.
func fill(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	for i := 0; i+8 <= len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i], b[i+1], b[i+2], b[i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(x>>32), byte(x>>40), byte(x>>48), byte(x>>56)
	}
}
