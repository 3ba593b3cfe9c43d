package engine_test

import (
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/policy"
)

// TestPolicyConfigRoot: a run's sandboxes keep a read-only root and have
// no sudo unless the policy's sandbox.root and sandbox.sudo say so.
func TestPolicyConfigRoot(t *testing.T) {
	for _, tt := range []struct {
		doc            string
		writable, sudo bool
	}{
		{"sandbox: {}\n", false, false},
		{"sandbox:\n  root: read-only\n  sudo: false\n", false, false},
		{"sandbox:\n  root: writable\n", true, false},
		{"sandbox:\n  sudo: true\n", false, true},
	} {
		doc, err := policy.Parse([]byte(tt.doc))
		if err != nil {
			t.Fatal(err)
		}
		cfg := engine.PolicyConfig(doc)
		if cfg.WritableRoot != tt.writable || cfg.Sudo != tt.sudo {
			t.Errorf("%q: WritableRoot, Sudo = %v, %v, want %v, %v", tt.doc, cfg.WritableRoot, cfg.Sudo, tt.writable, tt.sudo)
		}
	}
}
