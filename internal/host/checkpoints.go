package host

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/store"
)

// MinCheckpointGrace is the shortest grace period CollectCheckpoints
// takes: longer than any checkpoint takes to write (a checkpoint of
// several GiB is minutes), since a checkpoint written meanwhile keeps its
// chunks only if it was written within the grace period.
const MinCheckpointGrace = 10 * time.Minute

// CollectCheckpoints removes the checkpoint chunks that no live checkpoint
// refers to and that no writer used within grace (see
// checkpoint.Store.Collect): the live checkpoints are those every run's
// snapshot.taken events name, and the E2B server's paused sandboxes and
// snapshots in $AIRLOCK_HOME/e2b, and, on a PostgreSQL store, the holds
// every host's E2B server keeps there of its own (store.CheckpointHolds):
// any host sharing the store may collect, and several at once.
func (h *Host) CollectCheckpoints(ctx context.Context, grace time.Duration) (checkpoint.CollectStats, error) {
	if grace < MinCheckpointGrace {
		return checkpoint.CollectStats{}, &InputError{Err: fmt.Errorf("grace period %s: at least %s", grace, MinCheckpointGrace)}
	}
	rs, err := h.run()
	if err != nil {
		return checkpoint.CollectStats{}, err
	}
	before := time.Now().Add(-grace)
	return rs.checkpoints.Collect(ctx, before, h.liveCheckpoints(rs))
}

// liveCheckpoints lists the checkpoints that every run's snapshot.taken
// events name, and the E2B server's paused sandboxes and snapshots in
// $AIRLOCK_HOME/e2b, and on a shared store every host's holds.
func (h *Host) liveCheckpoints(rs *runSide) func(context.Context) ([]checkpoint.Root, error) {
	stateDir := filepath.Join(h.cfg.Home, sandboxcli.E2BStateDir)
	return func(ctx context.Context) ([]checkpoint.Root, error) {
		roots, err := RunCheckpoints(ctx, rs.store)
		if err != nil {
			return nil, err
		}
		if rs.holds != nil {
			hs, err := rs.holds.ListCheckpointHolds(ctx)
			if err != nil {
				return nil, err
			}
			for _, x := range hs {
				roots = append(roots, checkpoint.Root{Tenant: x.Tenant, Digest: x.Digest})
			}
		}
		more, err := e2b.CheckpointRoots(ctx, stateDir, func(ctx context.Context, runID string) (string, error) {
			r, err := rs.store.GetRun(ctx, runID)
			return r.Tenant, err
		})
		return append(roots, more...), err
	}
}

// deletionRoots is what a deletion lists before it deletes, so that
// forgetManifests can remove the manifests it leaves without a reference:
// the live checkpoints and when the listing began (on a PostgreSQL store,
// with every host's holds).
func (h *Host) deletionRoots(ctx context.Context, rs *runSide) ([]checkpoint.Root, time.Time, error) {
	since := time.Now()
	if rs.checkpoints == nil {
		return nil, since, nil
	}
	roots, err := h.liveCheckpoints(rs)(ctx)
	if err != nil {
		return nil, since, fmt.Errorf("list the checkpoints: %w", err)
	}
	return roots, since, nil
}

// forgetManifests removes, after a deletion, the manifests of the
// checkpoints that were live before it (gone, listed by deletionRoots at
// since) and that no live checkpoint's chain holds now
// (checkpoint.Store.Forget): the file names they hold go with the
// deletion, not with the next collection.
func (h *Host) forgetManifests(ctx context.Context, rs *runSide, gone []checkpoint.Root, since time.Time) error {
	if len(gone) == 0 {
		return nil
	}
	if _, err := rs.checkpoints.Forget(ctx, gone, since, h.liveCheckpoints(rs)); err != nil {
		return fmt.Errorf("remove the deleted checkpoints' manifests: %w", err)
	}
	return nil
}

// RunCheckpoints lists the checkpoints the runs of st name in their
// snapshot.taken events, every run and record of every tenant.
func RunCheckpoints(ctx context.Context, st store.RunLog) ([]checkpoint.Root, error) {
	var roots []checkpoint.Root
	err := eachRun(ctx, st, func(r store.Run) error {
		return eachEvent(ctx, st, r.ID, func(e event.Event) error {
			if e.Type != event.TypeSnapshotTaken {
				return nil
			}
			if _, deleted := event.ParseTombstone(e.Payload); deleted {
				return nil // retention deleted it: its checkpoint may go
			}
			p, err := e.Unpack()
			if err != nil {
				return fmt.Errorf("event %d of %s: %w", e.Seq, r.ID, err)
			}
			if sn, ok := p.(*event.SnapshotTaken); ok && sn.Format == event.FormatCheckpoint {
				roots = append(roots, checkpoint.Root{Tenant: r.Tenant, Digest: sn.Digest})
			}
			return nil
		})
	})
	return roots, err
}

// eachRun calls fn with every run of st, every kind and tenant, a page at
// a time.
func eachRun(ctx context.Context, st store.Runs, fn func(store.Run) error) error {
	f := store.RunFilter{Kind: store.KindAny}
	for {
		runs, err := st.ListRuns(ctx, f)
		if err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		for _, r := range runs {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(runs) < store.PageLimit(0) {
			return nil
		}
		f.After = runs[len(runs)-1].ID
	}
}

// eachEvent calls fn with every event of run id in st, a page at a time.
func eachEvent(ctx context.Context, st store.Log, id string, fn func(event.Event) error) error {
	for from := int64(1); ; {
		evs, err := st.Events(ctx, id, from, 0)
		if err != nil {
			return fmt.Errorf("events of %s: %w", id, err)
		}
		for _, e := range evs {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(evs) < store.PageLimit(0) {
			return nil
		}
		from = evs[len(evs)-1].Seq + 1
	}
}
