package store

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
)

// Kinds of ledger entry.
const (
	// LedgerGrant adds Amount credits to the tenant's balance.
	LedgerGrant = api.LedgerGrant
	// LedgerDebit takes Amount credits from the tenant's balance, for one
	// event of one of the tenant's runs.
	LedgerDebit = api.LedgerDebit
)

// Limits on ledger entries.
const (
	// MaxLedgerAmount is the largest Amount of one entry, in
	// micro-credits (a million credits). It keeps a balance, a sum of
	// entries, far from the int64 limit: the stores compute it exactly and
	// fail rather than wrap, and would need millions of maximal entries
	// to reach that.
	MaxLedgerAmount = 1_000_000_000_000
	// MaxNoteLen is the longest Note, in bytes, before redaction.
	MaxNoteLen = 1 << 10
)

// LedgerEntry is one row of a tenant's credit ledger. The ledger is
// append-only; a tenant's balance is the sum of its grants minus the sum
// of its debits, computed from the rows (no cached balance).
type LedgerEntry struct {
	// ID is assigned by the store: 1, 2, 3... across all tenants of one
	// database, in commit order, so paging by ID never skips an entry
	// committed after the page was read.
	ID     int64
	Tenant string
	// Kind is LedgerGrant or LedgerDebit; the kind gives Amount's sign.
	Kind string
	// Amount is in micro-credits, 1 to MaxLedgerAmount.
	Amount int64
	// RunID names the run that caused a debit (required for a debit: an
	// existing run of Tenant). A grant may name a run of Tenant too (a
	// refund, say); empty otherwise.
	RunID string
	// Seq is, for a debit, the event of RunID's log that caused it (at
	// least 1, and in the log). A debit is idempotent per (RunID, Seq).
	// Always 0 for a grant.
	Seq int64
	// Note is free text of at most MaxNoteLen bytes of UTF-8 without
	// control characters other than tab and newline; the store redacts it
	// like payloads.
	Note string
	// Created is set by the store when the entry is first added.
	Created time.Time
}

// PrepareLedgerEntry is for implementations of Store: it validates e for
// AddLedgerEntry and returns it as it must be stored, Note redacted and
// Created set to now (in UTC). What needs the database (that RunID exists,
// is Tenant's and has Seq) is checked by CheckLedgerRun inside the write
// transaction. Errors wrap ErrInvalid and never quote the note.
func PrepareLedgerEntry(e LedgerEntry, now time.Time, red Redactor) (LedgerEntry, error) {
	if err := validTenant(e.Tenant); err != nil {
		return e, fmt.Errorf("ledger entry: %w", err)
	}
	switch {
	case e.ID != 0:
		return e, fmt.Errorf("%w: ledger entry: ID is set; the store assigns it", ErrInvalid)
	case e.Kind != LedgerGrant && e.Kind != LedgerDebit:
		return e, fmt.Errorf("%w: ledger entry: kind %q is neither %s nor %s", ErrInvalid, clip(e.Kind), LedgerGrant, LedgerDebit)
	case e.Amount <= 0 || e.Amount > MaxLedgerAmount:
		return e, fmt.Errorf("%w: ledger %s: amount %d is not in 1..%d", ErrInvalid, e.Kind, e.Amount, int64(MaxLedgerAmount))
	case len(e.Note) > MaxNoteLen || !noteText(e.Note):
		return e, fmt.Errorf("%w: ledger %s: note is not UTF-8 text of at most %d bytes", ErrInvalid, e.Kind, MaxNoteLen)
	case e.Kind == LedgerDebit && e.RunID == "":
		return e, fmt.Errorf("%w: ledger debit: no run id", ErrInvalid)
	case e.Kind == LedgerDebit && e.Seq < 1:
		return e, fmt.Errorf("%w: ledger debit: seq %d is below 1", ErrInvalid, e.Seq)
	case e.Kind == LedgerGrant && e.Seq != 0:
		return e, fmt.Errorf("%w: ledger grant: seq is set; only a debit names an event", ErrInvalid)
	}
	if e.RunID != "" {
		if err := event.ValidRunID(e.RunID); err != nil {
			return e, fmt.Errorf("%w: ledger %s: %w", ErrInvalid, e.Kind, err)
		}
	}
	if red == nil {
		red = NoRedaction
	}
	e.Note = string(red.Bytes([]byte(e.Note)))
	e.Created = now.UTC()
	return e, nil
}

// CheckLedgerRun is for implementations of Store: called inside the write
// transaction of AddLedgerEntry with the tenant and last seq of the run
// e.RunID names (found is false when there is no such run), it returns nil
// when e may reference it, and an error wrapping ErrInvalid otherwise. The
// error never names the run's tenant: it belongs to someone else.
func CheckLedgerRun(e LedgerEntry, found bool, tenant string, lastSeq int64) error {
	switch {
	case !found:
		return fmt.Errorf("%w: ledger %s: run %s does not exist", ErrInvalid, e.Kind, e.RunID)
	case tenant != e.Tenant:
		return fmt.Errorf("%w: ledger %s: run %s is not tenant %s's", ErrInvalid, e.Kind, e.RunID, e.Tenant)
	case e.Kind == LedgerDebit && e.Seq > lastSeq:
		return fmt.Errorf("%w: ledger debit: run %s has no event %d (its last is %d)", ErrInvalid, e.RunID, e.Seq, lastSeq)
	}
	return nil
}

// SameDebit is for implementations of Store: given the debit old already
// stored for (e.RunID, e.Seq), it returns nil when e is a retry of it (same
// tenant, kind and amount; the note may differ and is not updated: old is
// what AddLedgerEntry returns), and an error wrapping ErrExists otherwise.
func SameDebit(old, e LedgerEntry) error {
	if old.Kind != e.Kind || old.Tenant != e.Tenant || old.Amount != e.Amount {
		return fmt.Errorf("%w: ledger debit: run %s seq %d is already debited %d (entry %d), not %d",
			ErrExists, e.RunID, e.Seq, old.Amount, old.ID, e.Amount)
	}
	return nil
}

// ValidateLedgerPage checks the arguments of LedgerEntries and returns
// limit brought into 1..MaxPage. Errors wrap ErrInvalid.
func ValidateLedgerPage(tenant string, after int64, limit int) (int, error) {
	if err := validTenant(tenant); err != nil {
		return 0, fmt.Errorf("ledger entries: %w", err)
	}
	if after < 0 {
		return 0, fmt.Errorf("%w: ledger entries: after %d is negative", ErrInvalid, after)
	}
	return PageLimit(limit), nil
}

// ValidateTenant checks a tenant name given on its own (Balance). Errors
// wrap ErrInvalid.
func ValidateTenant(tenant string) error { return validTenant(tenant) }

// noteText reports whether s is valid UTF-8 without control characters
// other than tab and newline (PostgreSQL text cannot hold NUL at all).
func noteText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}
