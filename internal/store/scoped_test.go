package store_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// TestTenantStore: a tenant's view reaches its own runs, events,
// artifacts, ledger and policies, and another tenant's answer exactly like
// ids nothing has.
func TestTenantStore(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mine, theirs := store.ForTenant(st, "a"), store.ForTenant(st, "b")

	newRun := func(v *store.TenantStore) store.Run {
		t.Helper()
		r, err := v.CreateRun(ctx, store.Run{ID: event.NewRunID(time.Now()), Task: "t", Model: "script:x", Status: event.StatusQueued})
		if err != nil {
			t.Fatal(err)
		}
		ev, _ := event.New(event.RunStarted{Host: "h"})
		if _, err := v.Append(ctx, r.ID, 1, []event.Event{ev}); err != nil {
			t.Fatal(err)
		}
		if _, err := v.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: "patch.diff", Digest: "sha256:" + strings.Repeat("0", 64), Size: 1, MediaType: "text/x-diff"}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := newRun(mine)
	b := newRun(theirs)
	if a.Tenant != "a" || b.Tenant != "b" {
		t.Fatalf("tenants %q %q", a.Tenant, b.Tenant)
	}
	if _, _, err := theirs.PutPolicy(ctx, store.PolicyVersion{Name: "p", Document: []byte("{}\n")}); err != nil {
		t.Fatal(err)
	}
	if _, err := theirs.AddLedgerEntry(ctx, store.LedgerEntry{Kind: store.LedgerGrant, Amount: 5}); err != nil {
		t.Fatal(err)
	}
	unknown := event.NewRunID(time.Now())

	ev, _ := event.New(event.RunStarted{Host: "h"})
	calls := map[string]func(id string) error{
		"GetRun":    func(id string) error { _, err := mine.GetRun(ctx, id); return err },
		"Events":    func(id string) error { _, err := mine.Events(ctx, id, 1, 10); return err },
		"LastEvent": func(id string) error { _, err := mine.LastEvent(ctx, id); return err },
		"Append":    func(id string) error { _, err := mine.Append(ctx, id, 2, []event.Event{ev}); return err },
		"AppendStatus": func(id string) error {
			_, _, err := mine.AppendStatus(ctx, id, 2, event.StatusQueued, event.StatusRunning, []event.Event{ev})
			return err
		},
		"UpdateRunStatus": func(id string) error {
			_, err := mine.UpdateRunStatus(ctx, id, event.StatusQueued, event.StatusRunning)
			return err
		},
		"GetArtifact":   func(id string) error { _, err := mine.GetArtifact(ctx, id, "patch.diff"); return err },
		"ListArtifacts": func(id string) error { _, err := mine.ListArtifacts(ctx, id); return err },
		"PutArtifact": func(id string) error {
			_, err := mine.PutArtifact(ctx, store.Artifact{RunID: id, Name: "x", Digest: "sha256:" + strings.Repeat("1", 64), Size: 1, MediaType: "a/b"})
			return err
		},
		"CreateRun(fork)": func(id string) error {
			_, err := mine.CreateRun(ctx, store.Run{ID: event.NewRunID(time.Now()), Task: "t", Status: event.StatusQueued, ParentRunID: id, ParentSeq: 1})
			return err
		},
		"CreateRunWith(fork)": func(id string) error {
			_, _, err := mine.CreateRunWith(ctx, store.Run{ID: event.NewRunID(time.Now()), Task: "t", Status: event.StatusQueued, ParentRunID: id, ParentSeq: 1}, []event.Event{ev})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			errB, errU, errBad := call(b.ID), call(unknown), call("run_guess")
			for _, err := range []error{errB, errU, errBad} {
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("%s on another tenant's or no run = %v, want ErrNotFound", name, err)
				}
			}
			if strings.ReplaceAll(errB.Error(), b.ID, "ID") != strings.ReplaceAll(errU.Error(), unknown, "ID") {
				t.Errorf("another tenant's run %q differs from no run %q", errB, errU)
			}
		})
	}
	if _, err := mine.Events(ctx, a.ID, 1, 10); err != nil {
		t.Errorf("own events: %v", err)
	}
	runs, err := mine.ListRuns(ctx, store.RunFilter{})
	if err != nil || len(runs) != 1 || runs[0].ID != a.ID {
		t.Errorf("ListRuns = %v, %v; want only %s", runs, err, a.ID)
	}
	if _, err := mine.ListRuns(ctx, store.RunFilter{Tenant: "b"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListRuns of tenant b = %v, want ErrInvalid", err)
	}
	if _, _, err := mine.CreateRunWith(ctx, store.Run{ID: event.NewRunID(time.Now()), Tenant: "b", Status: event.StatusQueued}, []event.Event{ev}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CreateRunWith for tenant b = %v, want ErrInvalid", err)
	}
	if _, err := mine.CreateRun(ctx, store.Run{ID: event.NewRunID(time.Now()), Tenant: "b", Status: event.StatusQueued}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CreateRun for tenant b = %v, want ErrInvalid", err)
	}
	if ps, err := mine.ListPolicies(ctx); err != nil || len(ps) != 0 {
		t.Errorf("ListPolicies = %v, %v; want none", ps, err)
	}
	if _, err := mine.GetPolicy(ctx, "p", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetPolicy of b's policy = %v, want ErrNotFound", err)
	}
	if _, err := mine.PolicyVersions(ctx, "p"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PolicyVersions of b's policy = %v, want ErrNotFound", err)
	}
	if _, _, err := mine.PutPolicy(ctx, store.PolicyVersion{Tenant: "b", Name: "p", Document: []byte("x")}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutPolicy for b = %v, want ErrInvalid", err)
	}
	if bal, err := mine.Balance(ctx); err != nil || bal != 0 {
		t.Errorf("Balance = %d, %v; want 0", bal, err)
	}
	if es, err := mine.LedgerEntries(ctx, 0, 0); err != nil || len(es) != 0 {
		t.Errorf("LedgerEntries = %v, %v; want none", es, err)
	}
	if _, err := mine.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "b", Kind: store.LedgerGrant, Amount: 1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("AddLedgerEntry for b = %v, want ErrInvalid", err)
	}
	if _, err := mine.AddLedgerEntry(ctx, store.LedgerEntry{Kind: store.LedgerDebit, Amount: 1, RunID: b.ID, Seq: 1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("debit of b's run = %v, want ErrInvalid", err)
	}
	if bal, err := theirs.Balance(ctx); err != nil || bal != 5 {
		t.Errorf("b's Balance = %d, %v; want 5", bal, err)
	}
	if _, err := store.ForTenant(st, "").GetRun(ctx, a.ID); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("empty tenant's view = %v, want ErrInvalid", err)
	}
}
