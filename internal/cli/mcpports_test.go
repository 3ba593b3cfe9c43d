package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/mcp"
	"github.com/airlockrun/airlock/internal/portproxy/portproxytest"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// mcpPortsPolicy exposes 8000 to anyone and 8001 with the sandbox's
// traffic token, two connections at once, 300K a connection.
const mcpPortsPolicy = `ports:
  expose:
    - ports: 8000
      access: public
    - ports: 8001
      access: token
  max_connections: 2
  max_connection_bytes: 300K
`

// TestMCPServePorts: on airlock serve, expose_port answers the data
// plane's preview URL (PORT-ID.DOMAIN), and a client of that URL reaches
// the server in the sandbox through the data-plane listener, under the
// sandbox's policy: a token port refuses without the sandbox's token (or
// with another tenant's credentials) and works with it, the token and the
// routing never reach the sandbox's server, the connection and byte
// bounds hold, every request is audited (the token in no record), and
// another tenant's session cannot expose the sandbox's ports.
func TestMCPServePorts(t *testing.T) {
	home, exe := serveHome(t, "almcpp-")
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "ports.yaml")
	if err := os.WriteFile(file, []byte(mcpPortsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := airlockIn(t, ctx, home, exe, io.Discard, "policy", "put", "ports", file); code != 0 {
		t.Fatalf("policy put = %d", code)
	}
	keys := map[string]string{}
	for _, tenant := range []string{"local", "other"} {
		if code := airlockIn(t, ctx, home, exe, io.Discard, "tenants", "create", tenant); code != 0 {
			t.Fatalf("tenants create %s = %d", tenant, code)
		}
		var out bytes.Buffer
		if code := airlockIn(t, ctx, home, exe, &out, "keys", "create", "--tenant", tenant, "--name", "mcp", "--scope", "sandboxes"); code != 0 {
			t.Fatalf("keys create = %d", code)
		}
		keys[tenant] = strings.TrimSpace(out.String())
	}
	const domain = "sbx.test"
	conf := filepath.Join(home, "serve.yaml")
	if err := os.WriteFile(conf, []byte("e2b:\n  api_addr: 127.0.0.1:0\n  sandbox_addr: 127.0.0.1:0\n  domain: "+domain+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := airlockIn(t, sctx, home, exe, pw, "serve", "--config", conf, "--listen", "127.0.0.1:0", "--workers", "0", "--log-level", "warn")
		pw.Close()
		done <- code
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	sc := bufio.NewScanner(pr)
	var plane, base string
	for (plane == "" || base == "") && sc.Scan() {
		if m := regexp.MustCompile(`sandboxes on http://(\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			plane = m[1]
		}
		if m := regexp.MustCompile(`listening on (http://\S+) `).FindStringSubmatch(sc.Text()); m != nil {
			base = m[1]
		}
	}
	if plane == "" || base == "" {
		t.Fatalf("airlock serve did not say its data plane and its address")
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	connect := func(key string) *sdk.ClientSession {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		tr := &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer(key)}, MaxRetries: -1}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(cctx, tr, nil)
		if err != nil {
			t.Fatalf("Connect = %v", err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	cs := connect(keys["local"])
	res := mcpCall(t, cs, "create_sandbox", map[string]any{"policy": "ports"})
	id, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)
	if res.IsError || id == "" {
		t.Fatalf("create_sandbox(ports) = %q", mcpText(res))
	}
	start := fmt.Sprintf(`mkdir -p /tmp/www && cd /tmp/www && echo "hello from 8000" > hello.txt && head -c 409600 /dev/zero > big.bin && (setsid nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &) && cat > /tmp/echo.py <<'PY'
%sPY
(setsid nohup python3 /tmp/echo.py 8001 >/dev/null 2>&1 &); echo started`, portproxytest.EchoServer)
	if res = mcpCall(t, cs, "run_command", map[string]any{"sandbox": id, "command": start}); res.IsError {
		t.Fatalf("run_command = %q", mcpText(res))
	}

	expose := func(cs *sdk.ClientSession, port int) (*sdk.CallToolResult, map[string]any) {
		t.Helper()
		res := mcpCall(t, cs, "expose_port", map[string]any{"sandbox": id, "port": port})
		st, _ := res.StructuredContent.(map[string]any)
		return res, st
	}
	// fetch sends a request for the preview URL u to the data-plane
	// listener, as a TLS-terminating proxy in front of it would: the
	// URL's host in Host.
	fetch := func(method, u, path string, hd ...string) (int, string) {
		t.Helper()
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatalf("preview URL %q: %v", u, err)
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://"+plane+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = pu.Host
		for i := 0; i+1 < len(hd); i += 2 {
			req.Header.Set(hd[i], hd[i+1])
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	// until retries fetch while the sandbox's server is still starting
	// (502: nothing listens yet).
	until := func(method, u, path string, hd ...string) (int, string) {
		t.Helper()
		var status int
		var body string
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if status, body = fetch(method, u, path, hd...); status != http.StatusBadGateway {
				break
			}
		}
		return status, body
	}

	res, pub := expose(cs, 8000)
	pubURL, _ := pub["url"].(string)
	if want := "https://8000-" + id + "." + domain; res.IsError || pubURL != want || pub["needs_token"] != false || pub["token"] != nil || pub["headers"] != nil {
		t.Fatalf("expose_port(8000) = %q %v, want the public preview URL %s", mcpText(res), pub, want)
	}
	if status, body := until("GET", pubURL, "/hello.txt"); status != 200 || body != "hello from 8000\n" {
		t.Errorf("GET %s/hello.txt = %d %q, want the sandbox's file", pubURL, status, body)
	}
	// A connection bound of 300K: a 400K file is cut off.
	if status, body := fetch("GET", pubURL, "/big.bin"); status == 200 && len(body) >= 409600 {
		t.Errorf("GET of 400K over a 300K connection bound = %d, %d bytes: went through", status, len(body))
	}
	if _, again := expose(cs, 8000); again["url"] != pubURL {
		t.Errorf("expose_port(8000) again = %v, want the same URL", again["url"])
	}

	res, tok := expose(cs, 8001)
	tokURL, _ := tok["url"].(string)
	token, _ := tok["token"].(string)
	if res.IsError || tokURL != "https://8001-"+id+"."+domain || tok["needs_token"] != true || tok["token_header"] != mcp.TrafficHeader || len(token) != 64 {
		t.Fatalf("expose_port(8001) = %q %v, want its preview URL, the header and a 256-bit token", mcpText(res), tok)
	}
	// A port exposed by the policy but not by expose_port is not reached.
	if status, body := fetch("GET", "https://8002-"+id+"."+domain, "/"); status != http.StatusForbidden && status != http.StatusBadGateway {
		t.Errorf("GET of a port never exposed = %d %q, want refused", status, body)
	}

	// Another tenant: its session does not see the sandbox, and neither
	// its key nor its own credentials open the token port.
	os2 := connect(keys["other"])
	if res, _ := expose(os2, 8001); !res.IsError || !strings.Contains(mcpText(res), "no sandbox") {
		t.Errorf("expose_port of another tenant's sandbox = %q, want no sandbox", mcpText(res))
	}
	refused := []struct {
		name string
		hd   []string
	}{
		{"no token", nil},
		{"a wrong token", []string{mcp.TrafficHeader, strings.Repeat("0", 64)}},
		{"the other tenant's key as the token", []string{mcp.TrafficHeader, keys["other"]}},
		{"the other tenant's key as a bearer", []string{"Authorization", "Bearer " + keys["other"]}},
		{"the owner's key as a bearer", []string{"Authorization", "Bearer " + keys["local"]}},
		{"the E2B header with the token", []string{"E2b-Traffic-Access-Token", token}},
	}
	for _, tc := range refused {
		if status, body := fetch("GET", tokURL, "/", tc.hd...); status != http.StatusForbidden || !strings.Contains(body, mcp.TrafficHeader) {
			t.Errorf("GET of the token port with %s = %d %q, want 403 naming %s", tc.name, status, body, mcp.TrafficHeader)
		}
	}
	// With the token: the sandbox's server answers, and sees neither the
	// token nor the data plane's routing.
	status, body := until("GET", tokURL, "/", mcp.TrafficHeader, token, "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8001")
	if status != 200 || !strings.Contains(body, "host=8001-"+id+"."+domain) {
		t.Errorf("GET of the token port with the token = %d %q, want the echo of its request", status, body)
	}
	for _, leak := range []string{token, "Airlock-Traffic-Token", "E2b-Sandbox"} {
		if strings.Contains(body, leak) {
			t.Errorf("the sandbox's server saw %q:\n%s", leak, body)
		}
	}

	// max_connections 2: two held requests (their bodies never come),
	// then a third is refused; once they end, requests go through again.
	// A held request is one the relay took: it reads the body, so the
	// data plane answers its Expect with 100 Continue (a refused one is
	// answered 429 instead, and is tried again: a request that has just
	// ended may still be counted for a moment).
	hold := func() net.Conn {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			c, err := net.Dial("tcp", plane)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, "POST /hold HTTP/1.1\r\nHost: 8001-%s.%s\r\n%s: %s\r\nExpect: 100-continue\r\nContent-Length: 100\r\n\r\n", id, domain, mcp.TrafficHeader, token)
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			if strings.Contains(line, " 100 ") {
				_ = c.SetReadDeadline(time.Time{})
				return c
			}
			c.Close()
		}
		t.Fatal("no request was held")
		return nil
	}
	held := []net.Conn{hold(), hold()}
	limited := false
	for deadline := time.Now().Add(time.Minute); !limited && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		status, body = fetch("GET", pubURL, "/hello.txt")
		limited = status == http.StatusTooManyRequests && strings.Contains(body, "max_connections: 2")
	}
	if !limited {
		t.Errorf("a third connection while two are held = %d %q, want 429 naming max_connections", status, body)
	}
	for _, c := range held {
		c.Close()
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if status, body = fetch("GET", pubURL, "/hello.txt"); status == 200 {
			break
		}
	}
	if status != 200 {
		t.Errorf("GET after the held connections ended = %d %q", status, body)
	}

	// The native API lists the exposures, to the sandbox's tenant, and
	// revokes one: its open upgraded connection ends, its URL is refused,
	// the other port goes on.
	for _, tenant := range []string{"local", "other"} {
		var out bytes.Buffer
		if code := airlockIn(t, ctx, home, exe, &out, "keys", "create", "--tenant", tenant, "--name", "ops", "--scope", "runs:read,runs:write"); code != 0 {
			t.Fatalf("keys create ops = %d", code)
		}
		keys["ops-"+tenant] = strings.TrimSpace(out.String())
	}
	ports := func(tenant string, args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		vars := map[string]string{"AIRLOCK_URL": base, "AIRLOCK_API_KEY": keys["ops-"+tenant]}
		env := &cli.Env{
			Env:    sandboxcli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Home: home, Executor: exe},
			Getenv: func(k string) string { return vars[k] },
		}
		code := cli.Main(env, append([]string{"sandbox", "ports"}, args...))
		return code, out.String()
	}
	code, out := ports("local", "ls", id, "--json")
	var listed api.Sandbox
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil {
		t.Fatalf("airlock sandbox ports ls %s --json = %d %q, %v", id, code, out, err)
	}
	if len(listed.Exposures) != 2 || listed.Origin != "mcp" || !strings.HasPrefix(listed.Template, "ports") {
		t.Fatalf("airlock sandbox ports ls %s = %+v, want the MCP sandbox's two exposures", id, listed)
	}
	for i, want := range []api.SandboxExposure{{Port: 8000, URL: pubURL, Access: "public"}, {Port: 8001, URL: tokURL, Access: "token", TokenRequired: true}} {
		e := listed.Exposures[i]
		if e.Port != want.Port || e.URL != want.URL || e.Access != want.Access || e.TokenRequired != want.TokenRequired || !strings.HasPrefix(e.By, "key_") || e.At.IsZero() {
			t.Errorf("exposure %d = %+v, want %+v by the MCP key's id, with its time", i, e, want)
		}
	}
	if code, out = ports("local"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, pubURL) || !strings.Contains(out, tokURL) {
		t.Errorf("airlock sandbox ports = %d %q, want the sandbox's URLs", code, out)
	}
	if code, out = ports("other"); code != 0 || strings.Contains(out, id) {
		t.Errorf("airlock sandbox ports as another tenant = %d %q, want the sandbox not listed", code, out)
	}
	if code, out = ports("other", "revoke", id, "8001"); code != 2 || !strings.Contains(out, "no such sandbox") {
		t.Errorf("airlock sandbox ports revoke as another tenant = %d %q, want 2, no such sandbox", code, out)
	}
	ws, err := net.Dial("tcp", plane)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(ws, "GET /ws HTTP/1.1\r\nHost: 8001-%s.%s\r\n%s: %s\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n", id, domain, mcp.TrafficHeader, token)
	wr := bufio.NewReader(ws)
	if res, err := http.ReadResponse(wr, nil); err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade through the token port = %v, %v; want 101", res, err)
	}
	fmt.Fprintf(ws, "ping\n")
	if line, err := wr.ReadString('\n'); line != "ping\n" {
		t.Fatalf("the upgraded connection echoed %q, %v", line, err)
	}
	if code, out = ports("local", "revoke", id, "8001"); code != 0 || !strings.Contains(out, "revoked port 8001") {
		t.Fatalf("airlock sandbox ports revoke %s 8001 = %d %q", id, code, out)
	}
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := wr.Read(make([]byte, 16)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read of the revoked port's upgraded connection = %d, %v; want it ended", n, err)
	}
	if status, body := fetch("GET", tokURL, "/", mcp.TrafficHeader, token); status != http.StatusForbidden || !strings.Contains(body, "not exposed") {
		t.Errorf("GET of the revoked port = %d %q, want 403 not exposed", status, body)
	}
	if status, body := fetch("GET", pubURL, "/hello.txt"); status != 200 {
		t.Errorf("GET of the port left exposed = %d %q", status, body)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"revoke", id, "8001"}, 2, "not exposed"},
		{[]string{"revoke", id, "0"}, 2, "not a TCP port"},
		{[]string{"ls", "inope"}, 2, "no such sandbox"},
	} {
		if code, out = ports("local", tc.args...); code != tc.code || !strings.Contains(out, tc.says) {
			t.Errorf("airlock sandbox ports %v = %d %q, want %d saying %q", tc.args, code, out, tc.code, tc.says)
		}
	}

	// Destroyed, the sandbox's URLs reach nothing.
	if res = mcpCall(t, cs, "destroy_sandbox", map[string]any{"sandbox": id}); res.IsError {
		t.Fatalf("destroy_sandbox = %q", mcpText(res))
	}
	if status, body = fetch("GET", pubURL, "/hello.txt"); status != http.StatusBadGateway || strings.Contains(body, "hello") {
		t.Errorf("GET after destroy = %d %q, want 502 not found", status, body)
	}

	// Every request through a URL is audited in the MCP log; the token
	// is in no record.
	b, err := os.ReadFile(filepath.Join(home, "audit", "mcp.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), token) {
		t.Errorf("the MCP audit log holds the traffic token")
	}
	outcomes := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"tool":"port.revoke"`) && strings.Contains(line, id) && !strings.Contains(line, "port 8001 (token)") {
			t.Errorf("the revoke's audit record = %s, want port 8001's", line)
		}
		if strings.Contains(line, `"tool":"port"`) && strings.Contains(line, id) {
			m := regexp.MustCompile(`"outcome":"([a-z_]+)"`).FindStringSubmatch(line)
			if m != nil {
				outcomes[m[1]]++
			}
		}
	}
	if outcomes["ok"] < 2 || outcomes["denied"] < len(refused) || outcomes["limited"] < 2 || outcomes["revoked"] != 1 {
		t.Errorf("audit outcomes of the port requests = %v, want ok ones, a denial per refused request, limited ones (the cut file, the third connection), the revoked connection", outcomes)
	}
}
