package e2b_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// TestCheckpointHoldsKept: on a shared store, the server keeps a hold of
// each checkpoint its snapshots and paused sandboxes name (what another
// host's collection reads): made by a snapshot and a pause, released by a
// resume and a snapshot's deletion, and at a restart made exactly those
// its records name (a stale hold of its own goes, another server's stays).
func TestCheckpointHoldsKept(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	srv, err := pgtest.Start(ctx)
	pgtest.ForTest(t, srv, err)
	pg, err := postgres.Open(ctx, srv.NewDatabase(t), postgres.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close() })
	o := harnessOptions{holds: pg}
	h := newHarness(t, o)
	holds := func() map[string]string { // holder's kind and id: digest
		t.Helper()
		hs, err := pg.ListCheckpointHolds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, x := range hs {
			if !strings.HasPrefix(x.Holder, "e2b/") {
				out[x.Holder] = x.Digest
				continue
			}
			parts := strings.Split(x.Holder, "/") // e2b, server, kind, id
			if len(parts) != 4 || x.Tenant != "alpha" {
				t.Fatalf("hold %+v", x)
			}
			out[parts[2]+"/"+parts[3]] = x.Digest
		}
		return out
	}
	s := h.createRaw("alpha", map[string]any{"timeout": 3600})
	h.run(s, "echo kept > /workspace/a")
	sn := h.snapshot("alpha", s.ID, nil)
	got := holds()
	if len(got) != 1 || !strings.HasPrefix(got["snapshot/"+sn.ID], "sha256:") {
		t.Fatalf("holds after a snapshot = %v", got)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	rec := recordOf(t, h.store, s.ID)
	paused := pausedOf(t, h, s.ID)
	if got := holds(); len(got) != 2 || len(paused) != 1 || got["paused/"+rec.run.ID] != paused[0] {
		t.Fatalf("holds after a pause = %v, the pause's checkpoint %q", got, paused)
	}
	// Another server's hold, and a stale one of this server's (a release
	// lost to a crash).
	if err := pg.HoldCheckpoint(ctx, store.CheckpointHold{Holder: "other/x", Tenant: "beta", Digest: paused[0]}); err != nil {
		t.Fatal(err)
	}
	var prefix string
	hs, _ := pg.ListCheckpointHolds(ctx)
	for _, x := range hs {
		if strings.HasSuffix(x.Holder, "/snapshot/"+sn.ID) {
			prefix = strings.TrimSuffix(x.Holder, "snapshot/"+sn.ID)
		}
	}
	if err := pg.HoldCheckpoint(ctx, store.CheckpointHold{Holder: prefix + "snapshot/snap-gone", Tenant: "alpha", Digest: paused[0]}); err != nil {
		t.Fatal(err)
	}
	h.serve(t, o, h.store)
	if got := holds(); len(got) != 3 || got["snapshot/snap-gone"] != "" || got["other/x"] == "" || got["paused/"+rec.run.ID] == "" {
		t.Fatalf("holds after a restart = %v, want the snapshot's, the paused sandbox's and the other server's", got)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}); res.status != 201 {
		t.Fatalf("resume: %s", res)
	}
	if got := holds(); len(got) != 2 || got["paused/"+rec.run.ID] != "" {
		t.Fatalf("holds after the resume = %v", got)
	}
	if res := h.api("alpha", "DELETE", "/templates/"+sn.ID, nil); res.status/100 != 2 {
		t.Fatalf("delete the snapshot: %s", res)
	}
	if got := holds(); len(got) != 1 || got["other/x"] == "" {
		t.Fatalf("holds after the snapshot's deletion = %v, want only the other server's", got)
	}
	h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil)
}
