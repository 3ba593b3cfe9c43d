package engine_test

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
)

// TestConfigEnv: a run's env may repeat what the engine sets in its
// sandboxes with the same value (a template's env often does), not set it
// otherwise, and never the sandbox's own variables.
func TestConfigEnv(t *testing.T) {
	for _, tt := range []struct {
		env  []string
		want string // "" for valid
	}{
		{[]string{"A=1", "PYTHONDONTWRITEBYTECODE=1"}, ""},
		{[]string{"PYTHONDONTWRITEBYTECODE=0"}, "PYTHONDONTWRITEBYTECODE: airlock sets it"},
		{[]string{"HTTPS_PROXY=http://x"}, "HTTPS_PROXY: airlock sets it"},
		{[]string{"NOEQUALS"}, "want KEY=VALUE"},
	} {
		cfg := engine.Config{Model: "script:x", Script: "sha256:" + strings.Repeat("0", 64), Env: tt.env, MaxSteps: 10, TimeoutMS: 60_000, Sandboxes: []engine.SandboxConfig{{Name: "main"}}}
		err := cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("env %q: %v", tt.env, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("env %q: %v, want an error with %q", tt.env, err, tt.want)
		}
	}
}
