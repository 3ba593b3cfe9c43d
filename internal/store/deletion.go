package store

import (
	"context"
	"time"
)

// Kinds of Deletion.
const (
	// DeletionRun: a run purged (with the runs forked from it).
	DeletionRun = "run"
	// DeletionTenant: a tenant deleted with everything it had.
	DeletionTenant = "tenant"
	// DeletionRetention: a retention pass deleted what had expired.
	DeletionRetention = "retention"
)

// Deletion is the audit record of a deletion: who deleted what, when, and
// how much (Counts, by kind of data: "runs", "events", "artifacts"...),
// never any of the deleted content. It outlives what it names.
type Deletion struct {
	// ID is the store's number for the record, 1, 2, 3... in commit order.
	ID int64
	// Tenant is the tenant whose data was deleted ("" for a retention pass
	// over every tenant).
	Tenant string
	// Kind is DeletionRun, DeletionTenant or DeletionRetention.
	Kind string
	// Target names what was deleted: the run id, the tenant name, or the
	// retention rule.
	Target string
	// Actor is who asked: an API key id, "cli" for the local CLI, or
	// "retention" for the sweeper.
	Actor string
	// Counts holds how many of each kind of data went.
	Counts map[string]int64
	// Created is when the deletion was recorded.
	Created time.Time
}

// Deletions is a data policy's deletions: payloads replaced by tombstones
// (retention), runs purged, tenants deleted, and their audit records.
type Deletions interface {
	// TombstonePayloads replaces the payload of each event of run runID
	// with event.Tombstone(e, at, reason), keeping its hash so the chain
	// still verifies, and clears the run's task. Events already
	// tombstoned are left as they are; events sealed before payload
	// digests (event.ErrV1Payload) keep their payloads and are counted in
	// kept. It returns how many payloads it replaced, and the blobs the
	// replaced payloads named that nothing names any more (a script, a
	// workspace tar; never a checkpoint manifest), whose blobs the caller
	// deletes.
	TombstonePayloads(ctx context.Context, runID string, at time.Time, reason string) (replaced, kept int64, free []string, err error)

	// TombstoneCheckpoints does what TombstonePayloads does to run
	// runID's snapshot.taken events only (its workspace checkpoints;
	// the task and every other payload stay): the checkpoint collection
	// then frees the manifests and chunks nothing else names. It returns
	// how many payloads it replaced (those sealed before digests stay).
	TombstoneCheckpoints(ctx context.Context, runID string, at time.Time, reason string) (replaced int64, err error)

	// DeleteArtifacts deletes run runID's artifacts' metadata and
	// replaces the payloads of its artifact.stored events by tombstones
	// (as TombstonePayloads; the task and every other payload stay). It
	// returns how many artifacts it deleted and the digests nothing names
	// any more (no artifact, upload or event payload), whose blobs the
	// caller deletes. A fork's own copies keep a blob until they go too.
	DeleteArtifacts(ctx context.Context, runID string, at time.Time, reason string) (deleted int64, free []string, err error)

	// PurgeRun and DeleteTenant keep the counts d holds already (of what
	// the caller deleted outside the store) and add the store's.

	// PurgeRun deletes run runID and every run forked from it (their
	// forks' logs start with a copy of the parent's), with their events,
	// artifacts' metadata and metadata, and records d with the counts
	// filled (d.Tenant is the run's). The runs' ledger entries stay, so
	// the tenant's balance does not change. It returns the record as
	// stored and the digests of the deleted artifacts that no remaining
	// artifact refers to, whose blobs the caller deletes.
	PurgeRun(ctx context.Context, runID string, d Deletion) (Deletion, []string, error)

	// DeleteTenant deletes tenant and everything the store keeps of it:
	// runs (of every kind) with their events, artifacts' metadata and
	// metadata; ledger entries; policies; templates; API keys; and the
	// tenant itself. It records d with the counts filled and returns it
	// and the digests whose blobs are no longer referenced, as PurgeRun.
	// A tenant that does not exist gives ErrNotFound; one with a run
	// that has not ended, ErrConflict (and nothing is deleted).
	DeleteTenant(ctx context.Context, tenant string, d Deletion) (Deletion, []string, error)

	// RecordDeletion stores d (a retention pass's summary) and returns it
	// as stored.
	RecordDeletion(ctx context.Context, d Deletion) (Deletion, error)

	// ListDeletions returns the audit records of tenant ("" for every
	// tenant's and the retention passes'), newest first, at most limit
	// (MaxPage when limit <= 0 or above it).
	ListDeletions(ctx context.Context, tenant string, limit int) ([]Deletion, error)

	// ExpireDeletions deletes the audit records recorded before before
	// (the audit retention of a data policy) of the tenants listed, or,
	// with others, of every tenant not listed: the retention passes' ("")
	// and those of tenants since deleted too. It returns how many went.
	ExpireDeletions(ctx context.Context, before time.Time, tenants []string, others bool) (int64, error)
}
