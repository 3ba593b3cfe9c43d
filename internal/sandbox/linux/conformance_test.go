package linux_test

import (
	"os"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend {
		b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
		if err != nil {
			t.Fatalf("linux.New = %v", err)
		}
		t.Cleanup(func() { _ = b.Close() }) // after the sandboxes' cleanups
		return b
	})
}
