package tools_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// executorPath is the airlock-exec binary built for these tests.
var executorPath string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run()) // the sandbox tests skip; the rest need no executor
	}
	dir, err := os.MkdirTemp("", "airlock-exec-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// World-executable in a world-traversable directory, owned by root,
	// like an installed binary.
	_ = os.Chmod(dir, 0o755)
	executorPath = filepath.Join(dir, "airlock-exec")
	build := exec.Command("go", "build", "-trimpath", "-o", executorPath, "github.com/airlockrun/airlock/cmd/airlock-exec")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build executor:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
