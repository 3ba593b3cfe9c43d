package host

import (
	"os"
	"testing"

	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestProbeLayers: doctor's probe mounts a real stack of layers and finds
// both whiteout forms honoured on this machine.
func TestProbeLayers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create sandboxes")
	}
	exe, remove, err := sandboxtest.BuildExecutor()
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	if err := probeLayers(exe); err != nil {
		t.Fatalf("probeLayers = %v", err)
	}
}

// TestParseRegistryAuth: a registry secret is USER:PASSWORD (the password
// may hold colons) or a bearer token.
func TestParseRegistryAuth(t *testing.T) {
	for in, want := range map[string]image.Auth{
		"user:pa:ss\n": {Username: "user", Password: "pa:ss"},
		"tok3n":        {Token: "tok3n"},
	} {
		if got := ParseRegistryAuth(in); got != want {
			t.Errorf("ParseRegistryAuth(%q) = %+v, want %+v", in, got, want)
		}
	}
	if got := RegistrySecret("127.0.0.1:5000"); got != "registry-127.0.0.1_5000" {
		t.Errorf("RegistrySecret = %q", got)
	}
}
