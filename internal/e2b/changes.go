package e2b

import (
	"context"
	"errors"
	"sync"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// A forced end decided elsewhere reaches the sandbox at once. A sandbox's
// record may be closed by another process: a forced deletion of its tenant
// (run from another replica, or the command line), `airlock runs cancel`
// of the record, a replica that took this one for dead; its tenant's
// credits may be spent by a debit another process made. The meter tick
// (every MeterInterval) finds all of these: its lease renewal fails on a
// closed record, the paused sandboxes' records are read, the spent
// tenants' sandboxes killed. On a store that reports its changes
// (Options.Changes: PostgreSQL's LISTEN/NOTIFY, sent in the writer's own
// transaction) the Server also listens, and looks at once at the sandbox
// whose record ended, or at the running sandboxes of the tenant whose
// ledger moved: the sandbox is destroyed, and its envd and ports refused,
// within moments of the commit, not at the next tick. The tick stays the
// fallback: a notification lost with the listening connection is made up
// by a look at every sandbox when it listens again (store.Change.Resync),
// and by the tick.

// changeQueue is what the store reported and Run has not looked at yet.
// The watcher adds; Run takes it all at once.
type changeQueue struct {
	// wake tells Run that changes wait (capacity 1: a wake is not lost,
	// and many wakes are one).
	wake chan struct{}

	mu sync.Mutex
	// runs and tenants are guarded by mu: the records that ended, the
	// tenants whose ledgers moved.
	runs, tenants map[string]bool
	// resync is guarded by mu: changes may have been missed; look at
	// everything.
	resync bool
}

func newChangeQueue() *changeQueue {
	return &changeQueue{wake: make(chan struct{}, 1), runs: map[string]bool{}, tenants: map[string]bool{}}
}

// add queues c. It never blocks (store.Changes asks that of its callback).
func (q *changeQueue) add(c store.Change) {
	q.mu.Lock()
	switch {
	case c.Resync:
		q.resync = true
	case c.RunEnded != "":
		q.runs[c.RunEnded] = true
	case c.LedgerTenant != "":
		q.tenants[c.LedgerTenant] = true
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns what is queued and empties the queue.
func (q *changeQueue) take() (runs, tenants map[string]bool, resync bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	runs, tenants, resync = q.runs, q.tenants, q.resync
	q.runs, q.tenants, q.resync = map[string]bool{}, map[string]bool{}, false
	return runs, tenants, resync
}

// watchChanges reports the store's changes to s.changes until ctx ends.
func (s *Server) watchChanges(ctx context.Context) {
	if err := s.o.Changes.WatchChanges(ctx, s.changes.add); err != nil {
		s.log.Warn("e2b: listen for the store's changes; the meter tick finds them", "err", err)
	}
}

// applyChanges looks at what the store reported: each sandbox of this
// Server whose record ended (every one, after a Resync) is ended if its
// record was closed or deleted elsewhere, and the running sandboxes of each
// tenant whose ledger moved (every tenant's, after a Resync) are killed if
// the tenant is metered and its credits are spent.
func (s *Server) applyChanges(ctx context.Context) {
	runs, tenants, resync := s.changes.take()
	running := map[string][]*box{}
	for _, b := range s.all() {
		if resync || runs[b.rec.runID] {
			if s.endIfClosed(ctx, b) {
				continue
			}
		}
		b.mu.Lock()
		live := b.state == stateRunning && b.live != nil
		b.mu.Unlock()
		if live && (resync || tenants[b.tenant]) {
			running[b.tenant] = append(running[b.tenant], b)
		}
	}
	s.endSpent(ctx, running)
}

// endIfClosed ends b, running or paused, if another process closed or
// deleted its record, and reports whether it did. Nothing is appended to
// the record: it ended where it was closed.
func (s *Server) endIfClosed(ctx context.Context, b *box) bool {
	b.mu.Lock()
	st := b.state
	b.mu.Unlock()
	if st != stateRunning && st != statePaused {
		return false
	}
	r, err := s.o.Store.GetRun(ctx, b.rec.runID)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && r.Status.Final():
	case err != nil:
		s.log.Warn("e2b: read a sandbox's record", "sandbox_id", b.id, "err", err)
		return false
	default:
		return false
	}
	b.life.Lock()
	defer b.life.Unlock()
	b.mu.Lock()
	st = b.state
	b.mu.Unlock()
	if st == stateKilled {
		return false // this server ended it meanwhile
	}
	why := "closed"
	if err == nil {
		why += " " + string(r.Status)
	} else {
		why = "deleted"
	}
	s.log.Info("e2b: a sandbox's record was "+why+" elsewhere; destroying the sandbox", "sandbox_id", b.id, "run_id", b.rec.runID)
	b.status = event.StatusFailed // closed by another: nothing to append
	s.endLocked(ctx, b, endClosed, "")
	return true
}

// endSpent kills the running sandboxes (by tenant) of each metered tenant
// whose credits are spent.
func (s *Server) endSpent(ctx context.Context, running map[string][]*box) {
	for tenant, boxes := range running {
		a, err := s.credits.Account(ctx, tenant)
		if err != nil {
			s.log.Warn("e2b: credits", "tenant", tenant, "err", err)
			continue
		}
		ex := a.Spent()
		if ex == nil {
			continue
		}
		for _, b := range boxes {
			s.end(ctx, b, endCredits, "", *ex)
		}
	}
}
