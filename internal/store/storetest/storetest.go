// Package storetest is the conformance suite for store.Store: every
// implementation runs it from its own tests, against a real database
// (containerd's snapshotter suite is the model).
//
//	var factory = storetest.Factory{New: newStore, Reopen: reopen, Tamper: tamper}
//
//	func TestConformance(t *testing.T) { storetest.Run(t, factory) }
//	func BenchmarkStore(b *testing.B)  { storetest.Bench(b, factory) }
//
// Importers: tests only (of the store implementations).
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Factory tells the suite how to get stores.
type Factory struct {
	// New returns a new, empty store that redacts with r. The suite closes
	// it when the test ends (Bench: when the benchmark ends).
	New func(t testing.TB, r store.Redactor) store.Store
	// Reopen returns another, independent handle on the database behind s,
	// as a second process would open it; s may be open or closed. The suite
	// closes it. Optional: the tests that need it are skipped when nil.
	Reopen func(t *testing.T, s store.Store) store.Store
	// Tamper overwrites the payload of event seq of run runID behind the
	// store's back (raw SQL), as an attacker with write access to the
	// database would. Optional: the test is skipped when nil.
	Tamper func(t *testing.T, s store.Store, runID string, seq int64, payload []byte)
	// NewAt returns a new, empty store without redaction whose clock
	// (its Options.Now) is now, so lease expiry can be tested without
	// sleeping. The suite closes it. Optional: the tests that need it are
	// skipped when nil.
	NewAt func(t *testing.T, now func() time.Time) store.Store
	// Dump returns every byte the database behind s keeps (after making
	// the store's deletions final: a SQLite checkpoint; every text and
	// bytea column of PostgreSQL), so a test can search it for content
	// that was deleted. Optional: the tests that need it are skipped when
	// nil.
	Dump func(t *testing.T, s store.Store) []byte
}

// Run runs the conformance suite.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f Factory)
	}{
		{"CreateGetRun", testCreateGetRun},
		{"CreateRunInvalid", testCreateRunInvalid},
		{"CreateRunWith", testCreateRunWith},
		{"Fork", testFork},
		{"ListRuns", testListRuns},
		{"ListRunsPaging", testListRunsPaging},
		{"ListRunsMetadata", testListRunsMetadata},
		{"UpdateRunStatus", testUpdateRunStatus},
		{"StatusRace", testStatusRace},
		{"Append", testAppend},
		{"AppendConflict", testAppendConflict},
		{"AppendInvalid", testAppendInvalid},
		{"AppendCancelled", testAppendCancelled},
		{"AppendStatus", testAppendStatus},
		{"AppendUpdated", testAppendUpdated},
		{"ConcurrentAppenders", testConcurrentAppenders},
		{"EventsPaging", testEventsPaging},
		{"Unfinished", testUnfinished},
		{"Kind", testKind},
		{"Artifacts", testArtifacts},
		{"Redaction", testRedaction},
		{"Reopen", testReopen},
		{"TwoHandles", testTwoHandles},
		{"Tamper", testTamper},
		{"Closed", testClosed},
		{"Text", testText},
		{"Lease", testLease},
		{"LeaseTakeover", testLeaseTakeover},
		{"LeaseLapsed", testLeaseLapsed},
		{"LeaseInvalid", testLeaseInvalid},
		{"LeaseRace", testLeaseRace},
		{"Ledger", testLedger},
		{"LedgerDebitRetry", testLedgerDebitRetry},
		{"LedgerInvalid", testLedgerInvalid},
		{"LedgerTenants", testLedgerTenants},
		{"LedgerPaging", testLedgerPaging},
		{"LedgerRace", testLedgerRace},
		{"LedgerRedaction", testLedgerRedaction},
		{"Policies", testPolicies},
		{"PolicyHash", testPolicyHash},
		{"PolicyAmbiguous", testPolicyAmbiguous},
		{"PolicyInvalid", testPolicyInvalid},
		{"PolicyRace", testPolicyRace},
		{"PolicyRedaction", testPolicyRedaction},
		{"Templates", testTemplates},
		{"TemplateInvalid", testTemplateInvalid},
		{"TemplateRace", testTemplateRace},
		{"TemplateRedaction", testTemplateRedaction},
		{"Tenants", testTenants},
		{"TenantRace", testTenantRace},
		{"APIKeys", testAPIKeys},
		{"APIKeyInvalid", testAPIKeyInvalid},
		{"APIKeyHandles", testAPIKeyHandles},
		{"APIKeyRedaction", testAPIKeyRedaction},
		{"UISessions", testUISessions},
		{"UISessionRace", testUISessionRace},
		{"TombstonePayloads", testTombstonePayloads},
		{"PartialRetention", testPartialRetention},
		{"PurgeRun", testPurgeRun},
		{"DeleteTenant", testDeleteTenant},
		{"MarkTenantDeleting", testMarkTenantDeleting},
		{"DeletionMarkers", testDeletionMarkers},
		{"ExpireDeletions", testExpireDeletions},
		{"SandboxEvents", testSandboxEvents},
		{"Uploads", testUploads},
		{"Secrets", testSecrets},
		{"SecretKeyRace", testSecretKeyRace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, f) })
	}
}

// base is the creation time of the runs the suite makes.
var base = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// runID returns the same valid run id for the same i, and ids that sort in
// i order: the timestamp of a real id made at base + i ms, and i in the
// random part.
func runID(i int) string {
	id := event.NewRunID(base.Add(time.Duration(i) * time.Millisecond))
	return id[:len(event.RunIDPrefix)+10] + fmt.Sprintf("%016d", i)
}

func newStore(t *testing.T, f Factory) store.Store {
	t.Helper()
	return open(t, f, store.NoRedaction)
}

func open(t *testing.T, f Factory, r store.Redactor) store.Store {
	t.Helper()
	s := f.New(t, r)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return s
}

func reopen(t *testing.T, f Factory, s store.Store) store.Store {
	t.Helper()
	if f.Reopen == nil {
		t.Skip("the factory has no Reopen")
	}
	s2 := f.Reopen(t, s)
	t.Cleanup(func() {
		if err := s2.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return s2
}

func createRun(t *testing.T, s store.Store, r store.Run) store.Run {
	t.Helper()
	if r.Tenant == "" {
		r.Tenant = "acme"
	}
	if r.Status == "" {
		r.Status = event.StatusQueued
	}
	got, err := s.CreateRun(context.Background(), r)
	if err != nil {
		t.Fatalf("CreateRun(%s) = %v", r.ID, err)
	}
	return got
}

// draft returns a draft of a retry event whose payload records who wrote
// it, so tests can tell batches apart.
func draft(t *testing.T, writer, batch, i int) event.Event {
	t.Helper()
	b, err := json.Marshal(map[string]int{"w": writer, "b": batch, "i": i})
	if err != nil {
		t.Fatal(err)
	}
	return event.Event{Type: event.TypeRetry, Payload: b}
}

func drafts(t *testing.T, writer, batch, n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = draft(t, writer, batch, i)
	}
	return out
}

func appendN(t *testing.T, s store.Store, id string, next int64, n int) []event.Event {
	t.Helper()
	evs, err := s.Append(context.Background(), id, next, drafts(t, 0, int(next), n))
	if err != nil {
		t.Fatalf("Append(%s, %d, %d drafts) = %v", id, next, n, err)
	}
	return evs
}

func allEvents(t *testing.T, s store.Store, id string) []event.Event {
	t.Helper()
	var out []event.Event
	for {
		page, err := s.Events(context.Background(), id, int64(len(out))+1, store.MaxPage)
		if err != nil {
			t.Fatalf("Events(%s) = %v", id, err)
		}
		out = append(out, page...)
		if len(page) < store.MaxPage {
			return out
		}
	}
}

func verify(t *testing.T, s store.Store, id string, want int64) {
	t.Helper()
	n, err := store.VerifyRun(context.Background(), s, id)
	if err != nil || n != want {
		t.Fatalf("VerifyRun(%s) = %d, %v, want %d, nil", id, n, err, want)
	}
}

func sameEvent(a, b event.Event) bool {
	return a.RunID == b.RunID && a.Seq == b.Seq && a.Type == b.Type && a.Time.Equal(b.Time) &&
		bytes.Equal(a.Payload, b.Payload) && a.PrevHash == b.PrevHash && a.Hash == b.Hash
}

func sameRun(a, b store.Run) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Task == b.Task && a.Model == b.Model &&
		bytes.Equal(a.Policy, b.Policy) && a.PolicyHash == b.PolicyHash && a.Status == b.Status &&
		a.Created.Equal(b.Created) && a.Updated.Equal(b.Updated) && a.Finished.Equal(b.Finished) &&
		a.ParentRunID == b.ParentRunID && a.ParentSeq == b.ParentSeq && a.LastSeq == b.LastSeq && a.LastHash == b.LastHash &&
		a.LeaseOwner == b.LeaseOwner && a.LeaseToken == b.LeaseToken && a.LeaseExpires.Equal(b.LeaseExpires)
}

func ids(runs []store.Run) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.ID
	}
	return out
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s = %v, want %v", what, err, target)
	}
}

// wantNames fails unless err's text names each of names: an error says
// what its call was writing (the run, the artifact, the tenant...), also
// when the store refused it half-way.
func wantNames(t *testing.T, what string, err error, names ...string) {
	t.Helper()
	for _, n := range names {
		if err == nil || !strings.Contains(err.Error(), n) {
			t.Errorf("%s = %v, want an error naming %q", what, err, n)
		}
	}
}

// testCreateRunWith: a run and its first events are stored together or not
// at all.
func testCreateRunWith(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	created, err := event.New(event.RunCreated{Tenant: "acme", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	started, _ := event.New(event.RunStarted{Host: "h"})
	r, evs, err := s.CreateRunWith(ctx, store.Run{ID: runID(1), Tenant: "acme", Status: event.StatusQueued}, []event.Event{created, started})
	if err != nil {
		t.Fatalf("CreateRunWith() = %v", err)
	}
	if len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 2 || evs[0].RunID != r.ID {
		t.Fatalf("CreateRunWith() events = %+v", evs)
	}
	if err := event.Verify(evs); err != nil {
		t.Fatalf("Verify(returned events) = %v", err)
	}
	if r.LastSeq != 2 || r.LastHash != evs[1].Hash {
		t.Errorf("CreateRunWith() run tail = %d %x, want 2 %x", r.LastSeq, r.LastHash, evs[1].Hash)
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil || got.LastSeq != 2 || got.LastHash != evs[1].Hash || got.Status != event.StatusQueued {
		t.Fatalf("GetRun() = %+v, %v", got, err)
	}
	stored, err := s.Events(ctx, r.ID, 1, 10)
	if err != nil || len(stored) != 2 || stored[1].Hash != evs[1].Hash {
		t.Fatalf("Events() = %+v, %v", stored, err)
	}

	// Nothing of a refused create stays: neither the run nor its events.
	bad := event.Event{Type: "x.bad", Payload: json.RawMessage(`{not json`)}
	for _, tc := range []struct {
		name  string
		run   store.Run
		first []event.Event
	}{
		{"bad event", store.Run{ID: runID(2), Tenant: "acme", Status: event.StatusQueued}, []event.Event{created, bad}},
		{"no events", store.Run{ID: runID(3), Tenant: "acme", Status: event.StatusQueued}, nil},
		{"missing parent", store.Run{ID: runID(4), Tenant: "acme", Status: event.StatusQueued, ParentRunID: runID(99), ParentSeq: 1}, []event.Event{created}},
	} {
		if _, _, err := s.CreateRunWith(ctx, tc.run, tc.first); err == nil {
			t.Errorf("%s: CreateRunWith() succeeded", tc.name)
		}
		if _, err := s.GetRun(ctx, tc.run.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: GetRun() after a refused create = %v, want ErrNotFound", tc.name, err)
		}
	}
	// A writer fenced by a lease (a run's driver) creates no run: a new
	// run has no lease, so no fencing token is its current one.
	fenced := store.WithFence(ctx, 7)
	if _, _, err := s.CreateRunWith(fenced, store.Run{ID: runID(5), Tenant: "acme", Status: event.StatusQueued}, []event.Event{created}); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("CreateRunWith(fenced ctx) = %v, want ErrLeaseLost", err)
	}
	if _, err := s.GetRun(ctx, runID(5)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetRun() after a fenced create = %v, want ErrNotFound", err)
	}
	if _, _, err := s.CreateRunWith(ctx, store.Run{ID: r.ID, Tenant: "acme", Status: event.StatusQueued}, []event.Event{created}); !errors.Is(err, store.ErrExists) {
		t.Errorf("CreateRunWith(taken id) = %v, want ErrExists", err)
	}
	if after, err := s.Events(ctx, r.ID, 1, 10); err != nil || len(after) != 2 {
		t.Errorf("the existing run's log after a create with its id: %d events, %v", len(after), err)
	}
}

func testCreateGetRun(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	in := store.Run{
		ID:         runID(1),
		Tenant:     "acme",
		Task:       "fix the failing test ✓",
		Model:      "anthropic:claude-x",
		Policy:     []byte("network:\n  default: deny\n\x00binary\xff"),
		PolicyHash: "sha256:0123",
		Status:     event.StatusQueued,
		Created:    time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 7200)),
	}
	got, err := s.CreateRun(ctx, in)
	if err != nil {
		t.Fatalf("CreateRun() = %v", err)
	}
	want := in
	want.Created = in.Created.UTC()
	want.Updated = want.Created
	if !sameRun(got, want) || got.Created.Location() != time.UTC {
		t.Fatalf("CreateRun() = %+v, want %+v", got, want)
	}
	read, err := s.GetRun(ctx, in.ID)
	if err != nil || !sameRun(read, want) || read.Created.Location() != time.UTC {
		t.Fatalf("GetRun() = %+v, %v, want %+v", read, err, want)
	}
	if _, err := s.CreateRun(ctx, in); !errors.Is(err, store.ErrExists) {
		t.Fatalf("CreateRun(same id) = %v, want ErrExists", err)
	}
	_, err = s.GetRun(ctx, runID(2))
	wantErr(t, "GetRun(missing)", err, store.ErrNotFound)

	// Created defaults to now, and an empty policy reads back empty.
	before := time.Now()
	r2 := createRun(t, s, store.Run{ID: runID(3)})
	if r2.Created.IsZero() || r2.Created.Before(before.Add(-time.Hour)) || r2.Policy == nil {
		t.Fatalf("CreateRun(no times) = %+v; want Created set and a non-nil Policy", r2)
	}
}

func testCreateRunInvalid(t *testing.T, f Factory) {
	s := newStore(t, f)
	ok := store.Run{ID: runID(1), Tenant: "acme", Status: event.StatusQueued}
	tests := []struct {
		name string
		mod  func(r *store.Run)
	}{
		{"bad id", func(r *store.Run) { r.ID = "run_1" }},
		{"no tenant", func(r *store.Run) { r.Tenant = "" }},
		{"bad tenant", func(r *store.Run) { r.Tenant = "a b" }},
		{"long tenant", func(r *store.Run) { r.Tenant = strings.Repeat("a", store.MaxTenantLen+1) }},
		{"no status", func(r *store.Run) { r.Status = "" }},
		{"unknown status", func(r *store.Run) { r.Status = "done" }},
		{"final status", func(r *store.Run) { r.Status = event.StatusCompleted }},
		{"task not UTF-8", func(r *store.Run) { r.Task = "\xff" }},
		{"task too long", func(r *store.Run) { r.Task = strings.Repeat("x", store.MaxTaskLen+1) }},
		{"created out of range", func(r *store.Run) { r.Created = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"updated out of range", func(r *store.Run) { r.Updated = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"model control char", func(r *store.Run) { r.Model = "a\nb" }},
		{"policy too large", func(r *store.Run) { r.Policy = make([]byte, store.MaxPolicyLen+1) }},
		{"parent seq alone", func(r *store.Run) { r.ParentSeq = 1 }},
		{"bad parent", func(r *store.Run) { r.ParentRunID, r.ParentSeq = "x", 1 }},
		{"own parent", func(r *store.Run) { r.ParentRunID, r.ParentSeq = r.ID, 1 }},
		{"parent without seq", func(r *store.Run) { r.ParentRunID = runID(2) }},
		{"missing parent", func(r *store.Run) { r.ParentRunID, r.ParentSeq = runID(2), 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.mod(&r)
			_, err := s.CreateRun(context.Background(), r)
			wantErr(t, "CreateRun()", err, store.ErrInvalid)
			if _, err := s.GetRun(context.Background(), ok.ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("after a refused CreateRun, GetRun() = %v, want ErrNotFound", err)
			}
		})
	}
}

func testFork(t *testing.T, f Factory) {
	s := newStore(t, f)
	parent := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, parent.ID, 1, 5)
	child := createRun(t, s, store.Run{ID: runID(2), ParentRunID: parent.ID, ParentSeq: 5})
	if child.ParentRunID != parent.ID || child.ParentSeq != 5 {
		t.Fatalf("CreateRun(fork) = %+v", child)
	}
	got, err := s.GetRun(context.Background(), child.ID)
	if err != nil || got.ParentRunID != parent.ID || got.ParentSeq != 5 {
		t.Fatalf("GetRun(fork) = %+v, %v", got, err)
	}
	_, err = s.CreateRun(context.Background(), store.Run{ID: runID(3), Tenant: "acme", Status: event.StatusQueued, ParentRunID: parent.ID, ParentSeq: 6})
	wantErr(t, "CreateRun(fork past the parent's log)", err, store.ErrInvalid)
}

// statusPath lists legal transitions from queued to each status.
var statusPath = map[event.Status][]event.Status{
	event.StatusQueued:             nil,
	event.StatusRunning:            {event.StatusRunning},
	event.StatusAwaitingApproval:   {event.StatusRunning, event.StatusAwaitingApproval},
	event.StatusPaused:             {event.StatusRunning, event.StatusPaused},
	event.StatusCompleted:          {event.StatusRunning, event.StatusCompleted},
	event.StatusFailedVerification: {event.StatusRunning, event.StatusFailedVerification},
	event.StatusFailed:             {event.StatusFailed},
	event.StatusCancelled:          {event.StatusCancelled},
}

func moveTo(t *testing.T, s store.Store, id string, to event.Status) store.Run {
	t.Helper()
	r, err := s.GetRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, next := range statusPath[to] {
		r, err = s.UpdateRunStatus(context.Background(), id, r.Status, next)
		if err != nil {
			t.Fatalf("UpdateRunStatus(%s, %s, %s) = %v", id, r.Status, next, err)
		}
	}
	return r
}

func testListRuns(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	// i: tenant, status
	setup := []struct {
		tenant string
		status event.Status
	}{
		{"a", event.StatusQueued},
		{"b", event.StatusRunning},
		{"a", event.StatusCompleted},
		{"a", event.StatusRunning},
		{"b", event.StatusPaused},
		{"a", event.StatusAwaitingApproval},
	}
	var all []string
	for i, r := range setup {
		createRun(t, s, store.Run{ID: runID(i), Tenant: r.tenant})
		moveTo(t, s, runID(i), r.status)
		all = append(all, runID(i))
	}
	rev := slices.Clone(all)
	slices.Reverse(rev)
	tests := []struct {
		name string
		f    store.RunFilter
		want []string
	}{
		{"all", store.RunFilter{}, all},
		{"desc", store.RunFilter{Desc: true}, rev},
		{"tenant", store.RunFilter{Tenant: "a"}, []string{all[0], all[2], all[3], all[5]}},
		{"status", store.RunFilter{Statuses: []event.Status{event.StatusRunning}}, []string{all[1], all[3]}},
		{"statuses", store.RunFilter{Statuses: []event.Status{event.StatusRunning, event.StatusPaused}}, []string{all[1], all[3], all[4]}},
		{"tenant and status", store.RunFilter{Tenant: "b", Statuses: []event.Status{event.StatusRunning}}, []string{all[1]}},
		{"limit", store.RunFilter{Limit: 2}, all[:2]},
		{"after", store.RunFilter{After: all[2]}, all[3:]},
		{"after desc", store.RunFilter{After: all[2], Desc: true}, []string{all[1], all[0]}},
		{"after last", store.RunFilter{After: all[5]}, nil},
		{"no tenant match", store.RunFilter{Tenant: "c"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ListRuns(ctx, tt.f)
			if err != nil || !slices.Equal(ids(got), tt.want) {
				t.Fatalf("ListRuns(%+v) = %v, %v, want %v", tt.f, ids(got), err, tt.want)
			}
		})
	}
	for _, bad := range []store.RunFilter{{Tenant: "a b"}, {Statuses: []event.Status{"x"}}, {After: "run_x"}} {
		_, err := s.ListRuns(ctx, bad)
		wantErr(t, fmt.Sprintf("ListRuns(%+v)", bad), err, store.ErrInvalid)
	}
}

func testListRunsPaging(t *testing.T, f Factory) {
	s := newStore(t, f)
	var want []string
	for i := range 7 {
		createRun(t, s, store.Run{ID: runID(i)})
		want = append(want, runID(i))
	}
	for _, desc := range []bool{false, true} {
		var got []string
		fl := store.RunFilter{Limit: 3, Desc: desc}
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("paging does not end")
			}
			page, err := s.ListRuns(context.Background(), fl)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(page)...)
			if len(page) < fl.Limit {
				break
			}
			fl.After = page[len(page)-1].ID
		}
		w := slices.Clone(want)
		if desc {
			slices.Reverse(w)
		}
		if !slices.Equal(got, w) {
			t.Fatalf("paging (desc %v) = %v, want %v", desc, got, w)
		}
	}
}

func testUpdateRunStatus(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})

	got, err := s.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusRunning)
	if err != nil || got.Status != event.StatusRunning || !got.Finished.IsZero() || got.Updated.Before(r.Updated) {
		t.Fatalf("UpdateRunStatus(queued -> running) = %+v, %v", got, err)
	}
	// Compare-and-set: the expected status is stale.
	_, err = s.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusCancelled)
	var ce *store.StatusConflictError
	if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) || ce.Got != event.StatusRunning || ce.Want != event.StatusQueued {
		t.Fatalf("UpdateRunStatus(stale from) = %v, want a StatusConflictError with Got running", err)
	}
	// Illegal transitions never reach the database.
	_, err = s.UpdateRunStatus(ctx, r.ID, event.StatusRunning, event.StatusQueued)
	wantErr(t, "UpdateRunStatus(running -> queued)", err, event.ErrTransition)
	_, err = s.UpdateRunStatus(ctx, runID(9), event.StatusQueued, event.StatusRunning)
	wantErr(t, "UpdateRunStatus(missing run)", err, store.ErrNotFound)

	done, err := s.UpdateRunStatus(ctx, r.ID, event.StatusRunning, event.StatusCompleted)
	if err != nil || done.Status != event.StatusCompleted || done.Finished.IsZero() {
		t.Fatalf("UpdateRunStatus(running -> completed) = %+v, %v; want Finished set", done, err)
	}
	read, err := s.GetRun(ctx, r.ID)
	if err != nil || !sameRun(read, done) {
		t.Fatalf("GetRun() = %+v, %v, want %+v", read, err, done)
	}
	for _, to := range event.Statuses() {
		if _, err := s.UpdateRunStatus(ctx, r.ID, event.StatusCompleted, to); !errors.Is(err, event.ErrTransition) {
			t.Fatalf("UpdateRunStatus(completed -> %s) = %v, want ErrTransition", to, err)
		}
	}
}

// testStatusRace has several goroutines race to move one run from running:
// exactly one wins, the others see a conflict naming the winner's status.
func testStatusRace(t *testing.T, f Factory) {
	s := newStore(t, f)
	r := createRun(t, s, store.Run{ID: runID(1)})
	moveTo(t, s, r.ID, event.StatusRunning)
	targets := []event.Status{event.StatusCompleted, event.StatusFailed, event.StatusCancelled, event.StatusPaused, event.StatusFailedVerification}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, to := range targets {
		wg.Go(func() {
			_, errs[i] = s.UpdateRunStatus(context.Background(), r.ID, event.StatusRunning, to)
		})
	}
	wg.Wait()
	final, err := s.GetRun(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	wins := 0
	for i, err := range errs {
		var ce *store.StatusConflictError
		switch {
		case err == nil:
			wins++
			if final.Status != targets[i] {
				t.Errorf("winner set %s, run is %s", targets[i], final.Status)
			}
		case errors.As(err, &ce):
			if ce.Got == event.StatusRunning {
				t.Errorf("conflict reports the old status: %v", err)
			}
		default:
			t.Errorf("UpdateRunStatus(running -> %s) = %v", targets[i], err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d goroutines won the status race, want 1", wins)
	}
}

func testAppend(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})

	if _, err := s.LastEvent(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LastEvent(empty log) = %v, want ErrNotFound", err)
	}
	if evs, err := s.Events(ctx, r.ID, 1, 10); err != nil || len(evs) != 0 {
		t.Fatalf("Events(empty log) = %v, %v, want none", evs, err)
	}
	created, err := event.New(event.RunCreated{Tenant: "acme", Task: "t <b>"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 987654321, time.FixedZone("y", -3600))
	created.Time = at
	started, _ := event.New(event.RunStarted{Host: "h"})
	started.RunID, started.Seq = r.ID, 2 // allowed: exactly the values the store would set
	future := event.Event{Type: "x.from_the_future", Payload: json.RawMessage(` { "b" : 1 , "a" : [ ] } `)}

	evs, err := s.Append(ctx, r.ID, 1, []event.Event{created, started, future})
	if err != nil {
		t.Fatalf("Append() = %v", err)
	}
	if len(evs) != 3 {
		t.Fatalf("Append() returned %d events, want 3", len(evs))
	}
	for i, e := range evs {
		if e.RunID != r.ID || e.Seq != int64(i+1) || e.Time.IsZero() || e.Time.Location() != time.UTC {
			t.Errorf("Append()[%d] = %+v", i, e)
		}
	}
	if !evs[0].Time.Equal(at) {
		t.Errorf("Append() time = %v, want %v (to the nanosecond)", evs[0].Time, at)
	}
	if string(evs[2].Payload) != `{"b":1,"a":[]}` {
		t.Errorf("payload stored as %s, want canonical JSON", evs[2].Payload)
	}
	if err := event.Verify(evs); err != nil {
		t.Fatalf("Verify(returned events) = %v", err)
	}
	read := allEvents(t, s, r.ID)
	if len(read) != len(evs) {
		t.Fatalf("Events() = %d events, want %d", len(read), len(evs))
	}
	for i := range read {
		if !sameEvent(read[i], evs[i]) || read[i].Time.Location() != time.UTC {
			t.Errorf("Events()[%d] = %+v, want %+v", i, read[i], evs[i])
		}
	}
	last, err := s.LastEvent(ctx, r.ID)
	if err != nil || !sameEvent(last, evs[2]) {
		t.Fatalf("LastEvent() = %+v, %v, want %+v", last, err, evs[2])
	}
	got, err := s.GetRun(ctx, r.ID)
	if err != nil || got.LastSeq != 3 || got.LastHash != evs[2].Hash {
		t.Fatalf("GetRun() LastSeq, LastHash = %d, %s, %v; want 3, %s", got.LastSeq, got.LastHash, err, evs[2].Hash)
	}
	more := appendN(t, s, r.ID, 4, 2)
	if more[0].PrevHash != evs[2].Hash {
		t.Fatalf("second append does not link to the first")
	}
	verify(t, s, r.ID, 5)
	if p, err := more[0].Unpack(); err != nil || p.(*event.Retry) == nil {
		t.Fatalf("Unpack() = %v, %v", p, err)
	}
}

// testAppendUpdated: a run's Updated moves with its log, not only with
// its status (a long run's listing must not look stale).
func testAppendUpdated(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	if !r.Updated.Equal(clock.Now()) {
		t.Fatalf("CreateRun() Updated = %v, want %v", r.Updated, clock.Now())
	}
	for i := 1; i <= 3; i++ {
		clock.Advance(time.Minute)
		appendN(t, s, r.ID, int64(2*i-1), 2)
		got, err := s.GetRun(ctx, r.ID)
		if err != nil || !got.Updated.Equal(clock.Now()) || got.Status != r.Status {
			t.Fatalf("GetRun() after append %d = Updated %v, status %s, %v; want Updated %v, status %s", i, got.Updated, got.Status, err, clock.Now(), r.Status)
		}
	}
	// A clock that steps back does not move Updated back.
	before := clock.Now()
	clock.Advance(-time.Hour)
	appendN(t, s, r.ID, 7, 1)
	if got, err := s.GetRun(ctx, r.ID); err != nil || !got.Updated.Equal(before) {
		t.Fatalf("GetRun() after the clock stepped back = Updated %v, %v; want %v", got.Updated, err, before)
	}
}

func testAppendConflict(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 3)
	for _, next := range []int64{1, 3, 5, 100} {
		_, err := s.Append(ctx, r.ID, next, drafts(t, 1, 0, 2))
		var ce *store.AppendConflictError
		if !errors.As(err, &ce) || !errors.Is(err, store.ErrConflict) || ce.Got != 4 || ce.Want != next {
			t.Fatalf("Append(next %d) = %v, want an AppendConflictError with Got 4", next, err)
		}
	}
	_, err := s.Append(ctx, runID(2), 1, drafts(t, 0, 0, 1))
	wantErr(t, "Append(missing run)", err, store.ErrNotFound)
	_, err = s.Events(ctx, runID(2), 1, 10)
	wantErr(t, "Events(missing run)", err, store.ErrNotFound)
	_, err = s.LastEvent(ctx, runID(2))
	wantErr(t, "LastEvent(missing run)", err, store.ErrNotFound)
	verify(t, s, r.ID, 3)
}

// testAppendInvalid checks that a batch with one bad draft writes nothing.
func testAppendInvalid(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 2)
	other := runID(2)
	tests := []struct {
		name string
		bad  func(e *event.Event)
	}{
		{"payload not JSON", func(e *event.Event) { e.Payload = json.RawMessage(`{"a":`) }},
		{"payload array", func(e *event.Event) { e.Payload = json.RawMessage(`[1]`) }},
		{"payload too large", func(e *event.Event) {
			e.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", event.MaxPayloadSize) + `"}`)
		}},
		{"payload trailing data", func(e *event.Event) { e.Payload = json.RawMessage(`{}{}`) }},
		{"bad type", func(e *event.Event) { e.Type = "Tool Finished" }},
		{"no type", func(e *event.Event) { e.Type = "" }},
		{"other run", func(e *event.Event) { e.RunID = other }},
		{"wrong seq", func(e *event.Event) { e.Seq = 9 }},
		{"hash set", func(e *event.Event) { e.Hash[0] = 1 }},
		{"prev hash set", func(e *event.Event) { e.PrevHash[0] = 1 }},
		{"time out of range", func(e *event.Event) { e.Time = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := drafts(t, 0, 0, 5)
			tt.bad(&ds[3])
			_, err := s.Append(ctx, r.ID, 3, ds)
			wantErr(t, "Append()", err, store.ErrInvalid)
			verify(t, s, r.ID, 2)
		})
	}
	for _, n := range []int{0, store.MaxBatch + 1} {
		_, err := s.Append(ctx, r.ID, 3, make([]event.Event, n))
		wantErr(t, fmt.Sprintf("Append(%d drafts)", n), err, store.ErrInvalid)
	}
	_, err := s.Append(ctx, r.ID, 0, drafts(t, 0, 0, 1))
	wantErr(t, "Append(next 0)", err, store.ErrInvalid)
	_, err = s.Append(ctx, "nope", 1, drafts(t, 0, 0, 1))
	wantErr(t, "Append(bad run id)", err, store.ErrInvalid)
	verify(t, s, r.ID, 2)
}

// testAppendCancelled cancels large appends at various moments: each one
// is written whole or not at all, and what Append returned says which.
func testAppendCancelled(t *testing.T, f Factory) {
	s := newStore(t, f)
	r := createRun(t, s, store.Run{ID: runID(1)})
	const n = 2000
	batch := drafts(t, 0, 0, n)
	var next int64 = 1
	for _, delay := range []time.Duration{-1, 0, 50 * time.Microsecond, 500 * time.Microsecond, 2 * time.Millisecond, 10 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		if delay < 0 {
			cancel()
		}
		var wg sync.WaitGroup
		if delay >= 0 {
			wg.Go(func() {
				time.Sleep(delay)
				cancel()
			})
		}
		_, err := s.Append(ctx, r.ID, next, batch)
		wg.Wait()
		cancel()
		got, gerr := s.GetRun(context.Background(), r.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch {
		case err == nil && got.LastSeq == next-1+n:
			next += n
		case err != nil && got.LastSeq == next-1:
		default:
			t.Fatalf("cancel after %v: Append() = %v and the log ends at %d; want all %d events or none after %d",
				delay, err, got.LastSeq, n, next-1)
		}
		verify(t, s, r.ID, next-1)
	}
}

func testAppendStatus(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	moveTo(t, s, r.ID, event.StatusRunning)
	appendN(t, s, r.ID, 1, 2)
	done, _ := event.New(event.RunCompleted{Summary: "ok", Steps: 1})

	// A stale status: neither the events nor the status change.
	_, _, err := s.AppendStatus(ctx, r.ID, 3, event.StatusPaused, event.StatusRunning, []event.Event{done})
	wantErr(t, "AppendStatus(stale status)", err, store.ErrConflict)
	// A stale seq: nothing either.
	_, _, err = s.AppendStatus(ctx, r.ID, 2, event.StatusRunning, event.StatusCompleted, []event.Event{done})
	wantErr(t, "AppendStatus(stale seq)", err, store.ErrConflict)
	_, _, err = s.AppendStatus(ctx, r.ID, 3, event.StatusRunning, event.StatusQueued, []event.Event{done})
	wantErr(t, "AppendStatus(illegal transition)", err, event.ErrTransition)
	got, err := s.GetRun(ctx, r.ID)
	if err != nil || got.Status != event.StatusRunning || got.LastSeq != 2 {
		t.Fatalf("after refused AppendStatus: status %s, last seq %d, %v; want running, 2", got.Status, got.LastSeq, err)
	}

	run, evs, err := s.AppendStatus(ctx, r.ID, 3, event.StatusRunning, event.StatusCompleted, []event.Event{done})
	if err != nil || len(evs) != 1 || run.Status != event.StatusCompleted || run.Finished.IsZero() || run.LastSeq != 3 || run.LastHash != evs[0].Hash {
		t.Fatalf("AppendStatus() = %+v, %v, %v", run, evs, err)
	}
	read, err := s.GetRun(ctx, r.ID)
	if err != nil || !sameRun(read, run) {
		t.Fatalf("GetRun() = %+v, %v, want %+v", read, err, run)
	}
	verify(t, s, r.ID, 3)
}

// testConcurrentAppenders has several goroutines append batches to one run,
// each re-reading the tail and retrying on conflict. No event is lost,
// seqs have no gap, the chain verifies, and no batch is interleaved with
// another.
func testConcurrentAppenders(t *testing.T, f Factory) {
	s := newStore(t, f)
	r := createRun(t, s, store.Run{ID: runID(1)})
	const writers, batches, size = 4, 15, 10
	conflicts := make([]int, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			c, err := AppendLoop(context.Background(), s, r.ID, w, batches, size)
			conflicts[w] = c
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	CheckBatches(t, s, r.ID, writers, batches, size)
	t.Logf("conflicts retried per writer: %v", conflicts)
}

// AppendLoop is the appender of the concurrency tests, exported so an
// implementation can also run it in other processes against the same
// database: writer w appends batches batches of size events to run id,
// re-reading the tail and retrying whenever another writer got there first.
// It returns how many conflicts it retried. CheckBatches checks the result.
func AppendLoop(ctx context.Context, s store.Store, id string, w, batches, size int) (int, error) {
	conflicts := 0
	for b := 0; b < batches; {
		r, err := s.GetRun(ctx, id)
		if err != nil {
			return conflicts, err
		}
		ds := make([]event.Event, size)
		for i := range ds {
			p, _ := json.Marshal(map[string]int{"w": w, "b": b, "i": i})
			ds[i] = event.Event{Type: event.TypeRetry, Payload: p}
		}
		_, err = s.Append(ctx, id, r.LastSeq+1, ds)
		switch {
		case errors.Is(err, store.ErrConflict):
			conflicts++
			continue
		case err != nil:
			return conflicts, fmt.Errorf("writer %d batch %d: %w", w, b, err)
		}
		b++
	}
	return conflicts, nil
}

// CheckBatches checks run id's log after writers writers each appended
// batches batches of size events with AppendLoop: the chain verifies, the
// log has every event once, and each batch is contiguous and in order.
func CheckBatches(t *testing.T, s store.Store, id string, writers, batches, size int) {
	t.Helper()
	total := int64(writers * batches * size)
	verify(t, s, id, total)
	evs := allEvents(t, s, id)
	type key struct{ w, b int }
	seen := map[key]bool{}
	for k := 0; k < len(evs); k += size {
		var first map[string]int
		for i := 0; i < size; i++ {
			var p map[string]int
			if err := json.Unmarshal(evs[k+i].Payload, &p); err != nil {
				t.Fatalf("seq %d: %v", evs[k+i].Seq, err)
			}
			if i == 0 {
				first = p
			}
			if p["w"] != first["w"] || p["b"] != first["b"] || p["i"] != i {
				t.Fatalf("seq %d: event %v of another batch inside batch %v", evs[k+i].Seq, p, first)
			}
		}
		kk := key{first["w"], first["b"]}
		if seen[kk] {
			t.Fatalf("batch %v appears twice", kk)
		}
		seen[kk] = true
	}
	if len(seen) != writers*batches {
		t.Fatalf("%d distinct batches in the log, want %d", len(seen), writers*batches)
	}
}

func testEventsPaging(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	n := store.MaxPage + store.MaxPage/2
	want := appendN(t, s, r.ID, 1, n)
	tests := []struct {
		from     int64
		limit    int
		wantFrom int64
		wantLen  int
	}{
		{1, 10, 1, 10},
		{5, 3, 5, 3},
		{int64(n) - 1, 10, int64(n) - 1, 2},
		{int64(n) + 1, 10, 0, 0},
		{1, 0, 1, store.MaxPage},
		{1, store.MaxPage * 5, 1, store.MaxPage},
		{-5, 2, 1, 2},
	}
	for _, tt := range tests {
		got, err := s.Events(ctx, r.ID, tt.from, tt.limit)
		if err != nil || len(got) != tt.wantLen || (tt.wantLen > 0 && got[0].Seq != tt.wantFrom) {
			t.Fatalf("Events(from %d, limit %d) = %d events, %v; want %d from seq %d", tt.from, tt.limit, len(got), err, tt.wantLen, tt.wantFrom)
		}
		for i, e := range got {
			if !sameEvent(e, want[e.Seq-1]) || (i > 0 && e.Seq != got[i-1].Seq+1) {
				t.Fatalf("Events(from %d, limit %d)[%d] = seq %d, not the appended event", tt.from, tt.limit, i, e.Seq)
			}
		}
	}
	if all := allEvents(t, s, r.ID); len(all) != n {
		t.Fatalf("paging read %d events, want %d", len(all), n)
	}
	verify(t, s, r.ID, int64(n))
}

func testUnfinished(t *testing.T, f Factory) {
	s := newStore(t, f)
	var want []string
	for i, st := range event.Statuses() {
		for j, tenant := range []string{"a", "b"} {
			id := runID(2*i + j)
			createRun(t, s, store.Run{ID: id, Tenant: tenant})
			moveTo(t, s, id, st)
			if st.Unfinished() {
				want = append(want, id)
			}
		}
	}
	got, err := store.Unfinished(context.Background(), s)
	if err != nil || !slices.Equal(ids(got), want) {
		t.Fatalf("Unfinished() = %v, %v, want %v", ids(got), err, want)
	}
	for _, r := range got {
		if !r.Status.Unfinished() {
			t.Errorf("Unfinished() returned run %s in status %s", r.ID, r.Status)
		}
	}
}

func testArtifacts(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	digest := "sha256:" + strings.Repeat("ab", 32)
	at := time.Date(2026, 5, 6, 7, 8, 9, 10, time.FixedZone("z", 3600))
	a := store.Artifact{RunID: r.ID, Name: "patch", Digest: digest, Size: 42, MediaType: "text/x-diff", Created: at}
	got, err := s.PutArtifact(ctx, a)
	if err != nil || !got.Created.Equal(at) || got.Created.Location() != time.UTC {
		t.Fatalf("PutArtifact() = %+v, %v", got, err)
	}
	b, err := s.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: "out/step-1.txt", Digest: digest, Size: 42})
	if err != nil || b.MediaType != "application/octet-stream" || b.Created.IsZero() {
		t.Fatalf("PutArtifact(defaults) = %+v, %v", b, err)
	}
	// Idempotent retry returns the stored artifact; a different one is refused.
	again, err := s.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: "patch", Digest: digest, Size: 42, MediaType: "text/x-diff"})
	if err != nil || !again.Created.Equal(at) {
		t.Fatalf("PutArtifact(same again) = %+v, %v", again, err)
	}
	_, err = s.PutArtifact(ctx, store.Artifact{RunID: r.ID, Name: "patch", Digest: "sha256:" + strings.Repeat("cd", 32), Size: 42})
	wantErr(t, "PutArtifact(same name, other digest)", err, store.ErrExists)
	wantNames(t, "PutArtifact(same name, other digest)", err, r.ID, "patch")

	read, err := s.GetArtifact(ctx, r.ID, "patch")
	if err != nil || !reflect.DeepEqual(read, got) {
		t.Fatalf("GetArtifact() = %+v, %v, want %+v", read, err, got)
	}
	list, err := s.ListArtifacts(ctx, r.ID)
	if err != nil || len(list) != 2 || list[0].Name != "out/step-1.txt" || list[1].Name != "patch" {
		t.Fatalf("ListArtifacts() = %+v, %v", list, err)
	}
	r2 := createRun(t, s, store.Run{ID: runID(2)})
	if list, err := s.ListArtifacts(ctx, r2.ID); err != nil || len(list) != 0 {
		t.Fatalf("ListArtifacts(no artifacts) = %+v, %v", list, err)
	}
	_, err = s.GetArtifact(ctx, r.ID, "nope")
	wantErr(t, "GetArtifact(missing)", err, store.ErrNotFound)
	_, err = s.ListArtifacts(ctx, runID(3))
	wantErr(t, "ListArtifacts(missing run)", err, store.ErrNotFound)
	_, err = s.PutArtifact(ctx, store.Artifact{RunID: runID(3), Name: "x", Digest: digest})
	wantErr(t, "PutArtifact(missing run)", err, store.ErrNotFound)
	for _, bad := range []store.Artifact{
		{RunID: r.ID, Name: "", Digest: digest},
		{RunID: r.ID, Name: "a\nb", Digest: digest},
		{RunID: r.ID, Name: "x", Digest: "md5:00"},
		{RunID: r.ID, Name: "x", Digest: "sha256:" + strings.Repeat("AB", 32)},
		{RunID: r.ID, Name: "x", Digest: digest, Size: -1},
		{RunID: "x", Name: "x", Digest: digest},
		{RunID: r.ID, Name: "x", Digest: digest, Created: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, err := s.PutArtifact(ctx, bad)
		wantErr(t, fmt.Sprintf("PutArtifact(%+v)", bad), err, store.ErrInvalid)
	}
}

// redactor scrubs one secret the way secret.Redactor does.
type redactor struct{ secret string }

func (r redactor) Bytes(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte(r.secret), []byte("[redacted]"))
}

// Secret is the value the redaction test asks the store to scrub;
// implementations may look for it in their raw files afterwards.
const Secret = "hunter2-s3cr3t"

func testRedaction(t *testing.T, f Factory) {
	s := open(t, f, redactor{Secret})
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1), Task: "deploy with " + Secret})
	if strings.Contains(r.Task, Secret) {
		t.Fatalf("CreateRun() kept the secret in the task: %q", r.Task)
	}
	read, err := s.GetRun(ctx, r.ID)
	if err != nil || strings.Contains(read.Task, Secret) {
		t.Fatalf("GetRun() task = %q, %v", read.Task, err)
	}
	raw := `{"out":"TOKEN=` + Secret + `\n","esc":"\u0068unter2-s3cr3t","` + Secret + `":[{"x":"` + Secret + `"}]}`
	evs, err := s.Append(ctx, r.ID, 1, []event.Event{{Type: event.TypeToolFinished, Payload: json.RawMessage(raw)}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"out":"TOKEN=[redacted]\n","esc":"[redacted]","[redacted]":[{"x":"[redacted]"}]}`
	if string(evs[0].Payload) != want {
		t.Fatalf("Append() payload = %s, want %s", evs[0].Payload, want)
	}
	// The hash covers the redacted bytes: the secret was never hashed.
	if evs[0].ComputeHash() != evs[0].Hash {
		t.Fatal("hash does not cover the redacted payload")
	}
	stored := allEvents(t, s, r.ID)
	b, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), Secret) || !strings.Contains(string(b), "[redacted]") {
		t.Fatalf("stored events: %s", b)
	}
	verify(t, s, r.ID, 1)
}

func testReopen(t *testing.T, f Factory) {
	s := newStore(t, f)
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 10)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := reopen(t, f, s)
	verify(t, s2, r.ID, 10)
	appendN(t, s2, r.ID, 11, 5)
	verify(t, s2, r.ID, 15)
	got, err := s2.GetRun(context.Background(), r.ID)
	if err != nil || got.Tenant != r.Tenant || got.Status != r.Status || !got.Created.Equal(r.Created) {
		t.Fatalf("GetRun() after reopen = %+v, %v, want %+v", got, err, r)
	}
}

// testTwoHandles appends through two independent handles on one database
// at once, as two engine processes would: they never interleave a batch.
func testTwoHandles(t *testing.T, f Factory) {
	s := newStore(t, f)
	s2 := reopen(t, f, s)
	r := createRun(t, s, store.Run{ID: runID(1)})
	const batches, size = 15, 10
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w, h := range []store.Store{s, s2} {
		wg.Go(func() { _, errs[w] = AppendLoop(context.Background(), h, r.ID, w, batches, size) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	CheckBatches(t, s, r.ID, 2, batches, size)
	CheckBatches(t, s2, r.ID, 2, batches, size)
}

func testTamper(t *testing.T, f Factory) {
	if f.Tamper == nil {
		t.Skip("the factory has no Tamper")
	}
	s := newStore(t, f)
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 6)
	f.Tamper(t, s, r.ID, 4, []byte(`{"b":1,"i":0,"w":1}`))
	_, err := store.VerifyRun(context.Background(), s, r.ID)
	var ve *event.VerifyError
	if !errors.As(err, &ve) || !errors.Is(err, event.ErrHashMismatch) || ve.Seq != 4 {
		t.Fatalf("VerifyRun(tampered at seq 4) = %v, want a hash mismatch at seq 4", err)
	}
}

func testClosed(t *testing.T, f Factory) {
	s := f.New(t, store.NoRedaction)
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close() = %v", err)
	}
	ctx := context.Background()
	id := runID(1)
	calls := map[string]func() error{
		"CreateRun": func() error {
			_, err := s.CreateRun(ctx, store.Run{ID: id, Tenant: "a", Status: event.StatusQueued})
			return err
		},
		"GetRun":   func() error { _, err := s.GetRun(ctx, id); return err },
		"ListRuns": func() error { _, err := s.ListRuns(ctx, store.RunFilter{}); return err },
		"UpdateRunStatus": func() error {
			_, err := s.UpdateRunStatus(ctx, id, event.StatusQueued, event.StatusRunning)
			return err
		},
		"Append": func() error { _, err := s.Append(ctx, id, 1, drafts(t, 0, 0, 1)); return err },
		"AppendStatus": func() error {
			_, _, err := s.AppendStatus(ctx, id, 1, event.StatusQueued, event.StatusRunning, drafts(t, 0, 0, 1))
			return err
		},
		"Events":    func() error { _, err := s.Events(ctx, id, 1, 1); return err },
		"LastEvent": func() error { _, err := s.LastEvent(ctx, id); return err },
		"PutArtifact": func() error {
			_, err := s.PutArtifact(ctx, store.Artifact{RunID: id, Name: "x", Digest: "sha256:" + strings.Repeat("0", 64)})
			return err
		},
		"GetArtifact":   func() error { _, err := s.GetArtifact(ctx, id, "x"); return err },
		"AcquireLease":  func() error { _, err := s.AcquireLease(ctx, id, "w", time.Second); return err },
		"RenewLease":    func() error { _, err := s.RenewLease(ctx, id, "w", 1, time.Second); return err },
		"ReleaseLease":  func() error { return s.ReleaseLease(ctx, id, "w", 1) },
		"ListArtifacts": func() error { _, err := s.ListArtifacts(ctx, id); return err },
		"AddLedgerEntry": func() error {
			_, err := s.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: "a", Kind: store.LedgerGrant, Amount: 1})
			return err
		},
		"Balance":       func() error { _, err := s.Balance(ctx, "a"); return err },
		"LedgerEntries": func() error { _, err := s.LedgerEntries(ctx, "a", 0, 1); return err },
		"PutPolicy": func() error {
			_, _, err := s.PutPolicy(ctx, store.PolicyVersion{Tenant: "a", Name: "p", Document: docA})
			return err
		},
		"PolicyVersions": func() error { _, err := s.PolicyVersions(ctx, "a", "p"); return err },
		"GetPolicy":      func() error { _, err := s.GetPolicy(ctx, "a", "p", ""); return err },
		"ListPolicies":   func() error { _, err := s.ListPolicies(ctx, "a"); return err },
		"PutTemplate": func() error {
			_, _, err := s.PutTemplate(ctx, store.TemplateVersion{Tenant: "a", Name: "p", Image: imageA, Document: tmplA})
			return err
		},
		"TemplateVersions": func() error { _, err := s.TemplateVersions(ctx, "a", "p"); return err },
		"GetTemplate":      func() error { _, err := s.GetTemplate(ctx, "a", "p", 0); return err },
		"ListTemplates":    func() error { _, err := s.ListTemplates(ctx, "a"); return err },
		"DeleteTemplate":   func() error { _, err := s.DeleteTemplate(ctx, "a", "p"); return err },
		"CreateTenant":     func() error { _, err := s.CreateTenant(ctx, "a"); return err },
		"GetTenant":        func() error { _, err := s.GetTenant(ctx, "a"); return err },
		"ListTenants":      func() error { _, err := s.ListTenants(ctx); return err },
		"CreateAPIKey":     func() error { return s.CreateAPIKey(ctx, newKey("a", 1)) },
		"APIKeyByHash":     func() error { _, err := s.APIKeyByHash(ctx, keyHash("k")); return err },
		"ListAPIKeys":      func() error { _, err := s.ListAPIKeys(ctx, "a"); return err },
		"RevokeAPIKey":     func() error { return s.RevokeAPIKey(ctx, "a", keyID(1)) },
		"TouchAPIKey":      func() error { return s.TouchAPIKey(ctx, keyID(1), base) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

// testListRunsMetadata: ListRuns keeps the runs whose run.created metadata
// has every key of the filter with its value, within the tenant and with
// the other filters; a bad filter is refused.
func testListRunsMetadata(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	create := func(n int, tenant string, md map[string]string) {
		t.Helper()
		created, err := event.New(event.RunCreated{Tenant: tenant, Task: "t", Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(n), Tenant: tenant, Status: event.StatusQueued}, []event.Event{created}); err != nil {
			t.Fatalf("CreateRunWith(%d) = %v", n, err)
		}
	}
	create(1, "acme", map[string]string{"team": "infra", "pr": "42"})
	create(2, "acme", map[string]string{"team": "infra", "pr": "43"})
	create(3, "acme", map[string]string{"team": "web"})
	create(4, "acme", nil)
	create(5, "other", map[string]string{"team": "infra", "pr": "42"})
	if _, err := s.CreateRun(ctx, store.Run{ID: runID(6), Tenant: "acme", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	ids := func(f store.RunFilter) []string {
		t.Helper()
		runs, err := s.ListRuns(ctx, f)
		if err != nil {
			t.Fatalf("ListRuns(%+v) = %v", f, err)
		}
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    store.RunFilter
		want []string
	}{
		{"one key", store.RunFilter{Tenant: "acme", Metadata: map[string]string{"team": "infra"}}, []string{runID(1), runID(2)}},
		{"two keys", store.RunFilter{Tenant: "acme", Metadata: map[string]string{"team": "infra", "pr": "42"}}, []string{runID(1)}},
		{"no match", store.RunFilter{Tenant: "acme", Metadata: map[string]string{"team": "infra", "pr": "44"}}, nil},
		{"value is exact", store.RunFilter{Tenant: "acme", Metadata: map[string]string{"team": "inf"}}, nil},
		{"every tenant", store.RunFilter{Metadata: map[string]string{"pr": "42"}}, []string{runID(1), runID(5)}},
		{"other tenant", store.RunFilter{Tenant: "other", Metadata: map[string]string{"team": "infra"}}, []string{runID(5)}},
		{"newest first", store.RunFilter{Tenant: "acme", Desc: true, Metadata: map[string]string{"team": "infra"}}, []string{runID(2), runID(1)}},
		{"paged", store.RunFilter{Tenant: "acme", Limit: 1, After: runID(1), Metadata: map[string]string{"team": "infra"}}, []string{runID(2)}},
		{"with status", store.RunFilter{Tenant: "acme", Statuses: []event.Status{event.StatusRunning}, Metadata: map[string]string{"team": "infra"}}, nil},
	} {
		if got := ids(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ListRuns = %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, md := range []map[string]string{{"": "x"}, {"bad key": "x"}, {"k": "\xff"}} {
		if _, err := s.ListRuns(ctx, store.RunFilter{Metadata: md}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListRuns(metadata %q) = %v, want ErrInvalid", md, err)
		}
	}
}
