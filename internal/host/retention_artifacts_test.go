package host

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// TestSweepArtifactRetention: a run past its artifacts retention (its
// policy's, or its tenant's rule) loses its artifacts' records, its
// artifact.stored payloads (tombstones) and the blobs nothing else names;
// its task and other payloads stay and its chain verifies. Another run's
// artifacts (no such rule) stay, and so does a blob that run shares.
// On SQLite and PostgreSQL.
func TestSweepArtifactRetention(t *testing.T) {
	onBothStores(t, []string{"acme", "beta"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		rs, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		put := func(s string) string {
			t.Helper()
			d, _, err := rs.blobs.Put(ctx, strings.NewReader(s))
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		policyOwn, tenantOwn, keptOwn, shared := put("policy run's report"), put("tenant run's report"), put("kept run's report"), put("shared bytes")
		policyRun := artifactRun(t, st, "acme", "retention: {artifacts: 1h}\n", map[string]string{"own.txt": policyOwn, "shared.txt": shared})
		tenantRun := artifactRun(t, st, "beta", "", map[string]string{"own.txt": tenantOwn})
		keptRun := artifactRun(t, st, "acme", "", map[string]string{"own.txt": keptOwn, "shared.txt": shared})
		rules := RetentionRules{Tenants: map[string]Retention{"beta": {Artifacts: 2 * time.Hour}}}

		sw, err := h.Sweep(ctx, rules, time.Now().Add(3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if sw.Artifacts != 3 || sw.Payloads != 0 || sw.Purged != 0 || sw.Checkpoints != 0 {
			t.Errorf("Sweep() = %+v, want 3 artifacts deleted, no other payload, none purged", sw)
		}
		for id, wantGone := range map[string]bool{policyRun: true, tenantRun: true, keptRun: false} {
			arts, err := st.ListArtifacts(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if (len(arts) == 0) != wantGone {
				t.Errorf("run %s: %d artifacts after the sweep, want gone %v", id, len(arts), wantGone)
			}
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
				case e.Type == event.TypeArtifactStored && gone != wantGone:
					t.Errorf("run %s: artifact.stored tombstoned = %v, want %v", id, gone, wantGone)
				case e.Type != event.TypeArtifactStored && gone:
					t.Errorf("run %s: %s tombstoned by artifacts retention", id, e.Type)
				}
			}
			if r, err := st.GetRun(ctx, id); err != nil || r.Task != "task" {
				t.Errorf("GetRun(%s) = task %q, %v; want the task kept", id, r.Task, err)
			}
		}
		for d, want := range map[string]bool{policyOwn: false, tenantOwn: false, keptOwn: true, shared: true} {
			if ok, err := rs.blobs.Has(ctx, d); err != nil || ok != want {
				t.Errorf("blob %s stored = %v (%v), want %v", d, ok, err, want)
			}
		}
		if sw, err := h.Sweep(ctx, rules, time.Now().Add(3*time.Hour)); err != nil || sw.Artifacts != 0 {
			t.Errorf("Sweep(again) = %+v, %v; want no artifact deleted", sw, err)
		}
	})
}

// artifactRun stores a cancelled run of tenant under the policy doc (none
// when empty) with a retry event and, for each of arts (name to digest),
// an artifact and its artifact.stored event.
func artifactRun(t *testing.T, st store.Store, tenant, doc string, arts map[string]string) string {
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
	evs := []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"marker":"kept"}`)}}
	for name, d := range arts {
		ev, err := event.New(event.ArtifactStored{Name: name, Digest: d, Size: 1, Kind: "file"})
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if _, _, err := st.CreateRunWith(ctx, r, evs); err != nil {
		t.Fatal(err)
	}
	for name, d := range arts {
		if _, err := st.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: name, Digest: d, Size: 1, MediaType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	return r.ID
}
