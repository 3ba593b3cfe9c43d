package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// forceRounds bounds how often a forced deletion lists and stops the
// tenant's live runs: a run that a driver moves on between the listing
// and the cancel (queued to running, say) is cancelled in the next round.
const forceRounds = 5

// forceWait is how long a forced deletion waits for the drivers of the
// runs it cancelled, here or in another process on the store, to let go
// (engine.Engine.Driven): a driver notices a cancel within its poll,
// destroys its sandboxes and releases its lease. Past it the deletion
// goes on: the driver's later writes find no run and fail, and its
// sandboxes die when it notices.
const forceWait = 2 * time.Minute

// stopTenant ends everything of tenant that is still going, for a forced
// deletion: the sandboxes this host's E2B server holds (running, paused,
// frozen) are destroyed and their records closed; every agent run that has
// not ended is cancelled (engine.Engine.Cancel: the same unfenced write
// as `runs cancel`, which the driving process, on any host, sees at its
// next poll or fenced write, and stops); every other record still open
// (another server's E2B sandbox, an MCP session's asks) is closed
// cancelled, which its server sees at its next lease renewal (running) or
// record check (paused). It then waits for the cancelled runs' drivers to
// let go. It adds what it did to counts.
//
// Preconditions: the tenant is marked deleting, so no run of it is
// created meanwhile.
func (h *Host) stopTenant(ctx context.Context, rs *runSide, tenant string, counts map[string]int64) error {
	h.mu.Lock()
	srv := h.e2b
	h.mu.Unlock()
	if srv != nil {
		counts["sandboxes_destroyed"] += int64(srv.EndTenant(ctx, tenant))
	}
	reason := "tenant " + tenant + " is being deleted"
	var cancelled []string
	for round := 0; ; round++ {
		live, err := unended(ctx, rs.store, tenant)
		if err != nil {
			return err
		}
		if len(live) == 0 {
			break
		}
		if round == forceRounds {
			return fmt.Errorf("%d runs still going after %d rounds of cancelling (the first: %s): %w", len(live), forceRounds, live[0].ID, ErrLive)
		}
		for _, r := range live {
			ok, err := h.stopRecord(ctx, rs, r, "tenant deletion", reason)
			if err != nil {
				return fmt.Errorf("stop run %s: %w", r.ID, err)
			}
			if !ok {
				continue
			}
			if r.Kind == "" {
				counts["runs_cancelled"]++
				cancelled = append(cancelled, r.ID)
			} else {
				counts["records_closed"]++
			}
		}
	}
	deadline := time.Now().Add(forceWait)
	for _, id := range cancelled {
		for rs.eng.Driven(id) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// stopRecord cancels agent run r, or closes record r of another kind,
// by by, and reports whether this call did (false: it had ended
// meanwhile).
func (h *Host) stopRecord(ctx context.Context, rs *runSide, r store.Run, by, reason string) (bool, error) {
	if r.Kind == "" {
		err := rs.eng.Cancel(ctx, r.ID, by, reason)
		if errors.Is(err, engine.ErrFinal) {
			return false, nil
		}
		return err == nil, err
	}
	for attempt := 0; ; attempt++ {
		d, err := event.New(event.RunCancelled{By: by, Reason: reason})
		if err != nil {
			return false, err
		}
		_, _, err = rs.store.AppendStatus(ctx, r.ID, r.LastSeq+1, r.Status, event.StatusCancelled, []event.Event{d})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, store.ErrConflict) || attempt == 50 {
			return false, err
		}
		// Its server wrote first (usage, an op): look again.
		if r, err = rs.store.GetRun(ctx, r.ID); err != nil {
			return false, err
		}
		if r.Status.Final() {
			return false, nil
		}
	}
}

// killSandbox kills the E2B sandbox whose record is r, for an operator (or
// the tenant, through the API) who cancels the record: this host's E2B
// server destroys it at once when it holds it; else the record is closed
// cancelled, which the server holding it (another replica) hears of at
// once on PostgreSQL (store.Changes) and at its next meter tick on SQLite,
// and destroys it then. A record already closed is engine.ErrFinal.
func (h *Host) killSandbox(ctx context.Context, rs *runSide, r store.Run, by, reason string) error {
	h.mu.Lock()
	srv := h.e2b
	h.mu.Unlock()
	if srv != nil && srv.EndRecord(ctx, r.ID, by, reason) {
		return nil
	}
	if r.Status.Final() {
		return fmt.Errorf("%w: run %s is %s", engine.ErrFinal, r.ID, r.Status)
	}
	ok, err := h.stopRecord(ctx, rs, r, by, reason)
	if err == nil && !ok {
		err = fmt.Errorf("%w: run %s ended meanwhile", engine.ErrFinal, r.ID)
	}
	return err
}

// unended lists tenant's runs of every kind that have not ended.
func unended(ctx context.Context, st store.Runs, tenant string) ([]store.Run, error) {
	var out []store.Run
	f := store.RunFilter{Tenant: tenant, Kind: store.KindAny}
	for {
		runs, err := st.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range runs {
			if !r.Status.Final() {
				out = append(out, r)
			}
		}
		if len(runs) < store.PageLimit(0) {
			return out, nil
		}
		f.After = runs[len(runs)-1].ID
	}
}
