package linux_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// executorPath is the airlock-exec binary built for these tests.
var executorPath string

// prebuiltExecutorEnv names an executor already built by the process that
// started this one (the rootless tests re-execute the test binary as another
// user, who could not run `go build`).
const prebuiltExecutorEnv = "AIRLOCK_TEST_EXECUTOR"

func TestMain(m *testing.M) {
	if p := os.Getenv(prebuiltExecutorEnv); p != "" {
		executorPath = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "airlock-exec-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The executor is world-executable in a world-traversable directory
	// and owned by root, like an installed binary: sandbox root (an
	// unmapped host uid) may run it but never write it.
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
