package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/server"
	ssereader "github.com/airlockrun/airlock/internal/sse"
)

// sandboxTable is a hand-written server.Sandboxes: each tenant's live
// sandboxes, as the host's E2B API would tell them (the host's adapter
// of the real one is tested through airlock serve, internal/cli).
type sandboxTable struct {
	mu sync.Mutex
	// byTenant and revokedBy (the keys of Revoke's calls) are guarded by
	// mu.
	byTenant  map[string][]api.Sandbox
	revokedBy []string
	// logs are the sandboxes' event logs, by tenant/id.
	logs map[string]*report.Log
}

func (x *sandboxTable) Events(_ context.Context, tenant, id string) (*report.Log, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l, ok := x.logs[tenant+"/"+id]
	return l, ok
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

// Revoke removes an MCP sandbox's exposure, as the host's adapter of
// mcp.Server does; an E2B sandbox's ports are its policy's.
func (x *sandboxTable) Revoke(tenant, id string, port int, by string) (api.SandboxExposure, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, s := range x.byTenant[tenant] {
		if s.ID != id {
			continue
		}
		if s.Origin == "e2b" {
			return api.SandboxExposure{}, server.ErrPolicyPorts
		}
		for j, e := range s.Exposures {
			if e.Port == port {
				x.byTenant[tenant][i].Exposures = slices.Delete(slices.Clone(s.Exposures), j, j+1)
				x.revokedBy = append(x.revokedBy, by)
				return e, nil
			}
		}
		return api.SandboxExposure{}, server.ErrNotExposed
	}
	return api.SandboxExposure{}, server.ErrNoSandbox
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
			ID: "iabc123def456", Origin: "e2b", RunID: "run_01sandboxrecord", Template: "web-app", State: "running",
			Started: started, EndAt: started.Add(5 * time.Minute), Open: 0, Bytes: 52_000,
			Ports: []api.SandboxPorts{
				{Ports: "3000", Access: "public", URL: "https://3000-iabc123def456.sbx.example.test"},
				{Ports: "8000-8999", Access: "token", URL: "https://{port}-iabc123def456.sbx.example.test"},
			},
			Exposures: []api.SandboxExposure{},
		}, {
			ID: "imcp00000001", Origin: "mcp", Template: "ports", State: "running", Started: started, Open: 1, Bytes: 4096,
			Ports: []api.SandboxPorts{},
			Exposures: []api.SandboxExposure{
				{Port: 8000, URL: "https://8000-imcp00000001.sbx.example.test", Access: "public", By: "key_alpha1", At: started.Add(time.Minute), Open: 1},
				{Port: 8001, URL: "https://8001-imcp00000001.sbx.example.test", Access: "token", TokenRequired: true, By: "key_alpha1", At: started.Add(2 * time.Minute)},
			},
		}, {
			ID: "iquiet000000", Origin: "e2b", RunID: "run_01quietrecord", Template: "base", State: "paused",
			Started: started, EndAt: started, Ports: []api.SandboxPorts{}, Exposures: []api.SandboxExposure{},
		}},
		"beta": {{ID: "ibeta0000000", Origin: "e2b", RunID: "run_01betarecord", Template: "base", State: "running", Ports: []api.SandboxPorts{}, Exposures: []api.SandboxExposure{}}},
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

// TestSandboxExposuresAPI: /v1/sandboxes/{id}/exposures lists an MCP
// sandbox's exposed ports, and DELETE .../exposures/{port} revokes one
// for a key with runs:write, as the key's id; another tenant's sandbox,
// a port not exposed, an E2B sandbox's policy ports and a bad port are
// refused, each with its status.
func TestSandboxExposuresAPI(t *testing.T) {
	t.Parallel()
	table := exampleSandboxes()
	h := newHarness(t, harnessOptions{sandboxes: table})
	read, write, beta := h.key("alpha", "runs:read"), h.key("alpha", "runs:write"), h.key("beta", "runs:read", "runs:write")
	mcpBox := table.byTenant["alpha"][1]

	var list api.ExposureList
	h.must(http.StatusOK, "GET", "/v1/sandboxes/imcp00000001/exposures", read, nil).json(t, &list)
	if diff := cmp.Diff(mcpBox.Exposures, list.Exposures); diff != "" {
		t.Errorf("GET exposures (-want +got):\n%s", diff)
	}
	h.must(http.StatusOK, "GET", "/v1/sandboxes/iabc123def456/exposures", read, nil).json(t, &list)
	if list.Exposures == nil || len(list.Exposures) != 0 {
		t.Errorf("GET exposures of an E2B sandbox = %+v, want an empty list", list)
	}
	for _, tc := range []struct {
		name, method, path, key string
		status                  int
		code                    string
	}{
		{"another tenant's sandbox", "DELETE", "/v1/sandboxes/imcp00000001/exposures/8000", beta, http.StatusNotFound, api.CodeNotFound},
		{"another tenant's list", "GET", "/v1/sandboxes/imcp00000001/exposures", beta, http.StatusNotFound, api.CodeNotFound},
		{"a key without runs:write", "DELETE", "/v1/sandboxes/imcp00000001/exposures/8000", read, http.StatusForbidden, api.CodeForbidden},
		{"a port not exposed", "DELETE", "/v1/sandboxes/imcp00000001/exposures/9000", write, http.StatusNotFound, api.CodeNotFound},
		{"not a port", "DELETE", "/v1/sandboxes/imcp00000001/exposures/http", write, http.StatusBadRequest, api.CodeBadRequest},
		{"port 0", "DELETE", "/v1/sandboxes/imcp00000001/exposures/0", write, http.StatusBadRequest, api.CodeBadRequest},
		{"port 65536", "DELETE", "/v1/sandboxes/imcp00000001/exposures/65536", write, http.StatusBadRequest, api.CodeBadRequest},
		{"an E2B sandbox's policy port", "DELETE", "/v1/sandboxes/iabc123def456/exposures/3000", write, http.StatusConflict, api.CodeConflict},
		{"an unknown sandbox", "DELETE", "/v1/sandboxes/inope/exposures/8000", write, http.StatusNotFound, api.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(tc.method, tc.path, tc.key, nil)
			if r.status != tc.status || !strings.Contains(string(r.body), `"code":"`+tc.code+`"`) {
				t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, r.status, r.body, tc.status, tc.code)
			}
		})
	}
	var gone api.SandboxExposure
	h.must(http.StatusOK, "DELETE", "/v1/sandboxes/imcp00000001/exposures/8000", write, nil).json(t, &gone)
	if diff := cmp.Diff(mcpBox.Exposures[0], gone); diff != "" {
		t.Errorf("DELETE exposures/8000 answered (-want +got):\n%s", diff)
	}
	h.must(http.StatusOK, "GET", "/v1/sandboxes/imcp00000001/exposures", read, nil).json(t, &list)
	if len(list.Exposures) != 1 || list.Exposures[0].Port != 8001 {
		t.Errorf("exposures after the revoke = %+v, want 8001 alone", list.Exposures)
	}
	if r := h.do("DELETE", "/v1/sandboxes/imcp00000001/exposures/8000", write, nil); r.status != http.StatusNotFound {
		t.Errorf("DELETE exposures/8000 again = %d %s, want 404", r.status, r.body)
	}
	table.mu.Lock()
	defer table.mu.Unlock()
	if len(table.revokedBy) != 1 || !strings.HasPrefix(table.revokedBy[0], "key_") {
		t.Errorf("Revoke was called by %q, want the API key's id once", table.revokedBy)
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
	key := h.key("alpha", "runs:read", "runs:write")
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

	// The MCP sandbox: its exposures, who exposed each and when, and
	// their revocation, confirmed first.
	mrow := `table.sandboxes tr[data-sandbox="imcp00000001"]`
	got = text(mrow)
	for _, want := range []string{"imcp00000001", "MCP", "ports", "8000", "public", "https://8000-imcp00000001.sbx.example.test", "8001", "token", "key_alpha1", "1 open", "Revoke"} {
		if !strings.Contains(got, want) {
			t.Errorf("the MCP sandbox's row lacks %q:\n%s", want, got)
		}
	}
	if text(row+` [data-act="revoke"]`) != "" {
		t.Errorf("the E2B sandbox's row has a revoke button: its ports are its policy's")
	}
	do("revoke port 8000",
		chromedp.Click(chromedp.CSS(mrow+` li[data-port="8000"] [data-act="revoke"]`)),
		chromedp.WaitVisible(chromedp.CSS(mrow+` li[data-port="8000"] [data-act="confirm"]`)))
	shot(t, ctx, "sandboxes-revoke", false)
	do("confirm the revoke",
		chromedp.Click(chromedp.CSS(mrow+` li[data-port="8000"] [data-act="confirm"]`)),
		chromedp.Poll[chromedp.Void](`!document.querySelector(`+jsString(mrow+` li[data-port="8000"]`)+`) && !!document.querySelector(`+jsString(mrow+` li[data-port="8001"]`)+`)`,
			chromedp.WithPollingTimeout(20*time.Second)))
	table.mu.Lock()
	defer table.mu.Unlock()
	if len(table.revokedBy) != 1 {
		t.Errorf("the page revoked %d times, want once", len(table.revokedBy))
	}
}

// TestSandboxEventsAPI: what a real sandbox's command reports through
// airlock-event is served by GET /v1/sandboxes/{id}/events, as a JSON list
// and as a live server-sent event stream that ends with the sandbox,
// marked as the sandbox's; refused lines are counted; another tenant's
// key gets 404.
func TestSandboxEventsAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a real sandbox")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	be, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(t.TempDir(), "run")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Close() })
	sb, err := be.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	const id = "iabc123def456" // alpha's E2B sandbox in exampleSandboxes
	log := report.NewLog(policy.Events{}, id, 0, nil)
	stop := sandbox.WatchEvents(ctx, sb, log)
	table := exampleSandboxes()
	table.logs = map[string]*report.Log{"alpha/" + id: log}
	h := newHarness(t, harnessOptions{sandboxes: table})
	alpha, beta := h.key("alpha", "runs:read"), h.key("beta", "runs:read")
	path := "/v1/sandboxes/" + id + "/events"

	// A live stream, opened before anything was reported.
	req, err := http.NewRequestWithContext(ctx, "GET", h.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+alpha)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream = %d %s, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	streamed := make(chan []ssereader.Event, 1)
	go func() {
		var got []ssereader.Event
		rd := ssereader.NewReader(resp.Body, 1<<20)
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			got = append(got, ev)
			if ev.Type == "end" {
				break
			}
		}
		streamed <- got
	}()

	var out bytes.Buffer
	res, err := sandbox.Run(ctx, sb, sandbox.Command{
		Argv:   []string{"/bin/sh", "-c", `airlock-event progress --pct 40 x && echo 'not json' | airlock-event lines && airlock-event emit bogus '{}' && echo done`},
		Stdout: &out, Stderr: &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("command = %v %+v: %s", err, res, out.String())
	}
	var list api.SandboxEventList
	for deadline := time.Now().Add(30 * time.Second); ; {
		h.must(http.StatusOK, "GET", path, alpha, nil).json(t, &list)
		if len(list.Events) == 1 && list.Dropped.Malformed == 1 && list.Dropped.UnknownKind == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %+v, want the progress event and 2 refusals", path, list)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e := list.Events[0]
	if e.Seq != 1 || e.Event.Source != "sandbox" || e.Event.Sandbox != id || e.Event.Kind != "progress" || e.Event.Pct == nil || *e.Event.Pct != 40 || e.Event.Message != "x" || list.Next != 2 || list.Ended {
		t.Errorf("event = %+v (next %d, ended %v), want progress 40%% x from the sandbox, seq 1", e, list.Next, list.Ended)
	}
	h.must(http.StatusOK, "GET", path+"?after=1", alpha, nil).json(t, &list)
	if len(list.Events) != 0 {
		t.Errorf("after=1: %+v, want none", list.Events)
	}
	for _, tc := range []struct {
		name, path, key string
		status          int
	}{
		{"another tenant's key", path, beta, http.StatusNotFound},
		{"unknown sandbox", "/v1/sandboxes/inope/events", alpha, http.StatusNotFound},
		{"a sandbox without a log", "/v1/sandboxes/imcp00000001/events", alpha, http.StatusNotFound},
		{"a bad limit", path + "?limit=1001", alpha, http.StatusBadRequest},
		{"a key without runs:read", path, h.key("alpha", "approvals"), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := h.do("GET", tc.path, tc.key, nil); r.status != tc.status {
				t.Errorf("GET %s = %d %s, want %d", tc.path, r.status, r.body, tc.status)
			}
			if tc.status == http.StatusBadRequest {
				return // a stream has no limit: it would stay open
			}
			if r := h.do("GET", tc.path, tc.key, nil, "Accept", "text/event-stream"); r.status != tc.status {
				t.Errorf("stream %s = %d %s, want %d", tc.path, r.status, r.body, tc.status)
			}
		})
	}

	// The sandbox goes: the stream sends what is left and ends.
	stop()
	log.End()
	var got []ssereader.Event
	select {
	case got = <-streamed:
	case <-ctx.Done():
		t.Fatal("the stream did not end with the sandbox's log")
	}
	if len(got) != 2 || got[0].Type != "sandbox.event" || got[0].ID != "1" || got[1].Type != "end" {
		t.Fatalf("stream = %+v, want the progress event (id 1) and end", got)
	}
	var se api.SandboxEvent
	if err := json.Unmarshal([]byte(got[0].Data), &se); err != nil || se.Event.Kind != "progress" || se.Event.Source != "sandbox" {
		t.Errorf("streamed event = %s (%v), want the progress event from the sandbox", got[0].Data, err)
	}
	// A reconnection after the last id gets only the end.
	r := h.do("GET", path, alpha, nil, "Accept", "text/event-stream", "Last-Event-ID", "1")
	if r.status != http.StatusOK || strings.Contains(string(r.body), "sandbox.event") || !strings.Contains(string(r.body), "event: end") {
		t.Errorf("reconnection = %d %s, want only the end", r.status, r.body)
	}
}
