package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestWatchChanges: a process listening hears, from another process on the
// database, a run's move to a final status (by an append or a status
// update) and a ledger entry, once each and in commit order; it does not
// hear appends that end nothing, a status move that is not final, or a
// write that fails (its transaction rolls back, and its notification with
// it). A lost connection is listened on again, with a Resync first.
func TestWatchChanges(t *testing.T) {
	ctx := context.Background()
	a := newStore(t, store.NoRedaction)
	b := openURL(t, mustURL(t, a), store.NoRedaction)
	if _, err := a.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	got := make(chan store.Change, 64)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.WatchChanges(wctx, func(c store.Change) { got <- c }) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("WatchChanges() = %v after its context ended, want nil", err)
		}
	}()
	next := func() store.Change {
		t.Helper()
		select {
		case c := <-got:
			return c
		case <-time.After(time.Minute):
			t.Fatal("no change heard within a minute")
		}
		return store.Change{}
	}
	if c := next(); !c.Resync {
		t.Fatalf("first change = %+v, want a Resync", c)
	}
	mk := func(status event.Status) string {
		t.Helper()
		id := event.NewRunID(time.Now())
		if _, err := b.CreateRun(ctx, store.Run{ID: id, Tenant: "acme", Kind: store.KindSandbox, Status: status}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	draft := func() []event.Event {
		return []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{}`)}}
	}
	appended := mk(event.StatusRunning)
	updated := mk(event.StatusQueued)
	// Not heard: an append that moves no status, a move that is not
	// final, a refused move, a ledger entry refused in its transaction.
	if _, err := b.Append(ctx, appended, 1, draft()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateRunStatus(ctx, updated, event.StatusQueued, event.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.AppendStatus(ctx, appended, 2, event.StatusQueued, event.StatusCancelled, draft()); err == nil {
		t.Fatal("AppendStatus from the wrong status succeeded")
	}
	if _, err := b.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "other", Kind: store.LedgerDebit, Amount: 1, RunID: appended, Seq: 1}); err == nil {
		t.Fatal("a debit of another tenant's run succeeded")
	}
	// Heard, in this order.
	if _, _, err := b.AppendStatus(ctx, appended, 2, event.StatusRunning, event.StatusCancelled, draft()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 5, Note: "g"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateRunStatus(ctx, updated, event.StatusRunning, event.StatusFailed); err != nil {
		t.Fatal(err)
	}
	for i, want := range []store.Change{{RunEnded: appended}, {LedgerTenant: "acme"}, {RunEnded: updated}} {
		if c := next(); c != want {
			t.Fatalf("change %d = %+v, want %+v", i, c, want)
		}
	}

	// The listening connection is killed: it listens again, Resync
	// first, and hears what commits after.
	raw := rawConn(t, a)
	var n int
	if err := raw.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminate the listener = %d, %v; want 1", n, err)
	}
	if c := next(); !c.Resync {
		t.Fatalf("after the connection was lost: %+v, want a Resync", c)
	}
	again := mk(event.StatusRunning)
	if _, _, err := b.AppendStatus(ctx, again, 1, event.StatusRunning, event.StatusCompleted, draft()); err != nil {
		t.Fatal(err)
	}
	if c := next(); c != (store.Change{RunEnded: again}) {
		t.Fatalf("after listening again: %+v, want %s ended", c, again)
	}
	select {
	case c := <-got:
		t.Errorf("an extra change %+v", c)
	default:
	}
}

// TestParseChange: a payload of no known form is a Resync, never a change
// naming what it does not.
func TestParseChange(t *testing.T) {
	id := event.NewRunID(time.Now())
	for _, tc := range []struct {
		in   string
		want store.Change
	}{
		{"run:" + id, store.Change{RunEnded: id}},
		{"ledger:acme", store.Change{LedgerTenant: "acme"}},
		{"run:", store.Change{Resync: true}},
		{"run:../x", store.Change{Resync: true}},
		{"ledger:", store.Change{Resync: true}},
		{"tenant:acme", store.Change{Resync: true}},
		{"", store.Change{Resync: true}},
	} {
		if got := parseChange(tc.in); got != tc.want {
			t.Errorf("parseChange(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
