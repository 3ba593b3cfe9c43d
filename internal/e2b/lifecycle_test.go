package e2b_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/clock"
)

func TestPauseResume(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	oct := envdHeaders(s)
	oct["Content-Type"] = "application/octet-stream"
	if res := h.do("POST", h.envdURL+"/files?path=keep/me.txt", oct, strings.NewReader("kept\n")); res.status != 200 {
		t.Fatalf("write: %s", res)
	}
	// keepMemory false pauses the file system and says so (memory true,
	// the SDK's default: TestMemoryPause).
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{"memory": false}); res.status != 204 || res.header.Get("Airlock-Pause-Kind") != "filesystem" {
		t.Fatalf("pause without memory = %s (Airlock-Pause-Kind %q), want 204 and filesystem", res, res.header.Get("Airlock-Pause-Kind"))
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 409 || !strings.Contains(string(res.body), `"code":409`) {
		t.Errorf("second pause = %s, want 409 with code 409", res)
	}
	var info struct{ State, PauseKind string }
	if res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil); json.Unmarshal(res.body, &info) != nil || info.State != "paused" || info.PauseKind != "filesystem" {
		t.Errorf("info of the paused sandbox = %s, want state paused and pauseKind filesystem", res)
	}
	if res := h.do("GET", h.envdURL+"/health", envdHeaders(s), nil); res.status != 502 {
		t.Errorf("health while paused = %s, want 502", res)
	}
	var rows []struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(h.api("alpha", "GET", "/v2/sandboxes?state=paused", nil).body, &rows)
	if len(rows) != 1 || rows[0].State != "paused" {
		t.Errorf("paused list = %+v", rows)
	}
	res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 60})
	if res.status != 201 {
		t.Fatalf("connect to a paused sandbox = %s, want 201 (resumed)", res)
	}
	var again sbx
	_ = json.Unmarshal(res.body, &again)
	if again.ID != s.ID || again.Token != s.Token {
		t.Errorf("resumed sandbox = %+v, want the same id and token", again)
	}
	if res := h.do("GET", h.envdURL+"/files?path="+url.QueryEscape("keep/me.txt"), envdHeaders(s), nil); res.status != 200 || string(res.body) != "kept\n" {
		t.Errorf("read after resume = %s, want the file kept", res)
	}
	if res := h.api("alpha", "POST", "/v2/sandboxes/"+s.ID+"/connect", map[string]any{}); res.status != 200 {
		t.Errorf("connect to a running sandbox = %s, want 200", res)
	}
}

func TestTimeout(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h := newHarness(t, harnessOptions{clock: clk})
	short := h.create("alpha", map[string]any{"timeout": 10})
	long := h.create("alpha", nil) // the default, 300s
	if res := h.api("alpha", "POST", "/sandboxes/"+long.ID+"/timeout", map[string]any{"timeout": 20}); res.status != 204 {
		t.Fatalf("set timeout: %s", res)
	}
	clk.Advance(15 * time.Second)
	h.srv.Reap(t.Context())
	if res := h.api("alpha", "GET", "/sandboxes/"+short.ID, nil); res.status != 404 {
		t.Errorf("sandbox past its timeout = %s, want 404", res)
	}
	if res := h.api("alpha", "GET", "/sandboxes/"+long.ID, nil); res.status != 200 {
		t.Errorf("sandbox before its timeout = %s, want 200", res)
	}
	if res := h.do("GET", h.envdURL+"/health", envdHeaders(short), nil); res.status != 502 {
		t.Errorf("health of a timed-out sandbox = %s, want 502", res)
	}
	clk.Advance(10 * time.Second)
	h.srv.Reap(t.Context())
	if res := h.api("alpha", "GET", "/sandboxes/"+long.ID, nil); res.status != 404 {
		t.Errorf("sandbox past its shortened timeout = %s, want 404", res)
	}
	var ended int
	for _, r := range h.audit.records(t) {
		if r.Op == "sandbox.end" && r.Outcome == "timeout" {
			ended++
		}
	}
	if ended != 2 {
		t.Errorf("%d sandbox.end timeout records, want 2", ended)
	}
}

// TestEgress runs commands under a template whose policy allows one host
// and binds a credential to it.
func TestEgress(t *testing.T) {
	h := newHarness(t, harnessOptions{trust: true})
	needCurl(t)
	h.putPolicy("alpha", "egress", h.upstream.egressPolicy())
	s := h.create("alpha", map[string]any{"templateID": "egress"})
	port := h.upstream.port
	r := parseRun(t, h.stream(s, "process.Process/Start", bash(
		"curl -sS --max-time 20 http://allowed.test:"+itoa(port)+"/ ; echo; "+
			"curl -sS --max-time 20 -o /dev/null -w 'denied:%{http_code}\\n' http://denied.test:"+itoa(port)+"/ ; "+
			"env | grep -c Zq7CANARY || true"), nil))
	if !strings.Contains(r.stdout, "hello from upstream allowed.test") || !strings.Contains(r.stdout, "denied:403") {
		t.Errorf("egress = %+v, want the allowed host reached and the other refused", r)
	}
	if strings.Contains(r.stdout, canary) || !strings.HasSuffix(r.stdout, "0\n") {
		t.Errorf("the sandbox saw the credential: %q", r.stdout)
	}
	if seen := h.upstream.seen(); len(seen) != 1 || seen[0] != "Bearer "+canary {
		t.Errorf("upstream saw Authorization %q, want the injected credential once", seen)
	}
	var allowed, denied bool
	for _, rec := range h.audit.records(t) {
		if rec.Op == "egress" && rec.Sandbox == s.ID && rec.Tenant == "alpha" {
			allowed = allowed || (rec.Outcome == "allowed" && strings.Contains(rec.Detail, "allowed.test"))
			denied = denied || (rec.Outcome == "denied" && strings.Contains(rec.Detail, "denied.test"))
		}
	}
	if !allowed || !denied {
		t.Errorf("audit lacks the egress decisions:\n%s", h.audit)
	}
	if res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": "egress", "allow_internet_access": false}); res.status != 201 {
		t.Fatalf("create without internet: %s", res)
	} else {
		var off sbx
		_ = json.Unmarshal(res.body, &off)
		t.Cleanup(func() { h.api("alpha", "DELETE", "/sandboxes/"+off.ID, nil) })
		r := parseRun(t, h.stream(off, "process.Process/Start", bash("curl -sS --max-time 5 http://allowed.test:"+itoa(port)+"/ >/dev/null 2>&1 || echo no-route"), nil))
		if r.stdout != "no-route\n" {
			t.Errorf("allow_internet_access false = %+v, want no route", r)
		}
	}
}

// TestAutoPause: a sandbox created with autoPause is paused at its
// timeout, not killed, keeping its files; connect resumes it. With
// autoResume, a data-plane request resumes it and is served; without,
// the request finds it paused (502) and it stays so.
func TestAutoPause(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h := newHarness(t, harnessOptions{clock: clk})
	tests := []struct {
		name       string
		body       map[string]any
		onTimeout  string
		autoResume bool
		viaPort    bool // the waking request is to a port (a preview URL), not envd
	}{
		{"onTimeout pause", map[string]any{"timeout": 10, "autoPause": true}, "pause", false, false},
		{"pause with autoResume", map[string]any{"timeout": 10, "autoPause": true, "autoResume": map[string]any{"enabled": true}}, "pause", true, false},
		{"port request resumes", map[string]any{"timeout": 10, "autoPause": true, "autoResume": map[string]any{"enabled": true}}, "pause", true, true},
		{"filesystem-only pause", map[string]any{"timeout": 10, "autoPause": true, "autoPauseMemory": false}, "pause", false, false},
		{"kill", map[string]any{"timeout": 10, "autoPause": false}, "kill", false, false},
	}
	type info struct {
		State     string `json:"state"`
		PauseKind string `json:"pauseKind"`
		Lifecycle struct {
			OnTimeout  string `json:"onTimeout"`
			AutoResume bool   `json:"autoResume"`
		} `json:"lifecycle"`
	}
	getInfo := func(s sbx) (int, info) {
		res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil)
		var i info
		_ = json.Unmarshal(res.body, &i)
		return res.status, i
	}
	boxes := make([]sbx, len(tests))
	for i, tt := range tests {
		boxes[i] = h.create("alpha", tt.body)
		oct := envdHeaders(boxes[i])
		oct["Content-Type"] = "application/octet-stream"
		if res := h.do("POST", h.envdURL+"/files?path=marker.txt", oct, strings.NewReader(tt.name)); res.status != 200 {
			t.Fatalf("%s: write: %s", tt.name, res)
		}
		if _, got := getInfo(boxes[i]); got.Lifecycle.OnTimeout != tt.onTimeout || got.Lifecycle.AutoResume != tt.autoResume {
			t.Errorf("%s: lifecycle = %+v, want onTimeout %s, autoResume %v", tt.name, got.Lifecycle, tt.onTimeout, tt.autoResume)
		}
		if tt.viaPort {
			// A server the auto-pause freezes and the port request
			// thaws: the same one answers.
			h.streamStarted(boxes[i], "process.Process/Start", bash("exec python3 -m http.server 8000"))
			waitFor(t, "the server to listen", func() bool {
				res := h.do("GET", h.envdURL+"/", map[string]string{"E2b-Sandbox-Id": boxes[i].ID, "E2b-Sandbox-Port": "8000"}, nil)
				return res.status == 200
			})
		}
	}
	clk.Advance(15 * time.Second)
	h.srv.Reap(t.Context())
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := boxes[i]
			status, got := getInfo(s)
			if tt.onTimeout == "kill" {
				if status != 404 {
					t.Errorf("info past the timeout = %d %+v, want 404 (killed)", status, got)
				}
				return
			}
			wantKind := "memory"
			if tt.body["autoPauseMemory"] == false {
				wantKind = "filesystem"
			}
			if status != 200 || got.State != "paused" || got.PauseKind != wantKind {
				t.Fatalf("info past the timeout = %d %+v, want paused, pauseKind %s", status, got, wantKind)
			}
			if tt.viaPort {
				// Base exposes every port publicly: a request to one
				// resumes the sandbox, thawing the server that listens.
				res := h.do("GET", h.envdURL+"/", map[string]string{"E2b-Sandbox-Id": s.ID, "E2b-Sandbox-Port": "8000"}, nil)
				if res.status != 200 || !strings.Contains(string(res.body), "Directory listing") {
					t.Errorf("a port request to an auto-resuming paused sandbox = %s, want the thawed server's answer", res)
				}
				if _, got := getInfo(s); got.State != "running" {
					t.Errorf("state after the port request = %q, want running", got.State)
				}
				return
			}
			res := h.do("GET", h.envdURL+"/files?path=marker.txt", envdHeaders(s), nil)
			if tt.autoResume {
				if res.status != 200 || string(res.body) != tt.name {
					t.Errorf("read of an auto-resuming paused sandbox = %s, want the file", res)
				}
				if _, got := getInfo(s); got.State != "running" {
					t.Errorf("state after the request = %q, want running", got.State)
				}
				return
			}
			if res.status != 502 {
				t.Errorf("read of a paused sandbox without autoResume = %s, want 502", res)
			}
			if _, got := getInfo(s); got.State != "paused" {
				t.Errorf("state after the request = %q, want paused", got.State)
			}
			if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 60}); res.status != 201 {
				t.Fatalf("connect = %s, want 201 (resumed)", res)
			}
			if res := h.do("GET", h.envdURL+"/files?path=marker.txt", envdHeaders(s), nil); res.status != 200 || string(res.body) != tt.name {
				t.Errorf("read after connect = %s, want the file", res)
			}
		})
	}
	// A resumed sandbox pauses again at its new timeout.
	clk.Advance(2 * time.Minute)
	h.srv.Reap(t.Context())
	if _, got := getInfo(boxes[0]); got.State != "paused" {
		t.Errorf("state of a resumed sandbox past its new timeout = %q, want paused", got.State)
	}
	if res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"autoResume": map[string]any{"enabled": true}}); res.status != 400 {
		t.Errorf("autoResume without autoPause = %s, want 400", res)
	}
	if res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"autoPause": true, "autoPauseMemory": false, "autoResume": map[string]any{"enabled": true}}); res.status != 400 {
		t.Errorf("autoResume with a filesystem-only autoPause = %s, want 400", res)
	}
}
