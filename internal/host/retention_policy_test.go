package host

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// TestSweepPolicyRetention: a retention pass applies each run's policy's
// retention section together with its tenant's rule, the stricter of
// each field: a policy shortens what its runs keep (payloads tombstoned,
// the run purged) where the tenant's rule keeps them longer or forever,
// and cannot lengthen a tenant's shorter rule. On SQLite and PostgreSQL.
func TestSweepPolicyRetention(t *testing.T) {
	onBothStores(t, []string{"acme", "strict"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		// Each run ended now; the pass looks 3h ahead.
		run := func(n int, tenant, doc string) string {
			t.Helper()
			return endedRun(t, st, tenant, doc, `{"marker":"run `+string(rune('0'+n))+`"}`)
		}
		shortEvents := run(1, "acme", "retention: {events: 1h}\n")
		shortRuns := run(2, "acme", "retention: {events: 1h, runs: 2h}\n")
		none := run(3, "acme", "budgets: {max_steps: 3}\n")
		longer := run(4, "strict", "retention: {events: 1000h}\n")
		noPolicy := run(5, "acme", "")
		rules := RetentionRules{
			Default: Retention{},
			Tenants: map[string]Retention{"strict": {Events: time.Hour}},
		}
		sw, err := h.Sweep(ctx, rules, time.Now().Add(3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if sw.Runs != 2 || sw.Purged != 1 {
			t.Errorf("Sweep() = %+v, want 2 runs tombstoned (policy 1h; tenant 1h over policy 1000h), 1 purged", sw)
		}
		tombstoned := func(id string) bool {
			t.Helper()
			evs, err := st.Events(ctx, id, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				if e.Type == event.TypeRetry {
					_, ok := event.ParseTombstone(e.Payload)
					return ok
				}
			}
			t.Fatalf("run %s has no retry event", id)
			return false
		}
		for id, want := range map[string]bool{shortEvents: true, longer: true, none: false, noPolicy: false} {
			if got := tombstoned(id); got != want {
				t.Errorf("run %s tombstoned = %v, want %v", id, got, want)
			}
		}
		if _, err := st.GetRun(ctx, shortRuns); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetRun(policy runs: 2h, 3h after) = %v, want not found", err)
		}
	})
}

// endedRun stores a cancelled run of tenant under the policy doc (none
// when empty), with one event whose payload is payload; it returns its id.
func endedRun(t *testing.T, st store.Store, tenant, doc, payload string) string {
	t.Helper()
	ctx := context.Background()
	r := store.Run{ID: event.NewRunID(time.Now()), Tenant: tenant, Task: "task", Model: "script:x", Status: event.StatusQueued}
	if doc != "" {
		d, err := policy.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		r.Policy, r.PolicyHash = d.Canonical(), d.Hash()
	}
	if _, _, err := st.CreateRunWith(ctx, r, []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(payload)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// onBothStores runs f on a host of a fresh home, with tenants made, on
// SQLite and on PostgreSQL (a subtest each).
func onBothStores(t *testing.T, tenants []string, f func(t *testing.T, h *Host, st store.Store)) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			cfg := Config{Home: t.TempDir()}
			if backend == "postgres" {
				cfg.Store = postgresURL(t)
			}
			h, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { h.Close() })
			st, err := h.Store()
			if err != nil {
				t.Fatal(err)
			}
			for _, tn := range tenants {
				if _, err := st.CreateTenant(context.Background(), tn); err != nil {
					t.Fatal(err)
				}
			}
			f(t, h, st)
		})
	}
}

// postgresURL starts a throwaway PostgreSQL server for the test and
// returns a database's URL; it skips where PostgreSQL is missing and may
// be (pgtest.Required).
func postgresURL(t *testing.T) string {
	t.Helper()
	srv, err := pgtest.Start(context.Background())
	pgtest.ForTest(t, srv, err)
	return srv.NewDatabase(t)
}
