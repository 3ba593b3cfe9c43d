package host

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// TestSweepSandboxEvents: a retention pass deletes the stored events of
// sandboxes outside runs older than their tenant's rule (its events
// duration, or runs when shorter), keeps the rest and every event of a
// tenant whose rule keeps them, and records the deletion. On SQLite and
// PostgreSQL.
func TestSweepSandboxEvents(t *testing.T) {
	onBothStores(t, []string{"acme", "keeper", "runsonly"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		se, ok := st.(store.SandboxEvents)
		if !ok {
			t.Fatalf("%T keeps no sandbox events", st)
		}
		now := time.Now().UTC()
		var es []store.SandboxEvent
		for _, tn := range []string{"acme", "keeper", "runsonly"} {
			for i, age := range []time.Duration{10 * time.Hour, 3 * time.Hour, time.Minute} {
				body := fmt.Appendf(nil, `{"kind":"progress","message":"%s %d"}`, tn, i+1)
				es = append(es, store.SandboxEvent{Tenant: tn, Sandbox: "sb-1", Seq: uint64(i + 1), Time: now.Add(-age), Event: body})
			}
		}
		if err := se.AppendSandboxEvents(ctx, es); err != nil {
			t.Fatal(err)
		}
		rules := RetentionRules{
			Default: Retention{Events: 2 * time.Hour, Runs: 24 * time.Hour},
			Tenants: map[string]Retention{"keeper": {}, "runsonly": {Runs: 5 * time.Hour}},
		}
		sw, err := h.Sweep(ctx, rules, now)
		if err != nil {
			t.Fatal(err)
		}
		if sw.SandboxEvents != 3 {
			t.Errorf("Sweep() = %+v, want 3 sandbox events deleted (acme's 10h and 3h, runsonly's 10h)", sw)
		}
		for tn, want := range map[string][]uint64{"acme": {3}, "keeper": {1, 2, 3}, "runsonly": {2, 3}} {
			got, err := se.SandboxEvents(ctx, tn, "sb-1", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var seqs []uint64
			for _, e := range got {
				seqs = append(seqs, e.Seq)
			}
			if fmt.Sprint(seqs) != fmt.Sprint(want) {
				t.Errorf("%s's events after the sweep = %v, want %v", tn, seqs, want)
			}
		}
		ds, err := st.ListDeletions(ctx, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range ds {
			if d.Kind == store.DeletionRetention && d.Counts["sandbox_events"] == 3 {
				found = true
			}
		}
		if !found {
			t.Errorf("deletions = %+v, want a retention record counting 3 sandbox events", ds)
		}
	})
}
