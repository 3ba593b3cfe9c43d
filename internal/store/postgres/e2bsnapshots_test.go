package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// TestE2BSnapshots: a snapshot recorded through one process is found (by
// id and by name), listed and deleted through another; ids and a
// tenant's names are unique, also under concurrent puts; another
// tenant's snapshot is as absent as none; malformed ones are refused; a
// tenant's deletion deletes its snapshots.
func TestE2BSnapshots(t *testing.T) {
	ctx := context.Background()
	a := newStore(t, store.NoRedaction)
	b := openURL(t, mustURL(t, a), store.NoRedaction)
	for _, tn := range []string{"acme", "beta"} {
		if _, err := a.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Unix(1_700_000_000, 0).UTC()
	snap := func(id, tenant, name string, sec int) store.E2BSnapshot {
		return store.E2BSnapshot{ID: id, Tenant: tenant, Name: name, Created: at.Add(time.Duration(sec) * time.Second), Body: []byte(`{"id":"` + id + `"}`)}
	}
	for _, sn := range []store.E2BSnapshot{snap("s2", "acme", "web", 2), snap("s1", "acme", "", 1), snap("s3", "acme", "", 3), snap("s4", "beta", "web", 1)} {
		if err := a.PutE2BSnapshot(ctx, sn); err != nil {
			t.Fatalf("put %s: %v", sn.ID, err)
		}
	}
	ids := func(tenant string) []string {
		t.Helper()
		rows, err := b.ListE2BSnapshots(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids("acme"); !slices.Equal(got, []string{"s1", "s2", "s3"}) {
		t.Errorf("acme's snapshots = %q, oldest first", got)
	}
	for _, tt := range []struct {
		tenant, ref, want string
	}{
		{"acme", "s2", "s2"},
		{"acme", "web", "s2"},
		{"beta", "web", "s4"},
		{"beta", "s2", ""},
		{"acme", "s4", ""},
		{"acme", "", ""},
		{"acme", "none", ""},
	} {
		got, err := b.GetE2BSnapshot(ctx, tt.tenant, tt.ref)
		switch {
		case tt.want == "" && !errors.Is(err, store.ErrNotFound):
			t.Errorf("get %s %q = %v %v, want ErrNotFound", tt.tenant, tt.ref, got.ID, err)
		case tt.want != "" && (err != nil || got.ID != tt.want || string(got.Body) != `{"id":"`+tt.want+`"}` || got.Tenant != tt.tenant):
			t.Errorf("get %s %q = %+v %v, want %s", tt.tenant, tt.ref, got, err, tt.want)
		}
	}
	if got, _ := b.GetE2BSnapshot(ctx, "acme", "s2"); !got.Created.Equal(at.Add(2*time.Second)) || got.Name != "web" {
		t.Errorf("s2 = %+v, want created at +2 s, named web", got)
	}
	// A taken id, or a name the tenant has, is ErrExists; two processes
	// putting one name at once: one wins.
	for _, sn := range []store.E2BSnapshot{snap("s1", "beta", "", 5), snap("s9", "acme", "web", 5)} {
		if err := b.PutE2BSnapshot(ctx, sn); !errors.Is(err, store.ErrExists) {
			t.Errorf("put %s %q = %v, want ErrExists", sn.ID, sn.Name, err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.PutE2BSnapshot(ctx, snap("race"+string(rune('a'+i)), "beta", "raced", 6))
		}()
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), store.ErrExists) {
		t.Errorf("concurrent puts of one name = %v, want one success and one ErrExists", errs)
	}
	for _, tt := range []struct {
		name string
		sn   store.E2BSnapshot
	}{
		{"no id", snap("", "acme", "", 1)},
		{"no tenant", snap("x1", "", "", 1)},
		{"no body", store.E2BSnapshot{ID: "x2", Tenant: "acme"}},
		{"body too large", store.E2BSnapshot{ID: "x3", Tenant: "acme", Body: make([]byte, store.MaxE2BSnapshotBody+1)}},
	} {
		if err := a.PutE2BSnapshot(ctx, tt.sn); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tt.name, err)
		}
	}
	// Deleted through the other process; again, or another tenant's:
	// ErrNotFound. Its name is free again.
	if err := b.DeleteE2BSnapshot(ctx, "acme", "s2"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range [][2]string{{"acme", "s2"}, {"acme", "s4"}} {
		if err := a.DeleteE2BSnapshot(ctx, tt[0], tt[1]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("delete %s %s = %v, want ErrNotFound", tt[0], tt[1], err)
		}
	}
	if err := a.PutE2BSnapshot(ctx, snap("s5", "acme", "web", 7)); err != nil {
		t.Errorf("put of a deleted snapshot's name = %v", err)
	}
	rec, _, err := a.DeleteTenant(ctx, "acme", store.Deletion{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Counts["e2b_snapshots"] != 3 {
		t.Errorf("the deletion counts %d snapshots, want 3", rec.Counts["e2b_snapshots"])
	}
	if got := ids("acme"); len(got) != 0 {
		t.Errorf("acme's snapshots after its deletion = %q", got)
	}
	if got := ids("beta"); len(got) != 2 {
		t.Errorf("beta's snapshots after acme's deletion = %q, want s4 and one raced", got)
	}
}
