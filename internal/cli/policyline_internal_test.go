package cli

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
)

// TestPolicyLine: how runs show and the timeline name a run's policy, for
// runs recorded now and for runs recorded before the policy hash was
// canonical (their one hash is of the document's bytes, and still shows).
func TestPolicyLine(t *testing.T) {
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	for _, tc := range []struct {
		name      string
		p         event.PolicyResolved
		run       string
		full, brf string
	}{
		{
			"a stored version",
			event.PolicyResolved{PolicyHash: a, Source: "policy prod v2", Version: "prod@v2"},
			a,
			"prod@v2 " + a, "prod@v2 (aaaaaaaaaaaa)",
		},
		{
			"flags on a version",
			event.PolicyResolved{PolicyHash: b, Source: "prod.yaml", Version: "prod@v2", BaseHash: a},
			b,
			"prod@v2 " + a + " + flags → " + b, "prod@v2 (aaaaaaaaaaaa) + flags → bbbbbbbbbbbb",
		},
		{
			"flags on the default",
			event.PolicyResolved{PolicyHash: b, Source: "default (deny all egress)", BaseHash: a},
			b,
			"default (deny all egress) " + a + " + flags → " + b, "default (deny all egress) (aaaaaaaaaaaa) + flags → bbbbbbbbbbbb",
		},
		{
			"recorded before",
			event.PolicyResolved{PolicyHash: "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Source: "default with flags"},
			"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
			"default with flags sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "default with flags (e3b0c44298fc)",
		},
		{"no hash in the event", event.PolicyResolved{Source: "policy.yaml"}, a, "policy.yaml " + a, "policy.yaml (aaaaaaaaaaaa)"},
	} {
		if got := policyLine(tc.p, tc.run, true); got != tc.full {
			t.Errorf("%s: policyLine(full) = %q, want %q", tc.name, got, tc.full)
		}
		if got := policyLine(tc.p, tc.run, false); got != tc.brf {
			t.Errorf("%s: policyLine(short) = %q, want %q", tc.name, got, tc.brf)
		}
	}
}
