package host

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// TestSweepCheckpointRetention: a run past its checkpoints retention (its
// policy's, or its tenant's rule) loses its snapshot.taken payloads and
// nothing else: its task and other payloads stay, its chain verifies, and
// the next checkpoint collection removes the chunks only its checkpoint
// used, while another run's checkpoint (no such rule) keeps every chunk.
// On SQLite and PostgreSQL.
func TestSweepCheckpointRetention(t *testing.T) {
	onBothStores(t, []string{"acme", "beta"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		rs, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		write := func(tenant string, files map[string]uint64) checkpoint.Result {
			t.Helper()
			res, err := rs.checkpoints.Write(ctx, tenant, "", true, filesTar(t, 4<<20, files))
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		byPolicy := write("acme", map[string]uint64{"p-own": 11})
		byTenant := write("beta", map[string]uint64{"t-own": 12})
		kept := write("acme", map[string]uint64{"k-own": 13})
		ids := map[string][]string{
			byPolicy.Digest: chunkIDs(t, rs, "acme", byPolicy),
			byTenant.Digest: chunkIDs(t, rs, "beta", byTenant),
			kept.Digest:     chunkIDs(t, rs, "acme", kept),
		}
		policyRun := checkpointRunWith(t, st, "acme", "retention: {checkpoints: 1h}\n", byPolicy)
		tenantRun := checkpointRunWith(t, st, "beta", "", byTenant)
		keptRun := checkpointRunWith(t, st, "acme", "", kept)
		rules := RetentionRules{Tenants: map[string]Retention{"beta": {Checkpoints: 2 * time.Hour}}}

		sw, err := h.Sweep(ctx, rules, time.Now().Add(3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if sw.Checkpoints != 2 || sw.Payloads != 0 || sw.Purged != 0 {
			t.Errorf("Sweep() = %+v, want 2 checkpoints tombstoned, no other payload, none purged", sw)
		}
		for id, wantGone := range map[string]bool{policyRun: true, tenantRun: true, keptRun: false} {
			evs, err := st.Events(ctx, id, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if err := event.Verify(evs); err != nil {
				t.Errorf("run %s does not verify: %v", id, err)
			}
			for _, e := range evs {
				_, gone := event.ParseTombstone(e.Payload)
				switch {
				case e.Type == event.TypeSnapshotTaken && gone != wantGone:
					t.Errorf("run %s: snapshot.taken tombstoned = %v, want %v", id, gone, wantGone)
				case e.Type != event.TypeSnapshotTaken && gone:
					t.Errorf("run %s: %s tombstoned by checkpoints retention", id, e.Type)
				}
			}
			r, err := st.GetRun(ctx, id)
			if err != nil || r.Task != "task" {
				t.Errorf("GetRun(%s) = task %q, %v; want the task kept", id, r.Task, err)
			}
		}
		// A second pass finds nothing more to do.
		if sw, err := h.Sweep(ctx, rules, time.Now().Add(3*time.Hour)); err != nil || sw.Checkpoints != 0 {
			t.Errorf("Sweep(again) = %+v, %v; want no checkpoint tombstoned", sw, err)
		}

		ageStored(t, h, 2*time.Hour)
		if _, err := h.CollectCheckpoints(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		have := storedChunks(t, h)
		for _, c := range []struct {
			tenant string
			res    checkpoint.Result
			want   bool
		}{{"acme", byPolicy, false}, {"beta", byTenant, false}, {"acme", kept, true}} {
			for _, id := range ids[c.res.Digest] {
				if have[id] != c.want {
					t.Errorf("chunk %s of %s's checkpoint %s: stored %v, want %v", id, c.tenant, c.res.Digest, have[id], c.want)
				}
			}
			_, err := rs.checkpoints.Manifest(ctx, c.tenant, c.res.Digest)
			if (err == nil) != c.want {
				t.Errorf("manifest %s of %s after collection: %v, want stored %v", c.res.Digest, c.tenant, err, c.want)
			}
		}
	})
}

// checkpointRunWith stores a cancelled run of tenant under the policy doc
// (none when empty) whose log is a retry event and a snapshot.taken event
// naming checkpoint c.
func checkpointRunWith(t *testing.T, st store.Store, tenant, doc string, c checkpoint.Result) string {
	t.Helper()
	ctx := context.Background()
	snap, err := event.New(event.SnapshotTaken{Step: 1, Sandbox: "main", Digest: c.Digest, Format: event.FormatCheckpoint, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	r := store.Run{ID: event.NewRunID(time.Now()), Tenant: tenant, Task: "task", Model: "script:x", Status: event.StatusQueued}
	if doc != "" {
		d, err := policy.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		r.Policy, r.PolicyHash = d.Canonical(), d.Hash()
	}
	evs := []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"marker":"kept"}`)}, snap}
	if _, _, err := st.CreateRunWith(ctx, r, evs); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	return r.ID
}
