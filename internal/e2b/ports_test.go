package e2b_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/e2b"
)

// portReq asks the data plane for port of sandbox id, the way a client of
// a preview URL does (the E2b-Sandbox-* headers of E2B_SANDBOX_URL), with
// extra headers.
func (h *harness) portReq(id string, port int, extra map[string]string) response {
	h.t.Helper()
	hd := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": itoa(port)}
	for k, v := range extra {
		hd[k] = v
	}
	return h.do("GET", h.envdURL+"/", hd, nil)
}

// edgeError is the body E2B's edge answers a refused port request with.
type edgeError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port"`
	Code      int    `json:"code"`
}

// TestPortRefusals: each way a request for a sandbox's port is refused
// gets E2B's edge's answer (the status and body the SDK's tests expect)
// and an audit record with its outcome.
func TestPortRefusals(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.putPolicy("alpha", "closed", "sandbox:\n  limits:\n    memory: 256M\n")
	h.putPolicy("alpha", "some", "ports:\n  expose:\n    - ports: 3000\n      access: public\n    - ports: 8000-8999\n      access: token\n")

	public := h.create("alpha", map[string]any{"templateID": "base"})
	private := h.create("alpha", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	other := h.create("beta", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	closed := h.create("alpha", map[string]any{"templateID": "closed"})
	some := h.create("alpha", map[string]any{"templateID": "some"})
	dead := h.create("alpha", map[string]any{"templateID": "base"})
	if res := h.api("alpha", "DELETE", "/sandboxes/"+dead.ID, nil); res.status != 204 {
		t.Fatalf("kill: %s", res)
	}
	paused := h.create("alpha", map[string]any{"templateID": "base"})
	if res := h.api("alpha", "POST", "/sandboxes/"+paused.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}

	// Nothing listens on 3000 in any sandbox: a request that passes every
	// check reaches the port and finds it closed.
	const listening = 3000
	tok := func(t string) map[string]string { return map[string]string{"E2b-Traffic-Access-Token": t} }
	tests := []struct {
		name    string
		id      string
		port    int
		header  map[string]string
		status  int
		message string
		outcome string
	}{
		{"unknown sandbox", "sb-000000000000", listening, nil, 502, "The sandbox was not found", "not_found"},
		{"killed sandbox", dead.ID, listening, nil, 502, "The sandbox was not found", "not_found"},
		{"paused sandbox", paused.ID, listening, nil, 502, "The sandbox was not found", "not_found"},
		{"public port, nothing listening", public.ID, listening, nil, 502, "The sandbox is running but port is not open", ""},
		{"private sandbox, no token", private.ID, listening, nil, 403, "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing", "denied"},
		{"private sandbox, wrong token", private.ID, listening, tok("nope"), 403, "Sandbox is secured with traffic access token. Provided token in header 'e2b-traffic-access-token' is invalid", "denied"},
		{"private sandbox, another tenant's sandbox's token", private.ID, listening, tok(other.Traffic), 403, "Provided token in header 'e2b-traffic-access-token' is invalid", "denied"},
		{"private sandbox, its envd token is not a traffic token", private.ID, listening, map[string]string{"X-Access-Token": private.Token}, 403, "Token header 'e2b-traffic-access-token' is missing", "denied"},
		{"private sandbox, its token, nothing listening", private.ID, listening, tok(private.Traffic), 502, "The sandbox is running but port is not open", ""},
		{"policy without ports exposes nothing", closed.ID, listening, nil, 403, "Port 3000 is not exposed by the sandbox's policy", "not_exposed"},
		{"port outside the policy's rules", some.ID, 3001, nil, 403, "Port 3001 is not exposed by the sandbox's policy", "not_exposed"},
		{"token rule, no token", some.ID, 8080, nil, 403, "Token header 'e2b-traffic-access-token' is missing", "denied"},
		{"token rule, its token", some.ID, 8080, tok(some.Traffic), 502, "The sandbox is running but port is not open", ""},
		{"public rule of a stored policy", some.ID, listening, nil, 502, "The sandbox is running but port is not open", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := h.portReq(tc.id, tc.port, tc.header)
			var e edgeError
			if err := json.Unmarshal(res.body, &e); err != nil {
				t.Fatalf("port %d of %s = %s, not JSON: %v", tc.port, tc.id, res, err)
			}
			if res.status != tc.status || e.Code != tc.status || !strings.Contains(e.Message, tc.message) || e.SandboxID != tc.id {
				t.Errorf("port %d of %s = %s, want %d with message %q", tc.port, tc.id, res, tc.status, tc.message)
			}
			if tc.outcome == "" {
				return
			}
			found := false
			for _, r := range h.audit.records(t) {
				found = found || r.Op == "port" && r.Sandbox == tc.id && r.Port == tc.port && r.Outcome == tc.outcome && r.Client != ""
			}
			if !found {
				t.Errorf("no audit record of op port, sandbox %s, port %d, outcome %s:\n%s", tc.id, tc.port, tc.outcome, h.audit)
			}
		})
	}
}

// TestTrafficAccessToken: create tells a traffic access token only when a
// port needs one (allowPublicTraffic: false, or a token rule), a fresh one
// per sandbox, and getInfo tells allowPublicTraffic.
func TestTrafficAccessToken(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.putPolicy("alpha", "tokened", "ports:\n  expose:\n    - ports: 8000\n")
	public := h.create("alpha", map[string]any{"templateID": "base"})
	private := h.create("alpha", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	private2 := h.create("alpha", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	tokened := h.create("alpha", map[string]any{"templateID": "tokened"})
	if public.Traffic != "" {
		t.Errorf("public sandbox's trafficAccessToken = %q, want none", public.Traffic)
	}
	if private.Traffic == "" || private2.Traffic == "" || private.Traffic == private2.Traffic || private.Traffic == private.Token {
		t.Errorf("private sandboxes' trafficAccessTokens = %q, %q, want two distinct, not the envd token", private.Traffic, private2.Traffic)
	}
	if tokened.Traffic == "" {
		t.Errorf("a sandbox whose policy has a token rule has no trafficAccessToken")
	}
	for _, tc := range []struct {
		s    sbx
		want bool
	}{{public, true}, {private, false}} {
		res := h.api("alpha", "GET", "/sandboxes/"+tc.s.ID, nil)
		var info struct {
			Network struct {
				AllowPublicTraffic bool `json:"allowPublicTraffic"`
			} `json:"network"`
		}
		if err := json.Unmarshal(res.body, &info); err != nil || info.Network.AllowPublicTraffic != tc.want {
			t.Errorf("getInfo(%s) = %s, want network.allowPublicTraffic %v", tc.s.ID, res, tc.want)
		}
	}
	// The token never reaches the audit log or the sandbox's log.
	if strings.Contains(h.audit.String(), private.Traffic) {
		t.Errorf("the audit log holds a traffic access token")
	}
}

// TestPortByHost: a preview URL's host, <port>-<id>.<domain>, routes to
// the port as the headers do.
func TestPortByHost(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{Domain: "e2b.test"}})
	s := h.create("alpha", map[string]any{"templateID": "base"})
	req, err := http.NewRequest("GET", h.envdURL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "3000-" + s.ID + ".e2b.test"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e edgeError
	if err := json.NewDecoder(res.Body).Decode(&e); err != nil || res.StatusCode != 502 || e.Message != "The sandbox is running but port is not open" || e.Port != 3000 {
		t.Errorf("GET %s = %d %+v, want 502 port not open", req.Host, res.StatusCode, e)
	}
}
