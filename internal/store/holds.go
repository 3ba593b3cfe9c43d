package store

import "context"

// CheckpointHold is a reference to a checkpoint that no run's event makes:
// an E2B sandbox paused as a checkpoint, an E2B snapshot. Their records
// live in the home of the server that made them; on a store several hosts
// share, each server also keeps a hold in the store for each, so that a
// checkpoint collection run from any host sees every live checkpoint.
type CheckpointHold struct {
	// Holder names the reference, unique in the store:
	// "e2b/SERVER/paused/RUN", "e2b/SERVER/snapshot/ID".
	Holder string
	// Tenant is the checkpoint's tenant (its chunks' key), Digest its
	// manifest's digest.
	Tenant, Digest string
}

// CheckpointHolds keeps the holds of a store several hosts share (the
// PostgreSQL store; the SQLite store's host reads its own E2B records).
// A tenant's deletion deletes its holds with it.
type CheckpointHolds interface {
	// HoldCheckpoint records h, replacing a hold of the same holder.
	HoldCheckpoint(ctx context.Context, h CheckpointHold) error
	// ReleaseCheckpoint deletes the hold of holder; none is fine.
	ReleaseCheckpoint(ctx context.Context, holder string) error
	// SyncCheckpointHolds makes the holds whose holders start with prefix
	// exactly hs, in one transaction: what a server records when it
	// starts, from its records (a hold it could not release before it
	// stopped goes; one it could not record is made).
	SyncCheckpointHolds(ctx context.Context, prefix string, hs []CheckpointHold) error
	// ListCheckpointHolds returns every hold, ordered by holder.
	ListCheckpointHolds(ctx context.Context) ([]CheckpointHold, error)
}
