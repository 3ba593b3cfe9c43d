package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestServeE2BTenantDeletionMarkers: a tenant's E2B sandboxes, one paused
// with its memory (its processes frozen) and one paused to its files (a
// checkpoint in the home), hold a marker in every place a sandbox puts
// data: its metadata and environment, a command line, a file's name and
// content, an event it reported. DELETE /v1/tenants/{name}?force=true
// through airlock serve destroys both, and once airlock gc has collected
// the checkpoints nothing of the marker is in any file of the home (the
// database, its WAL, the audit logs, the E2B state, blobs; zstd files
// decompressed) and the frozen process is gone; another tenant's paused
// sandbox keeps its own marker (the search sees checkpoints).
func TestServeE2BTenantDeletionMarkers(t *testing.T) {
	home, exe := serveHome(t, "ale2bd-")
	ctx := context.Background()
	const (
		marker = "E2BDEL-MARKER-3b7c"
		keep   = "E2BKEEP-MARKER-8e1d"
		sleep  = "sleep 4811"
	)
	key := func(tenant, scope string, e2bKey bool) string {
		t.Helper()
		args := []string{"keys", "create", "--tenant", tenant, "--name", scope, "--scope", scope}
		if e2bKey {
			args = append(args, "--e2b")
		}
		var out bytes.Buffer
		if code := airlockIn(t, ctx, home, exe, &out, args...); code != 0 {
			t.Fatalf("keys create %s: %d", tenant, code)
		}
		return strings.TrimSpace(out.String())
	}
	for _, tn := range []string{"gone", "keep"} {
		if code := airlockIn(t, ctx, home, exe, io.Discard, "tenants", "create", tn); code != 0 {
			t.Fatalf("tenants create %s: %d", tn, code)
		}
	}
	goneSDK, goneAdmin, keepSDK := key("gone", "sandboxes", true), key("gone", "admin", false), key("keep", "sandboxes", true)

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
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})
	sc := bufio.NewScanner(pr)
	var apiURL, envdURL, base string
	if sc.Scan() {
		if m := regexp.MustCompile(`E2B API on (http://\S+), sandboxes on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			apiURL, envdURL = m[1], m[2]
		}
	}
	if sc.Scan() {
		if m := regexp.MustCompile(`listening on (http://\S+) `).FindStringSubmatch(sc.Text()); m != nil {
			base = m[1]
		}
	}
	if apiURL == "" || base == "" {
		t.Fatalf("airlock serve did not say where it listens: %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	type sbx struct{ ID, Token string }
	create := func(sdkKey, body string) sbx {
		t.Helper()
		req, _ := http.NewRequest("POST", apiURL+"/v2/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-KEY", sdkKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var s struct {
			ID    string `json:"sandboxID"`
			Token string `json:"envdAccessToken"`
		}
		if res.StatusCode != 201 || json.Unmarshal(b, &s) != nil {
			t.Fatalf("create = %d %s", res.StatusCode, b)
		}
		return sbx{s.ID, s.Token}
	}
	// start runs sh -c cmd in s; it returns when the command has ended
	// or when ctx ends.
	start := func(ctx context.Context, s sbx, cmd string) (int, []byte, error) {
		msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", cmd}}, "stdin": false})
		env := append([]byte{0, 0, 0, 0, 0}, msg...)
		binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
		req, _ := http.NewRequestWithContext(ctx, "POST", envdURL+"/process.Process/Start", bytes.NewReader(env))
		req.Header.Set("E2b-Sandbox-Id", s.ID)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", s.Token)
		req.Header.Set("Content-Type", "application/connect+json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, b, err
	}
	run := func(s sbx, cmd string) {
		t.Helper()
		if st, b, err := start(ctx, s, cmd); err != nil || st != 200 || !bytes.Contains(b, []byte(`"exited":true`)) || bytes.Contains(b, []byte(`"exitCode"`)) {
			t.Fatalf("%q = %d %q %v, want it to exit 0", cmd, st, b, err)
		}
	}
	pause := func(sdkKey string, s sbx, memory bool) {
		t.Helper()
		req, _ := http.NewRequest("POST", apiURL+"/sandboxes/"+s.ID+"/pause", strings.NewReader(`{"memory":`+map[bool]string{true: "true", false: "false"}[memory]+`}`))
		req.Header.Set("X-API-KEY", sdkKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		want := map[bool]string{true: "memory", false: "filesystem"}[memory]
		if res.StatusCode != 204 || res.Header.Get("Airlock-Pause-Kind") != want {
			t.Fatalf("pause = %d, kind %q; want 204, %s", res.StatusCode, res.Header.Get("Airlock-Pause-Kind"), want)
		}
	}
	// waitEvents waits until s's log holds n events.
	waitEvents := func(admin string, s sbx, n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			st, b := call(t, "GET", base+"/v1/sandboxes/"+s.ID+"/events", admin, nil)
			var evs struct{ Events []json.RawMessage }
			if st == 200 && json.Unmarshal(b, &evs) == nil && len(evs.Events) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /v1/sandboxes/%s/events = %d %s, want %d events", s.ID, st, b, n)
			}
		}
	}

	// Paused with its memory: a process frozen with the marker in its
	// command line, the marker in the metadata and the environment.
	frozen := create(goneSDK, `{"templateID":"base","metadata":{"note":"`+marker+`-meta"},"envVars":{"MARK":"`+marker+`-env"}}`)
	run(frozen, "echo "+marker+"-content > f-"+marker+".txt && airlock-event log "+marker+"-event")
	waitEvents(goneAdmin, frozen, 1)
	sctxSleep, stopSleep := context.WithCancel(ctx)
	defer stopSleep()
	go func() { _, _, _ = start(sctxSleep, frozen, "exec "+sleep+" # "+marker) }()
	waitUntil(t, sleep+" to run", func() bool { return sandboxtest.HostRuns(sleep) })
	pause(goneSDK, frozen, true)
	// Paused to its files: the marker in a checkpoint of the home.
	files := create(goneSDK, `{"templateID":"base"}`)
	run(files, "echo "+marker+"-content > f-"+marker+".txt && airlock-event progress --pct 50 "+marker+"-event")
	waitEvents(goneAdmin, files, 1)
	pause(goneSDK, files, false)
	// Another tenant's, paused to its files: it stays.
	kept := create(keepSDK, `{"templateID":"base"}`)
	run(kept, "echo "+keep+" > f-"+keep+".txt")
	pause(keepSDK, kept, false)

	for _, m := range []string{marker, keep} {
		if where := homeHolds(t, home, m); len(where) == 0 {
			t.Fatalf("the search finds %s nowhere before the deletion: it proves nothing", m)
		}
	}
	where := homeHolds(t, home, marker)
	for _, want := range []string{"airlock.db", "audit/e2b.jsonl", "(zstd)"} {
		if !strings.Contains(strings.Join(where, "\n"), want) {
			t.Errorf("before the deletion the marker is in %v, want it in %s too (the search would not see it there)", where, want)
		}
	}

	st, b := call(t, "DELETE", base+"/v1/tenants/gone?force=true", goneAdmin, nil)
	var rec struct {
		Kind   string           `json:"kind"`
		Counts map[string]int64 `json:"counts"`
	}
	if st != http.StatusOK || json.Unmarshal(b, &rec) != nil || rec.Kind != "tenant" || rec.Counts["sandboxes_destroyed"] != 2 {
		t.Fatalf("DELETE /v1/tenants/gone?force=true = %d %s; want the record counting 2 sandboxes destroyed", st, b)
	}
	waitUntil(t, "the frozen process to end", func() bool { return !sandboxtest.HostRuns(sleep) })
	stopSleep()

	cancel()
	stopped = true
	if code := <-done; code != 0 {
		t.Errorf("airlock serve exited %d", code)
	}
	// The checkpoints nobody holds are collected once older than the
	// grace: age them as if the deletion had been two hours ago.
	for _, dir := range []string{"chunks", "blobs"} {
		old := time.Now().Add(-2 * time.Hour)
		_ = filepath.WalkDir(filepath.Join(home, dir), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				return os.Chtimes(p, old, old)
			}
			return nil
		})
	}
	var gcOut bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &gcOut, "gc", "--grace", "1h"); code != 0 {
		t.Fatalf("gc: %d\n%s", code, gcOut.String())
	}
	if where := homeHolds(t, home, marker); len(where) > 0 {
		t.Errorf("the deleted tenant's marker is still in the home after the deletion and gc (%s): %v", strings.TrimSpace(gcOut.String()), where)
	}
	if where := homeHolds(t, home, keep); !strings.Contains(strings.Join(where, "\n"), "(zstd)") {
		t.Errorf("another tenant's paused sandbox's checkpoint went: its marker is only in %v", where)
	}
}

// homeHolds lists the files under home whose bytes hold s, and the zstd
// files (checkpoint manifests and chunks) whose content does, marked
// " (zstd)".
func homeHolds(t *testing.T, home, s string) []string {
	t.Helper()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var where []string
	err = filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(home, p)
		if bytes.Contains(b, []byte(s)) {
			where = append(where, rel)
		}
		if bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			if plain, err := dec.DecodeAll(b, nil); err == nil && bytes.Contains(plain, []byte(s)) {
				where = append(where, rel+" (zstd)")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return where
}

// waitUntil waits (up to a minute) until ok says yes.
func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}
