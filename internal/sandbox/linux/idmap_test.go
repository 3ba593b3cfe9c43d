package linux_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/executor/vfork"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestIdmapReuse: a backend keeps the id-map namespace of a workspace owner
// and uid range, so the next sandbox that gets the same range (the one its
// process released last) starts no helper; an owner it has not seen gets a
// namespace of its own. Each time the workspace shows as the sandbox user's.
func TestIdmapReuse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for id-mapped workspaces")
	}
	for _, start := range []string{"direct", "spawner", "fork"} {
		t.Run(start, func(t *testing.T) {
			b := newBackend(t, executorPath, start == "spawner")
			if start == "fork" {
				linux.SetForkOnly(b)
			}
			rootOwned := t.TempDir()
			other := t.TempDir()
			for _, d := range []string{rootOwned, other} {
				if err := os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chown(other, 12345, 12345); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(filepath.Join(other, "f"), 12345, 12345); err != nil {
				t.Fatal(err)
			}
			check := func(ws string) {
				t.Helper()
				sb := sandboxtest.Create(t, b, sandbox.Spec{Workspace: ws})
				ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
				defer cancel()
				var out strings.Builder
				r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "stat -c %u:%g /workspace /workspace/f && touch /workspace/new && echo written"}, Stdout: &out})
				if err != nil || r.ExitCode != 0 {
					t.Fatalf("run: %+v %v (%q)", r, err, out.String())
				}
				if want := "1000:1000\n1000:1000\nwritten\n"; out.String() != want {
					t.Errorf("workspace %s inside: %q, want %q", ws, out.String(), want)
				}
				if err := sb.Destroy(ctx); err != nil {
					t.Fatal(err)
				}
			}
			check(rootOwned)
			check(rootOwned)
			if n := linux.IdmapsMade(b); n != 1 {
				t.Errorf("two sandboxes one after the other on one workspace made %d id-map namespaces, want 1", n)
			}
			check(other)
			if n := linux.IdmapsMade(b); n != 2 {
				t.Errorf("a workspace of another owner: %d id-map namespaces in all, want 2", n)
			}
			check(rootOwned)
			if n := linux.IdmapsMade(b); n != 2 {
				t.Errorf("back to the first owner: %d id-map namespaces in all, want 2", n)
			}
			// The direct start's helpers are clones that share the
			// host's memory, their maps written after the exec; the
			// spawner's and the fork-only start's are forks.
			want := int64(0)
			if start == "direct" && vfork.Supported {
				want = 2
			}
			if n := linux.IdmapsDirect(b); n != want {
				t.Errorf("%d id-map namespaces made by a helper started sharing the host's memory, want %d", n, want)
			}
			for _, d := range []string{rootOwned, other} {
				if _, err := os.Stat(filepath.Join(d, "new")); err == nil {
					t.Errorf("the cow workspace %s changed on the host", d)
				}
			}
		})
	}
}
