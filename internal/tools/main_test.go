package tools_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// executorPath is the airlock-exec binary built for these tests.
var executorPath string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run()) // the sandbox tests skip; the rest need no executor
	}
	path, remove, err := sandboxtest.BuildExecutor()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	executorPath = path
	code := m.Run()
	remove()
	os.Exit(code)
}
