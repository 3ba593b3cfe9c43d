package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

// The repository's root, where the Makefile is.
const root = "../.."

func makeTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("make")
	if err != nil {
		t.Skipf("make not found: %v", err)
	}
	return p
}

// TestMakeHelp: make help lists every target the Makefile annotates with
// ##, digits in its name or not (bench-e2b).
func TestMakeHelp(t *testing.T) {
	mk := makeTool(t)
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := regexp.MustCompile(`(?m)^([^\s:#=]+):[^=\n]*## `).FindAllStringSubmatch(string(b), -1)
	if len(targets) < 10 {
		t.Fatalf("found %d annotated targets in the Makefile, want them all", len(targets))
	}
	out, err := exec.Command(mk, "-s", "-C", root, "help").Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			listed[f[0]] = true
		}
	}
	for _, m := range targets {
		if !listed[m[1]] {
			t.Errorf("make help does not list %s; it printed:\n%s", m[1], out)
		}
	}
}

// TestMakeInstall: make install puts the three commands side by side in
// $(DESTDIR)$(PREFIX)/bin, and the installed airlock finds airlock-host
// beside it.
func TestMakeInstall(t *testing.T) {
	mk := makeTool(t)
	if testing.Short() {
		t.Skip("builds the commands; skipped in -short mode")
	}
	tmp := t.TempDir()
	dest := filepath.Join(tmp, "dest")
	cmd := exec.Command(mk, "-s", "-C", root, "install", "BIN="+filepath.Join(tmp, "bin"), "DESTDIR="+dest, "PREFIX=/opt/airlock", "GO="+deptest.GoTool(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	bin := filepath.Join(dest, "opt", "airlock", "bin")
	for _, name := range []string{"airlock", "airlock-host", "airlock-exec"} {
		fi, err := os.Stat(filepath.Join(bin, name))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s after make install: %v, %v; want a file of mode 0755", name, fi, err)
		}
	}
	if r := run(t, filepath.Join(bin, "airlock"), nil, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "airlock ") {
		t.Errorf("installed airlock --version = %+v, want the version", r)
	}
}

// TestGoTestSummary: scripts/gotest.sh (make test's go test) passes go
// test's output and exit status through and ends with a line counting the
// packages that passed and failed, a build failure among the failed.
func TestGoTestSummary(t *testing.T) {
	gotest, err := filepath.Abs(filepath.Join(root, "scripts", "gotest.sh"))
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	for name, src := range map[string]string{
		"go.mod":             "module example.com/m\n\ngo 1.21\n",
		"ok/ok_test.go":      "package ok\n\nimport \"testing\"\n\nfunc TestOK(t *testing.T) {}\n",
		"bad/bad_test.go":    "package bad\n\nimport \"testing\"\n\nfunc TestBad(t *testing.T) { t.Fatal(\"no\") }\n",
		"broken/b_test.go":   "package broken\n\nimport \"testing\"\n\nfunc TestBroken(t *testing.T) { undefined() }\n",
		"notests/notests.go": "package notests\n",
	} {
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	summary := regexp.MustCompile(`\npackages: (\d+) passed, (\d+) failed in \d+m\d\ds\n$`)
	for _, tt := range []struct {
		pkgs           string
		code           int
		passed, failed string
	}{
		{"./...", 1, "1", "2"},
		{"./ok/", 0, "1", "0"},
	} {
		cmd := exec.Command(gotest, "-count=1", tt.pkgs)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GO="+deptest.GoTool(t), "GOWORK=off", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gotest.sh %s: %v", tt.pkgs, err)
		}
		m := summary.FindStringSubmatch(string(out))
		if code != tt.code || m == nil || m[1] != tt.passed || m[2] != tt.failed {
			t.Errorf("gotest.sh %s exited %d with output\n%s\nwant exit %d and a last line of %s passed, %s failed", tt.pkgs, code, out, tt.code, tt.passed, tt.failed)
		}
		if tt.code != 0 && !strings.Contains(string(out), "--- FAIL: TestBad") {
			t.Errorf("gotest.sh %s did not pass go test's output through:\n%s", tt.pkgs, out)
		}
	}
}
