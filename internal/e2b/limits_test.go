package e2b_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/e2b"
)

// TestTimeoutAndInternetRefused: a timeout over the tenant's bound (its
// plan's, else the server's) or the template's TTL is refused with E2B's
// status and a message that says why, not shortened; internet access a
// template cannot give is answered as none, in the create's header and
// getInfo, never silently.
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
	// Internet access: what the sandbox got, said.
	for _, tt := range []struct {
		template string
		allow    bool
		header   string
		info     bool
	}{
		{"base", true, "none; template base's policy allows no egress", false},
		{"egress", true, "", true},
		{"egress", false, "", false},
	} {
		res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": tt.template, "allow_internet_access": tt.allow})
		var s sbx
		_ = json.Unmarshal(res.body, &s)
		var info struct {
			AllowInternetAccess bool `json:"allowInternetAccess"`
		}
		_ = json.Unmarshal(h.api("alpha", "GET", "/sandboxes/"+s.ID, nil).body, &info)
		h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil)
		if res.status != 201 || res.header.Get("Airlock-Internet-Access") != tt.header || info.AllowInternetAccess != tt.info {
			t.Errorf("create from %s with allow_internet_access %v = %d, Airlock-Internet-Access %q, getInfo's allowInternetAccess %v; want 201, %q, %v",
				tt.template, tt.allow, res.status, res.header.Get("Airlock-Internet-Access"), info.AllowInternetAccess, tt.header, tt.info)
		}
	}
	// The same bound holds for setTimeout and connect.
	s := h.create("alpha", nil)
	for _, path := range []string{"/sandboxes/" + s.ID + "/timeout", "/sandboxes/" + s.ID + "/connect"} {
		if res := h.api("alpha", "POST", path, map[string]any{"timeout": 7200}); res.status != 400 || !strings.Contains(string(res.body), "Timeout cannot be greater than 1 hours") {
			t.Errorf("%s with 7200 s = %s, want 400", path, res)
		}
	}
}
