package e2b_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/e2b"
)

// procEvent is a decoded process event.
type procEvent struct {
	Event struct {
		Start *struct {
			PID int `json:"pid"`
		} `json:"start"`
		Data *struct {
			Stdout []byte `json:"stdout"`
			Stderr []byte `json:"stderr"`
			Pty    []byte `json:"pty"`
		} `json:"data"`
		End *struct {
			ExitCode int    `json:"exitCode"`
			Exited   bool   `json:"exited"`
			Status   string `json:"status"`
			Error    string `json:"error"`
		} `json:"end"`
		Keepalive *struct{} `json:"keepalive"`
	} `json:"event"`
}

// runResult is what a Start stream said.
type runResult struct {
	pid            int
	stdout, stderr string
	pty            string
	exit           int
	ended          bool
	keepalives     int
	endStream      string // the end-stream envelope's JSON
}

func parseRun(t *testing.T, frames []frame) runResult {
	t.Helper()
	var r runResult
	for i, f := range frames {
		if f.flags == 2 {
			if i != len(frames)-1 {
				t.Fatalf("end-stream envelope is not last")
			}
			r.endStream = string(f.msg)
			continue
		}
		var ev procEvent
		if err := json.Unmarshal(f.msg, &ev); err != nil {
			t.Fatalf("event %s: %v", f.msg, err)
		}
		switch e := ev.Event; {
		case e.Start != nil:
			if i != 0 {
				t.Errorf("start event at %d, want first", i)
			}
			r.pid = e.Start.PID
		case e.Data != nil:
			r.stdout += string(e.Data.Stdout)
			r.stderr += string(e.Data.Stderr)
			r.pty += string(e.Data.Pty)
		case e.End != nil:
			r.exit, r.ended = e.End.ExitCode, true
		case e.Keepalive != nil:
			r.keepalives++
		default:
			t.Errorf("unknown event %s", f.msg)
		}
	}
	if len(frames) == 0 || frames[0].flags != 0 || r.pid == 0 {
		t.Errorf("stream does not begin with a start event: %v", frames)
	}
	return r
}

func bash(script string) map[string]any {
	return map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", script}}, "stdin": false}
}

func TestProcessStart(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", map[string]any{"envVars": map[string]string{"FROM_CREATE": "c1"}})
	tests := []struct {
		name   string
		req    map[string]any
		stdout string
		stderr string
		exit   int
	}{
		{"stdout and exit 0", bash("echo hello; echo oops >&2"), "hello\n", "oops\n", 0},
		{"exit code", bash("exit 3"), "", "", 3},
		{"envs and cwd", map[string]any{"process": map[string]any{
			"cmd": "/bin/sh", "args": []string{"-c", "echo $FOO $FROM_CREATE; pwd"},
			"envs": map[string]string{"FOO": "bar"}, "cwd": "/tmp",
		}, "stdin": false}, "bar c1\n/tmp\n", "", 0},
		{"E2B's user, home and cwd", bash(`id -un; echo "$HOME"; pwd; echo x > f; cat /workspace/f`), "user\n/home/user\n/home/user\nx\n", "", 0},
		{"root", bash(`id -u; echo "$HOME"; pwd`), "0\n/root\n/root\n", "", 0},
		{"no network by default", bash("curl -sS --max-time 5 http://example.com >/dev/null 2>&1 || echo refused"), "refused\n", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra := map[string]string{"Connect-Timeout-Ms": "60000", "Keepalive-Ping-Interval": "50"}
			if tt.name == "root" {
				extra["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))
			}
			r := parseRun(t, h.stream(s, "process.Process/Start", tt.req, extra))
			if r.stdout != tt.stdout || r.stderr != tt.stderr || r.exit != tt.exit || !r.ended || r.endStream != "{}" {
				t.Errorf("run = %+v, want stdout %q stderr %q exit %d and a clean end", r, tt.stdout, tt.stderr, tt.exit)
			}
		})
	}
	t.Run("deadline", func(t *testing.T) {
		r := parseRun(t, h.stream(s, "process.Process/Start", bash("sleep 30"), map[string]string{"Connect-Timeout-Ms": "500"}))
		if !strings.Contains(r.endStream, "deadline_exceeded") {
			t.Errorf("end-stream = %s, want deadline_exceeded", r.endStream)
		}
	})
	t.Run("keepalive", func(t *testing.T) {
		r := parseRun(t, h.stream(s, "process.Process/Start", bash("sleep 2.5; echo done"), map[string]string{"Keepalive-Ping-Interval": "1"}))
		if r.keepalives == 0 || r.stdout != "done\n" {
			t.Errorf("run = %+v, want keepalives while idle", r)
		}
	})
	recs := h.audit.records(t)
	var starts int
	for _, rec := range recs {
		if rec.Op == "process.start" && rec.Tenant == "alpha" && rec.Sandbox == s.ID {
			starts++
		}
		if strings.Contains(rec.Detail, "c1") {
			t.Errorf("audit record %+v holds an environment value", rec)
		}
	}
	if starts < len(tests) {
		t.Errorf("%d process.start audit records, want %d", starts, len(tests))
	}
}

// TestProcessBackground drives a background command with stdin: list,
// connect, send input, close stdin, signal.
func TestProcessBackground(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	var wg sync.WaitGroup
	var first runResult
	wg.Add(1)
	go func() {
		defer wg.Done()
		first = parseRun(t, h.stream(s, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/bin/cat"}, "stdin": true, "tag": "cat"}, nil))
	}()
	var pid int
	waitFor(t, "the process in the list", func() bool {
		var l struct {
			Processes []struct {
				PID    int `json:"pid"`
				Config struct {
					Cmd string `json:"cmd"`
				} `json:"config"`
			} `json:"processes"`
		}
		res := h.unary(s, "process.Process/List", map[string]any{})
		_ = json.Unmarshal(res.body, &l)
		if len(l.Processes) == 1 && l.Processes[0].Config.Cmd == "/bin/cat" {
			pid = l.Processes[0].PID
			return true
		}
		return false
	})
	// Connected before cat can end: the input below ends it.
	connected := h.streamStarted(s, "process.Process/Connect", map[string]any{"process": map[string]any{"tag": "cat"}})
	res := h.unary(s, "process.Process/SendInput", map[string]any{"process": map[string]any{"pid": pid}, "input": map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte("ping\n"))}})
	if res.status != 200 {
		t.Fatalf("SendInput: %s", res)
	}
	if res := h.unary(s, "process.Process/CloseStdin", map[string]any{"process": map[string]any{"pid": pid}}); res.status != 200 {
		t.Fatalf("CloseStdin: %s", res)
	}
	second := parseRun(t, connected())
	wg.Wait()
	if first.stdout != "ping\n" || first.exit != 0 || !first.ended {
		t.Errorf("start stream = %+v, want the echoed input and exit 0", first)
	}
	if !second.ended {
		t.Errorf("connect stream = %+v, want the end", second)
	}
	// Signals, and calls on processes that are gone.
	wg.Add(1)
	var killed runResult
	go func() {
		defer wg.Done()
		killed = parseRun(t, h.stream(s, "process.Process/Start", bash("exec sleep 60"), nil))
	}()
	waitFor(t, "sleep to run", func() bool {
		return strings.Contains(string(h.unary(s, "process.Process/List", map[string]any{}).body), "sleep 60")
	})
	var l struct {
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	_ = json.Unmarshal(h.unary(s, "process.Process/List", map[string]any{}).body, &l)
	if res := h.unary(s, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": l.Processes[0].PID}, "signal": "SIGNAL_SIGKILL"}); res.status != 200 {
		t.Fatalf("SendSignal: %s", res)
	}
	wg.Wait()
	if killed.exit != -1 || !killed.ended {
		t.Errorf("killed = %+v, want exit -1", killed)
	}
	gone := map[string]any{"process": map[string]any{"pid": 999999}}
	for _, m := range []string{"SendSignal", "SendInput", "CloseStdin"} {
		body := map[string]any{"process": gone["process"], "signal": "SIGNAL_SIGKILL", "input": map[string]any{"stdin": "eA=="}}
		if res := h.unary(s, "process.Process/"+m, body); res.status != 404 || !strings.Contains(string(res.body), `"not_found"`) {
			t.Errorf("%s on an unknown pid = %s, want 404 not_found", m, res)
		}
	}
}

func TestPTY(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	var wg sync.WaitGroup
	var r runResult
	wg.Add(1)
	go func() {
		defer wg.Done()
		r = parseRun(t, h.stream(s, "process.Process/Start", map[string]any{
			"process": map[string]any{"cmd": "/bin/bash", "args": []string{"--norc", "-i"}},
			"pty":     map[string]any{"size": map[string]any{"cols": 80, "rows": 24}},
		}, nil))
	}()
	pid := h.onlyProcess(s, "the terminal")
	if res := h.unary(s, "process.Process/Update", map[string]any{"process": map[string]any{"pid": pid}, "pty": map[string]any{"size": map[string]any{"cols": 123, "rows": 45}}}); res.status != 200 {
		t.Fatalf("resize: %s", res)
	}
	in := "stty size; tty -s && echo is-a-tty; exit 7\n"
	if res := h.unary(s, "process.Process/SendInput", map[string]any{"process": map[string]any{"pid": pid}, "input": map[string]any{"pty": base64.StdEncoding.EncodeToString([]byte(in))}}); res.status != 200 {
		t.Fatalf("input: %s", res)
	}
	wg.Wait()
	if !strings.Contains(r.pty, "45 123") || !strings.Contains(r.pty, "is-a-tty") || r.exit != 7 {
		t.Errorf("pty = %+v, want the new size, a terminal and exit 7", r)
	}
}

func TestFiles(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{MaxFile: 64 << 10}})
	s := h.create("alpha", nil)
	hd := envdHeaders(s)

	// Multipart, the part's filename is the destination path.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("file", "dir/sub/a.txt")
	fw.Write([]byte("alpha\n"))
	fw, _ = mw.CreateFormFile("file", "/tmp/b.bin")
	fw.Write([]byte{0, 1, 2, 255})
	mw.Close()
	up := map[string]string{"Content-Type": mw.FormDataContentType()}
	for k, v := range hd {
		up[k] = v
	}
	res := h.do("POST", h.envdURL+"/files", up, &mp)
	var infos []struct{ Name, Type, Path string }
	_ = json.Unmarshal(res.body, &infos)
	if res.status != 200 || len(infos) != 2 || infos[0].Path != "/home/user/dir/sub/a.txt" || infos[1].Path != "/tmp/b.bin" || infos[0].Type != "file" {
		t.Fatalf("multipart upload = %s", res)
	}
	// Octet-stream, gzip-encoded.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped\n"))
	zw.Close()
	oct := map[string]string{"Content-Type": "application/octet-stream", "Content-Encoding": "gzip"}
	for k, v := range hd {
		oct[k] = v
	}
	if res := h.do("POST", h.envdURL+"/files?path=z.txt", oct, &gz); res.status != 200 {
		t.Fatalf("octet-stream upload = %s", res)
	}
	reads := []struct {
		path   string
		status int
		body   string
	}{
		{"dir/sub/a.txt", 200, "alpha\n"},
		{"/workspace/dir/sub/a.txt", 200, "alpha\n"},
		{"/tmp/b.bin", 200, "\x00\x01\x02\xff"},
		{"z.txt", 200, "zipped\n"},
		{"missing.txt", 404, ""},
		{"dir", 400, ""},
	}
	for _, r := range reads {
		res := h.do("GET", h.envdURL+"/files?path="+url.QueryEscape(r.path), hd, nil)
		if res.status != r.status || (r.status == 200 && string(res.body) != r.body) {
			t.Errorf("read %s = %s, want %d %q", r.path, res, r.status, r.body)
		}
	}
	// Empty files say Content-Length: 0.
	h.do("POST", h.envdURL+"/files?path=empty", map[string]string{"Content-Type": "application/octet-stream", "X-Access-Token": s.Token, "E2b-Sandbox-Id": s.ID}, strings.NewReader(""))
	if res := h.do("GET", h.envdURL+"/files?path=empty", hd, nil); res.status != 200 || res.header.Get("Content-Length") != "0" {
		t.Errorf("empty read = %s %v, want Content-Length 0", res, res.header)
	}
	// Metadata envd refuses (the SDK checks it too, but not every
	// client does): 400, and no file.
	for _, md := range []map[string]string{
		{"X-Metadata-Good": "café"}, // not US-ASCII
		{"X-Metadata-" + strings.Repeat("k", 247): "v"},
		{"X-Metadata-A": strings.Repeat("v", 4096)},
	} {
		up := map[string]string{"Content-Type": "application/octet-stream"}
		for k, v := range hd {
			up[k] = v
		}
		maps.Copy(up, md)
		if res := h.do("POST", h.envdURL+"/files?path=md.txt", up, strings.NewReader("x")); res.status != 400 {
			t.Errorf("upload with metadata %.60v = %s, want 400", md, res)
		}
	}
	if res := h.do("GET", h.envdURL+"/files?path=md.txt", hd, nil); res.status != 404 {
		t.Errorf("read of a refused upload = %s, want 404", res)
	}
	// Oversized upload.
	big := strings.NewReader(strings.Repeat("x", 65<<10))
	octPlain := map[string]string{"Content-Type": "application/octet-stream"}
	for k, v := range hd {
		octPlain[k] = v
	}
	if res := h.do("POST", h.envdURL+"/files?path=big", octPlain, big); res.status != 413 {
		t.Errorf("oversized upload = %s, want 413", res)
	}
	// Signed download URL without any header: routed by its signature.
	sig := func(path, op string, exp string) string {
		raw := path + ":" + op + "::" + s.Token
		if exp != "" {
			raw += ":" + exp
		}
		sum := sha256.Sum256([]byte(raw))
		return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	}
	q := url.Values{"path": {"z.txt"}, "signature": {sig("z.txt", "read", "")}}
	if res := h.do("GET", h.envdURL+"/files?"+q.Encode(), nil, nil); res.status != 200 || string(res.body) != "zipped\n" {
		t.Errorf("signed download = %s", res)
	}
	// A bad or expired signature is envd's 401, with its message.
	q.Set("signature", sig("z.txt", "write", ""))
	if res := h.do("GET", h.envdURL+"/files?"+q.Encode(), nil, nil); res.status != 401 || string(res.body) != `{"message":"invalid signature","code":401}` {
		t.Errorf("download signed for write = %s, want 401 invalid signature", res)
	}
	q = url.Values{"path": {"z.txt"}, "signature": {sig("z.txt", "read", "1")}, "signature_expiration": {"1"}}
	for _, hd := range []map[string]string{nil, {"E2b-Sandbox-Id": s.ID}, {"E2b-Sandbox-Id": "sb-nonesuch"}} {
		if res := h.do("GET", h.envdURL+"/files?"+q.Encode(), hd, nil); res.status != 401 || string(res.body) != `{"message":"signature is already expired","code":401}` {
			t.Errorf("expired signature (headers %v) = %s, want 401 signature is already expired", hd, res)
		}
	}

	// The filesystem service.
	calls := []struct {
		method string
		msg    map[string]any
		status int
		want   string
	}{
		{"Stat", map[string]any{"path": "dir/sub/a.txt"}, 200, `"type":"FILE_TYPE_FILE"`},
		{"Stat", map[string]any{"path": "dir/sub/a.txt"}, 200, `"size":"6"`},
		{"Stat", map[string]any{"path": "nope"}, 404, `"not_found"`},
		{"ListDir", map[string]any{"path": "dir", "depth": 2}, 200, `"path":"/home/user/dir/sub/a.txt"`},
		{"ListDir", map[string]any{"path": "/workspace"}, 200, `"FILE_TYPE_DIRECTORY"`},
		{"MakeDir", map[string]any{"path": "new/deep"}, 200, `"path":"/home/user/new/deep"`},
		{"MakeDir", map[string]any{"path": "new/deep"}, 409, `"already_exists"`},
		{"Move", map[string]any{"source": "z.txt", "destination": "moved/z.txt"}, 200, `"path":"/home/user/moved/z.txt"`},
		{"Stat", map[string]any{"path": "z.txt"}, 404, `"not_found"`},
		{"Remove", map[string]any{"path": "dir"}, 200, `{}`},
		{"Stat", map[string]any{"path": "dir"}, 404, `"not_found"`},
		{"Remove", map[string]any{"path": "never-was"}, 200, `{}`},
		{"Stat", map[string]any{"path": ""}, 400, `"invalid_argument"`},
		{"WatchDir", map[string]any{"path": "/"}, 415, `"unimplemented"`}, // a server stream: connect+json only
		{"Copy", map[string]any{"path": "/"}, 404, `"unimplemented"`},
	}
	for i, c := range calls {
		t.Run(fmt.Sprintf("%d-%s", i, c.method), func(t *testing.T) {
			res := h.unary(s, "filesystem.Filesystem/"+c.method, c.msg)
			if res.status != c.status || !strings.Contains(string(res.body), c.want) {
				t.Errorf("%s(%v) = %s, want %d with %s", c.method, c.msg, res, c.status, c.want)
			}
		})
	}
}

// TestConnectFraming sends malformed Connect requests over HTTP.
func TestConnectFraming(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{MaxMessage: 64 << 10}})
	s := h.create("alpha", nil)
	start := []byte(`{"process":{"cmd":"/bin/true"}}`)
	tests := []struct {
		name        string
		method      string
		contentType string
		headers     map[string]string
		body        []byte
		status      int
		want        string
	}{
		{"empty body", "process.Process/Start", "application/connect+json", nil, nil, 200, `"invalid_argument"`},
		{"truncated prefix", "process.Process/Start", "application/connect+json", nil, []byte{0, 0, 0}, 200, `"invalid_argument"`},
		{"truncated message", "process.Process/Start", "application/connect+json", nil, envelope(0, start)[:10], 200, `"invalid_argument"`},
		{"oversized", "process.Process/Start", "application/connect+json", nil, []byte{0, 0x7f, 0xff, 0xff, 0xff}, 200, `"resource_exhausted"`},
		{"two messages", "process.Process/Start", "application/connect+json", nil, append(envelope(0, start), envelope(0, start)...), 200, `"invalid_argument"`},
		{"compressed flag", "process.Process/Start", "application/connect+json", nil, envelope(1, start), 200, `"invalid_argument"`},
		{"end-stream flag", "process.Process/Start", "application/connect+json", nil, envelope(2, start), 200, `"invalid_argument"`},
		{"not JSON", "process.Process/Start", "application/connect+json", nil, envelope(0, []byte("{nope")), 200, `"invalid_argument"`},
		{"no cmd", "process.Process/Start", "application/connect+json", nil, envelope(0, []byte(`{}`)), 200, `"invalid_argument"`},
		{"binary codec", "process.Process/Start", "application/connect+proto", nil, envelope(0, start), 415, `"unimplemented"`},
		{"gzip stream", "process.Process/Start", "application/connect+json", map[string]string{"Connect-Content-Encoding": "gzip"}, envelope(0, start), 400, `"unimplemented"`},
		{"bad timeout", "process.Process/Start", "application/connect+json", map[string]string{"Connect-Timeout-Ms": "soon"}, envelope(0, start), 200, `"invalid_argument"`},
		{"protocol version", "process.Process/List", "application/json", map[string]string{"Connect-Protocol-Version": "2"}, []byte(`{}`), 400, `"invalid_argument"`},
		{"unary oversized", "process.Process/List", "application/json", nil, bytes.Repeat([]byte(" "), 65<<10), 429, `"resource_exhausted"`},
		{"unary not JSON", "filesystem.Filesystem/Stat", "application/json", nil, []byte(`[1,2]`), 400, `"invalid_argument"`},
		{"unary proto", "filesystem.Filesystem/Stat", "application/proto", nil, []byte{0x0a, 0x01, 0x2f}, 415, `"unimplemented"`},
		{"unknown method", "process.Process/Explode", "application/json", nil, []byte(`{}`), 404, `"unimplemented"`},
		{"pid as a string", "process.Process/SendSignal", "application/json", nil, []byte(`{"process":{"pid":"12345"},"signal":"SIGNAL_SIGTERM"}`), 404, `"not_found"`},
		{"bad signal", "process.Process/SendSignal", "application/json", nil, []byte(`{"process":{"pid":1},"signal":"SIGNAL_SIGHUP"}`), 400, `"invalid_argument"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hd := envdHeaders(s)
			hd["Content-Type"] = tt.contentType
			for k, v := range tt.headers {
				hd[k] = v
			}
			res := h.do("POST", h.envdURL+"/"+tt.method, hd, bytes.NewReader(tt.body))
			if res.status != tt.status {
				t.Fatalf("status %s, want %d", res, tt.status)
			}
			body := res.body
			if strings.HasPrefix(res.header.Get("Content-Type"), "application/connect+json") {
				frames := decodeFrames(t, res.body)
				last := frames[len(frames)-1]
				if last.flags != 2 {
					t.Fatalf("last envelope flags %d, want end-stream", last.flags)
				}
				body = last.msg
			}
			if !strings.Contains(string(body), tt.want) {
				t.Errorf("body %s, want %s", body, tt.want)
			}
		})
	}
}

func TestHostRouting(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{Domain: "sbx.airlock.test"}})
	s := h.create("alpha", nil)
	get := func(host string, headers map[string]string) int {
		req, _ := http.NewRequest("GET", h.envdURL+"/health", nil)
		req.Host = host
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	tok := map[string]string{"X-Access-Token": s.Token}
	tests := []struct {
		host   string
		status int
	}{
		{"49983-" + s.ID + ".sbx.airlock.test", 204},
		{"49983-" + s.ID + ".sbx.airlock.test:443", 204},
		{"8080-" + s.ID + ".sbx.airlock.test", 502},
		{"49983-sb-ffffffffffff.sbx.airlock.test", 502},
		{"api.sbx.airlock.test", 400},
		{"49983-" + s.ID + ".elsewhere.test", 400},
	}
	for _, tt := range tests {
		if got := get(tt.host, tok); got != tt.status {
			t.Errorf("GET /health Host %s = %d, want %d", tt.host, got, tt.status)
		}
	}
	// Headers win over the Host.
	hd := envdHeaders(s)
	if got := get("49983-sb-ffffffffffff.sbx.airlock.test", hd); got != 204 {
		t.Errorf("headers with another Host = %d, want 204", got)
	}
	var sb struct {
		Domain string `json:"domain"`
	}
	_ = json.Unmarshal(h.api("alpha", "GET", "/sandboxes/"+s.ID, nil).body, &sb)
	if sb.Domain != "sbx.airlock.test" {
		t.Errorf("info domain = %q", sb.Domain)
	}
}
