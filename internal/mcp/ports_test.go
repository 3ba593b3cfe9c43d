package mcp_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/mcp"
	"github.com/airlockrun/airlock/internal/portproxy/portproxytest"
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

// upgrade opens a connection to url (http://HOST:PORT) that the
// sandbox's echo server upgrades, and checks that it echoes.
func upgrade(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade at %s = %v, %v; want 101", url, res, err)
	}
	fmt.Fprintf(c, "ping\n")
	if line, err := br.ReadString('\n'); line != "ping\n" {
		t.Fatalf("the upgraded connection echoed %q, %v", line, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c
}

// TestRevokeExposure: the host lists each sandbox's exposed ports (who
// exposed them, when, the connections open) to the sandbox's tenant only,
// and Revoke takes one off: its open upgraded connection ends, its URL
// reaches nothing, the other port is untouched, a second revoke finds
// nothing, expose_port may expose it again, and both are audited.
func TestRevokeExposure(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	cs := h.stdio(t)
	res := mustCall(t, cs, "create_sandbox", map[string]any{"policy": "ports"})
	id, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)
	if res.IsError || id == "" {
		t.Fatalf("create_sandbox = %q", text(res))
	}
	start := fmt.Sprintf("cat > /tmp/echo.py <<'PY'\n%sPY\nfor p in 8000 8001; do (setsid nohup python3 /tmp/echo.py $p >/dev/null 2>&1 &); done; echo started", portproxytest.EchoServer)
	if res = mustCall(t, cs, "run_command", map[string]any{"sandbox": id, "command": start}); res.IsError {
		t.Fatalf("run_command = %q", text(res))
	}
	expose := func(port int) (url, token string) {
		t.Helper()
		res := mustCall(t, cs, "expose_port", map[string]any{"sandbox": id, "port": port})
		st, _ := res.StructuredContent.(map[string]any)
		url, _ = st["url"].(string)
		token, _ = st["token"].(string)
		if res.IsError || url == "" {
			t.Fatalf("expose_port(%d) = %q", port, text(res))
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if status, _ := get(t, url+"/", mcp.TrafficHeader, token); status != http.StatusBadGateway {
				break // the server has started
			}
		}
		return url, token
	}
	before := time.Now()
	pubURL, _ := expose(8000)
	tokURL, token := expose(8001)
	ws := upgrade(t, pubURL)

	// Listed to the sandbox's tenant, with what each exposure is.
	list := h.srv.Sandboxes("local")
	if len(list) != 1 || list[0].ID != id || list[0].Policy != "ports" || len(list[0].Exposures) != 2 {
		t.Fatalf("Sandboxes(local) = %+v, want %s with two exposures", list, id)
	}
	pub, tok := list[0].Exposures[0], list[0].Exposures[1]
	if pub.Port != 8000 || pub.URL != pubURL || pub.Access != "public" || pub.Open != 1 || pub.At.Before(before.Add(-time.Second)) || pub.By != "local-user" {
		t.Errorf("exposure of 8000 = %+v, want public at %s, one open connection, by local-user, at its exposure", pub, pubURL)
	}
	if tok.Port != 8001 || tok.URL != tokURL || tok.Access != "token" || tok.Open != 0 {
		t.Errorf("exposure of 8001 = %+v, want token at %s", tok, tokURL)
	}
	if got := h.srv.Sandboxes("acme"); len(got) != 0 {
		t.Errorf("Sandboxes(acme) = %+v, want none of another tenant's", got)
	}
	if one, ok := h.srv.Sandbox("local", id); !ok || len(one.Exposures) != 2 {
		t.Errorf("Sandbox(local, %s) = %+v, %v", id, one, ok)
	}
	if _, ok := h.srv.Sandbox("acme", id); ok {
		t.Errorf("Sandbox(acme, %s) found another tenant's sandbox", id)
	}

	for _, tc := range []struct {
		name, tenant, id string
		port             int
		want             error
	}{
		{"another tenant's sandbox", "acme", id, 8000, mcp.ErrNoSandbox},
		{"no sandbox named", "local", "", 8000, mcp.ErrNoSandbox},
		{"an unknown sandbox", "local", "nope", 8000, mcp.ErrNoSandbox},
		{"a port never exposed", "local", id, 8002, mcp.ErrNotExposed},
	} {
		if _, err := h.srv.Revoke(tc.tenant, tc.id, tc.port, "key_admin"); !errors.Is(err, tc.want) {
			t.Errorf("Revoke of %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	e, err := h.srv.Revoke("local", id, 8000, "key_admin")
	if err != nil || e.Port != 8000 || e.URL != pubURL {
		t.Fatalf("Revoke(8000) = %+v, %v", e, err)
	}
	// The upgraded connection ends, and the URL reaches nothing.
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := ws.Read(make([]byte, 16)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read of the revoked port's upgraded connection = %d, %v; want it ended", n, err)
	}
	if status, body := get(t, pubURL+"/"); status != 0 {
		t.Errorf("GET of the revoked port = %d %q, want the connection refused", status, body)
	}
	if _, err := h.srv.Revoke("local", id, 8000, "key_admin"); !errors.Is(err, mcp.ErrNotExposed) {
		t.Errorf("Revoke(8000) again = %v, want ErrNotExposed", err)
	}
	if status, body := get(t, tokURL+"/", mcp.TrafficHeader, token); status != 200 || !strings.Contains(body, "host=") {
		t.Errorf("GET of the port left exposed = %d %q, want its echo", status, body)
	}
	if list = h.srv.Sandboxes("local"); len(list) != 1 || len(list[0].Exposures) != 1 || list[0].Exposures[0].Port != 8001 {
		t.Errorf("Sandboxes(local) after the revoke = %+v, want 8001 alone", list)
	}
	// Exposed again, it is reached again.
	again, _ := expose(8000)
	upgrade(t, again)

	var revokes, revoked int
	for _, r := range h.audit.records(t) {
		switch {
		case r.Tool == "port.revoke" && r.Sandbox == id && r.KeyID == "key_admin" && strings.Contains(r.Detail, "port 8000") && strings.Contains(r.Detail, "1 connections ended"):
			revokes++
		case r.Tool == "port" && r.Outcome == "revoked":
			revoked++
		}
	}
	if revokes != 1 || revoked != 1 {
		t.Errorf("audit: %d port.revoke records, %d requests revoked; want 1 and 1", revokes, revoked)
	}
}
