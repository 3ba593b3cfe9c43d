package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/server"
)

// browser is a web UI client: a cookie jar, the session's CSRF token, and
// the Origin a page of the server sends.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
	csrf   string
}

func newBrowser(t *testing.T, base string, tr http.RoundTripper) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, base: base, client: &http.Client{
		Jar: jar, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// do sends a request from the browser; headers are name, value pairs, and
// "Origin" and the CSRF header are sent unless given (an empty value
// leaves one out).
func (b *browser) do(method, path string, body any, headers ...string) response {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			b.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Origin", b.base)
	if b.csrf != "" {
		req.Header.Set(server.CSRFHeader, b.csrf)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: out}
}

// login logs the browser in with key and keeps the CSRF token.
func (b *browser) login(key string) server.Session {
	b.t.Helper()
	r := b.do("POST", "/ui/login", server.LoginRequest{Key: key})
	if r.status != http.StatusOK {
		b.t.Fatalf("login = %d %s", r.status, r.body)
	}
	var s server.Session
	r.json(b.t, &s)
	b.csrf = s.CSRFToken
	return s
}

func cookieOf(t *testing.T, r response, name string) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s cookie in %q", name, r.header.Values("Set-Cookie"))
	return nil
}

// checkUIHeaders checks the security headers of a UI response.
func checkUIHeaders(t *testing.T, what string, r response) {
	t.Helper()
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: CSP %q lacks %q", what, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "*") {
		t.Errorf("%s: CSP %q allows inline or foreign code", what, csp)
	}
	for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
		if got := r.header.Get(h); got != want {
			t.Errorf("%s: %s = %q, want %q", what, h, got, want)
		}
	}
}

// TestUIPages: / redirects to the UI; every page path serves the page,
// the files under /ui/static/ are served with their types and ETags, and
// every answer has the security headers. The page has no inline script
// or style for the CSP to refuse.
func TestUIPages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	b := newBrowser(t, h.url, nil)
	if r := b.do("GET", "/", nil); r.status != http.StatusFound || r.header.Get("Location") != "/ui/" {
		t.Errorf("GET / = %d to %q, want 302 to /ui/", r.status, r.header.Get("Location"))
	}
	var page []byte
	for _, p := range []string{"/ui/", "/ui/runs/run_01JAAAAAAAAAAAAAAAAAAAAAAA", "/ui/approvals", "/ui/credits", "/ui/secrets", "/ui/login"} {
		r := b.do("GET", p, nil)
		if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !bytes.Contains(r.body, []byte(`<main id="main"`)) {
			t.Errorf("GET %s = %d %s", p, r.status, r.header.Get("Content-Type"))
		}
		checkUIHeaders(t, "GET "+p, r)
		page = r.body
	}
	if regexp.MustCompile(`(?i)<script[^>]*>\s*[^<\s]|\sstyle=|\son[a-z]+=`).Match(page) {
		t.Errorf("the page has inline script, style or handlers:\n%s", page)
	}
	for _, asset := range []struct{ path, ctype string }{
		{"/ui/static/app.js", "text/javascript; charset=utf-8"},
		{"/ui/static/run.js", "text/javascript; charset=utf-8"},
		{"/ui/static/secrets.js", "text/javascript; charset=utf-8"},
		{"/ui/static/app.css", "text/css; charset=utf-8"},
		{"/ui/static/favicon.svg", "image/svg+xml"},
	} {
		r := b.do("GET", asset.path, nil)
		etag := r.header.Get("ETag")
		if r.status != http.StatusOK || r.header.Get("Content-Type") != asset.ctype || etag == "" {
			t.Errorf("GET %s = %d, %q, ETag %q", asset.path, r.status, r.header.Get("Content-Type"), etag)
			continue
		}
		checkUIHeaders(t, "GET "+asset.path, r)
		if r := b.do("GET", asset.path, nil, "If-None-Match", etag); r.status != http.StatusNotModified {
			t.Errorf("GET %s with its ETag = %d, want 304", asset.path, r.status)
		}
	}
	for _, p := range []string{"/ui/static/none.js", "/ui/static/", "/ui/static/../index.html", "/ui/static/%2e%2e/index.html"} {
		// Not found, or (a path to clean) redirected to the clean path.
		if r := b.do("GET", p, nil); r.status != http.StatusNotFound && (r.status < 300 || r.status > 308 || strings.Contains(r.header.Get("Location"), "..")) {
			t.Errorf("GET %s = %d (%s), want 404", p, r.status, r.header.Get("Location"))
		}
	}
}

// TestUILoginLogout: a key is exchanged for an HttpOnly, SameSite=Strict
// session cookie that holds no key; the session calls the API with the
// key's tenant and scopes; state-changing calls need the CSRF token and
// this server's Origin; logout ends the session.
func TestUILoginLogout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	key := h.key("alpha", "runs:read", "runs:write")
	reader := h.key("alpha", "runs:read")
	b := newBrowser(t, h.url, nil)

	if r := b.do("GET", "/ui/session", nil); r.status != http.StatusUnauthorized || r.errBody(t).Code != api.CodeUnauthenticated {
		t.Errorf("session before login = %d %s", r.status, r.body)
	}
	for _, tc := range []struct {
		name    string
		body    any
		headers []string
		status  int
	}{
		{"no Origin", server.LoginRequest{Key: key}, []string{"Origin", ""}, http.StatusForbidden},
		{"another site", server.LoginRequest{Key: key}, []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"another port", server.LoginRequest{Key: key}, []string{"Origin", "http://127.0.0.1:1"}, http.StatusForbidden},
		{"null Origin", server.LoginRequest{Key: key}, []string{"Origin", "null"}, http.StatusForbidden},
		{"wrong key", server.LoginRequest{Key: "airlock_" + strings.Repeat("0", 64)}, nil, http.StatusUnauthorized},
		{"malformed key", server.LoginRequest{Key: "nope"}, nil, http.StatusUnauthorized},
		{"no key", server.LoginRequest{}, nil, http.StatusBadRequest},
		{"unknown field", map[string]string{"key": key, "remember": "yes"}, nil, http.StatusBadRequest},
	} {
		r := b.do("POST", "/ui/login", tc.body, tc.headers...)
		if r.status != tc.status || r.errBody(t).Code == "" || len(r.header.Values("Set-Cookie")) != 0 {
			t.Errorf("login, %s = %d %s (cookies %q), want %d", tc.name, r.status, r.body, r.header.Values("Set-Cookie"), tc.status)
		}
		checkUIHeaders(t, "login, "+tc.name, r)
	}

	r := b.do("POST", "/ui/login", server.LoginRequest{Key: key})
	if r.status != http.StatusOK {
		t.Fatalf("login = %d %s", r.status, r.body)
	}
	c := cookieOf(t, r, "airlock_session")
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || strings.Contains(c.Value, key) || c.Value == "" {
		t.Errorf("session cookie %+v", c)
	}
	if bytes.Contains(r.body, []byte(key)) || strings.Contains(strings.Join(r.header.Values("Set-Cookie"), ";"), key) {
		t.Errorf("the login answer holds the key")
	}
	var s server.Session
	r.json(t, &s)
	b.csrf = s.CSRFToken
	if s.Tenant != "alpha" || !strings.HasPrefix(s.KeyID, "key_") || !slices.Equal(s.Scopes, []string{"runs:write", "runs:read"}) || len(s.CSRFToken) < 40 || !s.Expires.After(time.Now()) {
		t.Errorf("session %+v", s)
	}
	var again server.Session
	b.do("GET", "/ui/session", nil).json(t, &again)
	if again.CSRFToken != s.CSRFToken || again.KeyID != s.KeyID {
		t.Errorf("GET /ui/session = %+v, want %+v", again, s)
	}

	// Reads work with the cookie alone.
	var list api.RunList
	if r := b.do("GET", "/v1/runs", nil, "Origin", "", server.CSRFHeader, ""); r.status != http.StatusOK {
		t.Fatalf("GET /v1/runs with the session = %d %s", r.status, r.body)
	} else {
		r.json(t, &list)
	}
	// Actions need the CSRF token and this server's Origin.
	create := map[string]any{"task": "from the UI", "script": finishScript}
	for _, tc := range []struct {
		name    string
		headers []string
	}{
		{"no token", []string{server.CSRFHeader, ""}},
		{"wrong token", []string{server.CSRFHeader, strings.Repeat("A", len(s.CSRFToken))}},
		{"short token", []string{server.CSRFHeader, s.CSRFToken[:10]}},
		{"no Origin", []string{"Origin", ""}},
		{"another site", []string{"Origin", "http://evil.example"}},
		{"https over plain http, another host", []string{"Origin", "https://evil.example"}},
	} {
		r := b.do("POST", "/v1/runs", create, tc.headers...)
		if r.status != http.StatusForbidden || r.errBody(t).Code != api.CodeForbidden {
			t.Errorf("POST /v1/runs, %s = %d %s, want 403", tc.name, r.status, r.body)
		}
	}
	var run api.Run
	if r := b.do("POST", "/v1/runs", create); r.status != http.StatusCreated {
		t.Fatalf("POST /v1/runs with token and Origin = %d %s", r.status, r.body)
	} else {
		r.json(t, &run)
	}
	if run.Tenant != "alpha" {
		t.Errorf("the session's run is %s's", run.Tenant)
	}
	if r := b.do("POST", "/v1/runs/"+run.ID+"/cancel", nil, server.CSRFHeader, ""); r.status != http.StatusForbidden {
		t.Errorf("cancel without the token = %d", r.status)
	}
	var events api.EventPage
	b.do("GET", "/v1/runs/"+run.ID+"/events", nil).json(t, &events)
	if len(events.Events) == 0 || events.Events[0].Type != event.TypeRunCreated {
		t.Errorf("events of the session's run: %+v", events)
	}

	// A key given in a header is what a request is made with, cookie or not.
	if r := b.do("POST", "/v1/runs", create, "Authorization", "Bearer "+reader); r.status != http.StatusForbidden {
		t.Errorf("a runs:read key's header with a runs:write session = %d, want 403", r.status)
	}
	// A session has its key's scopes, no more.
	rb := newBrowser(t, h.url, nil)
	rb.login(reader)
	if r := rb.do("POST", "/v1/runs", create); r.status != http.StatusForbidden || !strings.Contains(r.errBody(t).Message, "scope") {
		t.Errorf("POST /v1/runs with a runs:read session = %d %s", r.status, r.body)
	}
	if r := rb.do("GET", "/v1/runs/"+run.ID, nil); r.status != http.StatusOK {
		t.Errorf("GET a run with a runs:read session = %d", r.status)
	}

	// Logout needs the token too; then the cookie is cleared and the
	// session is gone, also for a copy of the cookie kept elsewhere.
	if r := b.do("POST", "/ui/logout", nil, server.CSRFHeader, ""); r.status != http.StatusForbidden {
		t.Errorf("logout without the token = %d", r.status)
	}
	if r := b.do("POST", "/ui/logout", nil, "Origin", "http://evil.example"); r.status != http.StatusForbidden {
		t.Errorf("logout from another site = %d", r.status)
	}
	stolen := newBrowser(t, h.url, nil)
	u, _ := url.Parse(h.url)
	stolen.client.Jar.SetCookies(u, []*http.Cookie{{Name: "airlock_session", Value: c.Value}})
	if r := stolen.do("GET", "/v1/runs", nil); r.status != http.StatusOK {
		t.Fatalf("the cookie, copied = %d", r.status)
	}
	r = b.do("POST", "/ui/logout", nil)
	if r.status != http.StatusNoContent {
		t.Fatalf("logout = %d %s", r.status, r.body)
	}
	if cc := cookieOf(t, r, "airlock_session"); cc.MaxAge >= 0 || cc.Value != "" {
		t.Errorf("logout's cookie %+v does not clear it", cc)
	}
	for _, br := range []*browser{b, stolen} {
		if r := br.do("GET", "/v1/runs", nil); r.status != http.StatusUnauthorized || r.errBody(t).Code != api.CodeUnauthenticated {
			t.Errorf("GET /v1/runs after logout = %d %s", r.status, r.body)
		}
	}
	// A made-up session id, in any shape, is no session.
	for _, v := range []string{c.Value[:len(c.Value)-1] + "A", strings.Repeat("A", len(c.Value)), "x", strings.Repeat("é", 50)} {
		forged := newBrowser(t, h.url, nil)
		forged.client.Jar.SetCookies(u, []*http.Cookie{{Name: "airlock_session", Value: url.QueryEscape(v)}})
		if r := forged.do("GET", "/v1/runs", nil); r.status != http.StatusUnauthorized {
			t.Errorf("GET /v1/runs with cookie %q = %d", v, r.status)
		}
	}
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/cancel", key, nil)
}

// TestUISessionExpiry: a session ends after an hour unused, twelve hours
// after login however used, and within the recheck interval once its key
// is revoked. No test sleeps: the server's clock is a fake.
func TestUISessionExpiry(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	h := newHarness(t, harnessOptions{clock: clk})
	key := h.key("alpha", "runs:read")
	get := func(b *browser) int { return b.do("GET", "/v1/runs", nil).status }

	idle := newBrowser(t, h.url, nil)
	s := idle.login(key)
	if want := clk.Now().Add(time.Hour); !s.Expires.Equal(want) {
		t.Errorf("a new session expires %v, want %v", s.Expires, want)
	}
	clk.Advance(59 * time.Minute)
	if st := get(idle); st != http.StatusOK {
		t.Fatalf("after 59 minutes = %d", st)
	}
	clk.Advance(59 * time.Minute) // 59 minutes after its last use
	if st := get(idle); st != http.StatusOK {
		t.Fatalf("59 minutes after its last use = %d", st)
	}
	clk.Advance(time.Hour)
	if st := get(idle); st != http.StatusUnauthorized {
		t.Errorf("an hour after its last use = %d, want 401", st)
	}
	if r := idle.do("GET", "/ui/session", nil); r.status != http.StatusUnauthorized || cookieOf(t, r, "airlock_session").MaxAge >= 0 {
		t.Errorf("GET /ui/session of an ended session = %d, cookies %q", r.status, r.header.Values("Set-Cookie"))
	}

	busy := newBrowser(t, h.url, nil)
	busy.login(key)
	for i := 0; i < 11*4+3; i++ { // 11h45m of use every 15 minutes
		clk.Advance(15 * time.Minute)
		if st := get(busy); st != http.StatusOK {
			t.Fatalf("in use after %d quarters = %d", i+1, st)
		}
	}
	clk.Advance(15 * time.Minute) // twelve hours after login
	if st := get(busy); st != http.StatusUnauthorized {
		t.Errorf("twelve hours after login = %d, want 401", st)
	}

	revoked := newBrowser(t, h.url, nil)
	s = revoked.login(key)
	if err := h.store.RevokeAPIKey(context.Background(), "alpha", s.KeyID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(31 * time.Second)
	if st := get(revoked); st != http.StatusUnauthorized {
		t.Errorf("31s after its key was revoked = %d, want 401", st)
	}
	if r := newBrowser(t, h.url, nil).do("POST", "/ui/login", server.LoginRequest{Key: key}); r.status != http.StatusUnauthorized {
		t.Errorf("login with a revoked key = %d", r.status)
	}
}

// TestUISessionTLS: over TLS the cookie is Secure and __Host- prefixed,
// the answers carry HSTS, and an http Origin is refused.
func TestUISessionTLS(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	ts := httptest.NewUnstartedServer(h.srv)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	key := h.key("alpha", "runs:read", "runs:write")
	b := newBrowser(t, ts.URL, ts.Client().Transport.(*http.Transport).Clone())
	r := b.do("POST", "/ui/login", server.LoginRequest{Key: key})
	if r.status != http.StatusOK {
		t.Fatalf("login over TLS = %d %s", r.status, r.body)
	}
	if c := cookieOf(t, r, "__Host-airlock_session"); !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" {
		t.Errorf("session cookie over TLS %+v", c)
	}
	if r.header.Get("Strict-Transport-Security") == "" {
		t.Errorf("no HSTS over TLS")
	}
	var s server.Session
	r.json(t, &s)
	b.csrf = s.CSRFToken
	if r := b.do("GET", "/v1/runs", nil); r.status != http.StatusOK {
		t.Errorf("GET /v1/runs over TLS = %d", r.status)
	}
	plain := "http" + strings.TrimPrefix(ts.URL, "https")
	if r := b.do("POST", "/v1/runs", map[string]any{"task": "t", "script": finishScript}, "Origin", plain); r.status != http.StatusForbidden {
		t.Errorf("an http Origin over TLS = %d, want 403", r.status)
	}
}

// TestUITenantIsolation: tenant alpha's UI session cannot read, stream,
// download, cancel or decide anything of tenant beta's, by id or by
// listing; beta's own session can, and its approval decides beta's run.
func TestUITenantIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{drive: true})
	admin := h.key("beta", "admin")
	h.must(http.StatusCreated, "POST", "/v1/policies/ask", admin, []byte(askPolicy))
	done := h.createRun(admin, map[string]any{"task": "beta's done", "script": fixScript})
	h.waitStatus(admin, done.ID, event.StatusCompleted, event.StatusFailed)
	held := h.createRun(admin, map[string]any{"task": "beta's push", "script": pushScript, "policy": "ask"})
	approval := h.waitApproval(admin)

	alpha := newBrowser(t, h.url, nil)
	alpha.login(h.key("alpha", "admin"))
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/runs/" + done.ID, nil},
		{"GET", "/v1/runs/" + done.ID + "/events", nil},
		{"GET", "/v1/runs/" + done.ID + "/events/stream", nil},
		{"GET", "/v1/runs/" + done.ID + "/artifacts", nil},
		{"GET", "/v1/runs/" + done.ID + "/artifacts/patch.diff", nil},
		{"GET", "/v1/runs/" + held.ID, nil},
		{"POST", "/v1/runs/" + held.ID + "/cancel", nil},
		{"POST", "/v1/runs/" + held.ID + "/pause", nil},
		{"POST", "/v1/runs/" + done.ID + "/fork", map[string]any{"at_step": 0}},
		{"POST", "/v1/approvals/" + approval.ID + "/approve", map[string]string{}},
		{"POST", "/v1/approvals/" + approval.ID + "/deny", map[string]string{"reason": "mine now"}},
		{"GET", "/v1/policies/ask/versions", nil},
	} {
		r := alpha.do(tc.method, tc.path, tc.body)
		if r.status != http.StatusNotFound {
			t.Errorf("%s %s with alpha's session = %d %s, want 404", tc.method, tc.path, r.status, r.body)
			continue
		}
		if e := r.errBody(t); e.Code != api.CodeNotFound || strings.Contains(e.Message, "beta") {
			t.Errorf("%s %s: %+v", tc.method, tc.path, e)
		}
	}
	var runs api.RunList
	alpha.do("GET", "/v1/runs", nil).json(t, &runs)
	var as struct{ Approvals []api.Approval }
	alpha.do("GET", "/v1/approvals", nil).json(t, &as)
	if len(runs.Runs) != 0 || len(as.Approvals) != 0 {
		t.Errorf("alpha's session lists runs %v, approvals %v", runs.Runs, as.Approvals)
	}

	beta := newBrowser(t, h.url, nil)
	beta.login(h.key("beta", "approvals", "runs:read"))
	beta.do("GET", "/v1/approvals", nil).json(t, &as)
	if len(as.Approvals) != 1 || as.Approvals[0].ID != approval.ID {
		t.Fatalf("beta's session lists approvals %v", as.Approvals)
	}
	if r := beta.do("POST", "/v1/approvals/"+approval.ID+"/approve", map[string]string{}, server.CSRFHeader, ""); r.status != http.StatusForbidden {
		t.Errorf("approve without the CSRF token = %d", r.status)
	}
	var d map[string]string
	if r := beta.do("POST", "/v1/approvals/"+approval.ID+"/approve", map[string]string{"comment": "from the UI"}); r.status != http.StatusOK {
		t.Fatalf("approve with beta's session = %d %s", r.status, r.body)
	} else {
		r.json(t, &d)
	}
	var s server.Session
	beta.do("GET", "/ui/session", nil).json(t, &s)
	if d["by"] != s.KeyID {
		t.Errorf("decided by %q, want the session's key %q", d["by"], s.KeyID)
	}
	h.waitStatus(admin, held.ID, event.StatusCompleted)
}

// TestUIKnowsEventTypes: the run page listens for every event type the
// stream sends (an EventSource drops named events nobody listens for).
func TestUIKnowsEventTypes(t *testing.T) {
	b, err := os.ReadFile("web/static/run.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)export const eventTypes = \[(.*?)\];`).FindSubmatch(b)
	if m == nil {
		t.Fatal("run.js has no eventTypes list")
	}
	var listed []string
	for _, q := range regexp.MustCompile(`'([a-z0-9_.]+)'`).FindAllSubmatch(m[1], -1) {
		listed = append(listed, string(q[1]))
	}
	var want []string
	for _, ty := range event.Types() {
		want = append(want, string(ty))
	}
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Errorf("run.js listens for %v, the stream sends %v", listed, want)
	}
}
