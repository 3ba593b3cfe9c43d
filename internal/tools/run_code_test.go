package tools_test

import (
	"os"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/tools"
)

// TestRunCodeNoKernel: in a sandbox whose python3 cannot run Jupyter
// kernels (here: none on its PATH), run_code is a tool error that says
// what is missing, at once rather than after the readiness timeout.
func TestRunCodeNoKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sb := sandboxtest.Create(t, b, sandbox.Spec{Env: []string{"PATH=/nowhere"}})
	r := tools.Default(tools.Limits{})
	res := call(t, r, sb, "run_code", `{"code": "1 + 1"}`)
	if !res.IsError || !strings.Contains(res.Content, "cannot run Jupyter kernels") {
		t.Errorf("run_code without python3 = %+v, want a tool error saying the kernel cannot run", res)
	}
}
