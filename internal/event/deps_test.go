package event_test

import (
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

// TestDeps keeps event a leaf (STYLE §1): the standard library only, so
// the store, the engine, the API and the CLI can all import it, and it can
// be fuzzed in isolation.
func TestDeps(t *testing.T) {
	const self = deptest.Module + "/internal/event"
	for _, p := range deptest.List(t, "", "-deps", self) {
		if !p.Standard && p.ImportPath != self {
			t.Errorf("event must import only the standard library, but depends on %s", p.ImportPath)
		}
	}
}
