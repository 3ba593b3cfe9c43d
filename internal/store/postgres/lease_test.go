package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestLeaseTwoProcesses: two Store values on one database, as two worker
// processes would hold them, sharing a clock. Worker a stalls past its
// lease, b takes the run over, and a's fenced writes are refused from its
// own handle; b's go through.
func TestLeaseTwoProcesses(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	clock := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	open := func() *Store {
		s, err := Open(ctx, url, Options{Redactor: store.NoRedaction, Now: clock.Now})
		if err != nil {
			t.Fatalf("Open() = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	procA, procB := open(), open()
	id := event.NewRunID(clock.Now())
	if _, err := procA.CreateRun(ctx, store.Run{ID: id, Tenant: "a", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	a, err := procA.AcquireLease(ctx, id, "worker-a", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := procA.Append(store.WithFence(ctx, a.Token), id, 1, []event.Event{{Type: event.TypeRetry, Payload: []byte(`{"w":"a"}`)}}); err != nil {
		t.Fatalf("Append(a's fence) = %v", err)
	}
	if _, err := procB.AcquireLease(ctx, id, "worker-b", 30*time.Second); !errors.Is(err, store.ErrLeased) {
		t.Fatalf("AcquireLease(b, a's lease valid) = %v, want ErrLeased", err)
	}

	clock.Advance(31 * time.Second) // a stalls past its lease
	b, err := procB.AcquireLease(ctx, id, "worker-b", 30*time.Second)
	if err != nil || b.Token != a.Token+1 {
		t.Fatalf("AcquireLease(b, a's lease expired) = %+v, %v, want token %d", b, err, a.Token+1)
	}

	// a wakes up, reads the tail as it would, and tries to go on.
	r, err := procA.GetRun(ctx, id)
	if err != nil || r.LeaseOwner != "worker-b" || r.LeaseToken != b.Token {
		t.Fatalf("GetRun() from a = %+v, %v; want b's lease", r, err)
	}
	_, err = procA.Append(store.WithFence(ctx, a.Token), id, r.LastSeq+1, []event.Event{{Type: event.TypeRetry, Payload: []byte(`{"w":"a"}`)}})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Append(a's stale fence) = %v, want ErrLeaseLost", err)
	}
	if _, err := procA.RenewLease(ctx, id, "worker-a", a.Token, 30*time.Second); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("RenewLease(a) = %v, want ErrLeaseLost", err)
	}
	if _, err := procB.Append(store.WithFence(ctx, b.Token), id, r.LastSeq+1, []event.Event{{Type: event.TypeRetry, Payload: []byte(`{"w":"b"}`)}}); err != nil {
		t.Fatalf("Append(b's fence) = %v", err)
	}
	if n, err := store.VerifyRun(ctx, procA, id); err != nil || n != 2 {
		t.Fatalf("VerifyRun() = %d, %v, want 2 events (a's first, b's)", n, err)
	}
	last, err := procA.LastEvent(ctx, id)
	if err != nil || string(last.Payload) != `{"w":"b"}` {
		t.Fatalf("LastEvent() = %s, %v, want b's event", last.Payload, err)
	}
}
