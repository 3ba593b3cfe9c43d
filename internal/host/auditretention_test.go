package host

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// TestAuditRetention: the data policy's audit setting. A tenant whose rule
// sets audit keeps its audit lines that long, counted from when each was
// written, whatever its events and runs settings and its runs' policies
// say (longer than its events here, shorter than its runs); a tenant
// without keeps the events/runs rule; the default's audit governs the
// tenants no rule names. A purged run's lines still go, whatever audit
// says. The store's deletion records expire by the same setting: each
// named tenant's by its own, every other (the retention passes', a deleted
// tenant's) by the default's. The pass counts both and records them. On
// SQLite and PostgreSQL.
func TestAuditRetention(t *testing.T) {
	onBothStores(t, []string{"long", "short", "plain"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		// The pass runs 6 h from now: what the store records now is
		// 6 h old then.
		now := time.Now().UTC().Add(6 * time.Hour)
		rules := RetentionRules{
			Default: Retention{Audit: 5 * time.Hour},
			Tenants: map[string]Retention{
				// Audit outlives events here, and is shorter than runs.
				"long":  {Events: time.Hour, Runs: 48 * time.Hour, Audit: 24 * time.Hour},
				"short": {Audit: 30 * time.Minute},
				"plain": {Events: 2 * time.Hour},
			},
		}
		longRun := endedRun(t, st, "long", "retention: {events: 1h}\n", `{}`)
		purged := endedRun(t, st, "long", "", `{}`)
		plainRun := endedRun(t, st, "plain", "", `{}`)
		a, err := OpenAuditLog(filepath.Join(h.cfg.Home, "audit", "e2b.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		lines := []struct {
			tenant, run, marker string
			age                 time.Duration
			gone                bool
		}{
			{"long", longRun, "long-past-events", 3 * time.Hour, false},
			{"long", "", "long-young", 23 * time.Hour, false},
			{"long", longRun, "long-past-audit", 25 * time.Hour, true},
			{"long", purged, "long-purged", time.Minute, true},
			{"short", "", "short-young", 10 * time.Minute, false},
			{"short", "", "short-old", 40 * time.Minute, true},
			{"plain", plainRun, "plain-young", time.Hour, false},
			{"plain", plainRun, "plain-past-events", 3 * time.Hour, true},
			{"other", "", "other-young", 4 * time.Hour, false},
			{"other", "", "other-old", 6 * time.Hour, true},
		}
		for _, l := range lines {
			b, _ := json.Marshal(map[string]any{"time": now.Add(-l.age), "tenant": l.tenant, "run": l.run, "op": "process.start", "detail": "sh -c MARK-" + l.marker})
			if _, err := a.Write(append(b, '\n')); err != nil {
				t.Fatal(err)
			}
		}
		// Deletion records of each tenant, of a deleted one and of a
		// retention pass, all made now, 6 h before the pass.
		for _, tn := range []string{"long", "short", "plain", "deleted", ""} {
			if _, err := st.RecordDeletion(ctx, store.Deletion{Tenant: tn, Kind: store.DeletionRetention, Target: "t", Actor: "test"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := h.PurgeRun(ctx, purged, "test"); err != nil {
			t.Fatal(err)
		}
		sw, err := h.Sweep(ctx, rules, now)
		if err != nil {
			t.Fatal(err)
		}
		body, err := os.ReadFile(filepath.Join(h.cfg.Home, "audit", "e2b.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if in := bytes.Contains(body, []byte("MARK-"+l.marker+`"`)); in == l.gone {
				t.Errorf("line %s (%s, %s old): in the log = %v, want %v", l.marker, l.tenant, l.age, in, !l.gone)
			}
		}
		// long keeps 24 h, short 30 m, plain forever (no audit: deletion
		// records stay), the rest the default's 5 h. The purge's record
		// is long's.
		want := []string{"long test", "long test", "plain test"}
		list, err := st.ListDeletions(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		var rec *store.Deletion
		for _, d := range list {
			if d.Actor == "retention" {
				rec = &d
				continue
			}
			left = append(left, d.Tenant+" "+d.Actor)
		}
		slices.Sort(left)
		if !slices.Equal(left, want) {
			t.Errorf("deletion records left %q, want %q", left, want)
		}
		// Audit: long-past-audit, short-old, plain-past-events,
		// other-old (the purge took long-purged).
		if sw.Audit != 4 || sw.Deletions != 3 {
			t.Errorf("Sweep() = %+v, want 4 audit lines and 3 deletion records", sw)
		}
		if rec == nil || rec.Counts["deletions"] != 3 || rec.Counts["audit_lines"] != 4 {
			t.Errorf("the pass's record = %+v, want counts deletions 3, audit_lines 4", rec)
		}
	})
}

// TestAuditLogOtherReplicaDeletion: a tenant deleted through another
// replica (its deletion record in the shared store; this home's logs not
// scrubbed by it) loses its lines here at this host's next pass, even
// with no retention set; a line written after the deletion (a tenant made
// again under the name) and another tenant's stay. On SQLite and
// PostgreSQL.
func TestAuditLogOtherReplicaDeletion(t *testing.T) {
	onBothStores(t, []string{"keep"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		a, err := OpenAuditLog(filepath.Join(h.cfg.Home, "audit", "e2b.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		write := func(tenant, marker string, at time.Time) {
			t.Helper()
			b, _ := json.Marshal(map[string]any{"time": at, "tenant": tenant, "op": "process.start", "detail": "sh -c " + marker})
			if _, err := a.Write(append(b, '\n')); err != nil {
				t.Fatal(err)
			}
		}
		before := time.Now().Add(-time.Minute)
		write("elsewhere", "MARK-before", before)
		write("keep", "KEEP-other", before)
		// What another replica's DeleteTenant records.
		if _, err := st.RecordDeletion(ctx, store.Deletion{Tenant: "elsewhere", Kind: store.DeletionTenant, Target: "elsewhere", Actor: "cli"}); err != nil {
			t.Fatal(err)
		}
		write("elsewhere", "KEEP-after", time.Now().Add(time.Minute))
		sw, err := h.Sweep(ctx, RetentionRules{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		body, err := os.ReadFile(filepath.Join(h.cfg.Home, "audit", "e2b.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for marker, want := range map[string]bool{"MARK-before": false, "KEEP-other": true, "KEEP-after": true} {
			if got := bytes.Contains(body, []byte(marker)); got != want {
				t.Errorf("%s in the log = %v, want %v", marker, got, want)
			}
		}
		if sw.Audit != 1 {
			t.Errorf("Sweep() = %+v, want 1 audit line removed", sw)
		}
	})
}
