package engine_test

import (
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/policy"
)

// TestPolicyConfigRoot: a run's sandboxes keep a read-only root, have no
// sudo and show read-only directories as live binds unless the policy's
// sandbox.root, sandbox.sudo and sandbox.static_read_only say so.
func TestPolicyConfigRoot(t *testing.T) {
	for _, tt := range []struct {
		doc                    string
		writable, sudo, static bool
	}{
		{"sandbox: {}\n", false, false, false},
		{"sandbox:\n  root: read-only\n  sudo: false\n", false, false, false},
		{"sandbox:\n  root: writable\n", true, false, false},
		{"sandbox:\n  sudo: true\n", false, true, false},
		{"sandbox:\n  static_read_only: true\n", false, false, true},
	} {
		doc, err := policy.Parse([]byte(tt.doc))
		if err != nil {
			t.Fatal(err)
		}
		cfg := engine.PolicyConfig(doc)
		if cfg.WritableRoot != tt.writable || cfg.Sudo != tt.sudo {
			t.Errorf("%q: WritableRoot, Sudo = %v, %v, want %v, %v", tt.doc, cfg.WritableRoot, cfg.Sudo, tt.writable, tt.sudo)
		}
		if cfg.StaticReadOnly != tt.static {
			t.Errorf("%q: StaticReadOnly = %v, want %v", tt.doc, cfg.StaticReadOnly, tt.static)
		}
	}
}
