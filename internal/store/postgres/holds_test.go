package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
)

// TestCheckpointHolds: holds are recorded, replaced, released, synced
// per server prefix (another server's stay, and a prefix is no pattern),
// visible to another process on the database, and deleted with their
// tenant; malformed ones are refused.
func TestCheckpointHolds(t *testing.T) {
	ctx := context.Background()
	a := newStore(t, store.NoRedaction)
	b := openURL(t, mustURL(t, a), store.NoRedaction)
	dg := func(c byte) string {
		return "sha256:" + string(slices.Repeat([]byte{c}, 64))
	}
	for _, tn := range []string{"acme", "beta"} {
		if _, err := a.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(holder, tenant, digest string) {
		t.Helper()
		if err := a.HoldCheckpoint(ctx, store.CheckpointHold{Holder: holder, Tenant: tenant, Digest: digest}); err != nil {
			t.Fatal(err)
		}
	}
	list := func() []string {
		t.Helper()
		hs, err := b.ListCheckpointHolds(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hs {
			out = append(out, h.Holder+" "+h.Tenant+" "+h.Digest[7:8])
		}
		return out
	}
	hold("e2b/s1/paused/r1", "acme", dg('a'))
	hold("e2b/s1/snapshot/x", "beta", dg('b'))
	hold("e2b/s1_/snapshot/y", "acme", dg('c'))
	hold("e2b/s2/snapshot/z", "acme", dg('d'))
	hold("e2b/s1/paused/r1", "acme", dg('e')) // replaced
	want := []string{"e2b/s1/paused/r1 acme e", "e2b/s1/snapshot/x beta b", "e2b/s1_/snapshot/y acme c", "e2b/s2/snapshot/z acme d"}
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("holds = %q, want %q", got, want)
	}
	if err := b.ReleaseCheckpoint(ctx, "e2b/s1/snapshot/x"); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseCheckpoint(ctx, "e2b/s1/snapshot/none"); err != nil {
		t.Errorf("releasing no hold = %v", err)
	}
	// A server's start: its holds become exactly those its records name;
	// s1_ and s2 are other servers ("_" is no wildcard).
	if err := b.SyncCheckpointHolds(ctx, "e2b/s1/", []store.CheckpointHold{
		{Holder: "e2b/s1/snapshot/w", Tenant: "beta", Digest: dg('f')},
	}); err != nil {
		t.Fatal(err)
	}
	want = []string{"e2b/s1/snapshot/w beta f", "e2b/s1_/snapshot/y acme c", "e2b/s2/snapshot/z acme d"}
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("holds after the sync = %q, want %q", got, want)
	}
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"no holder", a.HoldCheckpoint(ctx, store.CheckpointHold{Tenant: "acme", Digest: dg('a')})},
		{"bad digest", a.HoldCheckpoint(ctx, store.CheckpointHold{Holder: "h", Tenant: "acme", Digest: "sha256:../x"})},
		{"another prefix", a.SyncCheckpointHolds(ctx, "e2b/s1/", []store.CheckpointHold{{Holder: "e2b/s2/snapshot/z", Tenant: "acme", Digest: dg('a')}})},
		{"empty prefix", a.SyncCheckpointHolds(ctx, "", nil)},
	} {
		if !errors.Is(tt.err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tt.name, tt.err)
		}
	}
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("holds after refusals = %q, want %q", got, want)
	}
	rec, _, err := a.DeleteTenant(ctx, "acme", store.Deletion{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Counts["checkpoint_holds"] != 2 {
		t.Errorf("the deletion counts %d holds, want 2", rec.Counts["checkpoint_holds"])
	}
	if got := list(); !slices.Equal(got, []string{"e2b/s1/snapshot/w beta f"}) {
		t.Errorf("holds after acme's deletion = %q", got)
	}
}
