package cli_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/store"
)

// keyProbe is one request made with a tenant's key while it was deleted.
type keyProbe struct {
	status int
	body   string
	// before says the answer came before the deletion's response did.
	before bool
}

// probeKey asks GET base/v1/runs with key until stop is closed (and once
// more after), and returns what each answer was; returned is closed (by
// the caller) when the deletion has answered.
func probeKey(base, key string, stop, returned <-chan struct{}) []keyProbe {
	var out []keyProbe
	for last := false; ; {
		select {
		case <-stop:
			last = true
		default:
		}
		done := false
		select {
		case <-returned:
			done = true
		default:
		}
		req, _ := http.NewRequest("GET", base+"/v1/runs", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			out = append(out, keyProbe{status: resp.StatusCode, body: string(b), before: !done})
		}
		if last {
			return out
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeReplicasForceDeleteTenant: DELETE /v1/tenants/acme?force=true
// asked of server B, while server A drives a run of acme in a sandbox
// (both on one PostgreSQL): the tenant's key is refused at once on both
// servers (401 saying the tenant is being deleted, and a plain 401 once it
// is gone; never a 200 after the first refusal), A's driver sees the
// cancellation through the store and destroys its sandbox (the command
// in it ends), and nothing of the run is left in the database, where the
// deletion's record names the cancelled run.
func TestServeReplicasForceDeleteTenant(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	homeA, exe := serveHome(t, "alh-")
	homeB := moreHome(t)
	key := pgKey(t, homeA, exe, url)
	st := pgStore(t, url)
	ctx := context.Background()
	var out bytes.Buffer
	if code := airlockIn(t, ctx, homeA, exe, &out, "--store", url, "keys", "create", "--tenant", "acme", "--name", "admin", "--scope", "admin"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	admin := strings.TrimSpace(out.String())

	a := startServeProc(t, homeA, exe, url, 1) // drives
	b := startServeProc(t, homeB, exe, url, 0) // serves the API only
	const marker = "MARKER-f0rce-7e1"
	// A sleep whose command line this test can find: the sandbox's.
	const sleep = "sleep 3717"
	script := "turns:\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"echo " + marker + " > m.txt; " + sleep + "\"}\n" +
		"  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	run := createRun(t, a.url, key, map[string]any{"task": "task " + marker, "script": script})
	waitEvent(t, st, run.ID, event.TypeToolStarted)
	waitProc(t, sleep, true)
	r, err := st.GetRun(ctx, run.ID)
	if err != nil || !strings.HasPrefix(r.LeaseOwner, a.host()+":") {
		t.Fatalf("GetRun() = lease %q, %v; want A (%s) driving", r.LeaseOwner, err, a.host())
	}
	if s, body := call(t, "GET", b.url+"/v1/runs", key, nil); s != http.StatusOK {
		t.Fatalf("GET /v1/runs before = %d %s", s, body)
	}

	// Without force: refused, nothing changes.
	if s, body := call(t, "DELETE", b.url+"/v1/tenants/acme", admin, nil); s != http.StatusConflict || !strings.Contains(string(body), "force=true") {
		t.Fatalf("DELETE without force = %d %s; want 409 naming force=true", s, body)
	}

	stop, returned := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	probes := make([][]keyProbe, 2)
	for i, base := range []string{a.url, b.url} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i] = probeKey(base, key, stop, returned)
		}()
	}
	s, body := call(t, "DELETE", b.url+"/v1/tenants/acme?force=true", admin, nil)
	close(returned)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	var rec struct {
		Kind   string           `json:"kind"`
		Target string           `json:"target"`
		Counts map[string]int64 `json:"counts"`
	}
	if s != http.StatusOK || json.Unmarshal(body, &rec) != nil || rec.Kind != "tenant" || rec.Counts["runs_cancelled"] != 1 || rec.Counts["runs"] != 1 {
		t.Fatalf("DELETE ?force=true = %d %s; want 200, the record counting 1 run cancelled and deleted", s, body)
	}

	for i, ps := range probes {
		refused, during := false, 0
		for _, p := range ps {
			switch {
			case p.status == http.StatusOK && refused:
				t.Errorf("server %d: a 200 after a 401: %+v", i, ps)
			case p.status == http.StatusUnauthorized:
				refused = true
				if p.before && strings.Contains(p.body, "tenant is being deleted") {
					during++
				}
			case p.status != http.StatusOK:
				t.Errorf("server %d: a probe got %d %s", i, p.status, p.body)
			}
		}
		if last := ps[len(ps)-1]; last.status != http.StatusUnauthorized || last.before {
			t.Errorf("server %d: the last probe (after the deletion) = %+v; want 401", i, last)
		}
		if during == 0 {
			t.Errorf("server %d: no 401 saying the tenant is being deleted while it was: %+v", i, ps)
		}
	}
	for _, base := range []string{a.url, b.url} {
		if s, body := call(t, "GET", base+"/v1/runs", key, nil); s != http.StatusUnauthorized || strings.Contains(string(body), "being deleted") {
			t.Errorf("GET /v1/runs after = %d %s; want a plain 401", s, body)
		}
	}

	// A's driver saw the cancel and destroyed its sandbox.
	waitProc(t, sleep, false)
	if _, err := st.GetRun(ctx, run.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRun(deleted) = %v, want not found", err)
	}
	if _, err := st.GetTenant(ctx, "acme"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetTenant(acme) = %v, want not found", err)
	}
	dels, err := st.ListDeletions(ctx, "acme", 0)
	if err != nil || len(dels) != 1 || dels[0].Counts["runs_cancelled"] != 1 {
		t.Errorf("ListDeletions(acme) = %+v, %v", dels, err)
	}
	// A's driver may still write after the deletion: its writes fail
	// (no run). Give it its poll, then search every table.
	time.Sleep(500 * time.Millisecond)
	if where := searchDatabase(t, url, marker); len(where) > 0 {
		t.Errorf("the deleted run's marker is still in the database: %v", where)
	}
	// Both servers still serve.
	for _, p := range []*serveProc{a, b} {
		if code := stopProc(t, p); code != 0 {
			t.Errorf("server exited %d:\n%s", code, p.log.String())
		}
	}
}

// waitProc waits (up to a minute) until a process whose command line is
// cmdline exists (want) or none does.
func waitProc(t *testing.T, cmdline string, want bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if found := sandboxtest.HostRuns(cmdline); found == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %q running = %v for a minute", cmdline, !want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// searchDatabase returns the tables of the database at url that hold s in
// any column, as text or as bytes.
func searchDatabase(t *testing.T, url, s string) []string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var where []string
	for _, tb := range tables {
		var n int
		q := `SELECT count(*) FROM ` + pgx.Identifier{tb}.Sanitize() + ` x WHERE x::text LIKE '%' || $1 || '%' OR x::text LIKE '%' || $2 || '%'`
		if err := c.QueryRow(ctx, q, s, hex.EncodeToString([]byte(s))).Scan(&n); err != nil {
			t.Fatalf("search %s: %v", tb, err)
		}
		if n > 0 {
			where = append(where, tb)
		}
	}
	return where
}
