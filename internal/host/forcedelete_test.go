package host

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestDeleteTenantForce: a tenant with records of every kind still going
// (an agent run queued, one paused, one leased by a driver of another
// host, an E2B sandbox's record, an MCP session's record) is refused
// without force and nothing changes; with force every one is cancelled or
// closed, the leased run's driver is waited for (its lease runs out), and
// the tenant goes with its keys, the record counting what was stopped.
// Another tenant is not touched. On SQLite and PostgreSQL.
func TestDeleteTenantForce(t *testing.T) {
	onBothStores(t, []string{"acme", "other"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		sum := sha256.Sum256([]byte("acme key"))
		if err := st.CreateAPIKey(ctx, store.APIKey{ID: "key_00000000000000a1", Tenant: "acme", Scopes: []string{"admin"}, Hash: sum[:]}); err != nil {
			t.Fatal(err)
		}
		n := 0
		mk := func(tenant, kind string, status event.Status) string {
			t.Helper()
			n++
			r := store.Run{ID: event.NewRunID(time.Now()), Tenant: tenant, Kind: kind, Task: "task", Model: "script:x", Status: event.StatusQueued}
			if _, _, err := st.CreateRunWith(ctx, r, []event.Event{
				{Type: event.TypeRetry, Payload: json.RawMessage(`{"marker":"run"}`)},
			}); err != nil {
				t.Fatal(err)
			}
			if status != event.StatusQueued {
				if _, err := st.UpdateRunStatus(ctx, r.ID, event.StatusQueued, status); err != nil {
					t.Fatal(err)
				}
			}
			return r.ID
		}
		queued := mk("acme", "", event.StatusQueued)
		paused := mk("acme", "", event.StatusPaused)
		leased := mk("acme", "", event.StatusRunning)
		sbx := mk("acme", store.KindSandbox, event.StatusRunning)
		mcp := mk("acme", store.KindMCP, event.StatusRunning)
		keep := mk("other", "", event.StatusRunning)
		// Another host's driver holds the run; it never lets go, so
		// the deletion waits its lease out.
		if _, err := st.AcquireLease(ctx, leased, "elsewhere:1:x", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AcquireLease(ctx, sbx, "elsewhere:1:y", time.Minute); err != nil {
			t.Fatal(err)
		}

		_, err := h.DeleteTenant(ctx, "acme", "test", false)
		if !errors.Is(err, ErrLive) {
			t.Fatalf("DeleteTenant(no force) = %v, want ErrLive", err)
		}
		if tn, err := st.GetTenant(ctx, "acme"); err != nil || !tn.Deleting.IsZero() {
			t.Fatalf("GetTenant(acme) after a refused deletion = %+v, %v", tn, err)
		}

		rec, err := h.DeleteTenant(ctx, "acme", "test", true)
		if err != nil {
			t.Fatalf("DeleteTenant(force) = %v", err)
		}
		want := map[string]int64{"runs_cancelled": 3, "records_closed": 2, "runs": 5, "api_keys": 1, "tenants": 1}
		for k, v := range want {
			if rec.Counts[k] != v {
				t.Errorf("DeleteTenant(force) counts[%s] = %d, want %d (%v)", k, rec.Counts[k], v, rec.Counts)
			}
		}
		for _, id := range []string{queued, paused, leased, sbx, mcp} {
			if _, err := st.GetRun(ctx, id); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetRun(%s) = %v, want not found", id, err)
			}
		}
		if _, err := st.APIKeyByHash(ctx, sum[:]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("APIKeyByHash(acme's key) = %v, want not found", err)
		}
		if r, err := st.GetRun(ctx, keep); err != nil || r.Status != event.StatusRunning {
			t.Errorf("GetRun(other's run) = %+v, %v; want it running", r, err)
		}
		dels, err := h.Store()
		if err != nil {
			t.Fatal(err)
		}
		if list, err := dels.ListDeletions(ctx, "acme", 0); err != nil || len(list) != 1 || list[0].Counts["runs_cancelled"] != 3 {
			t.Errorf("ListDeletions(acme) = %+v, %v", list, err)
		}
		_, err = h.DeleteTenant(ctx, "acme", "test", true)
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeleteTenant(again) = %v, want not found", err)
		}
	})
}
