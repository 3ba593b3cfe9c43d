package e2b_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/e2b"
)

// TestTimeoutAndInternetRefused: a timeout over the tenant's bound (its
// plan's, else the server's) or the template's TTL, and internet access
// a template cannot give, are refused with E2B's status and a message
// that says why; nothing is silently shortened or turned off.
func TestTimeoutAndInternetRefused(t *testing.T) {
	h := newHarness(t, harnessOptions{trust: true, config: e2b.Config{
		MaxTimeout: time.Hour,
		Tenants:    map[string]e2b.TenantConfig{"beta": {MaxTimeout: 24 * time.Hour}},
	}})
	h.putPolicy("alpha", "short", "sandbox:\n  limits:\n    ttl: 10m\n")
	h.putPolicy("alpha", "egress", h.upstream.egressPolicy())
	tests := []struct {
		name   string
		tenant string
		body   map[string]any
		status int
		msg    string
	}{
		{"within the server's bound", "alpha", map[string]any{"timeout": 3600}, 201, ""},
		{"over the server's bound", "alpha", map[string]any{"timeout": 3601}, 400, "Timeout cannot be greater than 1 hours"},
		{"within the tenant's plan", "beta", map[string]any{"timeout": 86400}, 201, ""},
		{"over the tenant's plan", "beta", map[string]any{"timeout": 86401}, 400, "Timeout cannot be greater than 24 hours"},
		{"over the template's TTL", "alpha", map[string]any{"templateID": "short", "timeout": 601}, 400, "over template short's sandbox TTL"},
		{"internet on a template without egress", "alpha", map[string]any{"allow_internet_access": true}, 403, "template base's policy allows no egress"},
		{"internet on a template with egress", "alpha", map[string]any{"templateID": "egress", "allow_internet_access": true}, 201, ""},
		{"no internet on a template without egress", "alpha", map[string]any{"allow_internet_access": false}, 201, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := h.api(tt.tenant, "POST", "/v2/sandboxes", tt.body)
			if res.status == 201 {
				var s sbx
				_ = json.Unmarshal(res.body, &s)
				h.api(tt.tenant, "DELETE", "/sandboxes/"+s.ID, nil)
			}
			if res.status != tt.status || !strings.Contains(string(res.body), tt.msg) {
				t.Errorf("create %v = %s, want %d %q", tt.body, res, tt.status, tt.msg)
			}
		})
	}
	// The same bound holds for setTimeout and connect.
	s := h.create("alpha", nil)
	for _, path := range []string{"/sandboxes/" + s.ID + "/timeout", "/sandboxes/" + s.ID + "/connect"} {
		if res := h.api("alpha", "POST", path, map[string]any{"timeout": 7200}); res.status != 400 || !strings.Contains(string(res.body), "Timeout cannot be greater than 1 hours") {
			t.Errorf("%s with 7200 s = %s, want 400", path, res)
		}
	}
}
