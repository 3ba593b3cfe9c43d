package egress_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/egress"
)

func get(t testing.TB, c *http.Client, rawURL string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, c, req)
}

func do(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return resp, string(body)
}

func TestAbsoluteFormAllowed(t *testing.T) {
	w := newWorld(t, nil)
	c := w.h.client(nil)
	resp, body := get(t, c, "http://open.test/echo?a=1")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "path=/echo\nquery=a=1") {
		t.Fatalf("GET = %d %q, want 200 with the echo", resp.StatusCode, body)
	}
	if got := w.plain.last(t).Host; got != "open.test" {
		t.Errorf("upstream saw Host %q, want open.test", got)
	}
	c.CloseIdleConnections()
	recs := w.h.audit.waitRecords(t, 1)
	r := recs[0]
	if r.Decision != egress.DecisionAllowed || r.Method != "GET" || r.Host != "open.test" || r.Port != 80 ||
		r.Status != 200 || r.Addr != w.plain.addr() || !strings.HasPrefix(r.Rule, "allow[0]") ||
		r.BytesIn == 0 || r.BytesOut == 0 || r.Tenant != "t1" || r.Run != "run-1" || r.Sandbox != "sb-1" {
		t.Errorf("record = %+v", r)
	}
	if st := w.h.p.Stats(); st.Allowed != 1 || st.Denied != 0 || st.BytesIn < r.BytesIn || st.BytesOut < r.BytesOut {
		t.Errorf("Stats = %+v after one allowed request (record %d in, %d out)", st, r.BytesIn, r.BytesOut)
	}
}

func TestConnectUntouched(t *testing.T) {
	w := newWorld(t, nil)
	c := w.h.client(w.pki.pool) // trusts only the upstream's own CA
	resp, body := get(t, c, "https://tunnel.test/echo", "Authorization", "Bearer mine")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET = %d %q", resp.StatusCode, body)
	}
	if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != "upstream test CA" {
		t.Errorf("client saw a certificate issued by %q, want the upstream's own", iss)
	}
	if got := w.tls.last(t).Header.Get("Authorization"); got != "Bearer mine" {
		t.Errorf("upstream saw Authorization %q, want the client's untouched", got)
	}
	c.CloseIdleConnections()
	r := w.h.audit.waitRecords(t, 1)[0]
	if r.Method != "CONNECT" || r.Decision != egress.DecisionAllowed || r.Inspected || r.Status != 200 ||
		r.Host != "tunnel.test" || r.Port != 443 || r.BytesIn == 0 || r.BytesOut == 0 {
		t.Errorf("record = %+v", r)
	}
}

func TestRefusals(t *testing.T) {
	w := newWorld(t, nil)
	tests := []struct {
		name   string
		req    string
		status int
		reason string
	}{
		{"unknown host", "GET http://nowhere.test/ HTTP/1.1\r\nHost: nowhere.test\r\n\r\n", 403, "policy:no_rule"},
		{"denied port", "GET http://open.test:81/ HTTP/1.1\r\nHost: open.test:81\r\n\r\n", 403, "policy:port"},
		{"connect unknown host", "CONNECT nowhere.test:443 HTTP/1.1\r\nHost: nowhere.test:443\r\n\r\n", 403, "policy:no_rule"},
		{"connect denied port", "CONNECT tunnel.test:8443 HTTP/1.1\r\nHost: tunnel.test:8443\r\n\r\n", 403, "policy:port"},
		{"connect without port", "CONNECT tunnel.test HTTP/1.1\r\nHost: tunnel.test\r\n\r\n", 400, "bad_request:authority"},
		{"connect bad host", "CONNECT bad..test:443 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request:host"},
		{"connect userinfo", "CONNECT u@tunnel.test:443 HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request:authority"},
		{"origin form", "GET / HTTP/1.1\r\nHost: open.test\r\n\r\n", 400, "bad_request:origin_form"},
		{"https absolute form", "GET https://tunnel.test/ HTTP/1.1\r\nHost: tunnel.test\r\n\r\n", 400, "bad_request:scheme"},
		{"dot segments", "GET http://open.test/a/../b HTTP/1.1\r\nHost: open.test\r\n\r\n", 400, "bad_request:path"},
		{"garbage", "HELLO\r\n\r\n", 400, "bad_request:syntax"},
		{"case and trailing dot still denied", "GET http://NoWhere.Test./ HTTP/1.1\r\nHost: x\r\n\r\n", 403, "policy:no_rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := w.h.dial(t)
			resp := rawRequest(t, c, bufio.NewReader(c), tt.req)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || reasonOf(resp) != tt.reason {
				t.Fatalf("%q: %d %s=%q, want %d %q", firstLine(tt.req), resp.StatusCode, egress.ReasonHeader, reasonOf(resp), tt.status, tt.reason)
			}
			if !strings.Contains(string(body), "airlock egress") || !strings.Contains(string(body), tt.reason) {
				t.Errorf("body %q does not explain the refusal", body)
			}
		})
	}
	if n := len(w.plain.requests()) + len(w.tls.requests()); n != 0 {
		t.Errorf("%d refused requests reached an upstream", n)
	}
	recs := w.h.audit.waitRecords(t, len(tests))
	for _, r := range recs {
		if r.Decision != egress.DecisionDenied || r.Reason == "" {
			t.Errorf("record of a refusal = %+v", r)
		}
	}
}

func TestCaseAndTrailingDotAllowed(t *testing.T) {
	w := newWorld(t, nil)
	c := w.h.dial(t)
	resp := rawRequest(t, c, bufio.NewReader(c), "GET http://OPEN.Test./x HTTP/1.1\r\nHost: OPEN.Test.\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("GET http://OPEN.Test./x = %d %s", resp.StatusCode, reasonOf(resp))
	}
	if got := w.plain.last(t).Host; got != "open.test" {
		t.Errorf("upstream saw Host %q, want the normalized open.test", got)
	}
}

func TestInspectedRules(t *testing.T) {
	w := newWorld(t, nil)
	c := w.h.client(w.h.proxyRoots(t))
	tests := []struct {
		method, url string
		status      int
		reason      string
	}{
		{"GET", "https://inspect.test/repos/x", 200, ""},
		{"GET", "https://inspect.test/repos/", 200, ""},
		{"POST", "https://inspect.test/repos/x", 403, "policy:method"},
		{"GET", "https://inspect.test/admin", 403, "policy:path"},
		{"GET", "https://inspect.test/repos", 403, "policy:path"},
		{"GET", "https://inspect.test/repos/../admin", 400, "bad_request:path"},
		{"GET", "https://inspect.test/repos/%2e%2e/admin", 400, "bad_request:path"},
		{"GET", "https://inspect.test/repos%2F..%2Fadmin", 400, "bad_request:path"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader(""))
		resp, _ := do(t, c, req)
		if resp.StatusCode != tt.status || reasonOf(resp) != tt.reason {
			t.Errorf("%s %s = %d %q, want %d %q", tt.method, tt.url, resp.StatusCode, reasonOf(resp), tt.status, tt.reason)
		}
		if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != "airlock egress CA run-1" {
			t.Errorf("%s %s: certificate issued by %q, want the per-run CA", tt.method, tt.url, iss)
		}
	}
	for _, r := range w.tls.requests() {
		if r.Method != "GET" || !strings.HasPrefix(r.URL.Path, "/repos/") {
			t.Errorf("upstream received %s %s, which policy denies", r.Method, r.URL)
		}
	}
	// A client that does not trust the per-run CA cannot be fooled into
	// talking to an inspected host.
	if resp, err := w.h.client(w.pki.pool).Get("https://inspect.test/repos/x"); err == nil {
		resp.Body.Close()
		t.Error("a client without the per-run CA completed a request to an inspected host")
	}
}

func TestSNI(t *testing.T) {
	w := newWorld(t, nil)
	tests := []struct {
		name, target, sni string
		reason            string
	}{
		{"mismatch", "tunnel.test:443", "evil.test", "sni_mismatch"},
		{"missing", "tunnel.test:443", "", "sni_mismatch"},
		{"inspected mismatch", "api.test:443", "evil.test", "sni_mismatch"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, c, br := w.h.connect(t, tt.target)
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT %s = %d", tt.target, resp.StatusCode)
			}
			cfg := &tls.Config{ServerName: tt.sni, InsecureSkipVerify: true}
			if tt.sni == "" {
				cfg.ServerName = "127.0.0.1" // crypto/tls sends no SNI for an IP
			}
			tc := tls.Client(readerConn{c, br}, cfg)
			if err := tc.Handshake(); err == nil {
				t.Fatalf("handshake with SNI %q through CONNECT %s succeeded", tt.sni, tt.target)
			}
			recs := w.h.audit.waitRecords(t, i+1)
			if r := recs[i]; r.Decision != egress.DecisionDenied || r.Reason != tt.reason || r.Host != strings.TrimSuffix(tt.target, ":443") {
				t.Errorf("record = %+v, want denied %s", r, tt.reason)
			}
		})
	}
	if n := w.tls.hellosFor("evil.test") + w.tls.hellosFor(""); n != 0 {
		t.Errorf("the upstream saw %d ClientHellos for a mismatched name", n)
	}

	t.Run("not tls", func(t *testing.T) {
		resp, c, _ := w.h.connect(t, "tunnel.test:443")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: tunnel.test\r\n\r\n")
		if !isClosed(c, 10*time.Second) {
			t.Fatal("a non-TLS uninspected tunnel was not closed")
		}
		recs := w.h.audit.waitRecords(t, len(tests)+1)
		if r := recs[len(recs)-1]; r.Reason != "not_tls" {
			t.Errorf("record = %+v, want not_tls", r)
		}
		if got := len(w.tls.requests()); got != 0 {
			t.Errorf("upstream got %d requests", got)
		}
	})
}

func TestRequestShapes(t *testing.T) {
	w := newWorld(t, nil)

	t.Run("host header cannot redirect", func(t *testing.T) {
		c := w.h.dial(t)
		resp := rawRequest(t, c, bufio.NewReader(c), "GET http://open.test/x HTTP/1.1\r\nHost: nowhere.test\r\n\r\n")
		if resp.StatusCode != 200 || w.plain.last(t).Host != "open.test" {
			t.Fatalf("GET = %d, upstream Host %q; want 200 and the URL's host", resp.StatusCode, w.plain.last(t).Host)
		}
	})

	t.Run("no default user agent", func(t *testing.T) {
		c := w.h.dial(t)
		rawRequest(t, c, bufio.NewReader(c), "GET http://open.test/ua HTTP/1.1\r\nHost: open.test\r\n\r\n")
		if ua, ok := w.plain.last(t).Header["User-Agent"]; ok {
			t.Errorf("upstream saw User-Agent %q; the proxy must add none", ua)
		}
	})

	t.Run("expect continue", func(t *testing.T) {
		c := w.h.dial(t)
		br := bufio.NewReader(c)
		_, _ = io.WriteString(c, "POST http://open.test/echo HTTP/1.1\r\nHost: open.test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
		interim, err := http.ReadResponse(br, nil)
		if err != nil || interim.StatusCode != 100 {
			t.Fatalf("interim response = %v, %v; want 100 Continue", interim, err)
		}
		_, _ = io.WriteString(c, "hello")
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("final response = %v, %v", resp, err)
		}
		if w.plain.last(t).Header.Get("Expect") != "" {
			t.Error("Expect was forwarded after the proxy answered it")
		}
	})

	t.Run("head", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodHead, "http://open.test/big?n=1234", nil)
		resp, body := do(t, w.h.client(nil), req)
		if resp.StatusCode != 200 || resp.ContentLength != 1234 || body != "" {
			t.Errorf("HEAD = %d length %d body %q", resp.StatusCode, resp.ContentLength, body)
		}
	})

	t.Run("response header limit", func(t *testing.T) {
		resp, _ := get(t, w.h.client(nil), "http://open.test/bighead")
		if resp.StatusCode != 502 || reasonOf(resp) != "limit:response_header" {
			t.Errorf("GET /bighead = %d %q", resp.StatusCode, reasonOf(resp))
		}
	})

	t.Run("inspected tunnel, other host inside", func(t *testing.T) {
		resp, c, br := w.h.connect(t, "inspect.test:443")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		tc := tls.Client(readerConn{c, br}, &tls.Config{ServerName: "inspect.test", RootCAs: w.h.proxyRoots(t)})
		tbr := bufio.NewReader(tc)
		resp = rawRequest(t, tc, tbr, "GET /repos/x HTTP/1.1\r\nHost: tunnel.test\r\n\r\n")
		if resp.StatusCode != 403 || reasonOf(resp) != "host_mismatch" {
			t.Errorf("request for another host inside the tunnel = %d %q", resp.StatusCode, reasonOf(resp))
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp = rawRequest(t, tc, tbr, "GET /repos/y HTTP/1.1\r\nHost: inspect.test\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Errorf("next request on the same tunnel = %d %q", resp.StatusCode, reasonOf(resp))
		}
	})

	t.Run("plain http inside an inspected tunnel", func(t *testing.T) {
		resp, c, br := w.h.connect(t, "plain.test:80")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT = %d", resp.StatusCode)
		}
		resp = rawRequest(t, readerConn{c, br}, br, "GET /echo HTTP/1.1\r\nHost: plain.test\r\nAuthorization: mine\r\n\r\n")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || w.plain.last(t).Header.Get("Authorization") != "Bearer "+ghToken {
			t.Errorf("GET = %d, upstream Authorization %q", resp.StatusCode, w.plain.last(t).Header.Get("Authorization"))
		}
		if strings.Contains(string(body), ghToken) {
			t.Error("the secret reached the sandbox")
		}
	})
}
