package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/api"
)

// sandboxTable is a hand-written server.Sandboxes: each tenant's live
// sandboxes, as the host's E2B API would tell them (the host's adapter
// of the real one is tested through airlock serve, internal/cli).
type sandboxTable struct {
	mu sync.Mutex
	// byTenant is guarded by mu.
	byTenant map[string][]api.Sandbox
}

func (x *sandboxTable) Sandboxes(tenant string) []api.Sandbox {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]api.Sandbox(nil), x.byTenant[tenant]...)
}

func (x *sandboxTable) Sandbox(tenant, id string) (api.Sandbox, bool) {
	for _, s := range x.Sandboxes(tenant) {
		if s.ID == id {
			return s, true
		}
	}
	return api.Sandbox{}, false
}

func (x *sandboxTable) setOpen(tenant string, i, rule int, open int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byTenant[tenant][i].Ports[rule].Open = open
	x.byTenant[tenant][i].Open = open
}

var started = time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)

func exampleSandboxes() *sandboxTable {
	return &sandboxTable{byTenant: map[string][]api.Sandbox{
		"alpha": {{
			ID: "iabc123def456", RunID: "run_01sandboxrecord", Template: "web-app", State: "running",
			Started: started, EndAt: started.Add(5 * time.Minute), Open: 0, Bytes: 52_000,
			Ports: []api.SandboxPorts{
				{Ports: "3000", Access: "public", URL: "https://3000-iabc123def456.sbx.example.test"},
				{Ports: "8000-8999", Access: "token", URL: "https://{port}-iabc123def456.sbx.example.test"},
			},
		}, {
			ID: "iquiet000000", RunID: "run_01quietrecord", Template: "base", State: "paused",
			Started: started, EndAt: started, Ports: []api.SandboxPorts{},
		}},
		"beta": {{ID: "ibeta0000000", RunID: "run_01betarecord", Template: "base", State: "running", Ports: []api.SandboxPorts{}}},
	}}
}

// TestSandboxesAPI: /v1/sandboxes lists the caller's tenant's live
// sandboxes with their exposed ports, and /v1/sandboxes/{id} one of them;
// another tenant's id is not found, a key without runs:read is refused,
// and a server without the E2B API lists none.
func TestSandboxesAPI(t *testing.T) {
	t.Parallel()
	table := exampleSandboxes()
	h := newHarness(t, harnessOptions{sandboxes: table})
	alpha, beta := h.key("alpha", "runs:read"), h.key("beta", "runs:read")

	var list api.SandboxList
	h.must(http.StatusOK, "GET", "/v1/sandboxes", alpha, nil).json(t, &list)
	if diff := cmp.Diff(table.byTenant["alpha"], list.Sandboxes); diff != "" {
		t.Errorf("GET /v1/sandboxes as alpha (-want +got):\n%s", diff)
	}
	var one api.Sandbox
	h.must(http.StatusOK, "GET", "/v1/sandboxes/iabc123def456", alpha, nil).json(t, &one)
	if diff := cmp.Diff(table.byTenant["alpha"][0], one); diff != "" {
		t.Errorf("GET /v1/sandboxes/iabc123def456 (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name, path, key string
		status          int
	}{
		{"another tenant's sandbox", "/v1/sandboxes/iabc123def456", beta, http.StatusNotFound},
		{"unknown sandbox", "/v1/sandboxes/inope", alpha, http.StatusNotFound},
		{"a key without runs:read", "/v1/sandboxes", h.key("alpha", "approvals"), http.StatusForbidden},
		{"no key", "/v1/sandboxes", "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := h.do("GET", tc.path, tc.key, nil); r.status != tc.status {
				t.Errorf("GET %s = %d %s, want %d", tc.path, r.status, r.body, tc.status)
			}
		})
	}

	none := newHarness(t, harnessOptions{})
	var empty api.SandboxList
	none.must(http.StatusOK, "GET", "/v1/sandboxes", none.key("alpha", "runs:read"), nil).json(t, &empty)
	if empty.Sandboxes == nil || len(empty.Sandboxes) != 0 {
		t.Errorf("GET /v1/sandboxes without the E2B API = %+v, want an empty list", empty)
	}
	if r := none.do("GET", "/v1/sandboxes/iabc123def456", none.key("alpha", "runs:read"), nil); r.status != http.StatusNotFound {
		t.Errorf("GET /v1/sandboxes/{id} without the E2B API = %d, want 404", r.status)
	}
}

// TestUISandboxes: the Sandboxes page lists the tenant's live sandboxes,
// each with its exposed ports (the rule, public or token, the URL, a
// single port's as a link) and the connections open to them, which it
// keeps up to date; another tenant's are not there.
func TestUISandboxes(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	table := exampleSandboxes()
	h := newHarness(t, harnessOptions{sandboxes: table})
	key := h.key("alpha", "runs:read")
	ctx := newChrome(t, chrome)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			shot(t, ctx, "failure-"+strings.ReplaceAll(what, " ", "-"), true)
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	watchConsole(t, ctx)
	row := `table.sandboxes tr[data-sandbox="iabc123def456"]`
	do("log in on the sandboxes page",
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(h.url+"/ui/sandboxes"),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), key),
		chromedp.Click(chromedp.CSS("form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(row)))
	text := func(sel string) string {
		t.Helper()
		s, err := within(ctx, chromedp.Evaluate[string](`(document.querySelector(`+jsString(sel)+`) || {}).innerText || ''`))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	got := text(row)
	for _, want := range []string{
		"running", "iabc123def456", "web-app", "3000", "public", "https://3000-iabc123def456.sbx.example.test",
		"8000-8999", "token", "https://{port}-iabc123def456.sbx.example.test", "0 open",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the sandbox's row lacks %q:\n%s", want, got)
		}
	}
	if href := text(row + ` li[data-ports="3000"] a`); href != "https://3000-iabc123def456.sbx.example.test" {
		t.Errorf("port 3000's link reads %q", href)
	}
	if got := text(`table.sandboxes tr[data-sandbox="iquiet000000"]`); !strings.Contains(got, "paused") || !strings.Contains(got, "none exposed") {
		t.Errorf("the paused sandbox's row reads %q", got)
	}
	if got := text("table.sandboxes"); strings.Contains(got, "ibeta0000000") {
		t.Errorf("the page lists another tenant's sandbox:\n%s", got)
	}
	shot(t, ctx, "sandboxes", false)
	// A connection opens: the page shows it at its next poll.
	table.setOpen("alpha", 0, 0, 3)
	do("see the open connections",
		chromedp.WaitVisible(chromedp.CSS(row+` li[data-ports="3000"] .open`)),
		chromedp.Poll[chromedp.Void](`document.querySelector(`+jsString(row+` li[data-ports="3000"] .open`)+`).innerText === '3 open'`,
			chromedp.WithPollingTimeout(20*time.Second)))
}
