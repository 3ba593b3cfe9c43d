package interp

import (
	_ "embed"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/template"
)

// Name is the built-in template E2B's Sandbox.create of
// @e2b/code-interpreter asks for.
const Name = "code-interpreter-v1"

// Port is the port the server listens on, inside the sandbox, on
// loopback.
const Port = 49999

// ScriptPath is where the server's program is written in the sandbox.
const ScriptPath = "/tmp/airlock-interp.py"

// script is the server's program.
//
//go:embed server.py
var script []byte

// Script returns the server's program.
func Script() []byte { return append([]byte(nil), script...) }

// readyTimeout bounds the server's start: a first kernel and
// matplotlib's font cache on a loaded machine.
const readyTimeout = 2 * time.Minute

// healthCheck exits 0 once the server's default Python context is up.
const healthCheck = "import urllib.request; urllib.request.urlopen('http://127.0.0.1:49999/health', timeout=5)"

// Template returns the built-in code-interpreter-v1 template: no image
// (the sandbox's root is the host's, whose Python must have Debian's
// python3-ipykernel and python3-jupyter-client, and python3-matplotlib,
// python3-pandas and python3-numpy for charts and data), the server's
// program written into the sandbox and started, ready when it answers
// /health.
func Template() *template.Template {
	return &template.Template{
		Files: []template.File{{Path: ScriptPath, Data: Script(), Mode: 0o444}},
		Start: template.Command{"python3", ScriptPath},
		Ready: &template.Ready{
			Command: template.Command{"python3", "-c", healthCheck},
			Timeout: policy.Duration(readyTimeout),
		},
	}
}
