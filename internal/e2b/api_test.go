package e2b_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/e2b"
)

func TestAuth(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	keys := auth.NewKeys(h.store, nil)
	runsOnly, _, err := keys.Create(t.Context(), "alpha", "runs", []string{auth.ScopeRunsRead}, auth.FormatE2B)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		key    string
		status int
	}{
		{"no key", "", 401},
		{"malformed", "e2b_nothex", 401},
		{"unknown", "e2b_" + strings.Repeat("ab", 24), 401},
		{"huge", strings.Repeat("x", 60000), 401},
		{"without the sandboxes scope", runsOnly, 403},
		{"valid", h.keys["alpha"], 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := h.do("GET", h.apiURL+"/v2/sandboxes", map[string]string{"X-API-KEY": tt.key}, nil)
			if res.status != tt.status {
				t.Fatalf("GET /v2/sandboxes = %s, want %d", res, tt.status)
			}
			if tt.status != 200 {
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(res.body, &e); err != nil || e.Code != tt.status || e.Message == "" {
					t.Errorf("error body %s: want {code: %d, message}", res.body, tt.status)
				}
			}
		})
	}
}

// TestTenantIsolation checks that another tenant's sandbox id is
// answered exactly like an unknown one, on both planes.
func TestTenantIsolation(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", map[string]any{"templateID": "base", "metadata": map[string]string{"user": "alice"}})
	unknown := "sb-000000000000"
	calls := []struct {
		method, path string
		body         any
	}{
		{"GET", "/sandboxes/%s", nil},
		{"DELETE", "/sandboxes/%s", nil},
		{"POST", "/sandboxes/%s/timeout", map[string]int{"timeout": 60}},
		{"POST", "/sandboxes/%s/connect", map[string]any{}},
		{"POST", "/v2/sandboxes/%s/connect", map[string]any{}},
		{"POST", "/sandboxes/%s/pause", map[string]any{}},
		{"GET", "/sandboxes/%s/metrics", nil},
	}
	for _, c := range calls {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			theirs := h.api("beta", c.method, fmt.Sprintf(c.path, s.ID), c.body)
			none := h.api("beta", c.method, fmt.Sprintf(c.path, unknown), c.body)
			if theirs.status != 404 || !bytes.Equal(theirs.body, none.body) || theirs.status != none.status {
				t.Errorf("another tenant's id: %s; unknown id: %s; want the same 404", theirs, none)
			}
			if !bytes.Contains(theirs.body, []byte(`"code":404`)) {
				t.Errorf("body %s lacks code 404 (the SDK reads not-found from it)", theirs.body)
			}
		})
	}
	if res := h.api("beta", "GET", "/v2/sandboxes", nil); string(res.body) != "[]" {
		t.Errorf("beta's list = %s, want []", res)
	}
	// Alpha's sandbox survived beta's kill.
	if res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil); res.status != 200 {
		t.Fatalf("alpha's info after beta's kill: %s", res)
	}

	// Data plane: a wrong token is answered like an unknown sandbox.
	wrong := s
	wrong.Token = strings.Repeat("0", 64)
	missing := s
	missing.Token = ""
	ghost := sbx{ID: unknown, Token: s.Token}
	for _, path := range []string{"/health", "/files?path=x", "/process.Process/List"} {
		var bodies [][]byte
		for _, x := range []sbx{wrong, missing, ghost} {
			hd := envdHeaders(x)
			hd["Content-Type"] = "application/json"
			method := "GET"
			if strings.HasPrefix(path, "/process") {
				method = "POST"
			}
			res := h.do(method, h.envdURL+path, hd, strings.NewReader("{}"))
			if res.status != http.StatusBadGateway {
				t.Errorf("%s with token %.8q on %s = %s, want 502", path, x.Token, x.ID, res)
			}
			bodies = append(bodies, res.body)
		}
		if !bytes.Equal(bodies[0], bodies[2]) || !bytes.Equal(bodies[1], bodies[2]) {
			t.Errorf("%s: answers differ: %q", path, bodies)
		}
	}
	if res := h.do("GET", h.envdURL+"/health", envdHeaders(s), nil); res.status != 204 {
		t.Errorf("health with the right token = %s, want 204", res)
	}
}

func TestCreateKillInfo(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, path := range []string{"/sandboxes", "/v2/sandboxes"} {
		t.Run(path, func(t *testing.T) {
			res := h.api("alpha", "POST", path, map[string]any{
				"templateID": "base", "timeout": 120, "envVars": map[string]string{"FOO": "bar"},
				"metadata": map[string]string{"k": "v"}, "allow_internet_access": true, "secure": true,
			})
			if res.status != 201 {
				t.Fatalf("create: %s", res)
			}
			var s sbx
			_ = json.Unmarshal(res.body, &s)
			if s.ID == "" || s.EnvdVersion != e2b.EnvdVersion || len(s.Token) != 64 || s.TemplateID != "base" {
				t.Errorf("create = %s", res.body)
			}
			info := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil)
			var d struct {
				State    string            `json:"state"`
				Metadata map[string]string `json:"metadata"`
				EndAt    string            `json:"endAt"`
			}
			_ = json.Unmarshal(info.body, &d)
			if info.status != 200 || d.State != "running" || d.Metadata["k"] != "v" || d.EndAt == "" {
				t.Errorf("info = %s", info)
			}
			if res := h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil); res.status != 204 {
				t.Errorf("kill = %s, want 204", res)
			}
			if res := h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil); res.status != 404 || !bytes.Contains(res.body, []byte(`"code":404`)) {
				t.Errorf("second kill = %s, want 404 with code 404", res)
			}
		})
	}
	bad := []struct {
		name   string
		body   string
		status int
	}{
		{"unknown template", `{"templateID":"nope"}`, 404},
		{"malformed JSON", `{"templateID":`, 400},
		{"a domain in denyOut", `{"network":{"denyOut":["example.com"]}}`, 400},
		{"env name with =", `{"envVars":{"A=B":"c"}}`, 400},
		{"negative timeout", `{"timeout":-1}`, 400},
		{"body too large", `{"metadata":{"k":"` + strings.Repeat("x", 5<<20) + `"}}`, 413},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			res := h.do("POST", h.apiURL+"/v2/sandboxes", map[string]string{"X-API-KEY": h.keys["alpha"]}, strings.NewReader(tt.body))
			if res.status != tt.status {
				t.Errorf("create %s = %s, want %d", tt.name, res, tt.status)
			}
		})
	}
}

func TestTemplates(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.putPolicy("alpha", "small", "sandbox:\n  limits:\n    memory: 256M\n")
	h.putPolicy("alpha", "hosty", "sandbox:\n  workspace:\n    source: /etc\n")
	res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": "small"})
	if res.status != 201 {
		t.Fatalf("create from a stored policy: %s", res)
	}
	var s sbx
	_ = json.Unmarshal(res.body, &s)
	t.Cleanup(func() { h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil) })
	var l []struct {
		TemplateID string `json:"templateID"`
		MemoryMB   int    `json:"memoryMB"`
	}
	_ = json.Unmarshal(h.api("alpha", "GET", "/v2/sandboxes", nil).body, &l)
	if len(l) != 1 || l[0].TemplateID != "small" || l[0].MemoryMB != 256 {
		t.Errorf("list = %+v, want the small template with 256 MB", l)
	}
	if res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": "hosty"}); res.status != 403 || !strings.Contains(string(res.body), "sandbox.workspace.source") {
		t.Errorf("a template naming host directories = %s, want 403 naming the field", res)
	}
	if res := h.api("beta", "POST", "/v2/sandboxes", map[string]any{"templateID": "small"}); res.status != 404 {
		t.Errorf("another tenant's template = %s, want 404", res)
	}
}

func TestListPaging(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var ids []string
	for i := range 3 {
		s := h.create("alpha", map[string]any{"metadata": map[string]string{"n": fmt.Sprint(i), "team": "a b&c"}})
		ids = append(ids, s.ID)
	}
	h.create("alpha", map[string]any{"metadata": map[string]string{"team": "other"}})
	var got []string
	next := ""
	for page := 0; ; page++ {
		q := url.Values{"limit": {"2"}, "state": {"running,paused"}, "metadata": {"team=" + url.QueryEscape("a b&c")}}
		if next != "" {
			q.Set("nextToken", next)
		}
		res := h.api("alpha", "GET", "/v2/sandboxes?"+q.Encode(), nil)
		if res.status != 200 {
			t.Fatalf("list: %s", res)
		}
		var rows []struct {
			ID string `json:"sandboxID"`
		}
		_ = json.Unmarshal(res.body, &rows)
		for _, r := range rows {
			got = append(got, r.ID)
		}
		next = res.header.Get("X-Next-Token")
		if next == "" {
			break
		}
		if page > 3 {
			t.Fatal("paging does not end")
		}
	}
	// Without an order, newest first, as E2B lists.
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	if !slices.Equal(got, newest) {
		t.Errorf("paged list = %v, want %v (newest first)", got, newest)
	}
	var asc []struct {
		ID string `json:"sandboxID"`
	}
	_ = json.Unmarshal(h.api("alpha", "GET", "/v2/sandboxes?order=asc&metadata="+url.QueryEscape("team="+url.QueryEscape("a b&c")), nil).body, &asc)
	if len(asc) != 3 || asc[0].ID != ids[0] || asc[2].ID != ids[2] {
		t.Errorf("list order=asc = %+v, want %v oldest first", asc, ids)
	}
	// A token whose time is past int64, or before 1970, was not made
	// here.
	token := func(ns string) string { return base64.RawURLEncoding.EncodeToString([]byte(ns + "." + ids[0])) }
	for _, q := range []string{
		"state=exploded", "limit=0", "limit=1000", "limit=-1", "limit=abc", "limit=%2B5", "limit=9223372036854775807",
		"limit=9223372036854775808", "nextToken=%21%21", "nextToken=" + token("9223372036854775808"), "nextToken=" + token("-1"),
		"nextToken=" + token("+1"), "order=sideways", "startedAfter=yesterday",
	} {
		if res := h.api("alpha", "GET", "/v2/sandboxes?"+q, nil); res.status != 400 {
			t.Errorf("list ?%s = %s, want 400", q, res)
		}
	}
	for _, q := range []string{"limit=", "nextToken=" + token("9223372036854775807")} {
		if res := h.api("alpha", "GET", "/v2/sandboxes?"+q, nil); res.status != 200 {
			t.Errorf("list ?%s = %s, want 200", q, res)
		}
	}
	if res := h.api("alpha", "GET", "/v2/sandboxes?state=paused", nil); string(res.body) != "[]" {
		t.Errorf("paused ones = %s, want []", res)
	}
}

func TestSandboxLimit(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{MaxSandboxes: 1}})
	h.create("alpha", nil)
	if res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{}); res.status != 429 {
		t.Errorf("second sandbox over the limit = %s, want 429", res)
	}
	h.create("beta", nil) // the bound is per tenant
}

// TestExpectContinue: a body announced over max_message is answered 413,
// with the API's error body, before any of it is read: a client that
// asks first (Expect: 100-continue) is never told 100 Continue and sends
// none of it. net/http's client, over loopback HTTP/1.1.
func TestExpectContinue(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	var got100 atomic.Bool
	var sent atomic.Int64
	trace := &httptrace.ClientTrace{Got100Continue: func() { got100.Store(true) }}
	body := io.LimitReader(readerFunc(func(p []byte) (int, error) {
		clear(p)
		sent.Add(int64(len(p)))
		return len(p), nil
	}), 10<<20)
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "POST", h.apiURL+"/v2/sandboxes", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 10 << 20
	req.Header.Set("X-API-KEY", h.keys["alpha"])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Expect", "100-continue")
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if res.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(b, &e) != nil || e.Code != 413 || !strings.Contains(e.Message, "over") {
		t.Errorf("POST /v2/sandboxes of 10 MiB = %d %s, want 413 and the API's error", res.StatusCode, b)
	}
	if got100.Load() || sent.Load() != 0 {
		t.Errorf("the server said 100 Continue (%v) and took %d bytes of a body it refused", got100.Load(), sent.Load())
	}
}

// readerFunc is a function as an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
