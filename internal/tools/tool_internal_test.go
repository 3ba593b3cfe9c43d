package tools

import (
	"strings"
	"testing"
)

// TestRegisterUndeclared: a tool built without saying what its calls may
// change is refused, so the loop never guesses.
func TestRegisterUndeclared(t *testing.T) {
	r := NewRegistry(0)
	err := r.Register(&spec[finishArgs]{name: "undeclared", place: PlaceHost})
	if err == nil || !strings.Contains(err.Error(), "does not say what its calls may change") {
		t.Fatalf("Register(undeclared) = %v, want a refusal", err)
	}
	if err := r.Register(&spec[finishArgs]{name: "declared", place: PlaceHost, effects: readOnly}); err != nil {
		t.Fatalf("Register(declared) = %v", err)
	}
}
