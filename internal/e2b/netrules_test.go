package e2b_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestNetworkRules: a sandbox's own allowOut and denyOut narrow what its
// template's policy lets it reach, by address (127.x on loopback) and by
// name; allow beats deny; a rule that would widen the policy is 403;
// updateNetwork applies new rules to a running sandbox's next
// connection.
func TestNetworkRules(t *testing.T) {
	h := newHarness(t, harnessOptions{trust: true})
	needCurl(t)
	// One server on three loopback addresses, one port.
	ln, err := net.Listen("tcp", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })}
	t.Cleanup(func() { srv.Close() })
	go srv.Serve(ln)
	for _, a := range []string{"127.0.0.2", "127.0.0.3"} { // named.test is 127.0.0.3
		l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", a, port))
		if err != nil {
			t.Skipf("listen on %s:%d: %v", a, port, err)
		}
		go srv.Serve(l)
	}
	h.putPolicy("alpha", "loop", fmt.Sprintf(`network:
  allow:
    - cidr: 127.0.0.0/8
      ports: [%d]
    - host: named.test
      ports: [%d]
  resolve:
    - host: named.test:%d
      to: 127.0.0.3:%d
`, port, port, port, port))
	// Not 127.0.0.1: curl in the sandbox does not proxy it.
	targets := []string{"127.0.0.4", "127.0.0.2", "named.test"}
	probe := func(s sbx) string {
		var cmd []string
		for _, tg := range targets {
			cmd = append(cmd, fmt.Sprintf("curl -s -o /dev/null --max-time 20 -w '%%{http_code} ' http://%s:%d/", tg, port))
		}
		r := parseRun(t, h.stream(s, "process.Process/Start", bash(strings.Join(cmd, "; ")), nil))
		return strings.TrimSpace(r.stdout)
	}
	tests := []struct {
		name    string
		network map[string]any
		want    string // per target: 200 reached, 403 refused
	}{
		{"no rules", nil, "200 200 200"},
		{"deny one address", map[string]any{"denyOut": []string{"127.0.0.2"}}, "200 403 200"},
		{"deny all traffic", map[string]any{"denyOut": []string{"0.0.0.0/0"}}, "403 403 403"},
		{"allow one address, deny all", map[string]any{"denyOut": []string{"0.0.0.0/0"}, "allowOut": []string{"127.0.0.2"}}, "403 200 403"},
		{"allow a domain, deny all", map[string]any{"denyOut": []string{"0.0.0.0/0"}, "allowOut": []string{"named.test"}}, "403 403 200"},
		{"allow takes precedence over deny", map[string]any{"denyOut": []string{"127.0.0.0/8"}, "allowOut": []string{"127.0.0.4", "127.0.0.2/32"}}, "200 200 403"},
		{"allow alone refuses nothing", map[string]any{"allowOut": []string{"127.0.0.4"}}, "200 200 200"},
	}
	var live sbx
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := map[string]any{"templateID": "loop"}
			if tt.network != nil {
				body["network"] = tt.network
			}
			s := h.create("alpha", body)
			if got := probe(s); got != tt.want {
				t.Errorf("reached %v = %q, want %q", targets, got, tt.want)
			}
			if i == 3 {
				live = s
			}
		})
	}
	if live.ID == "" {
		t.Fatal("no sandbox to update")
	}
	updates := []struct {
		name string
		body map[string]any
		want string
	}{
		{"omitted fields clear the rules", map[string]any{}, "200 200 200"},
		{"deny applies to the next connection", map[string]any{"denyOut": []string{"127.0.0.4"}}, "403 200 200"},
		{"allow_internet_access false is deny all", map[string]any{"allow_internet_access": false}, "403 403 403"},
	}
	for _, u := range updates {
		if res := h.api("alpha", "PUT", "/sandboxes/"+live.ID+"/network", u.body); res.status != 204 {
			t.Fatalf("%s: updateNetwork = %s, want 204", u.name, res)
		}
		if got := probe(live); got != u.want {
			t.Errorf("%s: reached %v = %q, want %q", u.name, targets, got, u.want)
		}
	}
	// The rules (deny all, from the last update) stay with a pause and
	// go to forks.
	if res := h.api("alpha", "POST", "/sandboxes/"+live.ID+"/pause", nil); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+live.ID+"/connect", map[string]any{"timeout": 60}); res.status != 201 {
		t.Fatalf("connect: %s", res)
	}
	if got := probe(live); got != "403 403 403" {
		t.Errorf("after pause and resume: reached %v = %q, want the rules kept", targets, got)
	}
	res := h.api("alpha", "POST", "/sandboxes/"+live.ID+"/fork", map[string]any{"count": 1})
	var forks []struct {
		Sandbox *sbx `json:"sandbox"`
	}
	if err := json.Unmarshal(res.body, &forks); err != nil || res.status != 201 || len(forks) != 1 || forks[0].Sandbox == nil {
		t.Fatalf("fork = %s", res)
	}
	fork := *forks[0].Sandbox
	t.Cleanup(func() { h.api("alpha", "DELETE", "/sandboxes/"+fork.ID, nil) })
	if got := probe(fork); got != "403 403 403" {
		t.Errorf("fork: reached %v = %q, want the source's rules", targets, got)
	}
	refused := []struct {
		name     string
		template string
		network  map[string]any
		status   int
		msg      string
	}{
		{"allow an address the policy does not", "loop", map[string]any{"allowOut": []string{"10.0.0.1"}}, 403, `network.allowOut \"10.0.0.1/32\": template loop's policy allows no CIDR rule`},
		{"allow a block wider than the policy's", "loop", map[string]any{"allowOut": []string{"0.0.0.0/0"}}, 403, "0.0.0.0/0"},
		{"allow a domain the policy does not", "loop", map[string]any{"allowOut": []string{"other.test"}}, 403, `template loop's policy has no allow rule`},
		{"allow anything without egress", "base", map[string]any{"allowOut": []string{"127.0.0.1"}}, 403, "the sandbox has no egress"},
		{"deny a domain", "loop", map[string]any{"denyOut": []string{"named.test"}}, 400, "domain names are not supported for deny rules"},
		{"malformed entry", "loop", map[string]any{"allowOut": []string{"http://x/"}}, 400, "network.allowOut[0]"},
		{"transform rules", "loop", map[string]any{"rules": map[string]any{"named.test": []any{}}}, 400, "network.rules"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": tt.template, "network": tt.network})
			if res.status != tt.status || !strings.Contains(string(res.body), tt.msg) {
				t.Errorf("create = %s, want %d %q", res, tt.status, tt.msg)
			}
			if tt.template != "loop" {
				return
			}
			res = h.api("alpha", "PUT", "/sandboxes/"+live.ID+"/network", tt.network)
			if res.status != tt.status || !strings.Contains(string(res.body), tt.msg) {
				t.Errorf("updateNetwork = %s, want %d %q", res, tt.status, tt.msg)
			}
		})
	}
	if res := h.api("beta", "PUT", "/sandboxes/"+live.ID+"/network", map[string]any{}); res.status != 404 {
		t.Errorf("another tenant's updateNetwork = %s, want 404", res)
	}
}
