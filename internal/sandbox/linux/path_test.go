package linux_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// TestToolchainPath: a toolchain installed under /usr/local (Go's
// /usr/local/go/bin here) runs by its bare name in a sandbox of the host's
// system directories, and the PATH names no directory the sandbox lacks.
func TestToolchainPath(t *testing.T) {
	bins, _ := filepath.Glob("/usr/local/*/bin")
	var dir, name string
	for _, d := range bins {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if fi, err := os.Stat(filepath.Join(d, e.Name())); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				dir, name = d, e.Name()
				break
			}
		}
		if dir == "/usr/local/go/bin" {
			break // prefer go, to run go version
		}
	}
	if dir == "" {
		t.Skip("no toolchain under /usr/local/*/bin on this host")
	}
	sb := attackSandbox(t, sandbox.RuntimeNative, sandbox.Spec{})
	got := strings.TrimSpace(attackMust(t, sb, "", "command -v "+name))
	if want := filepath.Join(dir, name); got != want {
		t.Errorf("command -v %s in the sandbox = %q, want %q", name, got, want)
	}
	if dir == "/usr/local/go/bin" {
		if out := attackMust(t, sb, "", "go version"); !strings.HasPrefix(out, "go version go") {
			t.Errorf("go version in the sandbox printed %q", out)
		}
	}
	path := strings.TrimSpace(attackMust(t, sb, "", `echo "$PATH"`))
	dirs := strings.Split(path, ":")
	if i, j := slices.Index(dirs, "/usr/bin"), slices.Index(dirs, dir); i < 0 || j < i {
		t.Errorf("PATH in the sandbox = %q: want /usr/bin, and %s after it", path, dir)
	}
	for _, d := range dirs {
		if res := attackRun(t, sb, "", "test -d "+d); !res.ok() {
			t.Errorf("PATH in the sandbox names %s, which it does not have", d)
		}
	}
}
