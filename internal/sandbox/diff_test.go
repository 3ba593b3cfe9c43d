package sandbox_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

func tarOf(t testing.TB, files map[string]string) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// TestWriteDiff: against a directory and against a tar, the same trees give
// the same patch: a change, an addition, a removal; unchanged files are left
// out; an unsafe name in either stream is refused.
func TestWriteDiff(t *testing.T) {
	base := map[string]string{
		"a.txt": "one\ntwo\n", "same.txt": "same\n", "gone.txt": "bye\n", "dir/b.txt": "b\n",
		".git/index": "old index", ".git/gone": "x", "sub/.git/HEAD": "ref: a\n",
	}
	after := map[string]string{
		"a.txt": "one\nTWO\n", "same.txt": "same\n", "new.txt": "hi\n", "dir/b.txt": "b\n",
		".git/index": "new index", ".git/new": "y", "sub/.git/HEAD": "ref: b\n",
	}
	dir := t.TempDir()
	for name, body := range base {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var fromDir, fromTar strings.Builder
	if err := sandbox.WriteDiff(&fromDir, dir, tarOf(t, after)); err != nil {
		t.Fatal(err)
	}
	if err := sandbox.WriteDiffTar(&fromTar, tarOf(t, base), tarOf(t, after)); err != nil {
		t.Fatal(err)
	}
	if fromDir.String() != fromTar.String() {
		t.Errorf("directory and tar baselines differ:\n%s\n---\n%s", fromDir.String(), fromTar.String())
	}
	p := fromTar.String()
	for _, want := range []string{"diff --git a/a.txt b/a.txt", "-two", "+TWO", "diff --git a/new.txt b/new.txt", "diff --git a/gone.txt b/gone.txt"} {
		if !strings.Contains(p, want) {
			t.Errorf("patch lacks %q:\n%s", want, p)
		}
	}
	if strings.Contains(p, "same.txt") || strings.Contains(p, "dir/b.txt") {
		t.Errorf("unchanged files in the patch:\n%s", p)
	}
	// The top-level repository's internals are never in a patch; a
	// nested directory called .git is the work tree's like any other.
	if strings.Contains(p, " a/.git/") || strings.Contains(p, " b/.git/") {
		t.Errorf("the top-level .git directory is in the patch:\n%s", p)
	}
	if !strings.Contains(p, "diff --git a/sub/.git/HEAD b/sub/.git/HEAD") {
		t.Errorf("patch lacks the nested sub/.git/HEAD:\n%s", p)
	}
	var sink strings.Builder
	if err := sandbox.WriteDiffTar(&sink, tarOf(t, map[string]string{"../escape": "x"}), tarOf(t, after)); err == nil {
		t.Error("a source tar with ../escape was accepted")
	}
}
