package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

func addEntry(t *testing.T, s store.Store, e store.LedgerEntry) store.LedgerEntry {
	t.Helper()
	got, err := s.AddLedgerEntry(context.Background(), e)
	if err != nil {
		t.Fatalf("AddLedgerEntry(%+v) = %v", e, err)
	}
	return got
}

func wantBalance(t *testing.T, s store.Store, tenant string, want int64) {
	t.Helper()
	if got, err := s.Balance(context.Background(), tenant); err != nil || got != want {
		t.Fatalf("Balance(%s) = %d, %v, want %d", tenant, got, err, want)
	}
}

// allEntries reads tenant's whole ledger, a small page at a time.
func allEntries(t *testing.T, s store.Store, tenant string) []store.LedgerEntry {
	t.Helper()
	var (
		out   []store.LedgerEntry
		after int64
	)
	for {
		page, err := s.LedgerEntries(context.Background(), tenant, after, 3)
		if err != nil {
			t.Fatalf("LedgerEntries(%s, %d, 3) = %v", tenant, after, err)
		}
		out = append(out, page...)
		if len(page) < 3 {
			return out
		}
		after = page[len(page)-1].ID
	}
}

func sameEntry(a, b store.LedgerEntry) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Kind == b.Kind && a.Amount == b.Amount &&
		a.RunID == b.RunID && a.Seq == b.Seq && a.Note == b.Note && a.Created.Equal(b.Created)
}

func wantEntries(t *testing.T, s store.Store, tenant string, want []store.LedgerEntry) {
	t.Helper()
	got := allEntries(t, s, tenant)
	if !slices.EqualFunc(got, want, sameEntry) {
		t.Fatalf("LedgerEntries(%s) = %+v, want %+v", tenant, got, want)
	}
}

// testLedger: grants and debits add up, and read back as stored.
func testLedger(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 3)
	wantBalance(t, s, "acme", 0)
	wantEntries(t, s, "acme", nil)

	g := addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 1_000_000, Note: "welcome\ttier: free\n"})
	if g.ID < 1 || g.Kind != store.LedgerGrant || g.Amount != 1_000_000 || g.Note != "welcome\ttier: free\n" ||
		!g.Created.Equal(clock.Now()) || g.Created.Location() != time.UTC {
		t.Fatalf("AddLedgerEntry(grant) = %+v; want an id and Created %v", g, clock.Now())
	}
	clock.Advance(time.Second)
	d1 := addEntry(t, s, store.LedgerEntry{
		Tenant: "acme", Kind: store.LedgerDebit, Amount: 300_000, RunID: r.ID, Seq: 1,
		Created: base,
	}) // Created is the store's to set
	d2 := addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerDebit, Amount: 200_000, RunID: r.ID, Seq: 3})
	refund := addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 50_000, RunID: r.ID, Note: "refund"})
	if !d1.Created.Equal(clock.Now()) || d1.RunID != r.ID || d1.Seq != 1 || refund.RunID != r.ID || refund.Seq != 0 {
		t.Fatalf("AddLedgerEntry() = %+v, %+v; want Created %v and the run and seqs given", d1, refund, clock.Now())
	}
	if !(g.ID < d1.ID && d1.ID < d2.ID && d2.ID < refund.ID) {
		t.Fatalf("ids %d, %d, %d, %d; want increasing", g.ID, d1.ID, d2.ID, refund.ID)
	}
	wantBalance(t, s, "acme", 1_000_000-300_000-200_000+50_000)
	wantEntries(t, s, "acme", []store.LedgerEntry{g, d1, d2, refund})

	// Other tenants are untouched, and a balance may go below zero: the
	// ledger records debits, it does not refuse them.
	wantBalance(t, s, "globex", 0)
	wantEntries(t, s, "globex", nil)
	addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerDebit, Amount: 900_000, RunID: r.ID, Seq: 2})
	wantBalance(t, s, "acme", -350_000)
	wantBalance(t, s, "globex", 0)

	// The largest amounts still add up exactly.
	for range 3 {
		addEntry(t, s, store.LedgerEntry{Tenant: "big", Kind: store.LedgerGrant, Amount: store.MaxLedgerAmount})
	}
	wantBalance(t, s, "big", 3*store.MaxLedgerAmount)
}

// testLedgerDebitRetry: a debit is recorded once per (run, seq); a retry
// gets the stored entry, another amount ErrExists.
func testLedgerDebitRetry(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 2)
	g := addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 1000})
	debit := store.LedgerEntry{Tenant: "acme", Kind: store.LedgerDebit, Amount: 400, RunID: r.ID, Seq: 2, Note: "model tokens"}
	d := addEntry(t, s, debit)
	clock.Advance(time.Minute)
	retry := debit
	retry.Note = "model tokens (retried)"
	for _, e := range []store.LedgerEntry{debit, retry} {
		if got := addEntry(t, s, e); !sameEntry(got, d) {
			t.Fatalf("AddLedgerEntry(retry) = %+v, want the stored %+v", got, d)
		}
	}
	other := debit
	other.Amount = 401
	_, err := s.AddLedgerEntry(ctx, other)
	wantErr(t, "AddLedgerEntry(same run and seq, another amount)", err, store.ErrExists)
	wantNames(t, "AddLedgerEntry(same run and seq, another amount)", err, "acme", store.LedgerDebit)
	// Grants are not idempotent: each adds a row.
	g2 := addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 1000})
	wantBalance(t, s, "acme", 1000-400+1000)
	wantEntries(t, s, "acme", []store.LedgerEntry{g, d, g2})
}

// testLedgerInvalid: each malformed entry is refused with ErrInvalid, and
// nothing is written.
func testLedgerInvalid(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 3)
	empty := createRun(t, s, store.Run{ID: runID(2)})
	theirs := createRun(t, s, store.Run{ID: runID(3), Tenant: "globex"})
	appendN(t, s, theirs.ID, 1, 3)
	grant := store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 10}
	debit := store.LedgerEntry{Tenant: "acme", Kind: store.LedgerDebit, Amount: 10, RunID: r.ID, Seq: 1}
	with := func(e store.LedgerEntry, edit func(*store.LedgerEntry)) store.LedgerEntry {
		edit(&e)
		return e
	}
	tests := []struct {
		name string
		msg  string // the error says this
		e    store.LedgerEntry
	}{
		{"no kind", "neither", with(grant, func(e *store.LedgerEntry) { e.Kind = "" })},
		{"unknown kind", "neither", with(grant, func(e *store.LedgerEntry) { e.Kind = "refund" })},
		{"kind in upper case", "neither", with(grant, func(e *store.LedgerEntry) { e.Kind = "GRANT" })},
		{"zero amount", "amount 0", with(grant, func(e *store.LedgerEntry) { e.Amount = 0 })},
		{"negative amount", "amount -10", with(grant, func(e *store.LedgerEntry) { e.Amount = -10 })},
		{"negative debit", "amount -10", with(debit, func(e *store.LedgerEntry) { e.Amount = -10 })},
		{"amount too large", "amount 1000000000001", with(grant, func(e *store.LedgerEntry) { e.Amount = store.MaxLedgerAmount + 1 })},
		{"no tenant", "tenant", with(grant, func(e *store.LedgerEntry) { e.Tenant = "" })},
		{"malformed tenant", "tenant", with(grant, func(e *store.LedgerEntry) { e.Tenant = "acme corp" })},
		{"tenant too long", "tenant", with(grant, func(e *store.LedgerEntry) { e.Tenant = strings.Repeat("a", store.MaxTenantLen+1) })},
		{"id set", "assigns", with(grant, func(e *store.LedgerEntry) { e.ID = 7 })},
		{"note too long", "note", with(grant, func(e *store.LedgerEntry) { e.Note = strings.Repeat("n", store.MaxNoteLen+1) })},
		{"note with NUL", "note", with(grant, func(e *store.LedgerEntry) { e.Note = "a\x00b" })},
		{"note with escape", "note", with(grant, func(e *store.LedgerEntry) { e.Note = "a\x1b[2Jb" })},
		{"note not UTF-8", "note", with(grant, func(e *store.LedgerEntry) { e.Note = "a\xffb" })},
		{"grant with seq", "seq is set", with(grant, func(e *store.LedgerEntry) { e.RunID, e.Seq = r.ID, 1 })},
		{"grant on missing run", "does not exist", with(grant, func(e *store.LedgerEntry) { e.RunID = runID(9) })},
		{"grant on another tenant's run", "is not tenant acme's", with(grant, func(e *store.LedgerEntry) { e.RunID = theirs.ID })},
		{"debit without run", "no run id", with(debit, func(e *store.LedgerEntry) { e.RunID = "" })},
		{"debit without seq", "seq 0 is below 1", with(debit, func(e *store.LedgerEntry) { e.Seq = 0 })},
		{"debit with negative seq", "seq -1 is below 1", with(debit, func(e *store.LedgerEntry) { e.Seq = -1 })},
		{"debit with malformed run", "run id", with(debit, func(e *store.LedgerEntry) { e.RunID = "run_nope" })},
		{"debit on missing run", "does not exist", with(debit, func(e *store.LedgerEntry) { e.RunID = runID(9) })},
		{"debit past the log", "has no event 4", with(debit, func(e *store.LedgerEntry) { e.Seq = 4 })},
		{"debit on an empty log", "has no event 1", with(debit, func(e *store.LedgerEntry) { e.RunID = empty.ID })},
		{"debit on another tenant's run", "is not tenant acme's", with(debit, func(e *store.LedgerEntry) { e.RunID = theirs.ID })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.AddLedgerEntry(ctx, tt.e)
			wantErr(t, "AddLedgerEntry("+tt.name+")", err, store.ErrInvalid)
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("AddLedgerEntry(%s) = %v, want it to say %q", tt.name, err, tt.msg)
			}
		})
	}
	for _, tenant := range []string{"acme", "globex"} {
		wantBalance(t, s, tenant, 0)
		wantEntries(t, s, tenant, nil)
	}

	for _, tenant := range []string{"", "a b", strings.Repeat("a", store.MaxTenantLen+1)} {
		_, err := s.Balance(ctx, tenant)
		wantErr(t, "Balance("+tenant+")", err, store.ErrInvalid)
		_, err = s.LedgerEntries(ctx, tenant, 0, 10)
		wantErr(t, "LedgerEntries("+tenant+")", err, store.ErrInvalid)
	}
	_, err := s.LedgerEntries(ctx, "acme", -1, 10)
	wantErr(t, "LedgerEntries(after -1)", err, store.ErrInvalid)
}

// testLedgerTenants: a tenant cannot charge or credit through another
// tenant's run, and the refusal does not name the run's tenant.
func testLedgerTenants(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	theirs := createRun(t, s, store.Run{ID: runID(1), Tenant: "initech-secret-name"})
	appendN(t, s, theirs.ID, 1, 2)
	addEntry(t, s, store.LedgerEntry{Tenant: "initech-secret-name", Kind: store.LedgerDebit, Amount: 5, RunID: theirs.ID, Seq: 1})
	for _, e := range []store.LedgerEntry{
		{Tenant: "acme", Kind: store.LedgerDebit, Amount: 5, RunID: theirs.ID, Seq: 2},
		{Tenant: "acme", Kind: store.LedgerDebit, Amount: 5, RunID: theirs.ID, Seq: 1}, // their debit's key
		{Tenant: "acme", Kind: store.LedgerGrant, Amount: 5, RunID: theirs.ID},
	} {
		_, err := s.AddLedgerEntry(ctx, e)
		wantErr(t, "AddLedgerEntry(another tenant's run)", err, store.ErrInvalid)
		if strings.Contains(err.Error(), "initech") {
			t.Fatalf("AddLedgerEntry(another tenant's run) = %v; names that tenant", err)
		}
	}
	wantBalance(t, s, "acme", 0)
	wantBalance(t, s, "initech-secret-name", -5)
}

// testLedgerPaging: pages follow ID order, hold only the tenant's entries,
// and respect limit.
func testLedgerPaging(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	var want []store.LedgerEntry
	for i := range 25 {
		want = append(want, addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: int64(i + 1)}))
		addEntry(t, s, store.LedgerEntry{Tenant: "globex", Kind: store.LedgerGrant, Amount: 1})
	}
	wantEntries(t, s, "acme", want)
	for _, tt := range []struct {
		after int64
		limit int
		want  []store.LedgerEntry
	}{
		{0, 0, want},
		{0, -1, want},
		{0, store.MaxPage + 1, want},
		{0, 10, want[:10]},
		{want[9].ID, 10, want[10:20]},
		{want[9].ID - 1, 1, want[9:10]}, // between two of acme's ids: globex's entry
		{want[24].ID, 10, nil},
		{1 << 62, 10, nil},
	} {
		got, err := s.LedgerEntries(ctx, "acme", tt.after, tt.limit)
		if err != nil || !slices.EqualFunc(got, tt.want, sameEntry) {
			t.Fatalf("LedgerEntries(acme, %d, %d) = %+v, %v, want %+v", tt.after, tt.limit, got, err, tt.want)
		}
	}
	wantBalance(t, s, "acme", 25*26/2)
	wantBalance(t, s, "globex", 25)
}

// testLedgerRace: concurrent writers, through one handle and (when the
// factory can) another, as other processes would: every grant is counted
// once with its own id, and a debit raced by several writers is recorded
// once.
func testLedgerRace(t *testing.T, f Factory) {
	s := newStore(t, f)
	handles := []store.Store{s}
	if f.Reopen != nil {
		handles = append(handles, reopen(t, f, s))
	}
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 1)
	const n = 16
	var (
		wg     sync.WaitGroup
		grants = make([]store.LedgerEntry, n)
		debits = make([]store.LedgerEntry, n)
		errs   = make([]error, 2*n)
	)
	for i := range n {
		h := handles[i%len(handles)]
		wg.Go(func() {
			grants[i], errs[i] = h.AddLedgerEntry(context.Background(),
				store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: int64(i + 1)})
		})
		wg.Go(func() {
			debits[i], errs[n+i] = h.AddLedgerEntry(context.Background(),
				store.LedgerEntry{Tenant: "acme", Kind: store.LedgerDebit, Amount: 7, RunID: r.ID, Seq: 1})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, g := range grants {
		if seen[g.ID] {
			t.Fatalf("two grants got id %d", g.ID)
		}
		seen[g.ID] = true
	}
	for _, d := range debits {
		if d.ID != debits[0].ID || seen[d.ID] {
			t.Fatalf("debits got ids %d and %d (grants %v); want one id of its own", debits[0].ID, d.ID, seen)
		}
	}
	for _, h := range handles {
		wantBalance(t, h, "acme", n*(n+1)/2-7)
	}
	if got := allEntries(t, s, "acme"); len(got) != n+1 {
		t.Fatalf("LedgerEntries(acme) has %d entries, want %d", len(got), n+1)
	}
}

// testLedgerRedaction: notes are redacted before they are written.
func testLedgerRedaction(t *testing.T, f Factory) {
	s := open(t, f, redactor{Secret})
	e := addEntry(t, s, store.LedgerEntry{Tenant: "acme", Kind: store.LedgerGrant, Amount: 1, Note: "paid with key " + Secret})
	if e.Note != "paid with key [redacted]" {
		t.Fatalf("AddLedgerEntry() note = %q, want it redacted", e.Note)
	}
	wantEntries(t, s, "acme", []store.LedgerEntry{e})
}
