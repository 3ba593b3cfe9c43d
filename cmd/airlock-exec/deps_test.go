package main

import (
	"debug/elf"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

// The executor runs beside untrusted code, so what it links is part of the
// sandbox's attack surface (STYLE §1). These tests fail when a change pulls
// anything else from airlock or any third-party module into it, and keep its
// full non-standard dependency list in deps.txt so new transitive
// dependencies show up in review.

var update = flag.Bool("update", false, "rewrite deps.txt from the current dependencies of airlock-exec")

const self = "github.com/airlockrun/airlock/cmd/airlock-exec"

// platforms are the targets the executor ships for. Architecture-specific
// files (seccomp tables) may import different packages, so each is checked.
var platforms = []string{"linux/amd64", "linux/arm64"}

// linked are the packages outside the standard library that the executor
// may link, named one by one: a new package under internal/executor/, or a
// new package of golang.org/x/sys, is a review decision made here.
var linked = map[string]bool{
	self: true,
	"github.com/airlockrun/airlock/internal/execproto":         true,
	"github.com/airlockrun/airlock/internal/executor":          true,
	"github.com/airlockrun/airlock/internal/executor/landlock": true,
	"github.com/airlockrun/airlock/internal/executor/seccomp":  true,
	// The spawner runs on the host, not in a sandbox, but in this binary:
	// it is held to the executor's rules (its doc says why).
	"github.com/airlockrun/airlock/internal/executor/spawn": true,
	// The spawner's clone that shares its memory (and the front end's).
	"github.com/airlockrun/airlock/internal/executor/vfork": true,
	"golang.org/x/sys/unix":                                 true,
}

// allowedDep reports whether the executor may link the package.
func allowedDep(p deptest.Package) bool {
	return p.Standard || linked[p.ImportPath]
}

func TestExecutorDeps(t *testing.T) {
	for _, platform := range platforms {
		t.Run(platform, func(t *testing.T) {
			pkgs := deptest.List(t, platform, "-deps", self)
			for _, p := range pkgs {
				if !allowedDep(p) {
					t.Errorf("airlock-exec must not link %s (imported by %s): the executor may use only the standard library and the packages named in linked",
						p.ImportPath, strings.Join(deptest.Importers(pkgs, p.ImportPath), ", "))
				}
			}
		})
	}
}

// TestExecutorNoCgo: the executor links no C even when cgo is on, as it is
// by default wherever a C compiler is installed (a plain `go build ./...`).
// A cgo-linked executor could not drop the credentials of all its threads
// (AllThreadsSyscall refuses under cgo) and would need a dynamic loader.
func TestExecutorNoCgo(t *testing.T) {
	for _, p := range deptest.ListCgo(t, "-deps", self) {
		if p.ImportPath == "runtime/cgo" || p.ImportPath == "os/user" || p.ImportPath == "net" {
			t.Errorf("airlock-exec links %s with CGO_ENABLED=1; it must build without C whatever CGO_ENABLED says", p.ImportPath)
		}
	}
}

// TestExecutorStatic builds the executor the way a plain `go build` does and
// checks that it needs no dynamic loader and no shared library: it starts in
// an empty mount namespace where neither exists.
func TestExecutorStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the executor; skipped in -short mode")
	}
	bin := filepath.Join(t.TempDir(), "airlock-exec")
	cmd := exec.Command(deptest.GoTool(t), "build", "-o", bin, self)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", self, err, out)
	}

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("elf.Open(%s): %v", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("airlock-exec has a PT_INTERP program header: it is dynamically linked")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("read DT_NEEDED of %s: %v", bin, err)
	}
	if len(libs) > 0 {
		t.Errorf("airlock-exec needs shared libraries %v, want none", libs)
	}
}

const depsFile = "deps.txt"

const depsHeader = `# Packages outside the standard library linked into airlock-exec, for
# linux/amd64 and linux/arm64. Review every change to this list: the executor
# runs beside untrusted code (STYLE §1).
# Regenerate with: go test ./cmd/airlock-exec -update
`

// TestDepsList compares the executor's non-standard dependencies with the
// committed deps.txt.
func TestDepsList(t *testing.T) {
	seen := map[string]bool{}
	for _, platform := range platforms {
		for _, p := range deptest.List(t, platform, "-deps", self) {
			if !p.Standard {
				seen[p.ImportPath] = true
			}
		}
	}
	got := slices.Sorted(maps.Keys(seen))
	want := depsHeader + strings.Join(got, "\n") + "\n"

	if *update {
		if err := os.WriteFile(depsFile, []byte(want), 0o644); err != nil {
			t.Fatalf("write %s: %v", depsFile, err)
		}
		return
	}
	b, err := os.ReadFile(depsFile)
	if err != nil {
		t.Fatalf("read %s: %v; run: go test ./cmd/airlock-exec -update", depsFile, err)
	}
	var committed []string
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			committed = append(committed, line)
		}
	}
	if slices.Equal(committed, got) {
		return
	}
	for _, p := range got {
		if !slices.Contains(committed, p) {
			t.Errorf("new dependency of airlock-exec: %s", p)
		}
	}
	for _, p := range committed {
		if !slices.Contains(got, p) {
			t.Errorf("airlock-exec no longer depends on %s", p)
		}
	}
	t.Errorf("%s is out of date; review the change, then run: go test ./cmd/airlock-exec -update", depsFile)
}

func TestAllowedDep(t *testing.T) {
	tests := []struct {
		p    deptest.Package
		want bool
	}{
		{deptest.Package{ImportPath: "net/http", Standard: true}, true},
		{deptest.Package{ImportPath: "vendor/golang.org/x/net/dns/dnsmessage", Standard: true}, true},
		{deptest.Package{ImportPath: "golang.org/x/sys/unix"}, true},
		{deptest.Package{ImportPath: "github.com/airlockrun/airlock/internal/execproto"}, true},
		{deptest.Package{ImportPath: "github.com/airlockrun/airlock/internal/executor/seccomp"}, true},
		{deptest.Package{ImportPath: "github.com/airlockrun/airlock/internal/executor/newpkg"}, false},
		{deptest.Package{ImportPath: "github.com/airlockrun/airlock/internal/executorx"}, false},
		{deptest.Package{ImportPath: "github.com/airlockrun/airlock/internal/execproto/x"}, false},
		{deptest.Package{ImportPath: "github.com/airlockrun/airlock/internal/secret"}, false},
		{deptest.Package{ImportPath: "github.com/airlockrun/airlock/internal/sandbox"}, false},
		{deptest.Package{ImportPath: "golang.org/x/sys/cpu"}, false},
		{deptest.Package{ImportPath: "golang.org/x/sysx"}, false},
		{deptest.Package{ImportPath: "golang.org/x/net/http2"}, false},
		{deptest.Package{ImportPath: "github.com/pmezard/go-difflib/difflib"}, false},
	}
	for _, tt := range tests {
		if got := allowedDep(tt.p); got != tt.want {
			t.Errorf("allowedDep(%q) = %t, want %t", tt.p.ImportPath, got, tt.want)
		}
	}
}
