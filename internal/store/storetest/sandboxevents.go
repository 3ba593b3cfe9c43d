package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// testSandboxEvents: events of sandboxes outside runs are kept per tenant
// and sandbox, in seq order, paged, idempotent per seq, refused when
// invalid, expired by time per tenant, deleted with their tenant, and
// found by another handle (a restarted process).
func testSandboxEvents(t *testing.T, f Factory) {
	s := twoTenants(t, f)
	ctx := context.Background()
	ev := func(tenant, sb string, seq uint64, at time.Time) store.SandboxEvent {
		return store.SandboxEvent{Tenant: tenant, Sandbox: sb, Seq: seq, Time: at, Event: fmt.Appendf(nil, `{"source":"sandbox","sandbox":%q,"kind":"progress","message":"m%d"}`, sb, seq)}
	}
	var batch []store.SandboxEvent
	for i := uint64(1); i <= 5; i++ {
		batch = append(batch, ev("acme", "sb-1", i, base.Add(time.Duration(i)*time.Hour)))
	}
	batch = append(batch, ev("acme", "sb-2", 1, base), ev("other", "sb-1", 1, base))
	if err := s.AppendSandboxEvents(ctx, batch); err != nil {
		t.Fatal(err)
	}
	// Again, with one changed: what is stored stays.
	again := ev("acme", "sb-1", 2, base)
	again.Event = []byte(`{"changed":true}`)
	if err := s.AppendSandboxEvents(ctx, []store.SandboxEvent{again}); err != nil {
		t.Fatalf("append again = %v", err)
	}
	got, err := s.SandboxEvents(ctx, "acme", "sb-1", 0, 0)
	if err != nil || len(got) != 5 {
		t.Fatalf("SandboxEvents = %d, %v; want 5", len(got), err)
	}
	for i, e := range got {
		w := batch[i]
		if e.Seq != w.Seq || !e.Time.Equal(w.Time) || string(e.Event) != string(w.Event) || e.Tenant != "acme" || e.Sandbox != "sb-1" {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
	if got, _ := s.SandboxEvents(ctx, "acme", "sb-1", 3, 1); len(got) != 1 || got[0].Seq != 4 {
		t.Errorf("after 3, limit 1 = %+v, want seq 4", got)
	}
	if got, _ := s.SandboxEvents(ctx, "other", "sb-1", 0, 0); len(got) != 1 || !strings.Contains(string(got[0].Event), `"m1"`) {
		t.Errorf("other's sb-1 = %+v, want its one event", got)
	}
	if got, _ := s.SandboxEvents(ctx, "other", "sb-2", 0, 0); len(got) != 0 {
		t.Errorf("other's sb-2 = %+v, want none (acme's)", got)
	}
	for _, tc := range []struct {
		name string
		e    store.SandboxEvent
	}{
		{"no tenant", ev("", "sb-1", 9, base)},
		{"no sandbox", ev("acme", "", 9, base)},
		{"seq 0", ev("acme", "sb-1", 0, base)},
		{"empty", store.SandboxEvent{Tenant: "acme", Sandbox: "sb-1", Seq: 9, Time: base}},
		{"too big", store.SandboxEvent{Tenant: "acme", Sandbox: "sb-1", Seq: 9, Time: base, Event: make([]byte, store.MaxSandboxEvent+1)}},
	} {
		wantErr(t, "AppendSandboxEvents("+tc.name+")", s.AppendSandboxEvents(ctx, []store.SandboxEvent{tc.e}), store.ErrInvalid)
	}
	// Expiry is per tenant and by the time each was accepted.
	n, err := s.ExpireSandboxEvents(ctx, "acme", base.Add(3*time.Hour))
	if err != nil || n != 3 { // sb-1's 1 and 2, sb-2's 1
		t.Fatalf("ExpireSandboxEvents = %d, %v; want 3", n, err)
	}
	if got, _ := s.SandboxEvents(ctx, "acme", "sb-1", 0, 0); len(got) != 3 || got[0].Seq != 3 {
		t.Errorf("after expiry: %+v, want seq 3-5", got)
	}
	if got, _ := s.SandboxEvents(ctx, "other", "sb-1", 0, 0); len(got) != 1 {
		t.Errorf("other's after acme's expiry: %+v, want kept", got)
	}
	// Another handle (a restarted process) finds them.
	if f.Reopen != nil {
		if got, _ := f.Reopen(t, s).SandboxEvents(ctx, "acme", "sb-1", 0, 0); len(got) != 3 {
			t.Errorf("reopened: %d events, want 3", len(got))
		}
	}
	// The tenant's deletion takes them.
	rec, _, err := s.DeleteTenant(ctx, "acme", store.Deletion{Actor: "admin"})
	if err != nil || rec.Counts["sandbox_events"] != 3 {
		t.Fatalf("DeleteTenant = %+v, %v; want 3 sandbox events counted", rec.Counts, err)
	}
	if got, _ := s.SandboxEvents(ctx, "acme", "sb-1", 0, 0); len(got) != 0 {
		t.Errorf("after the tenant's deletion: %+v", got)
	}
	if f.Dump != nil {
		// acme's remaining events were m3-m5; other's one is m1.
		if d := f.Dump(t, s); strings.Contains(string(d), `"message":"m4"`) {
			t.Error("a deleted tenant's sandbox event is still in the database")
		}
	}
}
