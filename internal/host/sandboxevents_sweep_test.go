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
		now := time.Now().UTC()
		var es []store.SandboxEvent
		for _, tn := range []string{"acme", "keeper", "runsonly"} {
			for i, age := range []time.Duration{10 * time.Hour, 3 * time.Hour, time.Minute} {
				body := fmt.Appendf(nil, `{"kind":"progress","message":"%s %d"}`, tn, i+1)
				es = append(es, store.SandboxEvent{Tenant: tn, Sandbox: "sb-1", Seq: uint64(i + 1), Time: now.Add(-age), Event: body})
			}
		}
		if err := st.AppendSandboxEvents(ctx, es); err != nil {
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
			got, err := st.SandboxEvents(ctx, tn, "sb-1", 0, 0)
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

// TestStoredSandboxEvents: the native API's events of a sandbox this
// server no longer holds are what the store kept, as an ended log, to
// its tenant only. On SQLite and PostgreSQL.
func TestStoredSandboxEvents(t *testing.T) {
	onBothStores(t, []string{"acme", "other"}, func(t *testing.T, _ *Host, st store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		var es []store.SandboxEvent
		for i := range 3 {
			body := fmt.Appendf(nil, `{"kind":"progress","message":"step %d","pct":%d}`, i+1, 30*(i+1))
			es = append(es, store.SandboxEvent{Tenant: "acme", Sandbox: "sb-gone", Seq: uint64(i + 1), Time: now, Event: body})
		}
		if err := st.AppendSandboxEvents(ctx, es); err != nil {
			t.Fatal(err)
		}
		x := &e2bSandboxes{stored: st}
		l, ok := x.Events(ctx, "acme", "sb-gone")
		if !ok {
			t.Fatal("Events(acme, sb-gone) = false, want its stored log")
		}
		snap := l.After(0, 10)
		var got []string
		for _, e := range snap.Events {
			got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Event.Message))
		}
		if want := "[1:step 1 2:step 2 3:step 3]"; fmt.Sprint(got) != want || !snap.Ended {
			t.Errorf("stored log = %v ended %v, want %s ended", got, snap.Ended, want)
		}
		for _, c := range []struct{ tenant, id string }{{"other", "sb-gone"}, {"acme", "sb-never"}} {
			if _, ok := x.Events(ctx, c.tenant, c.id); ok {
				t.Errorf("Events(%s, %s) = true, want false", c.tenant, c.id)
			}
		}
		if _, ok := (&e2bSandboxes{}).Events(ctx, "acme", "sb-gone"); ok {
			t.Error("Events without a store = true")
		}
	})
}
