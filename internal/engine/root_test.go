package engine_test

import (
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/policy"
)

// TestPolicyConfigRoot: a run's sandboxes keep a read-only root unless
// the policy's sandbox.root says writable.
func TestPolicyConfigRoot(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		want bool
	}{
		{"sandbox: {}\n", false},
		{"sandbox:\n  root: read-only\n", false},
		{"sandbox:\n  root: writable\n", true},
	} {
		doc, err := policy.Parse([]byte(tt.doc))
		if err != nil {
			t.Fatal(err)
		}
		if got := engine.PolicyConfig(doc).WritableRoot; got != tt.want {
			t.Errorf("%q: WritableRoot = %v, want %v", tt.doc, got, tt.want)
		}
	}
}
