package executor

import (
	"testing"

	"github.com/airlockrun/airlock/internal/execproto"
)

// TestCapNumbers: every capability the protocol lets a setup keep has its
// number here, a distinct one, and nothing else does.
func TestCapNumbers(t *testing.T) {
	seen := map[int]string{}
	for _, name := range execproto.RootCapabilities {
		c, ok := capNumber(name)
		if !ok {
			t.Errorf("root capability %s has no number", name)
			continue
		}
		if other, dup := seen[c]; dup {
			t.Errorf("root capabilities %s and %s have the same number %d", name, other, c)
		}
		seen[c] = name
	}
	for _, name := range []string{"SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "", "chown"} {
		if c, ok := capNumber(name); ok {
			t.Errorf("capNumber(%q) = %d; want none: RootCapabilities does not allow it", name, c)
		}
	}
}
