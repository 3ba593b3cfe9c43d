package store

import "context"

// Change is one change another process (or this one) committed to a store
// several hosts share, as Changes reports it: nothing of its content, only
// what a listener needs to know to look.
type Change struct {
	// Resync says changes may have been missed (the first call, and after
	// the connection that listens was lost and made again): the listener
	// looks at everything it cares about, as a poll would.
	Resync bool
	// RunEnded is the id of a run (of any kind) that moved to a final
	// status: an E2B sandbox's record closed by a forced deletion, a
	// cancel from the command line, or another replica.
	RunEnded string
	// LedgerTenant is the tenant whose credit ledger got an entry (a
	// debit that may have spent its balance, a grant).
	LedgerTenant string
}

// Changes is a store that tells every process on it of each Change as it
// commits (the PostgreSQL store: LISTEN/NOTIFY; the notification is part of
// the writing transaction, so it is sent if and only if the change
// commits). A store without it (SQLite) leaves its listeners to poll.
type Changes interface {
	// WatchChanges calls fn with each change committed on the store by
	// any process (this one too), on one goroutine, in commit order, and
	// returns when ctx ends (nil). It first calls fn with Resync once it
	// listens, and again each time it listens anew after its connection
	// was lost (retrying while the store is unreachable); changes
	// committed while it did not listen are never reported. fn must not
	// block for long: notifications queue behind it.
	WatchChanges(ctx context.Context, fn func(Change)) error
}
