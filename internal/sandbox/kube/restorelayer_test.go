package kube_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestRestoreLayerHidden: a pod's empty workspace is an overlay over its
// volume (docs/kubernetes.md), and its layers (the lower one a restore
// fills, the upper one checkpoints read) have no path in the sandbox: not
// in /workspace, not through the executor's descriptors of them (the
// container's /proc shows outer pids: every process's is tried), not by
// unmounting the overlay. TestAttacks/*/WorkspaceLayers is the linux
// backend's.
func TestRestoreLayerHidden(t *testing.T) {
	e := needCluster(t)
	b := newBackend(t, e, namespace(t, e))
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	if !contains(sb.Info().Layers, execproto.LayerRestoreLayer) {
		t.Fatalf("layers %q lack %s", sb.Info().Layers, execproto.LayerRestoreLayer)
	}
	body := "lower\n"
	sandboxtest.ImportFile(t, sb, "restored", body)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(script string) (string, int) {
		var out bytes.Buffer
		r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("Run(%q) = %v", script, err)
		}
		return out.String(), r.ExitCode
	}
	if out, code := run("cat /workspace/restored"); code != 0 || out != body {
		t.Fatalf("control: cat /workspace/restored = %q, exit %d", out, code)
	}
	for _, p := range []string{
		"ls -A /workspace | grep -q airlock",
		`for f in /proc/[0-9]*/fd/*; do ls -A "$f/" 2>/dev/null | grep -q restored && exit 0; done; exit 1`,
		`for f in /proc/[0-9]*/fd/*; do (: > "$f/planted") 2>/dev/null && exit 0; done; exit 1`,
		"umount /workspace 2>/dev/null || umount -l /workspace",
	} {
		if out, code := run(p); code == 0 {
			t.Errorf("%q succeeded inside the sandbox: %q", p, out)
		}
	}
	if out, code := run("cat /workspace/restored && ls -A /workspace"); code != 0 || strings.TrimSpace(out) != "lower\nrestored" {
		t.Errorf("after the probes: %q, exit %d; want the restored file alone", out, code)
	}
}
