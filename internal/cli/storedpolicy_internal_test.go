package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
)

func TestPolicyNameOf(t *testing.T) {
	tests := []struct{ path, want string }{
		{"policy.yaml", "policy"},
		{"/etc/airlock/prod.yml", "prod"},
		{"dir/My Policy.yaml", "my-policy"},
		{"prod.v2.yaml", "prod.v2"},
		{".hidden.yaml", "hidden"},
		{"__init__.yaml", "init__"},
		{"noext", "noext"},
		{"ÉTÉ.yaml", "t-"},
		{"日本.yaml", ""},
		{".yaml", ""},
		{"---.yaml", ""},
		{"/", ""},
		{"", ""},
		{strings.Repeat("a", 100) + ".yaml", strings.Repeat("a", store.MaxPolicyNameLen)},
	}
	for _, tt := range tests {
		if got := policyNameOf(tt.path); got != tt.want {
			t.Errorf("policyNameOf(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestSplitPolicyRef(t *testing.T) {
	tests := []struct {
		arg, name, ref string
		ok             bool
	}{
		{"prod", "prod", "", true},
		{"prod@v3", "prod", "v3", true},
		{"prod@0123abcd", "prod", "0123abcd", true},
		{"prod@sha256:0123abcd", "prod", "sha256:0123abcd", true},
		{"prod@", "", "", false},
		{"prod@v0", "", "", false},
		{"prod@abc", "", "", false},
		{"prod@v1@v2", "", "", false},
		{"@v1", "", "", false},
		{"Prod", "", "", false},
		{"policy.yaml", "policy.yaml", "", true},
		{"dir/policy.yaml", "", "", false},
	}
	for _, tt := range tests {
		name, ref, err := splitPolicyRef(tt.arg)
		var usage usageError
		if (err == nil) != tt.ok || name != tt.name || ref != tt.ref || (err != nil && !errors.As(err, &usage)) {
			t.Errorf("splitPolicyRef(%q) = %q, %q, %v, want %q, %q (ok %v, a usage error)", tt.arg, name, ref, err, tt.name, tt.ref, tt.ok)
		}
	}
}

// FuzzPolicyNameOf: whatever the file name, the name made of it is valid
// or empty.
func FuzzPolicyNameOf(f *testing.F) {
	for _, s := range []string{"policy.yaml", "My Policy.yml", ".x", "日本.yaml", "a/b/c.d.e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		name := policyNameOf(path)
		if name != "" && store.ValidatePolicyName(name) != nil {
			t.Fatalf("policyNameOf(%q) = %q, not a valid name", path, name)
		}
		if name != "" && !isPolicyRef(name) {
			t.Fatalf("policyNameOf(%q) = %q, which --policy does not read as a stored name", path, name)
		}
	})
}
