package e2b_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/e2b"
)

// portReq asks the data plane for port of sandbox id, the way a client of
// a preview URL does (the E2b-Sandbox-* headers of E2B_SANDBOX_URL), with
// extra headers.
func (h *harness) portReq(id string, port int, extra map[string]string) response {
	h.t.Helper()
	hd := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": itoa(port)}
	for k, v := range extra {
		hd[k] = v
	}
	return h.do("GET", h.envdURL+"/", hd, nil)
}

// edgeError is the body E2B's edge answers a refused port request with.
type edgeError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Port      int    `json:"port"`
	Code      int    `json:"code"`
}

// TestPortRefusals: each way a request for a sandbox's port is refused
// gets E2B's edge's answer (the status and body the SDK's tests expect)
// and an audit record with its outcome.
func TestPortRefusals(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.putPolicy("alpha", "closed", "sandbox:\n  limits:\n    memory: 256M\n")
	h.putPolicy("alpha", "some", "ports:\n  expose:\n    - ports: 3000\n      access: public\n    - ports: 8000-8999\n      access: token\n")

	public := h.create("alpha", map[string]any{"templateID": "base"})
	private := h.create("alpha", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	other := h.create("beta", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	closed := h.create("alpha", map[string]any{"templateID": "closed"})
	some := h.create("alpha", map[string]any{"templateID": "some"})
	dead := h.create("alpha", map[string]any{"templateID": "base"})
	if res := h.api("alpha", "DELETE", "/sandboxes/"+dead.ID, nil); res.status != 204 {
		t.Fatalf("kill: %s", res)
	}
	paused := h.create("alpha", map[string]any{"templateID": "base"})
	if res := h.api("alpha", "POST", "/sandboxes/"+paused.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}

	// Nothing listens on 3000 in any sandbox: a request that passes every
	// check reaches the port and finds it closed.
	const listening = 3000
	tok := func(t string) map[string]string { return map[string]string{"E2b-Traffic-Access-Token": t} }
	tests := []struct {
		name    string
		id      string
		port    int
		header  map[string]string
		status  int
		message string
		outcome string
	}{
		{"unknown sandbox", "sb-000000000000", listening, nil, 502, "The sandbox was not found", "not_found"},
		{"killed sandbox", dead.ID, listening, nil, 502, "The sandbox was not found", "not_found"},
		{"paused sandbox", paused.ID, listening, nil, 502, "The sandbox was not found", "not_found"},
		{"public port, nothing listening", public.ID, listening, nil, 502, "The sandbox is running but port is not open", "closed"},
		{"private sandbox, no token", private.ID, listening, nil, 403, "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing", "denied"},
		{"private sandbox, wrong token", private.ID, listening, tok("nope"), 403, "Sandbox is secured with traffic access token. Provided token in header 'e2b-traffic-access-token' is invalid", "denied"},
		{"private sandbox, another tenant's sandbox's token", private.ID, listening, tok(other.Traffic), 403, "Provided token in header 'e2b-traffic-access-token' is invalid", "denied"},
		{"private sandbox, its envd token is not a traffic token", private.ID, listening, map[string]string{"X-Access-Token": private.Token}, 403, "Token header 'e2b-traffic-access-token' is missing", "denied"},
		{"private sandbox, its token, nothing listening", private.ID, listening, tok(private.Traffic), 502, "The sandbox is running but port is not open", "closed"},
		{"policy without ports exposes nothing", closed.ID, listening, nil, 403, "Port 3000 is not exposed by the sandbox's policy", "not_exposed"},
		{"port outside the policy's rules", some.ID, 3001, nil, 403, "Port 3001 is not exposed by the sandbox's policy", "not_exposed"},
		{"token rule, no token", some.ID, 8080, nil, 403, "Token header 'e2b-traffic-access-token' is missing", "denied"},
		{"token rule, its token", some.ID, 8080, tok(some.Traffic), 502, "The sandbox is running but port is not open", "closed"},
		{"public rule of a stored policy", some.ID, listening, nil, 502, "The sandbox is running but port is not open", "closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := h.portReq(tc.id, tc.port, tc.header)
			var e edgeError
			if err := json.Unmarshal(res.body, &e); err != nil {
				t.Fatalf("port %d of %s = %s, not JSON: %v", tc.port, tc.id, res, err)
			}
			if res.status != tc.status || e.Code != tc.status || !strings.Contains(e.Message, tc.message) || e.SandboxID != tc.id {
				t.Errorf("port %d of %s = %s, want %d with message %q", tc.port, tc.id, res, tc.status, tc.message)
			}
			if tc.outcome == "" {
				return
			}
			found := false
			for _, r := range h.audit.records(t) {
				// Nothing reached a server that is not there: a request
				// sent behind an early connect's opening is not counted.
				found = found || r.Op == "port" && r.Sandbox == tc.id && r.Port == tc.port && r.Outcome == tc.outcome && r.Client != "" &&
					(r.Outcome != "closed" || r.BytesIn == 0 && r.BytesOut == 0)
			}
			if !found {
				t.Errorf("no audit record of op port, sandbox %s, port %d, outcome %s:\n%s", tc.id, tc.port, tc.outcome, h.audit)
			}
		})
	}
}

// TestTrafficAccessToken: create tells a traffic access token only when a
// port needs one (allowPublicTraffic: false, or a token rule), a fresh one
// per sandbox, and getInfo tells allowPublicTraffic.
func TestTrafficAccessToken(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.putPolicy("alpha", "tokened", "ports:\n  expose:\n    - ports: 8000\n")
	public := h.create("alpha", map[string]any{"templateID": "base"})
	private := h.create("alpha", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	private2 := h.create("alpha", map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}})
	tokened := h.create("alpha", map[string]any{"templateID": "tokened"})
	if public.Traffic != "" {
		t.Errorf("public sandbox's trafficAccessToken = %q, want none", public.Traffic)
	}
	if private.Traffic == "" || private2.Traffic == "" || private.Traffic == private2.Traffic || private.Traffic == private.Token {
		t.Errorf("private sandboxes' trafficAccessTokens = %q, %q, want two distinct, not the envd token", private.Traffic, private2.Traffic)
	}
	if tokened.Traffic == "" {
		t.Errorf("a sandbox whose policy has a token rule has no trafficAccessToken")
	}
	for _, tc := range []struct {
		s    sbx
		want bool
	}{{public, true}, {private, false}} {
		res := h.api("alpha", "GET", "/sandboxes/"+tc.s.ID, nil)
		var info struct {
			Network struct {
				AllowPublicTraffic bool `json:"allowPublicTraffic"`
			} `json:"network"`
		}
		if err := json.Unmarshal(res.body, &info); err != nil || info.Network.AllowPublicTraffic != tc.want {
			t.Errorf("getInfo(%s) = %s, want network.allowPublicTraffic %v", tc.s.ID, res, tc.want)
		}
	}
	// The token never reaches the audit log or the sandbox's log.
	if strings.Contains(h.audit.String(), private.Traffic) {
		t.Errorf("the audit log holds a traffic access token")
	}
}

// TestPortByHost: a preview URL's host, <port>-<id>.<domain>, routes to
// the port as the headers do.
func TestPortByHost(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{Domain: "e2b.test"}})
	s := h.create("alpha", map[string]any{"templateID": "base"})
	req, err := http.NewRequest("GET", h.envdURL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "3000-" + s.ID + ".e2b.test"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e edgeError
	if err := json.NewDecoder(res.Body).Decode(&e); err != nil || res.StatusCode != 502 || e.Message != "The sandbox is running but port is not open" || e.Port != 3000 {
		t.Errorf("GET %s = %d %+v, want 502 port not open", req.Host, res.StatusCode, e)
	}
}

// portsResult is what testdata/ports.js prints.
type portsResult struct {
	ID   string `json:"id"`
	Host string `json:"host"`
	Page struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"page"`
	Hello struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"hello"`
	Stream struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"stream"`
	WS struct {
		Status int    `json:"status"`
		Echo   string `json:"echo"`
	} `json:"ws"`
	ClosedPort sdkPortAnswer `json:"closedPort"`
	Masked     struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	} `json:"masked"`
	BadMask            string        `json:"badMask"`
	TrafficAccessToken bool          `json:"trafficAccessToken"`
	PrivateWithToken   int           `json:"privateWithToken"`
	PrivateNoToken     sdkPortAnswer `json:"privateNoToken"`
	PrivateWrongToken  sdkPortAnswer `json:"privateWrongToken"`
	PrivateWS          struct {
		Status int `json:"status"`
	} `json:"privateWS"`
	NotExposed sdkPortAnswer `json:"notExposed"`
	Killed     sdkPortAnswer `json:"killed"`
}

type sdkPortAnswer struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// message is the edge error's message in a's body.
func (a sdkPortAnswer) message() string {
	var e edgeError
	_ = json.Unmarshal([]byte(a.Body), &e)
	return e.Message
}

// TestSDKPorts: with the official SDK, sbx.getHost(port) is
// <port>-<id>.<domain> and reaches a server the sandbox runs (a page,
// a streamed response, a WebSocket echo); allowPublicTraffic: false
// gives a trafficAccessToken that the port then needs; and the refusals
// answer as E2B's edge (its host.test.ts and network.test.ts read them).
func TestSDKPorts(t *testing.T) {
	needRoot(t)
	node := needNode(t)
	dir := installSDKs(t)
	h := newHarness(t, harnessOptions{config: e2b.Config{Domain: "e2b.test"}})
	h.putPolicy("alpha", "closed", "sandbox:\n  limits:\n    memory: 256M\n")
	script, err := filepath.Abs("testdata/ports.js")
	if err != nil {
		t.Fatal(err)
	}
	server, err := filepath.Abs("testdata/wsecho.py")
	if err != nil {
		t.Fatal(err)
	}
	var r portsResult
	h.runNode(t, node, 2*time.Minute, "alpha", &r, script, filepath.Join(dir, "node_modules", "e2b"), server)
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: %+v", what, r)
		}
	}
	check("getHost", r.Host == "8000-"+r.ID+".e2b.test")
	check("page", r.Page.Status == 200 && strings.Contains(r.Page.Body, "new WebSocket"))
	check("the server sees the preview host", r.Hello.Status == 200 && r.Hello.Body == "hello from the sandbox host="+r.Host)
	check("streamed response", r.Stream.Status == 200 && r.Stream.Body == "chunk 0\nchunk 1\nchunk 2\n")
	check("websocket", r.WS.Status == 101 && r.WS.Echo == "ping")
	check("nothing listening", r.ClosedPort.Status == 502 && r.ClosedPort.message() == "The sandbox is running but port is not open")
	check("trafficAccessToken", r.TrafficAccessToken)
	check("private port with its token", r.PrivateWithToken == 200)
	check("private port without a token", r.PrivateNoToken.Status == 403 && strings.Contains(r.PrivateNoToken.message(), "is missing"))
	check("private port with a wrong token", r.PrivateWrongToken.Status == 403 && strings.Contains(r.PrivateWrongToken.message(), "is invalid"))
	check("private websocket without a token", r.PrivateWS.Status == 403)
	check("not exposed", r.NotExposed.Status == 403 && strings.Contains(r.NotExposed.message(), "is not exposed"))
	check("maskRequestHost", r.Masked.Status == 200 && r.Masked.Body == "hello from the sandbox host=custom-host.example.com:8080")
	check("bad maskRequestHost", strings.Contains(r.BadMask, "400") && strings.Contains(r.BadMask, "network.maskRequestHost"))
	check("killed sandbox", r.Killed.Status == 502 && r.Killed.message() == "The sandbox was not found")

	var ok, in, outBytes int64
	for _, rec := range h.audit.records(t) {
		if rec.Op == "port" && rec.Sandbox == r.ID && rec.Outcome == "ok" {
			ok++
			in += rec.BytesIn
			outBytes += rec.BytesOut
		}
	}
	if ok < 4 || in == 0 || outBytes == 0 {
		t.Errorf("audit: %d ok port records of %s, %d bytes in, %d out; want each request with its bytes", ok, r.ID, in, outBytes)
	}
}

// startServer runs testdata/wsecho.py on port in s (root's home, so any
// template's user may run it) and waits until its page answers through
// the data plane.
func (h *harness) startServer(s sbx, port int) {
	h.t.Helper()
	src, err := os.ReadFile("testdata/wsecho.py")
	if err != nil {
		h.t.Fatal(err)
	}
	hd := map[string]string{"E2b-Sandbox-Id": s.ID, "X-Access-Token": s.Token, "Content-Type": "application/octet-stream"}
	if res := h.do("POST", h.envdURL+"/files?path=/tmp/wsecho.py", hd, bytes.NewReader(src)); res.status != 200 {
		h.t.Fatalf("upload wsecho.py: %s", res)
	}
	h.streamStarted(s, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/usr/bin/python3", "args": []string{"/tmp/wsecho.py", itoa(port)}}})
	waitFor(h.t, "the sandbox's server", func() bool {
		return h.portReq(s.ID, port, map[string]string{"E2b-Traffic-Access-Token": s.Traffic}).status == 200
	})
}

// wsConn is a WebSocket client connection through the data plane.
type wsConn struct {
	c net.Conn
	r *bufio.Reader
}

// dialWS opens a WebSocket to /ws of port of sandbox id; the status is
// the handshake's (101 when it opened; the conn is nil otherwise).
func (h *harness) dialWS(id string, port int) (*wsConn, int) {
	h.t.Helper()
	u, err := url.Parse(h.envdURL)
	if err != nil {
		h.t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		h.t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: %d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", u.Host, id, port)
	r := bufio.NewReader(c)
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		c.Close()
		h.t.Fatalf("websocket handshake: %v", err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		res.Body.Close()
		c.Close()
		return nil, res.StatusCode
	}
	return &wsConn{c: c, r: r}, res.StatusCode
}

// echo sends msg as one masked binary frame and reads the echo; an error
// when the connection ends first.
func (w *wsConn) echo(msg []byte) error {
	head := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(head[2:], uint64(len(msg)))
	mask := []byte{1, 2, 3, 4}
	masked := make([]byte, len(msg))
	for i, b := range msg {
		masked[i] = b ^ mask[i%4]
	}
	go func() { _, _ = w.c.Write(slices.Concat(head, mask, masked)) }() // the echo comes back while it is sent
	var h [2]byte
	if _, err := io.ReadFull(w.r, h[:]); err != nil {
		return err
	}
	n := int64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(w.r, b[:]); err != nil {
			return err
		}
		n = int64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(w.r, b[:]); err != nil {
			return err
		}
		n = int64(binary.BigEndian.Uint64(b[:]))
	}
	back := make([]byte, n)
	if _, err := io.ReadFull(w.r, back); err != nil {
		return err
	}
	if !bytes.Equal(back, msg) {
		return fmt.Errorf("echo of %d bytes differs", len(msg))
	}
	return nil
}

func (w *wsConn) Close() error { return w.c.Close() }

// TestPortLimits: a sandbox's policy bounds its connections open at once
// (the one past it is 429 while they are open, and served once they
// closed), the bytes of one connection (it is closed at the bound) and of
// all of them (then a request is 429), and each is an audit outcome.
func TestPortLimits(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.putPolicy("alpha", "limited", "ports:\n  expose:\n    - ports: 8000\n      access: public\n  max_connections: 2\n  max_connection_bytes: 300K\n  max_bytes: 2M\n")
	s := h.create("alpha", map[string]any{"templateID": "limited"})
	h.startServer(s, 8000)

	a, status := h.dialWS(s.ID, 8000)
	if a == nil {
		t.Fatalf("first websocket: %d", status)
	}
	// The relay counts a request until its handler returns, which may be
	// a moment after its client read the answer: startServer's last poll
	// can still hold a place, so the second websocket may wait for it.
	var b *wsConn
	waitFor(t, "a second websocket", func() bool {
		b, status = h.dialWS(s.ID, 8000)
		if b == nil && status != 429 {
			t.Fatalf("second websocket: %d", status)
		}
		return b != nil
	})
	if err := a.echo([]byte("ping")); err != nil {
		t.Fatalf("echo: %v", err)
	}
	res := h.portReq(s.ID, 8000, nil)
	var e edgeError
	if err := json.Unmarshal(res.body, &e); err != nil || res.status != 429 || !strings.Contains(e.Message, "max_connections: 2") {
		t.Errorf("a third connection while two are open = %s, want 429 naming max_connections", res)
	}
	a.Close()
	b.Close()
	waitFor(t, "the websockets' end", func() bool { return h.portReq(s.ID, 8000, nil).status == 200 })

	c, _ := h.dialWS(s.ID, 8000)
	if c == nil {
		t.Fatal("no websocket after the others closed")
	}
	if err := c.echo(bytes.Repeat([]byte("x"), 100<<10)); err != nil {
		t.Fatalf("echo of 100K under a bound of 300K: %v", err)
	}
	if err := c.echo(bytes.Repeat([]byte("y"), 400<<10)); err == nil {
		t.Errorf("echo of 400K more over a connection bound of 300K went through")
	}
	c.Close()
	// The rest of the sandbox's 2M, spent 250K a connection.
	spent := false
	for range 20 {
		d, status := h.dialWS(s.ID, 8000)
		if d == nil {
			spent = status == 429
			break
		}
		_ = d.echo(bytes.Repeat([]byte("z"), 250<<10))
		d.Close()
	}
	res = h.portReq(s.ID, 8000, nil)
	if !spent || res.status != 429 || !strings.Contains(string(res.body), "max_bytes") {
		t.Errorf("after 2M: a websocket was refused: %v; a request = %s, want 429 naming max_bytes", spent, res)
	}
	outcomes := map[string]int{}
	for _, r := range h.audit.records(t) {
		if r.Op == "port" && r.Sandbox == s.ID {
			outcomes[r.Outcome]++
		}
	}
	if outcomes["ok"] == 0 || outcomes["limited"] < 3 {
		t.Errorf("audit outcomes = %v, want ok ones and a limited one for each bound", outcomes)
	}
}
