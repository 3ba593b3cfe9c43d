package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// markerRun creates run n of tenant with marker in its task, metadata,
// event payloads and an artifact name, and returns it with its artifact's
// digest.
func markerRun(t *testing.T, s store.Store, n int, tenant, parent, marker string) (store.Run, string) {
	t.Helper()
	ctx := context.Background()
	created, err := event.New(event.RunCreated{Tenant: tenant, Task: "task " + marker, Metadata: map[string]string{"label": marker}})
	if err != nil {
		t.Fatal(err)
	}
	r := store.Run{ID: runID(n), Tenant: tenant, Status: event.StatusQueued, Task: "task " + marker}
	var first []event.Event
	if parent == "" {
		first = []event.Event{created}
	} else {
		r.ParentRunID, r.ParentSeq = parent, 1
		first = []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"copied":"` + marker + `"}`)}}
	}
	r, _, err = s.CreateRunWith(ctx, r, first)
	if err != nil {
		t.Fatalf("CreateRunWith(%d) = %v", n, err)
	}
	if _, err := s.Append(ctx, r.ID, 2, []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"out":"` + marker + `"}`)}}); err != nil {
		t.Fatalf("Append(%s) = %v", r.ID, err)
	}
	digest := fmt.Sprintf("sha256:%064x", n)
	if _, err := s.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: "report-" + marker + ".txt", Digest: digest, Size: 1, MediaType: "text/plain"}); err != nil {
		t.Fatalf("PutArtifact(%s) = %v", r.ID, err)
	}
	// Ended: only ended runs are purged.
	if _, err := s.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatalf("UpdateRunStatus(%s) = %v", r.ID, err)
	}
	r, err = s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	return r, digest
}

// testTombstonePayloads: payloads go, hashes stay, the chain verifies and
// counts the deletions; a second pass changes nothing.
func testTombstonePayloads(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r, digest := markerRun(t, s, 1, "acme", "", "TOMBSTONE-MARKER")
	at := base.Add(48 * time.Hour)
	script := fmt.Sprintf("sha256:%064x", 100)
	if _, err := s.Append(ctx, r.ID, 3, []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"script":"` + script + `","artifact":"` + digest + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	before := allEvents(t, s, r.ID)
	n, kept, free, err := s.TombstonePayloads(ctx, r.ID, at, event.ReasonRetention)
	if err != nil || n != 3 || kept != 0 {
		t.Fatalf("TombstonePayloads() = %d, %d, %v; want 3, 0", n, kept, err)
	}
	// The script no payload names any more goes; the artifact's blob stays
	// with the artifact.
	if len(free) != 1 || free[0] != script {
		t.Errorf("TombstonePayloads() free = %v, want [%s]", free, script)
	}
	after := allEvents(t, s, r.ID)
	for i, e := range after {
		if e.Hash != before[i].Hash || e.PrevHash != before[i].PrevHash {
			t.Errorf("seq %d: hash changed", e.Seq)
		}
		if bytes.Contains(e.Payload, []byte("TOMBSTONE-MARKER")) {
			t.Errorf("seq %d: payload kept: %s", e.Seq, e.Payload)
		}
	}
	c, err := store.VerifyRunChain(ctx, s, r.ID)
	if err != nil {
		t.Fatalf("VerifyRunChain() = %v", err)
	}
	if d, last := c.Deleted(); d != 3 || !last.Equal(at) {
		t.Errorf("Deleted() = %d, %v; want 3, %v", d, last, at)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil || got.Task != "" {
		t.Errorf("GetRun() task = %q, %v; want it cleared", got.Task, err)
	}
	if n, _, _, err := s.TombstonePayloads(ctx, r.ID, at.Add(time.Hour), event.ReasonRetention); err != nil || n != 0 {
		t.Errorf("TombstonePayloads(again) = %d, %v; want 0", n, err)
	}
	_, _, _, err = s.TombstonePayloads(ctx, runID(99), at, event.ReasonRetention)
	wantErr(t, "TombstonePayloads(no such run)", err, store.ErrNotFound)
}

// testPurgeRun: the run and its forks go with everything of theirs, the
// ledger stays, other runs stay, and the record says what went.
func testPurgeRun(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	parent, d1 := markerRun(t, s, 1, "acme", "", "P")
	fork, d2 := markerRun(t, s, 2, "acme", parent.ID, "F")
	other, _ := markerRun(t, s, 3, "acme", "", "O")
	// The other run shares the parent's blob: that one is still used.
	if _, err := s.PutArtifact(ctx, store.Artifact{RunID: other.ID, Name: "shared", Digest: d1, Size: 1, MediaType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 1000, Note: "grant"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerDebit, Amount: 300, RunID: parent.ID, Seq: 2}); err != nil {
		t.Fatal(err)
	}
	// Blobs the events name: the parent's script (only it), and a tar
	// the other run names too.
	script, tar := fmt.Sprintf("sha256:%064x", 100), fmt.Sprintf("sha256:%064x", 101)
	if _, err := s.Append(ctx, parent.ID, 3, []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"script":"` + script + `","tar":"` + tar + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, other.ID, 3, []event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"tar":"` + tar + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	// A fork of the fork still going keeps them all: its driver would
	// write into a run that is gone. Once it has ended, it goes too.
	live, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(4), Tenant: "acme", Status: event.StatusQueued, ParentRunID: fork.ID, ParentSeq: 1},
		[]event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"copied":"L"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.PurgeRun(ctx, parent.ID, store.Deletion{Actor: "alice"})
	wantErr(t, "PurgeRun(a fork's fork queued)", err, store.ErrConflict)
	verify(t, s, parent.ID, 3)
	verify(t, s, fork.ID, 2)
	if _, err := s.UpdateRunStatus(ctx, live.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	rec, free, err := s.PurgeRun(ctx, parent.ID, store.Deletion{Actor: "alice"})
	if err != nil {
		t.Fatalf("PurgeRun() = %v", err)
	}
	if rec.ID < 1 || rec.Tenant != "acme" || rec.Kind != store.DeletionRun || rec.Target != parent.ID || rec.Actor != "alice" ||
		rec.Counts["runs"] != 3 || rec.Counts["events"] != 6 || rec.Counts["artifacts"] != 2 || rec.Counts["metadata"] != 1 {
		t.Errorf("PurgeRun() record = %+v", rec)
	}
	slices.Sort(free)
	if want := []string{d2, script}; !slices.Equal(free, want) {
		t.Errorf("PurgeRun() free digests = %v, want %v (%s and %s are still used)", free, want, d1, tar)
	}
	for _, id := range []string{parent.ID, fork.ID, live.ID} {
		_, err := s.GetRun(ctx, id)
		wantErr(t, "GetRun(purged)", err, store.ErrNotFound)
	}
	verify(t, s, other.ID, 3)
	if bal, err := s.Balance(ctx, "acme"); err != nil || bal != 700 {
		t.Errorf("Balance() = %d, %v; want 700 (a purge is not a refund)", bal, err)
	}
	if runs, err := s.ListRuns(ctx, store.RunFilter{Metadata: map[string]string{"label": "P"}}); err != nil || len(runs) != 0 {
		t.Errorf("ListRuns(purged label) = %v, %v", ids(runs), err)
	}
	list, err := s.ListDeletions(ctx, "acme", 0)
	if err != nil || len(list) != 1 || list[0].ID != rec.ID || list[0].Counts["runs"] != 3 || !list[0].Created.Equal(rec.Created) {
		t.Errorf("ListDeletions() = %+v, %v; want [%+v]", list, err, rec)
	}
	_, _, err = s.PurgeRun(ctx, parent.ID, store.Deletion{Actor: "alice"})
	wantErr(t, "PurgeRun(again)", err, store.ErrNotFound)
}

// twoTenants is a store with the tenants acme and other, a key each.
func twoTenants(t *testing.T, f Factory) store.Store {
	t.Helper()
	s := newStore(t, f)
	for _, tn := range []string{"acme", "other"} {
		createTenant(t, s, tn)
	}
	createKey(t, s, newKey("acme", 1))
	createKey(t, s, newKey("other", 2))
	return s
}

// testDeleteTenant: everything of the tenant goes, the other tenant's
// stays, and the record survives.
func testDeleteTenant(t *testing.T, f Factory) {
	s := twoTenants(t, f)
	ctx := context.Background()
	a, _ := markerRun(t, s, 1, "acme", "", "A")
	markerRun(t, s, 2, "acme", a.ID, "A2")
	o, _ := markerRun(t, s, 3, "other", "", "O")
	putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "prod", Document: docA, Source: "p.yaml", By: "x"}, true)
	putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "py", Image: imageA, Document: tmplA, Source: "t.yaml", By: "x"}, true)
	if _, err := s.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 5, Note: "g"}); err != nil {
		t.Fatal(err)
	}
	// A run still going keeps everything: its driver would write into a
	// tenant that is gone. Once it has ended, the tenant goes.
	live, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(4), Tenant: "acme", Status: event.StatusQueued},
		[]event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"live":"L"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.DeleteTenant(ctx, "acme", store.Deletion{Actor: "admin"})
	wantErr(t, "DeleteTenant(a run queued)", err, store.ErrConflict)
	verify(t, s, a.ID, 2)
	if _, err := s.GetTenant(ctx, "acme"); err != nil {
		t.Errorf("GetTenant() after a refused deletion = %v", err)
	}
	if _, err := s.UpdateRunStatus(ctx, live.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	rec, free, err := s.DeleteTenant(ctx, "acme", store.Deletion{Actor: "admin"})
	if err != nil {
		t.Fatalf("DeleteTenant() = %v", err)
	}
	want := map[string]int64{"runs": 3, "events": 5, "artifacts": 2, "metadata": 1, "ledger_entries": 1, "policy_versions": 1, "template_versions": 1, "api_keys": 1, "tenants": 1}
	for k, v := range want {
		if rec.Counts[k] != v {
			t.Errorf("DeleteTenant() counts[%s] = %d, want %d (%v)", k, rec.Counts[k], v, rec.Counts)
		}
	}
	if len(free) != 2 {
		t.Errorf("DeleteTenant() free = %v, want 2 digests", free)
	}
	_, err = s.GetTenant(ctx, "acme")
	wantErr(t, "GetTenant(deleted)", err, store.ErrNotFound)
	if runs, err := s.ListRuns(ctx, store.RunFilter{Tenant: "acme", Kind: store.KindAny}); err != nil || len(runs) != 0 {
		t.Errorf("ListRuns(deleted tenant) = %v, %v", ids(runs), err)
	}
	if ps, err := s.ListPolicies(ctx, "acme"); err != nil || len(ps) != 0 {
		t.Errorf("ListPolicies(deleted tenant) = %d, %v", len(ps), err)
	}
	verify(t, s, o.ID, 2)
	if _, err := s.GetTenant(ctx, "other"); err != nil {
		t.Errorf("GetTenant(other) = %v", err)
	}
	if list, err := s.ListDeletions(ctx, "", 0); err != nil || len(list) != 1 || list[0].Target != "acme" {
		t.Errorf("ListDeletions() = %+v, %v", list, err)
	}
	_, _, err = s.DeleteTenant(ctx, "acme", store.Deletion{Actor: "admin"})
	wantErr(t, "DeleteTenant(again)", err, store.ErrNotFound)
}

// testMarkTenantDeleting: once a tenant's deletion began, its keys read
// as such, and no run or key of it is created; the other tenant is not
// touched, the mark keeps its first time, and the deletion still works.
func testMarkTenantDeleting(t *testing.T, f Factory) {
	s := twoTenants(t, f)
	ctx := context.Background()
	k, err := s.APIKeyByHash(ctx, newKey("acme", 1).Hash)
	if err != nil || !k.TenantDeleting.IsZero() {
		t.Fatalf("APIKeyByHash() before the mark = %+v, %v; want no TenantDeleting", k, err)
	}
	live, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(1), Tenant: "acme", Status: event.StatusRunning},
		[]event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.MarkTenantDeleting(ctx, "nobody")
	wantErr(t, "MarkTenantDeleting(nobody)", err, store.ErrNotFound)
	tn, err := s.MarkTenantDeleting(ctx, "acme")
	if err != nil || tn.Deleting.IsZero() || tn.Name != "acme" {
		t.Fatalf("MarkTenantDeleting(acme) = %+v, %v", tn, err)
	}
	again, err := s.MarkTenantDeleting(ctx, "acme")
	if err != nil || !again.Deleting.Equal(tn.Deleting) {
		t.Errorf("MarkTenantDeleting(again) = %+v, %v; want the first time %v kept", again, err, tn.Deleting)
	}
	if got, err := s.GetTenant(ctx, "acme"); err != nil || !got.Deleting.Equal(tn.Deleting) {
		t.Errorf("GetTenant(acme) = %+v, %v; want Deleting %v", got, err, tn.Deleting)
	}
	list, err := s.ListTenants(ctx)
	if err != nil || len(list) != 2 || list[0].Deleting.IsZero() || !list[1].Deleting.IsZero() {
		t.Errorf("ListTenants() = %+v, %v; want acme deleting, other not", list, err)
	}
	k, err = s.APIKeyByHash(ctx, newKey("acme", 1).Hash)
	if err != nil || !k.TenantDeleting.Equal(tn.Deleting) {
		t.Errorf("APIKeyByHash(acme's key) = %+v, %v; want TenantDeleting %v", k, err, tn.Deleting)
	}
	if keys, err := s.ListAPIKeys(ctx, "acme"); err != nil || len(keys) != 1 || keys[0].TenantDeleting.IsZero() {
		t.Errorf("ListAPIKeys(acme) = %+v, %v; want its key, TenantDeleting set", keys, err)
	}
	if k, err := s.APIKeyByHash(ctx, newKey("other", 2).Hash); err != nil || !k.TenantDeleting.IsZero() {
		t.Errorf("APIKeyByHash(other's key) = %+v, %v; want no TenantDeleting", k, err)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"CreateRun", func() error {
			_, err := s.CreateRun(ctx, store.Run{ID: runID(2), Tenant: "acme", Status: event.StatusQueued})
			return err
		}},
		{"CreateRunWith", func() error {
			_, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(3), Tenant: "acme", Status: event.StatusQueued},
				[]event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{}`)}})
			return err
		}},
		{"Fork", func() error {
			_, err := s.CreateRun(ctx, store.Run{ID: runID(4), Tenant: "acme", Status: event.StatusQueued, ParentRunID: live.ID, ParentSeq: 1})
			return err
		}},
		{"CreateAPIKey", func() error { return s.CreateAPIKey(ctx, newKey("acme", 3)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			wantErr(t, tt.name+"(a tenant being deleted)", err, store.ErrConflict)
			wantNames(t, tt.name, err, "acme", "being deleted")
		})
	}
	if _, err := s.GetRun(ctx, runID(2)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRun(refused run) = %v, want ErrNotFound", err)
	}
	if _, err := s.CreateRun(ctx, store.Run{ID: runID(5), Tenant: "other", Status: event.StatusQueued}); err != nil {
		t.Errorf("CreateRun(other) = %v", err)
	}
	// A run of a tenant that is not one of the API's (the CLI's own) is
	// not concerned.
	if _, err := s.CreateRun(ctx, store.Run{ID: runID(6), Tenant: "cli-local", Status: event.StatusQueued}); err != nil {
		t.Errorf("CreateRun(no such tenant) = %v", err)
	}
	// The run that was going still moves, and the deletion waits for it.
	_, _, err = s.DeleteTenant(ctx, "acme", store.Deletion{Actor: "admin"})
	wantErr(t, "DeleteTenant(a run running)", err, store.ErrConflict)
	if _, err := s.UpdateRunStatus(ctx, live.ID, event.StatusRunning, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.DeleteTenant(ctx, "acme", store.Deletion{Actor: "admin"}); err != nil {
		t.Fatalf("DeleteTenant() = %v", err)
	}
	if _, err := s.APIKeyByHash(ctx, newKey("acme", 1).Hash); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("APIKeyByHash(deleted tenant's key) = %v, want ErrNotFound", err)
	}
	// A tenant made again under the name starts clean.
	createTenant(t, s, "acme")
	if tn, err := s.GetTenant(ctx, "acme"); err != nil || !tn.Deleting.IsZero() {
		t.Errorf("GetTenant(acme made again) = %+v, %v", tn, err)
	}
}

// testDeletionMarkers writes a unique marker into each kind of data, deletes
// it the way its kind is deleted, and searches every byte the database
// keeps for the marker.
func testDeletionMarkers(t *testing.T, f Factory) {
	if f.Dump == nil {
		t.Skip("the factory has no Dump")
	}
	ctx := context.Background()
	tests := []struct {
		name string
		// write stores data holding marker; del deletes it.
		write func(t *testing.T, s store.Store, marker string)
		del   func(t *testing.T, s store.Store) error
	}{
		{"retention tombstones", func(t *testing.T, s store.Store, m string) {
			markerRun(t, s, 1, "acme", "", m)
		}, func(t *testing.T, s store.Store) error {
			_, _, _, err := s.TombstonePayloads(ctx, runID(1), base, event.ReasonRetention)
			if err == nil {
				// Metadata labels and artifact names are the run's index,
				// not its content: retention keeps them; a purge does not.
				_, _, err = s.PurgeRun(ctx, runID(1), store.Deletion{Actor: "t"})
			}
			return err
		}},
		{"run purge with fork", func(t *testing.T, s store.Store, m string) {
			p, _ := markerRun(t, s, 1, "acme", "", m)
			markerRun(t, s, 2, "acme", p.ID, m)
		}, func(t *testing.T, s store.Store) error {
			_, _, err := s.PurgeRun(ctx, runID(1), store.Deletion{Actor: "t"})
			return err
		}},
		{"tenant", func(t *testing.T, s store.Store, m string) {
			createTenant(t, s, "acme")
			k := newKey("acme", 1)
			k.Name = "key " + m
			createKey(t, s, k)
			markerRun(t, s, 1, "acme", "", m)
			putPolicy(t, s, store.PolicyVersion{Tenant: "acme", Name: "prod", Document: []byte("# " + m + "\n"), Source: m, By: m}, true)
			putTemplate(t, s, store.TemplateVersion{Tenant: "acme", Name: "py", Image: imageA, Document: []byte("# " + m + "\n"), Source: m, By: m}, true)
			if _, err := s.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 5, Note: m}); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, s store.Store) error {
			_, _, err := s.DeleteTenant(ctx, "acme", store.Deletion{Actor: "t"})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, f)
			marker := "MARKER-" + strings.ReplaceAll(tt.name, " ", "-") + "-7f3a9c"
			// Another tenant's data stays, so the search is not trivially
			// empty.
			markerRun(t, s, 50, "keep", "", "KEEP-7f3a9c")
			tt.write(t, s, marker)
			if dump := f.Dump(t, s); !bytes.Contains(dump, []byte(marker)) {
				t.Fatal("the dump does not hold the marker before the deletion: the search proves nothing")
			}
			if err := tt.del(t, s); err != nil {
				t.Fatalf("delete: %v", err)
			}
			dump := f.Dump(t, s)
			if i := bytes.Index(dump, []byte(marker)); i >= 0 {
				t.Errorf("the marker is still in the database after the deletion: %q", dump[max(0, i-60):min(len(dump), i+len(marker)+20)])
			}
			if !bytes.Contains(dump, []byte("KEEP-7f3a9c")) {
				t.Error("the deletion took another tenant's data")
			}
		})
	}
}

// testExpireDeletions: the audit records of deletions expire by tenant:
// those of the tenants listed recorded before the cutoff, or with others
// those of every tenant not listed (the retention passes' and a deleted
// tenant's too); a record at or after the cutoff, and one of a tenant the
// call does not select, stay.
func testExpireDeletions(t *testing.T, f Factory) {
	if f.NewAt == nil {
		t.Skip("the store's clock cannot be set")
	}
	ctx := context.Background()
	var mu sync.Mutex
	now := base
	s := f.NewAt(t, func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	})
	at := func(d time.Duration) {
		mu.Lock()
		now = base.Add(d)
		mu.Unlock()
	}
	record := func(tenant, target string) {
		t.Helper()
		kind := store.DeletionRetention
		if tenant != "" {
			kind = store.DeletionRun
		}
		if _, err := s.RecordDeletion(ctx, store.Deletion{Tenant: tenant, Kind: kind, Target: target, Actor: "test", Counts: map[string]int64{"runs": 1}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, tn := range []string{"acme", "beta", "", "gone"} {
		at(time.Duration(i) * time.Minute)
		record(tn, "old-"+tn)
	}
	at(time.Hour)
	for _, tn := range []string{"acme", "beta", "", "gone"} {
		record(tn, "new-"+tn)
	}
	targets := func() []string {
		t.Helper()
		list, err := s.ListDeletions(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range list {
			out = append(out, d.Target)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name    string
		before  time.Duration
		tenants []string
		others  bool
		n       int64
		left    []string
	}{
		{"nothing selected", time.Hour, nil, false, 0, []string{"new-", "new-acme", "new-beta", "new-gone", "old-", "old-acme", "old-beta", "old-gone"}},
		{"acme, before its record", 0, []string{"acme"}, false, 0, []string{"new-", "new-acme", "new-beta", "new-gone", "old-", "old-acme", "old-beta", "old-gone"}},
		{"acme", time.Hour, []string{"acme"}, false, 1, []string{"new-", "new-acme", "new-beta", "new-gone", "old-", "old-beta", "old-gone"}},
		{"all but beta, up to the retention pass", 2 * time.Minute, []string{"beta"}, true, 0, []string{"new-", "new-acme", "new-beta", "new-gone", "old-", "old-beta", "old-gone"}},
		{"all but beta", time.Hour, []string{"beta"}, true, 2, []string{"new-", "new-acme", "new-beta", "new-gone", "old-beta"}},
		{"all", time.Hour + time.Nanosecond, nil, true, 5, nil},
	} {
		n, err := s.ExpireDeletions(ctx, base.Add(tc.before), tc.tenants, tc.others)
		if err != nil || n != tc.n {
			t.Errorf("%s: ExpireDeletions() = %d, %v; want %d", tc.name, n, err, tc.n)
		}
		if got := targets(); !slices.Equal(got, tc.left) {
			t.Errorf("%s: left %q, want %q", tc.name, got, tc.left)
		}
	}
}

// testPartialRetention: TombstoneCheckpoints replaces a run's
// snapshot.taken payloads only (the task and other payloads stay, the
// chain verifies); DeleteArtifacts deletes its artifacts' records and
// frees the digests no other artifact names; both change nothing the
// second time and refuse a run that does not exist.
func testPartialRetention(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r, own := markerRun(t, s, 1, "acme", "", "PARTIAL-MARKER")
	other, shared := markerRun(t, s, 2, "acme", "", "OTHER-MARKER")
	if _, err := s.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: "shared.txt", Digest: shared, Size: 1, MediaType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	snap, err := event.New(event.SnapshotTaken{Step: 1, Sandbox: "main", Digest: fmt.Sprintf("sha256:%064x", 300), Format: event.FormatCheckpoint, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, r.ID, 3, []event.Event{snap}); err != nil {
		t.Fatal(err)
	}
	at := base.Add(48 * time.Hour)
	n, err := s.TombstoneCheckpoints(ctx, r.ID, at, event.ReasonRetention)
	if err != nil || n != 1 {
		t.Fatalf("TombstoneCheckpoints() = %d, %v; want 1", n, err)
	}
	for _, e := range allEvents(t, s, r.ID) {
		if _, gone := event.ParseTombstone(e.Payload); gone != (e.Type == event.TypeSnapshotTaken) {
			t.Errorf("seq %d (%s): tombstone %v", e.Seq, e.Type, gone)
		}
	}
	c, err := store.VerifyRunChain(ctx, s, r.ID)
	if err != nil {
		t.Fatalf("VerifyRunChain() = %v", err)
	}
	if d, _ := c.Deleted(); d != 1 {
		t.Errorf("Deleted() = %d, want 1", d)
	}
	if got, err := s.GetRun(ctx, r.ID); err != nil || got.Task != "task PARTIAL-MARKER" {
		t.Errorf("GetRun() task = %q, %v; want it kept", got.Task, err)
	}
	if n, err := s.TombstoneCheckpoints(ctx, r.ID, at, event.ReasonRetention); err != nil || n != 0 {
		t.Errorf("TombstoneCheckpoints(again) = %d, %v; want 0", n, err)
	}

	n, free, err := s.DeleteArtifacts(ctx, r.ID, at, event.ReasonRetention)
	if err != nil || n != 2 {
		t.Fatalf("DeleteArtifacts() = %d, %v; want 2", n, err)
	}
	if len(free) != 1 || free[0] != own {
		t.Errorf("DeleteArtifacts() free = %v, want [%s] (%s is run 2's too)", free, own, shared)
	}
	if arts, err := s.ListArtifacts(ctx, r.ID); err != nil || len(arts) != 0 {
		t.Errorf("ListArtifacts() = %v, %v; want none", arts, err)
	}
	if arts, err := s.ListArtifacts(ctx, other.ID); err != nil || len(arts) != 1 {
		t.Errorf("ListArtifacts(other run) = %v, %v; want its one", arts, err)
	}
	if n, free, err := s.DeleteArtifacts(ctx, r.ID, at, event.ReasonRetention); err != nil || n != 0 || len(free) != 0 {
		t.Errorf("DeleteArtifacts(again) = %d, %v, %v; want 0", n, free, err)
	}
	_, err = s.TombstoneCheckpoints(ctx, runID(99), at, event.ReasonRetention)
	wantErr(t, "TombstoneCheckpoints(no such run)", err, store.ErrNotFound)
	_, _, err = s.DeleteArtifacts(ctx, runID(99), at, event.ReasonRetention)
	wantErr(t, "DeleteArtifacts(no such run)", err, store.ErrNotFound)
}
