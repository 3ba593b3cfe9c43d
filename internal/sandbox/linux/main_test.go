package linux_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// executorPath is the airlock-exec binary built for these tests.
var executorPath string

// prebuiltExecutorEnv names an executor already built by the process that
// started this one (the rootless tests re-execute the test binary as another
// user, who could not run `go build`).
const prebuiltExecutorEnv = "AIRLOCK_TEST_EXECUTOR"

func TestMain(m *testing.M) {
	if role := os.Getenv(peerRoleEnv); role != "" {
		os.Exit(peerRole(role))
	}
	if p := os.Getenv(prebuiltExecutorEnv); p != "" {
		executorPath = p
		code := m.Run()
		removeBenchTree() // a benchmark run given an executor makes it too
		os.Exit(code)
	}
	path, remove, err := sandboxtest.BuildExecutor()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	executorPath = path
	code := m.Run()
	remove()
	removeBenchTree()
	os.Exit(code)
}
