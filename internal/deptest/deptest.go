// Package deptest reads the module's import graph with `go list`, for the
// tests that keep its rules (STYLE §1): what the executor and the front end
// may link, which packages are leaves, who may import a package, and that
// every package says what it is for. Its own tests check the rules that span
// the whole module (house_test.go).
//
// Importers: tests only.
package deptest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Module is the module's path.
const Module = "github.com/airlockrun/airlock"

// Package is what go list says of one package.
type Package struct {
	ImportPath string
	Name       string
	Dir        string
	// Doc is the first sentence of the package's doc comment.
	Doc      string
	Standard bool
	// Imports are the packages its non-test files import.
	Imports []string
}

// Internal reports whether p belongs to this module.
func (p Package) Internal() bool {
	return p.ImportPath == Module || strings.HasPrefix(p.ImportPath, Module+"/")
}

// Rel returns p's path relative to the module ("internal/engine").
func (p Package) Rel() string { return Rel(p.ImportPath) }

// Rel returns an import path relative to the module, or the path itself
// when it is not the module's.
func Rel(path string) string {
	if r, ok := strings.CutPrefix(path, Module+"/"); ok {
		return r
	}
	return path
}

// List runs `go list -json` with args (flags such as -deps, then
// patterns) for platform ("linux/amd64"; "" is the host's) with cgo off,
// as the binaries are built. It skips the test where there is no go
// command.
func List(t testing.TB, platform string, args ...string) []Package {
	t.Helper()
	return list(t, platform, false, args)
}

// ListCgo is List for the host's platform with cgo on, as a plain `go
// build` has it wherever a C compiler is installed.
func ListCgo(t testing.TB, args ...string) []Package {
	t.Helper()
	return list(t, "", true, args)
}

// GoTool returns the go command's path, or skips the test where there is
// none.
func GoTool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	return p
}

func list(t testing.TB, platform string, cgo bool, args []string) []Package {
	t.Helper()
	cmd := exec.Command(GoTool(t), append([]string{"list", "-json=ImportPath,Name,Dir,Doc,Standard,Imports"}, args...)...)
	cgoEnv := "CGO_ENABLED=0"
	if cgo {
		cgoEnv = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), cgoEnv)
	if platform != "" {
		goos, goarch, _ := strings.Cut(platform, "/")
		cmd.Env = append(cmd.Env, "GOOS="+goos, "GOARCH="+goarch)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s (%s): %v\n%s", strings.Join(args, " "), platform, err, stderr.Bytes())
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list %s: decode: %v", strings.Join(args, " "), err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list %s (%s) listed nothing", strings.Join(args, " "), platform)
	}
	return pkgs
}

// Importers returns the import paths of the packages in pkgs that import
// path directly, sorted.
func Importers(pkgs []Package, path string) []string {
	var by []string
	for _, p := range pkgs {
		if slices.Contains(p.Imports, path) {
			by = append(by, p.ImportPath)
		}
	}
	slices.Sort(by)
	return by
}
