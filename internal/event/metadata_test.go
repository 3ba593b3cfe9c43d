package event_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
)

func TestCheckMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range event.MaxMetadataKeys + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	full := map[string]string{}
	for i := range event.MaxMetadataKeys {
		full[fmt.Sprintf("k%d", i)] = strings.Repeat("é", event.MaxMetadataValueLen/2)
	}
	tests := []struct {
		name string
		md   map[string]string
		ok   bool
	}{
		{"none", nil, true},
		{"labels", map[string]string{"ticket": "OPS-42", "team.name": "infra", "A_1-b": ""}, true},
		{"at the bounds", full, true},
		{"longest key", map[string]string{strings.Repeat("k", event.MaxMetadataKeyLen): "v"}, true},
		{"too many keys", many, false},
		{"empty key", map[string]string{"": "v"}, false},
		{"key too long", map[string]string{strings.Repeat("k", event.MaxMetadataKeyLen+1): "v"}, false},
		{"key starts with a dot", map[string]string{".x": "v"}, false},
		{"key with a space", map[string]string{"a b": "v"}, false},
		{"key with a slash", map[string]string{"a/b": "v"}, false},
		{"value too long", map[string]string{"k": strings.Repeat("v", event.MaxMetadataValueLen+1)}, false},
		{"value not UTF-8", map[string]string{"k": "\xff"}, false},
		{"value with NUL", map[string]string{"k": "a\x00b"}, false},
		{"value with other control characters", map[string]string{"k": "a\tb\nc"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := event.CheckMetadata(tt.md)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckMetadata = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && strings.Contains(err.Error(), strings.Repeat("v", 20)) {
				t.Errorf("the error %q quotes a value", err)
			}
		})
	}
}

// TestRunCreatedMetadata: a run's metadata survives the payload's
// canonical form, and is redacted like every other payload field.
func TestRunCreatedMetadata(t *testing.T) {
	ev, err := event.New(event.RunCreated{
		Tenant: "acme", Task: "t", Model: "script:x", PolicyHash: "sha256:ab",
		Metadata: map[string]string{"ticket": "OPS-42", "token": "hunter2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := event.CanonicalPayload(ev.Payload, scrubber)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("hunter2")) {
		t.Fatalf("payload %s holds the secret", b)
	}
	ev.Payload = b
	p, err := ev.Unpack()
	if err != nil {
		t.Fatal(err)
	}
	md := p.(*event.RunCreated).Metadata
	if md["ticket"] != "OPS-42" || md["token"] != "[redacted]" {
		t.Errorf("metadata after the round trip = %v", md)
	}
}
