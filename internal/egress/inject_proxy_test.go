package egress_test

import (
	"bufio"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
)

// dump returns everything the sandbox received for resp: status, headers
// and body.
func dump(t testing.TB, resp *http.Response, body string) string {
	t.Helper()
	head, err := httputil.DumpResponse(resp, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(head) + body
}

func TestInjection(t *testing.T) {
	w := newWorld(t, nil)
	secrets := []string{
		ghToken, basicPW, apiKey, url.QueryEscape(apiKey), elsewhere,
		base64.StdEncoding.EncodeToString([]byte("bob:" + basicPW)),
	}
	noSecret := func(t *testing.T, what string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(what, s) {
				t.Fatalf("the sandbox side saw a secret in:\n%s", what)
			}
		}
	}
	https := w.h.client(w.h.proxyRoots(t))
	plain := w.h.client(nil)

	for _, tc := range []struct {
		name string
		c    *http.Client
		url  string
		up   *upstream
	}{
		{"https header", https, "https://api.test/echo", w.tls},
		{"http header", plain, "http://plain.test/echo", w.plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, tc.c, tc.url, "Authorization", "Bearer sandbox-fake")
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s = %d %s", tc.url, resp.StatusCode, reasonOf(resp))
			}
			seen := tc.up.last(t).Header
			if got := seen.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+ghToken {
				t.Errorf("upstream saw Authorization %q, want exactly the injected credential", got)
			}
			if got := resp.Header.Get("X-Echo-Auth"); got != "Bearer [redacted]" {
				t.Errorf("echoed header = %q, want the placeholder", got)
			}
			if !strings.Contains(body, "Authorization: Bearer [redacted]\n") {
				t.Errorf("echoed body = %q, want the placeholder", body)
			}
			if strings.Contains(body, "sandbox-fake") {
				t.Errorf("the sandbox's own Authorization was merged, not replaced: %q", body)
			}
			noSecret(t, dump(t, resp, body))
		})
	}

	t.Run("split across chunks", func(t *testing.T) {
		resp, body := get(t, https, "https://api.test/split")
		if body != "Bearer [redacted]" {
			t.Errorf("body = %q, want %q", body, "Bearer [redacted]")
		}
		noSecret(t, dump(t, resp, body))
	})

	t.Run("gzip echo", func(t *testing.T) {
		resp, body := get(t, https, "https://api.test/gzip")
		if resp.StatusCode != 200 || !strings.Contains(body, "Authorization: Bearer [redacted]") {
			t.Errorf("GET /gzip = %d %q", resp.StatusCode, body)
		}
		if got := w.tls.last(t).Header.Get("Accept-Encoding"); got != "identity" {
			t.Errorf("upstream saw Accept-Encoding %q, want identity", got)
		}
		noSecret(t, dump(t, resp, body))
	})

	t.Run("basic", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "https://basic.test/echo", nil)
		req.SetBasicAuth("alice", "sandbox-pw")
		resp, body := do(t, https, req)
		r := w.tls.last(t)
		u, p, ok := (&http.Request{Header: r.Header}).BasicAuth()
		if !ok || u != "bob" || p != basicPW {
			t.Errorf("upstream saw basic auth %q/%q %v, want bob and the secret", u, p, ok)
		}
		if got := resp.Header.Get("X-Echo-Auth"); got != "Basic [redacted]" {
			t.Errorf("echoed basic header = %q, want the placeholder", got)
		}
		noSecret(t, dump(t, resp, body))
	})

	t.Run("query", func(t *testing.T) {
		resp, body := get(t, https, "https://query.test/echo?key=sandbox&x=1&Key=other")
		q := w.tls.last(t).URL.Query()
		if got := q["key"]; len(got) != 1 || got[0] != apiKey {
			t.Errorf("upstream saw key=%q, want exactly the secret", got)
		}
		if q.Get("x") != "1" || q.Get("Key") != "other" {
			t.Errorf("upstream query %v lost the sandbox's other parameters", q)
		}
		noSecret(t, dump(t, resp, body))
	})

	t.Run("secret bound to another host", func(t *testing.T) {
		before := len(w.tls.requests())
		resp, body := get(t, https, "https://unbound.test/echo")
		if resp.StatusCode != 403 || reasonOf(resp) != "credential_not_bound_to_host" {
			t.Errorf("GET = %d %q", resp.StatusCode, reasonOf(resp))
		}
		if len(w.tls.requests()) != before {
			t.Error("the request reached the upstream")
		}
		noSecret(t, dump(t, resp, body))
	})

	t.Run("missing secret", func(t *testing.T) {
		resp, _ := get(t, https, "https://missing.test/echo")
		if resp.StatusCode != 403 || reasonOf(resp) != "credential_unavailable" {
			t.Errorf("GET = %d %q", resp.StatusCode, reasonOf(resp))
		}
	})

	t.Run("rotation", func(t *testing.T) {
		const rotated = "ghp_Rotated_9876543210"
		setSecret(t, w.store, "gh_token", rotated)
		resp, body := get(t, https, "https://api.test/echo")
		if got := w.tls.last(t).Header.Get("Authorization"); got != "Bearer "+rotated {
			t.Errorf("after rotation upstream saw %q", got)
		}
		if strings.Contains(dump(t, resp, body), rotated) {
			t.Error("the rotated value reached the sandbox")
		}
		setSecret(t, w.store, "gh_token", ghToken)
	})

	if got := w.red.String("x " + ghToken + " y"); got != "x [redacted] y" {
		t.Errorf("Config.Redactor does not know the injected value: %q", got)
	}
	https.CloseIdleConnections()
	plain.CloseIdleConnections()
	audit := w.h.audit.raw()
	noSecret(t, audit)
	var injected int
	for _, r := range w.h.audit.records(t) {
		if r.Credential != "" {
			injected++
			if r.Credential != "gh_token" && r.Credential != "basic_pw" && r.Credential != "api_key" {
				t.Errorf("record names credential %q", r.Credential)
			}
		}
	}
	if injected < 6 {
		t.Errorf("%d records name an injected credential, want at least 6", injected)
	}
}

func TestKeepAlive(t *testing.T) {
	w := newWorld(t, nil)
	c := w.h.dial(t)
	br := bufio.NewReader(c)
	steps := []struct {
		req    string
		status int
		reason string
	}{
		{"GET http://open.test/one HTTP/1.1\r\nHost: open.test\r\n\r\n", 200, ""},
		{"GET http://nowhere.test/two HTTP/1.1\r\nHost: nowhere.test\r\n\r\n", 403, "policy:no_rule"},
		{"GET http://open.test/three HTTP/1.1\r\nHost: open.test\r\n\r\n", 200, ""},
		{"POST http://open.test/four HTTP/1.1\r\nHost: open.test\r\nContent-Length: 5\r\n\r\nhello", 200, ""},
	}
	for _, s := range steps {
		resp := rawRequest(t, c, br, s.req)
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != s.status || reasonOf(resp) != s.reason || resp.Close {
			t.Fatalf("%q = %d %q close=%v, want %d %q on a kept-alive connection", firstLine(s.req), resp.StatusCode, reasonOf(resp), resp.Close, s.status, s.reason)
		}
	}
	if got := w.plain.conns.n.Load(); got != 1 {
		t.Errorf("upstream saw %d connections, want 1 (the proxy pools them)", got)
	}
	c.Close()
	waitFor(t, "the connection to end", func() bool { return w.h.p.Stats().Conns == 0 })
	recs := w.h.audit.records(t)
	if len(recs) != len(steps) {
		t.Fatalf("%d records for %d requests", len(recs), len(steps))
	}
	for i, r := range recs {
		if (r.Decision == egress.DecisionDenied) != (steps[i].status == 403) {
			t.Errorf("record %d = %+v", i, r)
		}
	}
}

func TestHopByHopStripped(t *testing.T) {
	w := newWorld(t, nil)
	c := w.h.dial(t)
	resp := rawRequest(t, c, bufio.NewReader(c), "GET http://open.test/echo HTTP/1.1\r\nHost: open.test\r\n"+
		"Proxy-Authorization: Basic c2FuZGJveDpwdw==\r\nProxy-Connection: keep-alive\r\n"+
		"Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: timeout=5\r\nTe: trailers\r\nUpgrade: websocket\r\nX-Keep: 1\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("GET = %d %q", resp.StatusCode, reasonOf(resp))
	}
	h := w.plain.last(t).Header
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Drop", "Keep-Alive", "Te", "Upgrade"} {
		if v := h.Get(k); v != "" {
			t.Errorf("upstream saw %s: %q", k, v)
		}
	}
	if h.Get("X-Keep") != "1" {
		t.Error("an end-to-end header was dropped")
	}
}

// TestInjectionTenant: credentials are looked up under the sandbox's
// tenant and never under another: a proxy of tenant t2 cannot send t1's
// secrets.
func TestInjectionTenant(t *testing.T) {
	for _, tc := range []struct {
		tenant   string
		injected bool
	}{
		{"t1", true},
		{"t2", false},
	} {
		t.Run(tc.tenant, func(t *testing.T) {
			w := newWorld(t, func(c *egress.Config) {
				c.Identity = bridge.Identity{Tenant: tc.tenant, Run: "run-1", Sandbox: "sb-1"}
			})
			resp, _ := get(t, w.h.client(nil), "http://plain.test/echo")
			if tc.injected {
				if resp.StatusCode != 200 || w.plain.last(t).Header.Get("Authorization") != "Bearer "+ghToken {
					t.Errorf("GET = %d %s, want the credential injected", resp.StatusCode, reasonOf(resp))
				}
				return
			}
			if resp.StatusCode == 200 || reasonOf(resp) != "credential_unavailable" {
				t.Errorf("GET = %d %s, want credential_unavailable", resp.StatusCode, reasonOf(resp))
			}
		})
	}
}
