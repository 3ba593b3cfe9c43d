package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// bins builds airlock, airlock-host and airlock-exec into one directory, as
// make build installs them, once per test binary.
var binDir string

func bins(t *testing.T) string {
	t.Helper()
	if binDir != "" {
		return binDir
	}
	if testing.Short() {
		t.Skip("builds the commands; skipped in -short mode")
	}
	// World-traversable, like an installed binary's directory: sandbox
	// root, an unmapped host uid, runs the executor from it.
	dir, err := os.MkdirTemp("", sandboxtest.ExecutorDirPrefix)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command(deptest.GoTool(t), "build", "-trimpath", "-o", dir+"/",
		self, "github.com/airlockrun/airlock/cmd/airlock-host", "github.com/airlockrun/airlock/cmd/airlock-exec")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("go build: %v\n%s", err, out)
	}
	binDir = dir
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return r
}

// TestFrontEnd runs the built front end: the plain sandbox commands run in
// it, everything else in airlock-host, with the same output either way.
func TestFrontEnd(t *testing.T) {
	dir := bins(t)
	home := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(filepath.Join(home, sandboxcli.RunStateDir)) })
	env := []string{"AIRLOCK_HOME=" + home}
	airlock, host := filepath.Join(dir, "airlock"), filepath.Join(dir, "airlock-host")
	sandboxes := linux.Doctor(filepath.Join(dir, "airlock-exec"))
	canRun := os.Geteuid() == 0
	for _, c := range sandboxes {
		if c.Required && !c.OK {
			canRun = false
		}
	}

	same := []struct {
		name string
		args []string
		code int
	}{
		{"version", []string{"version"}, 0},
		{"help", []string{"sandbox", "run", "--help"}, 0},
		{"unknown flag", []string{"sandbox", "run", "--bogus", "--", "true"}, 2},
		{"egress flag with a bad value", []string{"sandbox", "run", "--allow", "a b", "--", "true"}, 2},
		{"missing policy", []string{"sandbox", "run", "--policy", filepath.Join(home, "none.yaml"), "--", "true"}, 2},
		{"bad size", []string{"sandbox", "run", "--memory", "lots", "--", "true"}, 2},
		{"no command", []string{"sandbox", "run"}, 2},
		{"bad id", []string{"sandbox", "exec", "nope", "--", "true"}, 2},
		{"empty ls", []string{"sandbox", "ls"}, 0},
		{"runs", []string{"runs", "ls"}, 0},
	}
	for _, c := range same {
		t.Run(c.name, func(t *testing.T) {
			got, want := run(t, airlock, env, c.args...), run(t, host, env, c.args...)
			if got != want {
				t.Errorf("airlock %v = %+v\nairlock-host gives %+v", c.args, got, want)
			}
			if got.code != c.code {
				t.Errorf("airlock %v exited %d, want %d; stderr: %s", c.args, got.code, c.code, got.stderr)
			}
		})
	}

	t.Run("sandbox run", func(t *testing.T) {
		if !canRun {
			t.Skip("sandboxes cannot run here (not root, or a required layer is missing)")
		}
		r := run(t, airlock, env, "sandbox", "run", "--env", "A=b", "--", "/bin/sh", "-c", `echo "$A"; exit 3`)
		if r.stdout != "b\n" || r.code != 3 {
			t.Errorf("sandbox run = %+v, want stdout b and exit 3", r)
		}
	})

	t.Run("gc --forget", func(t *testing.T) {
		if !canRun {
			t.Skip("sandboxes cannot run here (not root, or a required layer is missing)")
		}
		own := filepath.Join(home, "own")
		oenv := []string{"AIRLOCK_HOME=" + own}
		if r := run(t, airlock, oenv, "sandbox", "run", "--", "true"); r.code != 0 {
			t.Fatalf("sandbox run = %+v", r)
		}
		parent := linux.CgroupParent(filepath.Join(own, sandboxcli.RunStateDir))
		if dirs := sandboxtest.CgroupDirs(parent); len(dirs) == 0 {
			t.Logf("no cgroup directories named %s (no cgroups here?)", parent)
		}
		if r := run(t, airlock, oenv, "sandbox", "gc", "--forget"); r.code != 0 {
			t.Fatalf("sandbox gc --forget = %+v", r)
		}
		if dirs := sandboxtest.CgroupDirs(parent); len(dirs) > 0 {
			t.Errorf("after gc --forget, cgroup directories %v are left", dirs)
		}
	})

	t.Run("without airlock-host", func(t *testing.T) {
		if !canRun {
			t.Skip("sandboxes cannot run here (not root, or a required layer is missing)")
		}
		// The plain sandbox commands need nothing but the front end and
		// the executor; the others say where airlock-host should be.
		lone := filepath.Join(dir, "lone")
		if err := os.Mkdir(lone, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"airlock", "airlock-exec"} {
			if err := os.Link(filepath.Join(dir, b), filepath.Join(lone, b)); err != nil {
				t.Fatal(err)
			}
		}
		a := filepath.Join(lone, "airlock")
		if r := run(t, a, env, "sandbox", "run", "--", "/bin/echo", "ok"); r.stdout != "ok\n" || r.code != 0 {
			t.Errorf("sandbox run without airlock-host = %+v", r)
		}
		r := run(t, a, env, "version")
		if r.code != 125 || !strings.Contains(r.stderr, "airlock-host") {
			t.Errorf("version without airlock-host = %+v, want exit 125 naming airlock-host", r)
		}
	})
}
