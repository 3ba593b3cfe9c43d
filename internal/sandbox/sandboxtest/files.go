package sandboxtest

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

func (s *suite) testFiles(t *testing.T) {
	sb := s.create(t, sandbox.Spec{})

	t.Run("Stream", func(t *testing.T) {
		t.Parallel()
		s.testStream(t, sb)
	})

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		data := make([]byte, 3<<20)
		_, _ = rand.Read(data)
		data[0], data[1] = 0, '\n' // make sure it is binary
		for _, p := range []string{"/workspace/blob.bin", "/tmp/blob.bin", "/home/sandbox/blob.bin"} {
			if err := sb.WriteFile(opCtx(t), p, bytes.NewReader(data), 0o600); err != nil {
				t.Errorf("WriteFile(%s, 3 MiB) = %v", p, err)
				continue
			}
			got, err := sb.ReadFile(opCtx(t), p, 0)
			if err != nil {
				t.Errorf("ReadFile(%s) = %v", p, err)
				continue
			}
			if !bytes.Equal(got, data) {
				t.Errorf("ReadFile(%s) returned %d bytes that differ from the %d written", p, len(got), len(data))
			}
		}
		// Overwriting truncates.
		if err := sb.WriteFile(opCtx(t), "/workspace/blob.bin", strings.NewReader("short"), 0o600); err != nil {
			t.Fatalf("WriteFile(overwrite) = %v", err)
		}
		if got, err := sb.ReadFile(opCtx(t), "/workspace/blob.bin", 0); err != nil || string(got) != "short" {
			t.Errorf("ReadFile after overwrite = %q, %v; want %q", got, err, "short")
		}
		// An empty file.
		if err := sb.WriteFile(opCtx(t), "/workspace/empty", nil, 0o644); err != nil {
			t.Fatalf("WriteFile(empty) = %v", err)
		}
		if got, err := sb.ReadFile(opCtx(t), "/workspace/empty", 0); err != nil || len(got) != 0 {
			t.Errorf("ReadFile(empty) = %q, %v; want empty, nil", got, err)
		}
	})

	t.Run("ReadLimit", func(t *testing.T) {
		t.Parallel()
		data := strings.Repeat("0123456789", 100)
		if err := sb.WriteFile(opCtx(t), "/workspace/limit.txt", strings.NewReader(data), 0o644); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		got, err := sb.ReadFile(opCtx(t), "/workspace/limit.txt", 15)
		if err != nil {
			t.Fatalf("ReadFile(limit 15) = %v", err)
		}
		if string(got) != data[:15] {
			t.Errorf("ReadFile(limit 15) = %q, want %q", got, data[:15])
		}
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		if err := sb.Mkdir(opCtx(t), "/workspace/list/sub", 0o755, true); err != nil {
			t.Fatalf("Mkdir = %v", err)
		}
		for name, content := range map[string]string{"a": "abc", "b": "hello"} {
			if err := sb.WriteFile(opCtx(t), "/workspace/list/"+name, strings.NewReader(content), 0o644); err != nil {
				t.Fatalf("WriteFile(%s) = %v", name, err)
			}
		}
		ents, err := sb.List(opCtx(t), "/workspace/list")
		if err != nil {
			t.Fatalf("List = %v", err)
		}
		got := map[string]sandbox.FileInfo{}
		var names []string
		for _, e := range ents {
			got[e.Name] = e
			names = append(names, e.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"a", "b", "sub"}) {
			t.Fatalf("List names = %q, want [a b sub]", names)
		}
		if got["a"].Size != 3 || got["b"].Size != 5 {
			t.Errorf("List sizes: a = %d, b = %d; want 3, 5", got["a"].Size, got["b"].Size)
		}
		if !got["a"].Mode.IsRegular() || !got["sub"].Mode.IsDir() {
			t.Errorf("List modes: a = %v, sub = %v; want a regular file and a directory", got["a"].Mode, got["sub"].Mode)
		}
		if _, err := sb.List(opCtx(t), "/workspace/no-such-dir"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("List(missing) = %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("Stat", func(t *testing.T) {
		t.Parallel()
		if err := sb.WriteFile(opCtx(t), "/workspace/stat.txt", strings.NewReader("12345678"), 0o640); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		fi, err := sb.Stat(opCtx(t), "/workspace/stat.txt")
		if err != nil {
			t.Fatalf("Stat = %v", err)
		}
		if fi.Name != "stat.txt" || fi.Size != 8 || !fi.Mode.IsRegular() || fi.Mode.Perm() != 0o640 {
			t.Errorf("Stat(stat.txt) = %+v, want name stat.txt, size 8, a regular file with mode 0640", fi)
		}
		mustSh(t, sb, "ln -s stat.txt /workspace/stat.link")
		fi, err = sb.Stat(opCtx(t), "/workspace/stat.link")
		if err != nil {
			t.Fatalf("Stat(link) = %v", err)
		}
		if fi.Mode&fs.ModeSymlink == 0 || fi.Link != "stat.txt" {
			t.Errorf("Stat(stat.link) = %+v, want a symlink with Link stat.txt", fi)
		}
		fi, err = sb.Stat(opCtx(t), "/workspace")
		if err != nil || !fi.Mode.IsDir() {
			t.Errorf("Stat(/workspace) = %+v, %v; want a directory", fi, err)
		}
		if _, err := sb.Stat(opCtx(t), "/workspace/no-such-file"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(missing) = %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("Mkdir", func(t *testing.T) {
		t.Parallel()
		if err := sb.Mkdir(opCtx(t), "/workspace/mk/a/b/c", 0o755, true); err != nil {
			t.Fatalf("Mkdir(recursive) = %v", err)
		}
		fi, err := sb.Stat(opCtx(t), "/workspace/mk/a/b/c")
		if err != nil || !fi.Mode.IsDir() {
			t.Errorf("Stat after recursive Mkdir = %+v, %v; want a directory", fi, err)
		}
		if err := sb.Mkdir(opCtx(t), "/workspace/mk/a/b/c", 0o755, true); err != nil {
			t.Errorf("Mkdir(recursive) of an existing directory = %v, want nil", err)
		}
		if err := sb.Mkdir(opCtx(t), "/workspace/mk/a", 0o755, false); !errors.Is(err, fs.ErrExist) {
			t.Errorf("Mkdir of an existing directory = %v, want fs.ErrExist", err)
		}
		if err := sb.Mkdir(opCtx(t), "/workspace/mk2/x", 0o755, false); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Mkdir(not recursive) with a missing parent = %v, want fs.ErrNotExist", err)
		}
		if err := sb.Mkdir(opCtx(t), "/workspace/mk/single", 0o700, false); err != nil {
			t.Fatalf("Mkdir = %v", err)
		}
		if fi, err := sb.Stat(opCtx(t), "/workspace/mk/single"); err != nil || fi.Mode.Perm() != 0o700 {
			t.Errorf("Stat(mk/single) = %+v, %v; want a directory with mode 0700", fi, err)
		}
	})

	t.Run("Rename", func(t *testing.T) {
		t.Parallel()
		if err := sb.WriteFile(opCtx(t), "/workspace/old.txt", strings.NewReader("moved"), 0o644); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		if err := sb.Rename(opCtx(t), "/workspace/old.txt", "/workspace/new.txt"); err != nil {
			t.Fatalf("Rename = %v", err)
		}
		if _, err := sb.Stat(opCtx(t), "/workspace/old.txt"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(old name) after Rename = %v, want fs.ErrNotExist", err)
		}
		if got, err := sb.ReadFile(opCtx(t), "/workspace/new.txt", 0); err != nil || string(got) != "moved" {
			t.Errorf("ReadFile(new name) = %q, %v; want %q", got, err, "moved")
		}
		if err := sb.Rename(opCtx(t), "/workspace/no-such", "/workspace/x"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Rename(missing) = %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("Remove", func(t *testing.T) {
		t.Parallel()
		if err := sb.Mkdir(opCtx(t), "/workspace/rm/a/b", 0o755, true); err != nil {
			t.Fatalf("Mkdir = %v", err)
		}
		for _, p := range []string{"/workspace/rm/f", "/workspace/rm/a/g", "/workspace/rm/a/b/h"} {
			if err := sb.WriteFile(opCtx(t), p, strings.NewReader("x"), 0o644); err != nil {
				t.Fatalf("WriteFile(%s) = %v", p, err)
			}
		}
		if err := sb.Remove(opCtx(t), "/workspace/rm/f", false); err != nil {
			t.Errorf("Remove(file) = %v", err)
		}
		if err := sb.Remove(opCtx(t), "/workspace/rm", false); err == nil {
			t.Errorf("Remove(non-empty directory, not recursive) = nil, want an error")
		}
		if err := sb.Remove(opCtx(t), "/workspace/rm", true); err != nil {
			t.Fatalf("Remove(recursive) = %v", err)
		}
		if _, err := sb.Stat(opCtx(t), "/workspace/rm"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat after recursive Remove = %v, want fs.ErrNotExist", err)
		}
		if err := sb.Remove(opCtx(t), "/workspace/no-such", false); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Remove(missing) = %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		if _, err := sb.ReadFile(opCtx(t), "/workspace/no-such-file", 0); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile(missing) = %v, want fs.ErrNotExist", err)
		}
		if _, err := sb.ReadFile(opCtx(t), "/workspace", 0); err == nil {
			t.Errorf("ReadFile(directory) = nil error, want one")
		}
		if err := sb.WriteFile(opCtx(t), "/workspace/no-such-dir/f", strings.NewReader("x"), 0o644); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("WriteFile(missing parent) = %v, want fs.ErrNotExist", err)
		}
	})

	t.Run("Xattrs", func(t *testing.T) {
		// A write under WithWriteXattrs replaces the file's user.<prefix>*
		// attributes and leaves the others; Stat and List report them.
		t.Parallel()
		p := "/workspace/xattrs.txt"
		for _, w := range []struct {
			prefix string
			attrs  map[string]string
		}{
			{"other.", map[string]string{"other.k": "2"}},
			{"md.", map[string]string{"md.old": "1"}},
			{"md.", map[string]string{"md.a": "x y", "md.b": ""}},
		} {
			if err := sb.WriteFile(sandbox.WithWriteXattrs(opCtx(t), w.prefix, w.attrs), p, strings.NewReader("data"), 0o644); err != nil {
				t.Fatalf("WriteFile with xattrs %v: %v", w.attrs, err)
			}
		}
		want := map[string]string{"md.a": "x y", "md.b": "", "other.k": "2"}
		if fi, err := sb.Stat(opCtx(t), p); err != nil || !maps.Equal(fi.Xattrs, want) {
			t.Errorf("Stat(%s).Xattrs = %v, %v; want %v", p, fi.Xattrs, err, want)
		}
		infos, err := sb.List(opCtx(t), "/workspace")
		i := slices.IndexFunc(infos, func(fi sandbox.FileInfo) bool { return fi.Name == "xattrs.txt" })
		if err != nil || i < 0 || !maps.Equal(infos[i].Xattrs, want) {
			t.Errorf("List(/workspace) = %v, %v; want xattrs.txt with %v", infos, err, want)
		}
	})

	t.Run("Owner", func(t *testing.T) {
		// Files the host writes belong to the sandbox user, so commands
		// can change and delete them.
		t.Parallel()
		for _, p := range []string{"/workspace/owned", "/tmp/owned"} {
			if err := sb.WriteFile(opCtx(t), p, strings.NewReader("x"), 0o644); err != nil {
				t.Fatalf("WriteFile(%s) = %v", p, err)
			}
		}
		if err := sb.Mkdir(opCtx(t), "/workspace/owned-dir", 0o755, false); err != nil {
			t.Fatalf("Mkdir = %v", err)
		}
		out := mustSh(t, sb, "stat -c %u:%g /workspace/owned /tmp/owned /workspace/owned-dir")
		if want := "1000:1000\n1000:1000\n1000:1000\n"; out != want {
			t.Errorf("owners (stat -c %%u:%%g) = %q, want %q", out, want)
		}
		mustSh(t, sb, "echo more >> /workspace/owned && rm /workspace/owned /tmp/owned && rmdir /workspace/owned-dir")
	})
}

func (s *suite) testExport(t *testing.T) {
	t.Run("Tar", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		files := map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n", "sub/deep/c.bin": "\x00\x01\x02"}
		if err := sb.Mkdir(opCtx(t), "/workspace/sub/deep", 0o755, true); err != nil {
			t.Fatalf("Mkdir = %v", err)
		}
		for name, content := range files {
			if err := sb.WriteFile(opCtx(t), "/workspace/"+name, strings.NewReader(content), 0o644); err != nil {
				t.Fatalf("WriteFile(%s) = %v", name, err)
			}
		}
		mustSh(t, sb, "echo shell > /workspace/shell.txt; ln -s a.txt /workspace/link")
		files["shell.txt"] = "shell\n"
		var buf bytes.Buffer
		if err := sb.Export(opCtx(t), "/workspace", &buf); err != nil {
			t.Fatalf("Export(/workspace) = %v", err)
		}
		got := map[string]string{}
		links := map[string]string{}
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reading the exported tar: %v", err)
			}
			name := strings.TrimPrefix(filepath.Clean(h.Name), "./")
			switch h.Typeflag {
			case tar.TypeReg:
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatalf("reading %s from the exported tar: %v", h.Name, err)
				}
				got[name] = string(b)
			case tar.TypeSymlink:
				links[name] = h.Linkname
			}
		}
		for name, want := range files {
			if got[name] != want {
				t.Errorf("exported %s = %q, want %q", name, got[name], want)
			}
		}
		if links["link"] != "a.txt" {
			t.Errorf("exported symlink link -> %q, want a.txt (symlinks are exported as links); links: %v", links["link"], links)
		}
	})

	t.Run("Diff", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		writeHost(t, ws, "x", "one\ntwo\nthree\n")
		writeHost(t, ws, "gone", "bye\n")
		writeHost(t, ws, "same", "unchanged\n")
		sb := s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCOW})
		if err := sb.WriteFile(opCtx(t), "/workspace/x", strings.NewReader("one\nTWO\nthree\n"), 0o644); err != nil {
			t.Fatalf("WriteFile(x) = %v", err)
		}
		mustSh(t, sb, "echo hello > /workspace/added && rm /workspace/gone")
		var buf bytes.Buffer
		if err := sb.Diff(opCtx(t), &buf); err != nil {
			t.Fatalf("Diff = %v", err)
		}
		diff := buf.String()
		for _, want := range []string{
			"--- a/x", "+++ b/x", "-two", "+TWO",
			"new file", "+++ b/added", "+hello",
			"deleted file", "--- a/gone", "-bye",
		} {
			if !strings.Contains(diff, want) {
				t.Errorf("Diff lacks %q:\n%s", want, diff)
			}
		}
		if strings.Contains(diff, "same") {
			t.Errorf("Diff mentions the unchanged file:\n%s", diff)
		}
	})
}

func (s *suite) testWorkspace(t *testing.T) {
	t.Run("COW", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		writeHost(t, ws, "f", "original\n")
		writeHost(t, ws, "d/g", "keep me\n")
		sb := s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCOW})
		out := mustSh(t, sb, "cat /workspace/f /workspace/d/g")
		if out != "original\nkeep me\n" {
			t.Errorf("host files inside = %q, want %q", out, "original\nkeep me\n")
		}
		mustSh(t, sb, "echo changed > /workspace/f && rm -r /workspace/d && echo new > /workspace/new")
		if out := mustSh(t, sb, "cat /workspace/f; ls /workspace"); out != "changed\nf\nnew\n" {
			t.Errorf("inside after changes: %q, want %q", out, "changed\nf\nnew\n")
		}
		if got := readHost(t, ws, "f"); got != "original\n" {
			t.Errorf("host f after a cow write inside = %q, want it unchanged %q", got, "original\n")
		}
		if got := readHost(t, ws, "d/g"); got != "keep me\n" {
			t.Errorf("host d/g after a cow delete inside = %q, want it unchanged", got)
		}
		if _, err := os.Stat(filepath.Join(ws, "new")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a file created inside a cow workspace appeared on the host (stat: %v)", err)
		}
	})

	t.Run("RO", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		writeHost(t, ws, "f", "original\n")
		sb := s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceRO})
		if out := mustSh(t, sb, "cat /workspace/f"); out != "original\n" {
			t.Errorf("cat /workspace/f = %q, want %q", out, "original\n")
		}
		for _, script := range []string{"echo x > /workspace/f", "touch /workspace/new", "rm /workspace/f", "mkdir /workspace/d"} {
			for _, user := range []string{"", "root"} {
				_, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", script}, User: user})
				if r.Outcome == sandbox.OutcomeExited && r.ExitCode == 0 {
					t.Errorf("%q as user %q in a ro workspace succeeded, want it to fail", script, user)
				} else if !strings.Contains(errOut, "Read-only file system") {
					t.Errorf("%q as user %q in a ro workspace: stderr %q, want EROFS (Read-only file system)", script, user, errOut)
				}
			}
		}
		err := sb.WriteFile(opCtx(t), "/workspace/api", strings.NewReader("x"), 0o644)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(strings.ToLower(err.Error()), "read-only") {
			t.Errorf("WriteFile in a ro workspace = %v, want a read-only file system error", err)
		}
		if got := readHost(t, ws, "f"); got != "original\n" {
			t.Errorf("host f = %q, want it unchanged", got)
		}
		if _, err := os.Stat(filepath.Join(ws, "new")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a file appeared on the host through a ro workspace (stat: %v)", err)
		}
	})

	t.Run("RW", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		writeHost(t, ws, "f", "original\n")
		writeHost(t, ws, "del", "delete me\n")
		// A workspace owned by someone other than the test process shows
		// that new files take the directory owner's identity.
		uid, gid := os.Geteuid(), os.Getegid()
		if os.Geteuid() == 0 {
			uid, gid = 4242, 4343
			for _, p := range []string{ws, filepath.Join(ws, "f"), filepath.Join(ws, "del")} {
				if err := os.Chown(p, uid, gid); err != nil {
					t.Fatal(err)
				}
			}
		}
		sb := s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceRW})
		mustSh(t, sb, "echo changed > /workspace/f && echo new > /workspace/new && rm /workspace/del && mkdir /workspace/dir")
		if err := sb.WriteFile(opCtx(t), "/workspace/api", strings.NewReader("from api\n"), 0o644); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		for name, want := range map[string]string{"f": "changed\n", "new": "new\n", "api": "from api\n"} {
			if got := readHost(t, ws, name); got != want {
				t.Errorf("host %s after a rw write inside = %q, want %q", name, got, want)
			}
		}
		if _, err := os.Stat(filepath.Join(ws, "del")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("host del after rm inside a rw workspace: stat = %v, want it gone", err)
		}
		for _, name := range []string{"new", "api", "dir"} {
			fi, err := os.Stat(filepath.Join(ws, name))
			if err != nil {
				t.Errorf("host %s: %v", name, err)
				continue
			}
			st := fi.Sys().(*syscall.Stat_t)
			if int(st.Uid) != uid || int(st.Gid) != gid {
				t.Errorf("host %s created inside is owned by %d:%d, want the workspace owner %d:%d", name, st.Uid, st.Gid, uid, gid)
			}
		}
		// Inside, the workspace owner is the sandbox user.
		if out := mustSh(t, sb, "stat -c %u /workspace /workspace/f"); out != "1000\n1000\n" {
			t.Errorf("owner of the rw workspace inside = %q, want the sandbox user 1000", out)
		}
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		if out := mustSh(t, sb, "ls -A /workspace"); out != "" {
			t.Errorf("ls -A of an empty workspace = %q, want nothing", out)
		}
		if out := mustSh(t, sb, "echo hi > /workspace/f && cat /workspace/f && stat -c %u /workspace"); out != "hi\n1000\n" {
			t.Errorf("write in an empty workspace: %q, want %q", out, "hi\n1000\n")
		}
	})
}

func writeHost(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readHost(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Errorf("read host %s: %v", name, err)
	}
	return string(b)
}
