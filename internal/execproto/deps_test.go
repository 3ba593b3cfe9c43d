package execproto_test

import (
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

// TestDeps keeps execproto a leaf that imports only the standard library: both
// the host and the executor link it, so anything it imports ends up beside
// untrusted code (STYLE §1).
func TestDeps(t *testing.T) {
	const self = deptest.Module + "/internal/execproto"
	for _, platform := range []string{"linux/amd64", "linux/arm64", "darwin/arm64"} {
		t.Run(platform, func(t *testing.T) {
			for _, p := range deptest.List(t, platform, "-deps", self) {
				if !p.Standard && p.ImportPath != self {
					t.Errorf("execproto must import only the standard library, but depends on %s", p.ImportPath)
				}
			}
		})
	}
}
