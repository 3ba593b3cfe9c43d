package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeE2B: airlock serve with an e2b section serves the E2B control
// plane and data plane on their own listeners, for an e2b_ key of a
// tenant, and records every operation in $AIRLOCK_HOME/audit/e2b.jsonl;
// /metrics counts the live sandbox as the E2B API's while it lives.
func TestServeE2B(t *testing.T) {
	home, exe := serveHome(t, "ale2b-")
	ctx := context.Background()
	if code := airlockIn(t, ctx, home, exe, io.Discard, "tenants", "create", "acme"); code != 0 {
		t.Fatalf("tenants create: %d", code)
	}
	var keyOut bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &keyOut, "keys", "create", "--tenant", "acme", "--name", "sdk", "--scope", "sandboxes", "--e2b"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	key := strings.TrimSpace(keyOut.String())
	if !regexp.MustCompile(`^e2b_[0-9a-f]+$`).MatchString(key) {
		t.Fatalf("key %q is not e2b_<hex>", key)
	}
	var adminOut bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &adminOut, "keys", "create", "--tenant", "acme", "--name", "ops", "--scope", "admin"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	admin := strings.TrimSpace(adminOut.String())
	conf := filepath.Join(home, "serve.yaml")
	if err := os.WriteFile(conf, []byte("e2b:\n  api_addr: 127.0.0.1:0\n  sandbox_addr: 127.0.0.1:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	sctx, cancel := context.WithCancel(context.Background())
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
	if !sc.Scan() {
		t.Fatalf("airlock serve exited before listening")
	}
	m := regexp.MustCompile(`E2B API on (http://\S+), sandboxes on (http://\S+)`).FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("airlock serve said %q", sc.Text())
	}
	if !sc.Scan() {
		t.Fatalf("airlock serve said nothing after the E2B API's addresses")
	}
	listening := regexp.MustCompile(`listening on (http://\S+) `).FindStringSubmatch(sc.Text())
	if listening == nil {
		t.Fatalf("airlock serve said %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	apiURL, envdURL, base := m[1], m[2], listening[1]
	// sandboxes is what /metrics says of the live sandboxes of origin.
	sandboxes := func(origin string) string {
		t.Helper()
		st, b := call(t, "GET", base+"/metrics", admin, nil)
		if st != http.StatusOK {
			t.Fatalf("/metrics = %d", st)
		}
		v := regexp.MustCompile(`(?m)^airlock_sandboxes\{origin="` + origin + `"\} (\S+)$`).FindSubmatch(b)
		if v == nil {
			t.Fatalf("/metrics lacks airlock_sandboxes{origin=%q}", origin)
		}
		return string(v[1])
	}
	if n := sandboxes("e2b"); n != "0" {
		t.Errorf("airlock_sandboxes{origin=\"e2b\"} = %s before any sandbox, want 0", n)
	}

	do := func(method, url string, hd map[string]string, body []byte) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		for k, v := range hd {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, b
	}
	st, b := do("POST", apiURL+"/v2/sandboxes", map[string]string{"X-API-KEY": key, "Content-Type": "application/json"}, []byte(`{"templateID":"base"}`))
	var sb struct {
		ID    string `json:"sandboxID"`
		Token string `json:"envdAccessToken"`
	}
	if st != 201 || json.Unmarshal(b, &sb) != nil {
		t.Fatalf("create = %d %s", st, b)
	}
	for origin, want := range map[string]string{"e2b": "1", "run": "0"} {
		if n := sandboxes(origin); n != want {
			t.Errorf("airlock_sandboxes{origin=%q} = %s while the E2B sandbox lives, want %s", origin, n, want)
		}
	}
	// The native API lists the sandbox with its exposed ports (base's:
	// every port, public), reached at the data plane's address.
	st, b = call(t, "GET", base+"/v1/sandboxes", admin, nil)
	var listed struct {
		Sandboxes []struct {
			ID    string `json:"id"`
			RunID string `json:"run_id"`
			State string `json:"state"`
			Ports []struct {
				Ports  string `json:"ports"`
				Access string `json:"access"`
				URL    string `json:"url"`
			} `json:"ports"`
		} `json:"sandboxes"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &listed) != nil || len(listed.Sandboxes) != 1 {
		t.Fatalf("GET /v1/sandboxes = %d %s, want the one sandbox", st, b)
	}
	if l := listed.Sandboxes[0]; l.ID != sb.ID || l.RunID == "" || l.State != "running" || len(l.Ports) != 1 ||
		l.Ports[0].Ports != "1-65535" || l.Ports[0].Access != "public" || l.Ports[0].URL != envdURL {
		t.Errorf("GET /v1/sandboxes = %s, want %s running, ports 1-65535 public at %s", b, sb.ID, envdURL)
	}
	msg := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","airlock-event progress --pct 40 x && echo from-e2b"]},"stdin":false}`)
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
	st, b = do("POST", envdURL+"/process.Process/Start", map[string]string{
		"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "49983",
		"X-Access-Token": sb.Token, "Content-Type": "application/connect+json",
	}, env)
	// "from-e2b\n" in base64.
	if st != 200 || !bytes.Contains(b, []byte(`"stdout":"ZnJvbS1lMmIK"`)) || !bytes.Contains(b, []byte(`"exited":true`)) {
		t.Fatalf("Start = %d %q", st, b)
	}
	// What the command reported is the native API's, by the E2B sandbox's
	// id, for the tenant's keys only (read from the sandbox as it comes:
	// asked again until it is there).
	var evs struct {
		Events []struct {
			Seq   uint64 `json:"seq"`
			Event struct {
				Source, Sandbox, Kind, Message string
				Pct                            float64
			} `json:"event"`
		} `json:"events"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, b = call(t, "GET", base+"/v1/sandboxes/"+sb.ID+"/events", admin, nil)
		if err := json.Unmarshal(b, &evs); st != 200 || err != nil {
			t.Fatalf("GET /v1/sandboxes/{id}/events = %d %s (%v)", st, b, err)
		}
		if len(evs.Events) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/sandboxes/{id}/events = %s, want the progress event", b)
		}
	}
	if len(evs.Events) != 1 {
		t.Fatalf("GET /v1/sandboxes/{id}/events = %s, want one event", b)
	}
	if e := evs.Events[0]; e.Seq != 1 || e.Event.Source != "sandbox" || e.Event.Sandbox != sb.ID || e.Event.Kind != "progress" || e.Event.Pct != 40 || e.Event.Message != "x" {
		t.Errorf("event = %+v, want progress 40%% x from sandbox %s", e, sb.ID)
	}
	if code := airlockIn(t, ctx, home, exe, io.Discard, "tenants", "create", "other"); code != 0 {
		t.Fatalf("tenants create: %d", code)
	}
	var otherOut bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &otherOut, "keys", "create", "--tenant", "other", "--name", "ops", "--scope", "admin"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	if st, b := call(t, "GET", base+"/v1/sandboxes/"+sb.ID+"/events", strings.TrimSpace(otherOut.String()), nil); st != http.StatusNotFound {
		t.Errorf("another tenant's GET /v1/sandboxes/{id}/events = %d %s, want 404", st, b)
	}
	if st, b := do("DELETE", apiURL+"/sandboxes/"+sb.ID, map[string]string{"X-API-KEY": key}, nil); st != 204 {
		t.Fatalf("kill = %d %s", st, b)
	}
	if n := sandboxes("e2b"); n != "0" {
		t.Errorf("airlock_sandboxes{origin=\"e2b\"} = %s after the kill, want 0", n)
	}
	if st, b := call(t, "GET", base+"/v1/sandboxes/"+sb.ID, admin, nil); st != http.StatusNotFound {
		t.Errorf("GET /v1/sandboxes/{id} after the kill = %d %s, want 404", st, b)
	}
	// Its events outlive it: what the store kept, as an ended log, to
	// the tenant's keys only.
	var ended struct {
		Events []struct {
			Seq uint64 `json:"seq"`
		} `json:"events"`
		Ended bool `json:"ended"`
	}
	if st, b := call(t, "GET", base+"/v1/sandboxes/"+sb.ID+"/events", admin, nil); st != 200 || json.Unmarshal(b, &ended) != nil || len(ended.Events) != 1 || ended.Events[0].Seq != 1 || !ended.Ended {
		t.Errorf("GET /v1/sandboxes/{id}/events after the kill = %d %s, want its one stored event, ended", st, b)
	}
	if st, b := call(t, "GET", base+"/v1/sandboxes/"+sb.ID+"/events", strings.TrimSpace(otherOut.String()), nil); st != http.StatusNotFound {
		t.Errorf("another tenant's GET /v1/sandboxes/{id}/events after the kill = %d %s, want 404", st, b)
	}
	audit, err := os.ReadFile(filepath.Join(home, "audit", "e2b.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{`"op":"sandbox.create"`, `"op":"process.start"`, `"op":"process.end"`, `"op":"sandbox.kill"`} {
		if !bytes.Contains(audit, []byte(op)) || !bytes.Contains(audit, []byte(`"tenant":"acme"`)) {
			t.Errorf("audit log lacks %s of tenant acme:\n%s", op, audit)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("airlock serve exited %d", code)
	}
	done <- 0
}
