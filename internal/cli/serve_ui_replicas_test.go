package cli_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// uiClient is a browser of the web UI: its session cookie and CSRF token.
type uiClient struct {
	t      *testing.T
	cookie string
	csrf   string
}

// do sends a request as the browser would from a page of base (Origin),
// with its cookie and, when set, its CSRF token, and returns the status
// and body.
func (u *uiClient) do(method, base, path, body string) (int, string) {
	u.t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		u.t.Fatal(err)
	}
	req.Header.Set("Origin", base)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if u.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "airlock_session", Value: u.cookie})
	}
	if u.csrf != "" {
		req.Header.Set("X-CSRF-Token", u.csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		u.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	for _, c := range resp.Cookies() {
		if c.Name == "airlock_session" && c.Value != "" {
			u.cookie = c.Value
		}
	}
	return resp.StatusCode, b.String()
}

// uiSession is the body of /ui/login and /ui/session.
type uiSession struct {
	Tenant    string `json:"tenant"`
	KeyID     string `json:"key_id"`
	CSRFToken string `json:"csrf_token"`
}

// login logs the browser in with key through base.
func (u *uiClient) login(base, key string) uiSession {
	u.t.Helper()
	b, _ := json.Marshal(map[string]string{"key": key})
	code, body := u.do("POST", base, "/ui/login", string(b))
	var s uiSession
	if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil || u.cookie == "" {
		u.t.Fatalf("login through %s = %d %s", base, code, body)
	}
	u.csrf = s.CSRFToken
	return s
}

// TestServeReplicasUISessions: the web UI needs no pinning to a replica.
// Two airlock serve processes on one PostgreSQL: a browser logs in
// through A and uses B (its session, reads, a state-changing request with
// the CSRF token); an event stream it opened on A ends when it logs out
// through B; the logged-out cookie is then refused by A and B. A forged
// cookie, an expired session's and a revoked key's session are refused by
// both, and the CSRF token is required on B as on A.
func TestServeReplicasUISessions(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	homeA, exe := serveHome(t, "alh-")
	homeB := moreHome(t)
	key := pgKey(t, homeA, exe, url)
	st := pgStore(t, url)
	ctx := context.Background()
	a := startServeProc(t, homeA, exe, url, 0)
	b := startServeProc(t, homeB, exe, url, 0)
	both := []*serveProc{a, b}

	// A run to stream (no worker drives it: it stays queued, its stream
	// open).
	run := createRun(t, a.url, key, map[string]any{"task": "ui", "script": "turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"})

	u := &uiClient{t: t}
	s := u.login(a.url, key)
	if s.Tenant != "acme" || s.CSRFToken == "" {
		t.Fatalf("login = %+v", s)
	}
	// Through B: the same session, its CSRF token, and the API.
	code, body := u.do("GET", b.url, "/ui/session", "")
	var sb uiSession
	if code != http.StatusOK || json.Unmarshal([]byte(body), &sb) != nil || sb != s {
		t.Fatalf("GET B/ui/session = %d %s; want %+v", code, body, s)
	}
	if code, body := u.do("GET", b.url, "/v1/runs/"+run.ID, ""); code != http.StatusOK || !strings.Contains(body, run.ID) {
		t.Fatalf("GET B/v1/runs/%s with the session = %d %s", run.ID, code, body)
	}
	// A state-changing request through B: refused without the CSRF
	// token, let through with it (to a 404: no such run).
	csrf := u.csrf
	u.csrf = ""
	if code, body := u.do("POST", b.url, "/v1/runs/run_01M96SRWPZGQV0PTNF5HTT9MAC/cancel", ""); code != http.StatusForbidden {
		t.Fatalf("POST through B without the CSRF token = %d %s, want 403", code, body)
	}
	u.csrf = csrf
	if code, body := u.do("POST", b.url, "/v1/runs/run_01M96SRWPZGQV0PTNF5HTT9MAC/cancel", ""); code != http.StatusNotFound {
		t.Fatalf("POST through B with the CSRF token = %d %s, want 404 (authenticated: no such run)", code, body)
	}

	// An event stream made with the session on A.
	req, err := http.NewRequest("GET", a.url+"/v1/runs/"+run.ID+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: "airlock_session", Value: u.cookie})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream on A with the session = %s", resp.Status)
	}
	ended := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		ended <- sc.Err()
	}()
	select {
	case err := <-ended:
		t.Fatalf("the stream ended before the logout: %v", err)
	case <-time.After(300 * time.Millisecond): // 3 polls of A's
	}

	// Log out through B: refused through A at once, and through B.
	cookie := u.cookie
	if code, body := u.do("POST", b.url, "/ui/logout", ""); code != http.StatusNoContent {
		t.Fatalf("logout through B = %d %s", code, body)
	}
	u.cookie = cookie
	for _, p := range both {
		if code, body := u.do("GET", p.url, "/ui/session", ""); code != http.StatusUnauthorized {
			t.Fatalf("GET %s/ui/session after the logout = %d %s, want 401", p.url, code, body)
		}
		if code, body := u.do("GET", p.url, "/v1/runs/"+run.ID, ""); code != http.StatusUnauthorized {
			t.Fatalf("GET %s/v1/runs/%s after the logout = %d %s, want 401", p.url, run.ID, code, body)
		}
	}
	// A's stream ended within its poll (100 ms); a minute bounds the wait.
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the session's stream on A outlived its logout through B by a minute")
	}

	// Forged cookies: random of the right shape, malformed, another
	// session's hash (what a copy of the store holds).
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	forged := base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(cookie))
	for _, c := range []string{forged, "x", strings.Repeat("A", 43), base64.RawURLEncoding.EncodeToString(sum[:])} {
		f := &uiClient{t: t, cookie: c, csrf: csrf}
		for _, p := range both {
			if code, body := f.do("GET", p.url, "/v1/runs/"+run.ID, ""); code != http.StatusUnauthorized {
				t.Fatalf("GET %s with forged cookie %q = %d %s, want 401", p.url, c, code, body)
			}
		}
	}

	// An expired session, put in the store directly (the servers' clocks
	// cannot be moved): its cookie is refused by both.
	_, _ = rand.Read(raw[:])
	old := base64.RawURLEncoding.EncodeToString(raw[:])
	oh := sha256.Sum256([]byte(old))
	at := time.Now().Add(-13 * time.Hour)
	if err := st.CreateUISession(ctx, store.UISession{
		Hash: oh[:], Tenant: "acme", KeyID: s.KeyID, Created: at, Used: at, Expires: at.Add(time.Hour),
	}, store.MaxUISessionsPerKey); err != nil {
		t.Fatal(err)
	}
	for _, p := range both {
		e := &uiClient{t: t, cookie: old}
		if code, body := e.do("GET", p.url, "/ui/session", ""); code != http.StatusUnauthorized {
			t.Fatalf("GET %s/ui/session with an expired session = %d %s, want 401", p.url, code, body)
		}
	}

	// A session of a key revoked in the store directly (as airlock keys
	// revoke does): refused by both at its next request.
	v := &uiClient{t: t}
	v.login(b.url, key)
	if code, _ := v.do("GET", a.url, "/ui/session", ""); code != http.StatusOK {
		t.Fatalf("a new session through A = %d", code)
	}
	if err := st.RevokeAPIKey(ctx, "acme", s.KeyID); err != nil {
		t.Fatal(err)
	}
	for _, p := range both {
		if code, body := v.do("GET", p.url, "/v1/runs/"+run.ID, ""); code != http.StatusUnauthorized {
			t.Fatalf("GET %s with a revoked key's session = %d %s, want 401", p.url, code, body)
		}
	}
}
