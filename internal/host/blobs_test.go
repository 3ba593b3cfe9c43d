package host

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestCollectBlobs: on SQLite and PostgreSQL, a blob collection removes
// the blobs nothing names once older than the grace — one a deletion
// freed but a writer found meanwhile (so the deletion kept it) and whose
// reference never came, one nothing ever named — and keeps what a run's
// event, an artifact or an upload names, a checkpoint manifest (the
// checkpoint collection's), and an unnamed blob used within the grace.
func TestCollectBlobs(t *testing.T) {
	onBothStores(t, []string{"acme"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		rs, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		put := func(what string) string {
			t.Helper()
			d, _, err := rs.blobs.Put(ctx, strings.NewReader("blob "+what))
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		script, art, up, found, orphan := put("script"), put("artifact"), put("upload"), put("found"), put("orphan")
		r := store.Run{ID: event.NewRunID(time.Now()), Tenant: "acme", Task: "t", Status: event.StatusQueued}
		if _, _, err := st.CreateRunWith(ctx, r, []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"script":"` + script + `"}`)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: "a.txt", Digest: art, Size: 1, MediaType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutUpload(ctx, store.Upload{ID: "upl_1", Tenant: "acme", Digest: up, Size: 1}, 0); err != nil {
			t.Fatal(err)
		}
		// A deletion begun at since frees found, but a writer finds it
		// after since (for a reference it is about to record): the
		// deletion keeps it. The reference never comes.
		since := time.Now()
		if ok, err := rs.blobs.Has(ctx, found); err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := deleteBlobs(ctx, rs.blobs, []string{found}, since); err != nil {
			t.Fatal(err)
		}
		if ok, _ := rs.blobs.Has(ctx, found); !ok {
			t.Fatal("the deletion removed a blob a writer found after it began")
		}
		manifest, err := rs.checkpoints.Write(ctx, "acme", "", true, filesTar(t, 64<<10, map[string]uint64{"f": 1}))
		if err != nil {
			t.Fatal(err)
		}

		// Within the grace, nothing goes.
		bs, err := h.CollectBlobs(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if bs.Expired != 0 {
			t.Errorf("CollectBlobs() within the grace = %+v, want none expired", bs)
		}
		ageStored(t, h, 2*time.Hour)
		recent := put("recent")
		bs, err = h.CollectBlobs(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name, digest string
			kept         bool
		}{
			{"the script a run's event names", script, true},
			{"an artifact's", art, true},
			{"an upload's", up, true},
			{"a checkpoint manifest", manifest.Digest, true},
			{"an unnamed blob used within the grace", recent, true},
			{"a freed blob a writer found, never named", found, false},
			{"a blob nothing named", orphan, false},
		} {
			ok, err := rs.blobs.Has(ctx, c.digest)
			if err != nil || ok != c.kept {
				t.Errorf("%s: stored %t (%v), want %t", c.name, ok, err, c.kept)
			}
		}
		if bs.Expired != 2 || bs.Manifests != 1 || bs.Named < 3 || bs.Blobs != 7 {
			t.Errorf("CollectBlobs() = %+v, want 2 expired, 1 manifest, 7 blobs, at least 3 named", bs)
		}
		// The upload expired, its blob goes with the retention pass; the
		// run purged, the next collection finds nothing more to remove.
		if _, err := h.Sweep(ctx, RetentionRules{Default: Retention{Uploads: time.Minute}}, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if ok, _ := rs.blobs.Has(ctx, up); ok {
			t.Error("an expired upload's blob is stored after the retention pass")
		}
		if _, err := h.CollectBlobs(ctx, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := h.CollectBlobs(ctx, time.Minute); err == nil {
			t.Error("CollectBlobs(1m) = nil, want the grace refused")
		}
	})
}
