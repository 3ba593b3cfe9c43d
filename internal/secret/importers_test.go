package secret_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// secretImporters are the packages allowed to hold secret values: the
// egress proxy and the model clients (which use them on the host, on the
// way out), the LLM gateway, the wiring, the CLI that manages the store and
// the API server, which takes a value on PUT /v1/secrets and hands it to the
// store and the redactor without keeping it.
// Secret values must never reach the store, events, logs or the sandbox
// (STYLE §1); a new importer is a review decision, made here.
var secretImporters = []string{
	"github.com/airlockrun/airlock/internal/cli",
	"github.com/airlockrun/airlock/internal/egress",
	"github.com/airlockrun/airlock/internal/gateway",
	"github.com/airlockrun/airlock/internal/host",
	"github.com/airlockrun/airlock/internal/model",
	"github.com/airlockrun/airlock/internal/secret/token",
	"github.com/airlockrun/airlock/internal/server",
}

func TestSecretImporters(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/airlockrun/airlock/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/airlockrun/airlock/internal/secret"
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == self || !slices.Contains(f[1:], self) {
			continue
		}
		if !slices.Contains(secretImporters, f[0]) {
			t.Errorf("%s imports internal/secret; only %v may (see STYLE §1)", f[0], secretImporters)
		}
	}
}
