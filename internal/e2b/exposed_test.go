package e2b_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/policy"
)

// TestExposures: the host's view of a tenant's live sandboxes tells, per
// rule of each one's ports.expose, its access (every rule token for a
// sandbox created with allowPublicTraffic: false), its preview URL, and
// the connections open now to the ports the rule decides (a port is the
// first rule's that names it); it lists no other tenant's sandbox, and a
// killed one no more.
func TestExposures(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{Domain: "e2b.test"}})
	h.putPolicy("alpha", "web", "ports:\n  expose:\n    - ports: 8000\n      access: public\n    - ports: 8000-8999\n      access: token\n")
	web := h.create("alpha", map[string]any{"templateID": "web"})
	private := h.create("alpha", map[string]any{"templateID": "web", "network": map[string]any{"allowPublicTraffic": false}})
	other := h.create("beta", map[string]any{"templateID": "base"})
	h.startServer(web, 8000)

	ws, status := h.dialWS(web.ID, 8000)
	if ws == nil {
		t.Fatalf("websocket to port 8000: %d", status)
	}
	if err := ws.echo([]byte("ping")); err != nil {
		t.Fatalf("echo: %v", err)
	}
	want := map[string][]e2b.ExposedPorts{
		web.ID: {
			{Ports: policy.PortRange{First: 8000, Last: 8000}, Access: policy.AccessPublic, URL: "https://8000-" + web.ID + ".e2b.test", Open: 1},
			{Ports: policy.PortRange{First: 8000, Last: 8999}, Access: policy.AccessToken, URL: "https://{port}-" + web.ID + ".e2b.test"},
		},
		private.ID: {
			{Ports: policy.PortRange{First: 8000, Last: 8000}, Access: policy.AccessToken, URL: "https://8000-" + private.ID + ".e2b.test"},
			{Ports: policy.PortRange{First: 8000, Last: 8999}, Access: policy.AccessToken, URL: "https://{port}-" + private.ID + ".e2b.test"},
		},
	}
	got := map[string][]e2b.ExposedPorts{}
	for _, x := range h.srv.Exposures("alpha") {
		got[x.ID] = x.Ports
		if x.State != "running" || x.RunID == "" || x.Template != "web" {
			t.Errorf("Exposures: %s is %s, record %q, template %q; want running, a record, web", x.ID, x.State, x.RunID, x.Template)
		}
		if x.ID == web.ID && (x.Open != 1 || x.Bytes == 0) {
			t.Errorf("Exposures: %s has %d open, %d bytes; want 1 open and the page's and the echo's bytes", x.ID, x.Open, x.Bytes)
		}
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Exposures(alpha) ports (-want +got):\n%s", diff)
	}
	if _, ok := h.srv.Exposure("beta", web.ID); ok {
		t.Errorf("Exposure(beta, alpha's sandbox) found it")
	}
	// base is E2B's: every port, public.
	wantBase := []e2b.ExposedPorts{{Ports: policy.PortRange{First: 1, Last: 65535}, Access: policy.AccessPublic, URL: "https://{port}-" + other.ID + ".e2b.test"}}
	if x, ok := h.srv.Exposure("beta", other.ID); !ok || !cmp.Equal(x.Ports, wantBase) {
		t.Errorf("Exposure(beta, its base sandbox) = %+v, %v; want it, with every port public", x, ok)
	}

	ws.Close()
	waitFor(t, "the websocket's end", func() bool {
		x, _ := h.srv.Exposure("alpha", web.ID)
		return x.Open == 0 && x.Ports[0].Open == 0
	})
	if res := h.api("alpha", "DELETE", "/sandboxes/"+web.ID, nil); res.status != 204 {
		t.Fatalf("kill: %s", res)
	}
	if _, ok := h.srv.Exposure("alpha", web.ID); ok {
		t.Errorf("Exposure of a killed sandbox found it")
	}
}
