package host

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// TestAuditLogConcurrentRewrite: writers (each its own AuditLog, as each
// process and each egress proxy has) append while rewrites remove one
// tenant's lines: every other line is there once, whole, in order of its
// writer, none of the removed tenant's.
func TestAuditLogConcurrentRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", "e2b.jsonl")
	const writers, lines = 4, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := OpenAuditLog(path)
			if err != nil {
				t.Error(err)
				return
			}
			defer a.Close()
			for i := range lines {
				tenant := []string{"keep", "gone"}[i%2]
				// A long detail: a line larger than one small write.
				b := fmt.Sprintf(`{"time":"2026-12-01T00:00:00Z","tenant":%q,"detail":"w%d-%d %s"}`+"\n", tenant, w, i, strings.Repeat("x", 5000))
				if _, err := a.Write([]byte(b)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	rewrites := 0
	var rw sync.WaitGroup
	rw.Add(1)
	go func() {
		defer rw.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := rewriteAudit(path, func(e auditEntry) bool { return e.Tenant == "gone" }); err != nil {
				t.Error(err)
				return
			}
			rewrites++
		}
	}()
	wg.Wait()
	close(stop)
	rw.Wait()
	if _, err := rewriteAudit(path, func(e auditEntry) bool { return e.Tenant == "gone" }); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	next := make([]int, writers) // each writer's next kept line
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var e struct{ Tenant, Detail string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d is not whole: %v", n+1, err)
		}
		var w, i int
		if _, err := fmt.Sscanf(e.Detail, "w%d-%d", &w, &i); err != nil {
			t.Fatal(err)
		}
		if e.Tenant != "keep" || i != next[w] {
			t.Fatalf("line %d: tenant %s, writer %d line %d; want tenant keep, line %d", n+1, e.Tenant, w, i, next[w])
		}
		next[w] += 2
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != writers*lines/2 {
		t.Errorf("%d lines kept, want %d", n, writers*lines/2)
	}
	t.Logf("%d rewrites during the appends", rewrites)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", fi.Mode(), err)
	}
}

// TestAuditLogDeletion: deleting a tenant, purging a run and a retention
// pass remove their lines from every audit log of the home (E2B, MCP,
// egress, an MCP session's own), and a marker in the removed lines is
// found nowhere in the home afterwards; other lines stay. On SQLite and
// PostgreSQL.
func TestAuditLogDeletion(t *testing.T) {
	onBothStores(t, []string{"acme", "gone", "short"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		run := func(tenant, doc string) string {
			t.Helper()
			return endedRun(t, st, tenant, doc, `{}`)
		}
		purged, kept, goneRun := run("acme", ""), run("acme", ""), run("gone", "")
		policyShort := run("acme", "retention: {events: 1h}\n")
		logs := map[string]*AuditLog{}
		for _, name := range []string{"e2b.jsonl", "mcp.jsonl", "egress.jsonl", "mcp-20261201T000000-1.jsonl"} {
			a, err := OpenAuditLog(filepath.Join(h.cfg.Home, "audit", name))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			logs[name] = a
		}
		type line struct {
			log, tenant, run, marker string
			age                      time.Duration
		}
		lines := []line{
			{"e2b.jsonl", "gone", goneRun, "MARK-tenant-e2b", 0},
			{"mcp.jsonl", "gone", "", "MARK-tenant-mcp", 0},
			{"mcp-20261201T000000-1.jsonl", "gone", "", "MARK-tenant-mcpsession", 0},
			{"egress.jsonl", "gone", goneRun, "MARK-tenant-egress", 0},
			{"e2b.jsonl", "acme", purged, "MARK-run-e2b", 0},
			{"egress.jsonl", "acme", purged, "MARK-run-egress", 0},
			{"e2b.jsonl", "short", "", "MARK-old-short", 3 * time.Hour},
			{"egress.jsonl", "acme", policyShort, "MARK-old-policy", 3 * time.Hour},
			// Kept: another tenant, another run, young enough, a
			// sandbox of no run (its own run name).
			{"e2b.jsonl", "acme", kept, "KEEP-run", 0},
			{"egress.jsonl", "acme", "run-0123abcd", "KEEP-norun", 3 * time.Hour},
			{"mcp.jsonl", "acme", "", "KEEP-acme", 3 * time.Hour},
			{"e2b.jsonl", "short", "", "KEEP-young", 30 * time.Minute},
			{"egress.jsonl", "acme", kept, "KEEP-old-run", 3 * time.Hour},
		}
		for _, l := range lines {
			b, _ := json.Marshal(map[string]any{"time": now.Add(-l.age), "tenant": l.tenant, "run": l.run, "op": "process.start", "detail": "sh -c " + l.marker})
			if _, err := logs[l.log].Write(append(b, '\n')); err != nil {
				t.Fatal(err)
			}
		}
		found := func(marker string) []string {
			t.Helper()
			var in []string
			err := filepath.WalkDir(h.cfg.Home, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if bytes.Contains(b, []byte(marker)) {
					in = append(in, p)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return in
		}
		check := func(step string, goneNow []string) {
			t.Helper()
			for _, l := range lines {
				in := found(l.marker)
				switch {
				case strings.HasPrefix(l.marker, "KEEP") && len(in) != 1:
					t.Errorf("after %s: %s in %v, want in %s", step, l.marker, in, l.log)
				case slices.Contains(goneNow, l.marker) && len(in) != 0:
					t.Errorf("after %s: %s still in %v", step, l.marker, in)
				}
			}
		}
		if _, err := h.DeleteTenant(ctx, "gone", "test", false); err != nil {
			t.Fatal(err)
		}
		check("deleting tenant gone", []string{"MARK-tenant-e2b", "MARK-tenant-mcp", "MARK-tenant-mcpsession", "MARK-tenant-egress"})
		if _, err := h.PurgeRun(ctx, purged, "test"); err != nil {
			t.Fatal(err)
		}
		check("purging a run", []string{"MARK-tenant-e2b", "MARK-run-e2b", "MARK-run-egress"})
		// The tenant short keeps 2h; acme forever, but a run's policy
		// keeps its events 1h.
		sw, err := h.Sweep(ctx, RetentionRules{Tenants: map[string]Retention{"short": {Events: 2 * time.Hour, Runs: 4 * time.Hour}}}, now)
		if err != nil {
			t.Fatal(err)
		}
		check("a retention pass", []string{"MARK-old-short", "MARK-old-policy"})
		if sw.Audit != 2 {
			t.Errorf("Sweep() = %+v, want 2 audit lines removed", sw)
		}
		// The writers append to the rewritten files.
		if _, err := logs["e2b.jsonl"].Write([]byte(`{"tenant":"acme","detail":"KEEP-after"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		if in := found("KEEP-after"); len(in) != 1 || filepath.Base(in[0]) != "e2b.jsonl" {
			t.Errorf("a line written after the rewrite is in %v, want e2b.jsonl", in)
		}
	})
}

// TestAuditLogRewriteUnlocked: a rewrite decides what goes without the
// log's lock (its drop may ask the store), so a writer appends while drop
// is held; the line it wrote then is kept, and one of a dropped tenant
// appended meanwhile goes too.
func TestAuditLogRewriteUnlocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", "e2b.jsonl")
	a, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	line := func(tenant, detail string) []byte {
		return []byte(fmt.Sprintf(`{"time":"2026-12-01T00:00:00Z","tenant":%q,"detail":%q}`+"\n", tenant, detail))
	}
	for _, l := range [][]byte{line("gone", "first"), line("keep", "second")} {
		if _, err := a.Write(l); err != nil {
			t.Fatal(err)
		}
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	var removed int
	go func() {
		n, err := rewriteAudit(path, func(e auditEntry) bool {
			once.Do(func() {
				close(held)
				<-release
			})
			return e.Tenant == "gone"
		})
		removed = n
		done <- err
	}()
	<-held
	// With the rewrite's drop held, a writer is not: these return (a
	// lock held through drop would hang here).
	for _, l := range [][]byte{line("keep", "during"), line("gone", "during")} {
		if _, err := a.Write(l); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := string(line("keep", "second")) + string(line("keep", "during"))
	if string(b) != want || removed != 2 {
		t.Errorf("after the rewrite (%d removed):\n%s\nwant (2 removed):\n%s", removed, b, want)
	}
}
