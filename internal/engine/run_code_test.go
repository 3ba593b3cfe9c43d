package engine_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
)

const runCodeScript = `
turns:
  - tool_calls:
      - name: run_code
        args: {code: "import os\nx = 6\nprint('cwd', os.getcwd())"}
  - tool_calls:
      - name: run_code
        args: {code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, x])\nplt.show()\nx * 7"}
  - tool_calls:
      - name: run_code
        args: {code: "1 / 0"}
  - tool_calls:
      - name: finish
        args: {summary: "plotted"}
`

// TestRunCode: the model's run_code calls run in one kernel in the run's
// sandbox, started on first use (state persists between calls, in
// /workspace); a chart is kept as a PNG artifact of the run, recorded next
// to the call's result; an exception is a tool error the model reads.
func TestRunCode(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client, matplotlib").Run(); err != nil {
		t.Skip("needs Debian's python3-ipykernel, python3-jupyter-client and python3-matplotlib (scripts/ci-deps.sh)")
	}
	h := newHarness(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "README"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := h.run("plot", runCodeScript, engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}}})
	if o.Status != event.StatusCompleted {
		t.Fatalf("status = %s (%s), want completed", o.Status, o.Reason)
	}
	fin := h.finished(o.RunID)
	if len(fin) != 4 {
		t.Fatalf("%d results, want 4: %+v", len(fin), fin)
	}
	if fin[0].IsError || !strings.Contains(fin[0].Output, "cwd /workspace") {
		t.Errorf("first call: %+v, want cwd /workspace", fin[0])
	}
	if fin[1].IsError || !strings.Contains(fin[1].Output, "[result]\n42") || !strings.Contains(fin[1].Output, "PNG image") {
		t.Errorf("second call: %q, want 42 (x kept) and a PNG", fin[1].Output)
	}
	if !fin[2].IsError || !strings.Contains(fin[2].Output, "ZeroDivisionError: division by zero") || strings.Contains(fin[2].Output, "\x1b[") {
		t.Errorf("third call: %+v, want a tool error with the exception, no terminal escapes", fin[2])
	}
	var png []string
	for _, a := range o.Artifacts {
		if a.MediaType != "image/png" {
			continue
		}
		png = append(png, a.Name)
		r, err := h.blobs.Open(context.Background(), a.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if b := mustRead(t, r); !strings.HasPrefix(b, "\x89PNG\r\n\x1a\n") {
			t.Errorf("artifact %s is not a PNG: %q", a.Name, b[:min(len(b), 16)])
		}
	}
	if len(png) != 1 || !strings.HasPrefix(png[0], "calls/2-") {
		t.Errorf("PNG artifacts = %v, want one of step 2", png)
	}
	stored := 0
	for _, e := range h.verifyLog(o.RunID) {
		if e.Type == event.TypeArtifactStored && strings.Contains(string(e.Payload), `"kind":"image"`) {
			stored++
		}
	}
	if stored != 1 {
		t.Errorf("%d image artifact.stored events, want 1", stored)
	}
}
