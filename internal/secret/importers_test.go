package secret_test

import (
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

// secretImporters are the packages allowed to hold secret values: the
// egress proxy and the model clients (which use them on the host, on the
// way out), the LLM gateway, the wiring (which the CLI calls to manage the store) and
// the API server, which takes a value on PUT /v1/secrets and hands it to the
// store and the redactor without keeping it.
// Secret values must never reach the store, events, logs or the sandbox
// (STYLE §1); a new importer is a review decision, made here.
var secretImporters = []string{
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
	const self = deptest.Module + "/internal/secret"
	for _, by := range deptest.Importers(deptest.List(t, "", deptest.Module+"/..."), self) {
		if !slices.Contains(secretImporters, by) {
			t.Errorf("%s imports internal/secret; only %v may (see STYLE §1)", by, secretImporters)
		}
	}
}
