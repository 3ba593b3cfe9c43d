package sandboxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ExecutorDirPrefix starts the name of the temporary directory that
// BuildExecutor builds into (tests that outlive a killed helper clean up by it).
const ExecutorDirPrefix = "airlock-exec-test-"

// BuildExecutor builds airlock-exec, static, for tests that make real
// sandboxes, and returns its path and a func that removes it. Like an
// installed binary it is owned by the caller (root in CI) and sits in a
// world-traversable directory: sandbox root, an unmapped host uid, may run it
// but never write it.
func BuildExecutor() (path string, remove func(), err error) {
	dir, err := os.MkdirTemp("", ExecutorDirPrefix)
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	if err := os.Chmod(dir, 0o755); err != nil {
		remove()
		return "", nil, err
	}
	path = filepath.Join(dir, "airlock-exec")
	build := exec.Command("go", "build", "-trimpath", "-o", path, "github.com/airlockrun/airlock/cmd/airlock-exec")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("build airlock-exec: %w\n%s", err, out)
	}
	return path, remove, nil
}

// PrebuiltExecutorEnv names an executor built beforehand, which Main uses
// instead of building one.
const PrebuiltExecutorEnv = "AIRLOCK_TEST_EXECUTOR"

// Main is the TestMain of a package whose tests make real sandboxes: as
// root it builds the executor into *path for them, runs the tests, and
// removes it; otherwise it only runs the tests (those that need sandboxes
// skip, saying they need root). It returns the exit code for os.Exit.
//
// With $AIRLOCK_TEST_EXECUTOR set (an airlock-exec built beforehand) it
// uses that one instead of building: the bench scripts run a test binary
// with one executor and then another (bench/gvisor-exec.sh).
func Main(m *testing.M, path *string) int {
	if os.Geteuid() != 0 {
		return m.Run()
	}
	if p := os.Getenv(PrebuiltExecutorEnv); p != "" {
		*path = p
		return m.Run()
	}
	p, remove, err := BuildExecutor()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer remove()
	*path = p
	return m.Run()
}
