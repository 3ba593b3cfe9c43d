package store

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/event"
)

// Unfinished returns every agent run, of every tenant, that recovery must
// pick up (status queued, running or awaiting_approval; see
// event.Status.Unfinished), oldest first. A sandbox record is never one:
// its "running" means an E2B sandbox is alive, not that a worker should
// drive it. It pages through ListRuns, so it works on any store.
func Unfinished(ctx context.Context, s Runs) ([]Run, error) {
	f := RunFilter{Kind: KindAgent, Statuses: []event.Status{event.StatusQueued, event.StatusRunning, event.StatusAwaitingApproval}}
	var out []Run
	for {
		page, err := s.ListRuns(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("store: unfinished runs: %w", err)
		}
		out = append(out, page...)
		if len(page) < PageLimit(f.Limit) {
			return out, nil
		}
		f.After = page[len(page)-1].ID
	}
}

// VerifyRun reads run id's log page by page and checks its hash chain
// (event.Chain) up to the run's recorded LastSeq, and that it reaches that
// seq with the recorded LastHash, so a truncated tail is caught too. Events
// appended after the run was read (a live run's) are not read. It returns
// the number of events verified; a broken log gives an *event.VerifyError
// with the seq.
func VerifyRun(ctx context.Context, s RunLog, id string) (int64, error) {
	c, err := VerifyRunChain(ctx, s, id)
	return c.Seq(), err
}

// VerifyRunChain is VerifyRun returning the chain it checked, which says
// how many of the events verified (Seq) and how many of their payloads
// were deleted, and when (Deleted).
func VerifyRunChain(ctx context.Context, s RunLog, id string) (*event.Chain, error) {
	c := event.NewChain(id)
	r, err := s.GetRun(ctx, id)
	if err != nil {
		return c, err
	}
	for c.Seq() < r.LastSeq {
		page, err := s.Events(ctx, id, c.Seq()+1, int(min(MaxPage, r.LastSeq-c.Seq())))
		if err != nil {
			return c, err
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if c.Seq() == r.LastSeq {
				break // appended after the run was read
			}
			if err := c.Next(e); err != nil {
				return c, err
			}
		}
	}
	switch {
	case c.Seq() != r.LastSeq:
		return c, &event.VerifyError{
			RunID: id, Seq: c.Seq() + 1, Got: r.LastSeq,
			Err: fmt.Errorf("%w: last event is seq %d, the run records %d", event.ErrTruncated, c.Seq(), r.LastSeq),
		}
	case c.Seq() > 0 && c.Last() != r.LastHash:
		return c, &event.VerifyError{
			RunID: id, Seq: c.Seq(),
			Err: fmt.Errorf("%w: last event differs from the one the run records", event.ErrHashMismatch),
		}
	}
	return c, nil
}
