package linux_test

import (
	"context"
	"os"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestConformance runs the backend's contract through the spawner, as a
// long-running host does; TestConformanceDirect forks the test process, as
// the command line does.
func TestConformance(t *testing.T) {
	conformance(t, true)
}

func TestConformanceDirect(t *testing.T) {
	conformance(t, false)
}

func conformance(t *testing.T, spawner bool) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir(), Spawner: spawner})
		if err != nil {
			t.Fatalf("linux.New = %v", err)
		}
		t.Cleanup(func() { _ = b.Close() }) // after the sandboxes' cleanups
		if root, ok := imageRoot(t); ok {
			return imageBackend{b, root} // TestImageRoot's run
		}
		return b
	})
}

// TestConformanceGVisor runs the contract on the gvisor runtime: the same
// backend, every spec with Runtime gvisor.
func TestConformanceGVisor(t *testing.T) {
	needGVisor(t)
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		return gvisorRuntime{newGVisorBackend(t)}
	})
}

// gvisorRuntime creates every sandbox on the gvisor runtime.
type gvisorRuntime struct{ *linux.Backend }

func (b gvisorRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	spec.Runtime = sandbox.RuntimeGVisor
	return b.Backend.Create(ctx, spec)
}
