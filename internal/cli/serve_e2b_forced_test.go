package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestServeReplicasE2BForcedEnd: a forced end decided away from the
// replica that holds an E2B sandbox reaches the sandbox at once, not at
// that replica's next meter tick (10 minutes here, so the tick cannot be
// what ends it). Two replicas A and B on one PostgreSQL; each case makes a
// sandbox through A with a process of a unique command line in it, then:
//   - tenant deleted: B's native API deletes the tenant with force
//     (the sandbox running, and one paused, frozen, whose processes wait);
//   - cancelled: `airlock runs cancel` of the sandbox's record, from the
//     command line (its own connection to the store);
//   - credits spent: a debit from another process spends the metered
//     tenant's balance.
//
// In each, the sandbox's processes vanish from this machine and its envd
// refuses the token (through A, and through B), waited for with a
// generous deadline, well short of the tick.
func TestServeReplicasE2BForcedEnd(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "ale2f-")
	homeB := moreHome(t)
	st := pgStore(t, url)
	conf := strings.Replace(e2bReplicaConf(t), "meter_interval: 1s", "meter_interval: 10m", 1)
	a := startServeConf(t, homeA, exe, url, 0, conf)
	b := startServeConf(t, homeB, exe, url, 0, conf)
	if a.e2bAPI == "" || b.e2bAPI == "" {
		t.Fatalf("no E2B listeners: A %q, B %q", a.e2bAPI, b.e2bAPI)
	}
	ctx := context.Background()
	mark := 86100 // each sandbox's sleep, unique on this machine
	// start makes a sandbox of client c through A with a process whose
	// command line is unique, and returns it and that command line.
	start := func(c e2bClient) (e2bSandbox, string) {
		t.Helper()
		code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base", "timeout": 3600})
		var sb e2bSandbox
		if code != 201 || json.Unmarshal(body, &sb) != nil {
			t.Fatalf("create through A = %d %s", code, body)
		}
		mark++
		arg := strconv.Itoa(mark) + ".5"
		if code, _ := c.run(a.e2bSandbox, sb, "sleep "+arg+" </dev/null >/dev/null 2>&1 &"); code != 200 {
			t.Fatalf("start a sleep through A = %d", code)
		}
		if !sleeping(t, arg) {
			t.Fatalf("no process 'sleep %s' on this machine after it was started", arg)
		}
		return sb, arg
	}
	// gone waits until the sandboxes' processes are gone and their envd
	// refuses the token, through both replicas.
	gone := func(c e2bClient, sbs []e2bSandbox, args []string, what string) {
		t.Helper()
		began := time.Now()
		deadline := began.Add(2 * time.Minute) // the tick is 10 minutes away
		for i, sb := range sbs {
			for sleeping(t, args[i]) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: sandbox %s's process still runs %s after", what, sb.ID, time.Since(began))
				}
				time.Sleep(50 * time.Millisecond)
			}
			for _, base := range []string{a.e2bSandbox, b.e2bSandbox} {
				for {
					code, _ := c.run(base, sb, "echo still")
					if code == 502 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: a command in sandbox %s through %s = %d %s after, want 502", what, sb.ID, base, code, time.Since(began))
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
		t.Logf("%s: %d sandboxes gone %.2f s after", what, len(sbs), time.Since(began).Seconds())
	}

	t.Run("tenant deleted", func(t *testing.T) {
		c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "gone")}
		var admin bytes.Buffer
		if code := airlockIn(t, ctx, homeA, exe, &admin, "--store", url, "keys", "create", "--tenant", "gone", "--name", "admin", "--scope", "admin"); code != 0 {
			t.Fatalf("keys create: %d", code)
		}
		running, arg1 := start(c)
		paused, arg2 := start(c)
		if code, body := c.api("POST", a.e2bAPI, "/sandboxes/"+paused.ID+"/pause", nil); code != 204 {
			t.Fatalf("pause through A = %d %s", code, body)
		}
		if !sleeping(t, arg2) {
			t.Fatal("the paused sandbox's process is gone: it was not frozen, the case tests nothing")
		}
		code, body := call(t, "DELETE", b.url+"/v1/tenants/gone?force=true", strings.TrimSpace(admin.String()), nil)
		if code != 200 {
			t.Fatalf("DELETE /v1/tenants/gone?force=true through B = %d %s", code, body)
		}
		gone(c, []e2bSandbox{running, paused}, []string{arg1, arg2}, "tenant deleted through B")
	})

	t.Run("cancelled", func(t *testing.T) {
		c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "stop")}
		sb, arg := start(c)
		rec := sandboxRecord(t, st, sb.ID)
		if code := airlockIn(t, ctx, homeB, exe, io.Discard, "--store", url, "runs", "cancel", rec.ID, "--reason", "admin kill"); code != 0 {
			t.Fatalf("runs cancel %s = %d", rec.ID, code)
		}
		gone(c, []e2bSandbox{sb}, []string{arg}, "record cancelled from the command line")
		if r, err := st.GetRun(ctx, rec.ID); err != nil || r.Status != event.StatusCancelled {
			t.Errorf("the record after = %+v, %v; want cancelled", r.Status, err)
		}
	})

	t.Run("credits spent", func(t *testing.T) {
		c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "spent")}
		if code := airlockIn(t, ctx, homeA, exe, io.Discard, "--store", url, "credits", "grant", "spent", "1000"); code != 0 {
			t.Fatalf("credits grant: %d", code)
		}
		sb, arg := start(c)
		rec := sandboxRecord(t, st, sb.ID)
		bal, err := st.Balance(ctx, "spent")
		if err != nil || bal <= 0 {
			t.Fatalf("Balance(spent) = %d, %v; want some left", bal, err)
		}
		if _, err := st.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "spent", Kind: store.LedgerDebit, Amount: bal, RunID: rec.ID, Seq: 1, Note: "spent elsewhere"}); err != nil {
			t.Fatal(err)
		}
		gone(c, []e2bSandbox{sb}, []string{arg}, "credits spent by another process")
		// The sandbox is forgotten and destroyed before its record is
		// closed (a request meanwhile finds no sandbox): the record
		// follows within moments.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			r, err := st.GetRun(ctx, rec.ID)
			if err == nil && r.Status == event.StatusFailed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the record a minute after = %+v, %v; want failed (credits)", r.Status, err)
			}
		}
	})
}

// sleeping reports whether a process `sleep arg` runs on this machine.
func sleeping(t *testing.T, arg string) bool {
	t.Helper()
	want := []byte("sleep\x00" + arg + "\x00")
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && bytes.HasSuffix(b, want) && (len(b) == len(want) || b[len(b)-len(want)-1] == '/' || b[len(b)-len(want)-1] == 0) {
			return true
		}
	}
	return false
}
