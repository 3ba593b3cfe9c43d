package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
)

var _ store.Changes = (*Store)(nil)

// changesChannel is the NOTIFY channel of store.Change: its payload is
// "run:ID" (a run that moved to a final status) or "ledger:TENANT" (an entry
// of a tenant's ledger). The writer queues pg_notify in its own
// transaction, so a listener hears of a change exactly when it commits.
const changesChannel = "airlock_changes"

// notifySQL is the statement a writer runs in its transaction.
const notifySQL = `SELECT pg_notify('` + changesChannel + `', $1)`

func runEndedPayload(id string) string { return "run:" + id }

func ledgerPayload(tenant string) string { return "ledger:" + tenant }

// parseChange reads a notification's payload; a payload of no known form
// (a later version's) is a Resync: look at everything.
func parseChange(p string) store.Change {
	if id, ok := strings.CutPrefix(p, "run:"); ok && store.CheckRunID(id) == nil {
		return store.Change{RunEnded: id}
	}
	if t, ok := strings.CutPrefix(p, "ledger:"); ok && t != "" {
		return store.Change{LedgerTenant: t}
	}
	return store.Change{Resync: true}
}

// Retries of a lost listening connection.
const (
	listenRetryFirst   = 100 * time.Millisecond
	listenRetryLongest = 5 * time.Second
)

// WatchChanges implements store.Changes: it listens on a connection of its
// own (not one of the pool's, which a LISTEN would hold for good).
func (s *Store) WatchChanges(ctx context.Context, fn func(store.Change)) error {
	wait := time.Duration(0)
	for {
		heard := s.listen(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		if heard {
			wait = 0 // it listened: the next loss is a new one
		}
		wait = min(max(2*wait, listenRetryFirst), listenRetryLongest)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// listen connects, listens and reports changes to fn until its connection
// fails or ctx ends; it reports whether it got as far as listening.
func (s *Store) listen(ctx context.Context, fn func(store.Change)) bool {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, `LISTEN `+changesChannel); err != nil {
		return false
	}
	fn(store.Change{Resync: true})
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		fn(parseChange(n.Payload))
	}
}
