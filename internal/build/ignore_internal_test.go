package build

import (
	"os"
	"path/filepath"
	"testing"
)

// TestIgnore: .dockerignore patterns as docker reads them: path.Match
// globs of whole relative paths, "**" across directories, a pattern that
// matches a directory excludes what is below it, the last matching rule
// decides ("!" re-includes), comments and leading slashes ignored.
func TestIgnore(t *testing.T) {
	dir := t.TempDir()
	rules := "# comment\n/build\n*.log\n**/tmp/**\ndocs/*.md\n!docs/keep.md\n[ab].txt\n"
	if err := os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ig, err := loadIgnore(root)
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]bool{
		"build": true, "build/out/x": true, "builder": false,
		"a.log": true, "sub/a.log": false,
		"x/tmp/y": true, "tmp/y": true, "x/tmpz/y": false,
		"docs/a.md": true, "docs/keep.md": false, "docs/sub/a.md": false,
		"a.txt": true, "c.txt": false,
		"src/main.go": false,
	} {
		if got := ig.excluded(rel); got != want {
			t.Errorf("excluded(%q) = %v, want %v", rel, got, want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".dockerignore"), []byte("[unterminated\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadIgnore(root); err == nil {
		t.Error("loadIgnore([unterminated) = nil error")
	}
}

// FuzzIgnorePattern: any pattern compiles or is refused, and matching
// never panics.
func FuzzIgnorePattern(f *testing.F) {
	for _, s := range []string{"**/*.go", "a/[!b]c", `\*x`, "[", "***", "a/**"} {
		f.Add(s, "a/b/c.go")
	}
	f.Fuzz(func(t *testing.T, pattern, rel string) {
		re, err := globRegexp(pattern)
		if err != nil {
			return
		}
		_ = re.MatchString(rel)
	})
}
