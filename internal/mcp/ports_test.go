package mcp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/mcp"
)

// portsPolicy exposes port 8000 to anyone and 8001-8002 with the
// sandbox's traffic token.
const portsPolicy = `
ports:
  expose:
    - ports: 8000
      access: public
    - ports: 8001-8002
`

// get fetches url with header hd (name, value), returning the status and
// body.
func get(t *testing.T, url string, hd ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hd) == 2 {
		req.Header.Set(hd[0], hd[1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestExposePort(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	cs := h.stdio(t)

	// Before any sandbox there is nothing to expose.
	if res := mustCall(t, cs, "expose_port", map[string]any{"port": 8000}); !res.IsError || !strings.Contains(text(res), "no sandbox") {
		t.Errorf("expose_port without a sandbox = %q, want no sandbox", text(res))
	}
	res := mustCall(t, cs, "create_sandbox", map[string]any{"policy": "ports"})
	id, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)
	if res.IsError || id == "" {
		t.Fatalf("create_sandbox = %q", text(res))
	}
	// A small HTTP server per port, each serving its own directory.
	res = mustCall(t, cs, "run_command", map[string]any{"sandbox": id, "command": `for p in 8000 8001; do mkdir -p /tmp/$p && echo "hello from $p" > /tmp/$p/hello.txt && (cd /tmp/$p && setsid nohup python3 -m http.server $p --bind 127.0.0.1 >/dev/null 2>&1 &); done; echo started`})
	if res.IsError {
		t.Fatalf("run_command = %q", text(res))
	}

	expose := func(port int) map[string]any {
		t.Helper()
		res := mustCall(t, cs, "expose_port", map[string]any{"sandbox": id, "port": port})
		if res.IsError {
			t.Fatalf("expose_port(%d) = %q", port, text(res))
		}
		st, _ := res.StructuredContent.(map[string]any)
		return st
	}
	pub := expose(8000)
	url, _ := pub["url"].(string)
	if pub["needs_token"] != false || pub["access"] != "public" || pub["token"] != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("expose_port(8000) = %v, want a public loopback URL and no token", pub)
	}
	var status int
	var body string
	// The server may still be starting: a 502 (nothing listens yet) is
	// retried until it answers.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, body = get(t, url+"/hello.txt"); status != http.StatusBadGateway {
			break
		}
	}
	if status != 200 || body != "hello from 8000\n" {
		t.Errorf("GET %s/hello.txt = %d %q, want the sandbox's file", url, status, body)
	}
	if again := expose(8000); again["url"] != url {
		t.Errorf("expose_port(8000) again = %v, want the same URL %s", again["url"], url)
	}

	tok := expose(8001)
	turl, _ := tok["url"].(string)
	token, _ := tok["token"].(string)
	if tok["needs_token"] != true || tok["token_header"] != mcp.TrafficHeader || len(token) != 64 || turl == url {
		t.Fatalf("expose_port(8001) = %v, want a URL of its own, the header and a 256-bit token", tok)
	}
	if status, body = get(t, turl+"/hello.txt"); status != http.StatusForbidden {
		t.Errorf("GET of the token port without the token = %d %q, want 403", status, body)
	}
	if status, _ = get(t, turl+"/hello.txt", mcp.TrafficHeader, strings.Repeat("0", 64)); status != http.StatusForbidden {
		t.Errorf("GET of the token port with a wrong token = %d, want 403", status)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, body = get(t, turl+"/hello.txt", mcp.TrafficHeader, token); status != http.StatusBadGateway {
			break
		}
	}
	if status != 200 || body != "hello from 8001\n" {
		t.Errorf("GET of the token port with the token = %d %q, want the sandbox's file", status, body)
	}
	// Exposed by the policy, but nothing listens: a 502 that says so.
	closed := expose(8002)
	if status, body = get(t, closed["url"].(string)+"/", mcp.TrafficHeader, token); status != http.StatusBadGateway || !strings.Contains(body, "nothing in the sandbox listens on port 8002") {
		t.Errorf("GET of a port nothing listens on = %d %q, want 502 saying so", status, body)
	}

	// A port the policy does not expose is refused, naming what it does.
	res = mustCall(t, cs, "expose_port", map[string]any{"sandbox": id, "port": 9000})
	if !res.IsError || !strings.Contains(text(res), "port 9000 is not exposed by the sandbox's policy ports (ports.expose names 8000, 8001-8002)") {
		t.Errorf("expose_port(9000) = %q, want a refusal naming the exposed ports", text(res))
	}
	// So is every port of a sandbox whose policy exposes none.
	res = mustCall(t, cs, "create_sandbox", nil)
	other, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)
	res = mustCall(t, cs, "expose_port", map[string]any{"sandbox": other, "port": 8000})
	if !res.IsError || !strings.Contains(text(res), "ports.expose names none") {
		t.Errorf("expose_port under a policy without ports = %q, want a refusal", text(res))
	}
	if _, err := call(t, cs, "expose_port", map[string]any{"sandbox": id, "port": 70000}, false); err == nil || !strings.Contains(err.Error(), "not a TCP port") {
		t.Errorf("expose_port(70000) = %v, want invalid params", err)
	}

	// Destroying the sandbox closes its URLs.
	mustCall(t, cs, "destroy_sandbox", map[string]any{"sandbox": id})
	if status, body = get(t, url+"/hello.txt"); status != 0 {
		t.Errorf("GET after destroy = %d %q, want the connection refused", status, body)
	}

	// Each request through a URL is audited; the token is in no record.
	var ports, denied int
	for _, r := range h.audit.records(t) {
		if r.Tool == "port" && r.Sandbox == id {
			ports++
			if r.Outcome == "denied" {
				denied++
			}
		}
		if line := r.Detail + r.Outcome; token != "" && strings.Contains(line, token) {
			t.Errorf("audit record %+v holds the token", r)
		}
	}
	if ports < 4 || denied != 2 {
		t.Errorf("audit: %d port records, %d denied; want at least 4, 2 denied", ports, denied)
	}
}
