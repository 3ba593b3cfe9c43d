package linux_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

// TestBackgroundCPUWeight: a sandbox created with a Background context
// starts at a CPU weight below a sandbox in use (1 against 100), and
// Foreground raises it to the default; one created without the mark is at
// the default from the start, and Foreground leaves it there. With and
// without the spawner.
func TestBackgroundCPUWeight(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, spawner := range []bool{false, true} {
		t.Run(fmt.Sprintf("spawner=%v", spawner), func(t *testing.T) {
			b := newBackend(t, executorPath, spawner)
			ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
			defer cancel()
			weight := func(sb sandbox.Sandbox) int {
				t.Helper()
				w, err := linux.CPUWeight(sb.(*linux.Sandbox))
				if err != nil {
					t.Skipf("no cpu controller for sandboxes here: %v", err)
				}
				return w
			}
			made := func(ctx context.Context) sandbox.Sandbox {
				t.Helper()
				sb, err := b.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{Pids: 64}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
				return sb
			}
			bg := made(sandbox.Background(ctx))
			if w := weight(bg); w != 1 {
				t.Errorf("CPU weight of a sandbox made in the background = %d, want 1", w)
			}
			if err := bg.(sandbox.Prioritizer).Foreground(); err != nil {
				t.Fatalf("Foreground() = %v", err)
			}
			if w := weight(bg); w != 100 {
				t.Errorf("CPU weight after Foreground = %d, want 100", w)
			}
			// It works as any sandbox does.
			var out bytes.Buffer
			if r, err := sandbox.Run(ctx, bg, sandbox.Command{Argv: []string{"echo", "hi"}, Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "hi\n" {
				t.Errorf("echo in a foregrounded sandbox: %+v %v %q", r, err, out.String())
			}
			fg := made(ctx)
			if w := weight(fg); w != 100 {
				t.Errorf("CPU weight of a sandbox made in the foreground = %d, want 100", w)
			}
			if err := fg.(sandbox.Prioritizer).Foreground(); err != nil || weight(fg) != 100 {
				t.Errorf("Foreground of a foreground sandbox = %v, weight %d; want nil, 100", err, weight(fg))
			}
		})
	}
}
