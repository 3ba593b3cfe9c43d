package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const self = "github.com/airlockrun/airlock/cmd/airlock"

// frontEndDeps are the packages outside the standard library the front end
// may link: the sandbox commands and what they run on. The policy engine,
// stores, model clients and telemetry stay in airlock-host; linking any of
// them would put their initialisation back on every sandbox's start.
var frontEndDeps = map[string]bool{
	self: true,
	"github.com/airlockrun/airlock/internal/sandboxcli":           true,
	"github.com/airlockrun/airlock/internal/sandbox":              true,
	"github.com/airlockrun/airlock/internal/sandbox/linux":        true,
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup": true,
	"github.com/airlockrun/airlock/internal/sandbox/execconn":     true,
	"github.com/airlockrun/airlock/internal/execproto":            true,
	"github.com/airlockrun/airlock/internal/executor/landlock":    true,
	"github.com/airlockrun/airlock/internal/supervisor":           true,
	"github.com/pmezard/go-difflib/difflib":                       true,
	"golang.org/x/sys/unix":                                       true,
}

func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	return p
}

func TestFrontEndDeps(t *testing.T) {
	cmd := exec.Command(goTool(t), "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", self)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", self, err)
	}
	for _, p := range strings.Fields(string(out)) {
		if !frontEndDeps[p] && !strings.HasPrefix(p, "vendor/") {
			t.Errorf("cmd/airlock links %s: the front end may link only the sandbox commands (frontEndDeps); run what needs more in airlock-host", p)
		}
	}
}
