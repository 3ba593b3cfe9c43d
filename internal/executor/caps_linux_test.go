package executor

import (
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/execproto"
)

// TestCapNumbers: every capability the protocol lets a setup keep has its
// number here, and nothing else does.
func TestCapNumbers(t *testing.T) {
	for _, name := range execproto.RootCapabilities {
		if _, ok := capNumbers[name]; !ok {
			t.Errorf("root capability %s has no number", name)
		}
	}
	for name := range capNumbers {
		if !slices.Contains(execproto.RootCapabilities, name) {
			t.Errorf("capNumbers names %s, which execproto.RootCapabilities does not allow", name)
		}
	}
}
