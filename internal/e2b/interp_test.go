package e2b_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/interp"
)

// needKernel skips t when the host root's Python has no IPython kernel
// (scripts/ci-deps.sh installs Debian's).
func needKernel(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client").Run(); err != nil {
		t.Skip("needs Debian's python3-ipykernel and python3-jupyter-client (scripts/ci-deps.sh)")
	}
}

// TestCodeInterpreterTemplate: Sandbox.create('code-interpreter-v1'), as
// @e2b/code-interpreter asks, makes a sandbox on the host's root whose
// code interpreter server was up before create returned; code run
// through it (from inside the sandbox, on its loopback) keeps its state.
// A tenant's own template of the name would win (TestStoredTemplates
// covers that order for stored templates before policies).
func TestCodeInterpreterTemplate(t *testing.T) {
	needKernel(t)
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", map[string]any{"templateID": interp.Name})
	post := func(code string) interp.Execution {
		t.Helper()
		script := `import json, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:49999/execute", data=json.dumps({"code": sys.argv[1]}).encode(), headers={"Content-Type": "application/json"})
sys.stdout.write(urllib.request.urlopen(req).read().decode())`
		r := parseRun(t, h.stream(s, "process.Process/Start",
			map[string]any{"process": map[string]any{"cmd": "python3", "args": []string{"-c", script, code}}, "stdin": false}, nil))
		if r.exit != 0 {
			t.Fatalf("POST /execute %q: exit %d, stderr %s", code, r.exit, r.stderr)
		}
		ex, err := interp.Decode(strings.NewReader(r.stdout), interp.Limits{})
		if err != nil || !ex.Ended {
			t.Fatalf("Decode(%q) = %+v, %v", r.stdout, ex, err)
		}
		return ex
	}
	post("x = 41")
	ex := post("x + 1")
	if len(ex.Results) != 1 || !ex.Results[0].Main || ex.Results[0].Text != "42" {
		t.Errorf("x + 1: results %+v, want the main result 42", ex.Results)
	}
}
