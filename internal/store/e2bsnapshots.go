package store

import (
	"context"
	"time"
)

// E2BSnapshot is the record of an E2B snapshot (a tenant's saved
// workspace that sandboxes are created from) on a store several hosts
// share.
type E2BSnapshot struct {
	// ID is the snapshot's id, unique in the store; Name its tenant's
	// name for it ("" for none), unique among the tenant's.
	ID, Tenant, Name string
	Created          time.Time
	// Body is the E2B server's record of the snapshot (JSON: its
	// checkpoint, the sandbox's policy and template), opaque to the
	// store; at most MaxE2BSnapshotBody bytes.
	Body []byte
}

// MaxE2BSnapshotBody bounds an E2B snapshot's record: a policy and a
// template document at their bounds, with room.
const MaxE2BSnapshotBody = 1 << 20

// E2BSnapshots keeps the E2B snapshots of a store several hosts share
// (the PostgreSQL store: every replica of the E2B service sees every
// snapshot; the SQLite store's host keeps its own in its E2B state
// directory). A tenant's deletion deletes its snapshots with it.
type E2BSnapshots interface {
	// PutE2BSnapshot records s. An id, or a non-empty name of the
	// tenant's, that is taken gives an error wrapping ErrExists, also
	// when another process took it a moment before.
	PutE2BSnapshot(ctx context.Context, s E2BSnapshot) error
	// GetE2BSnapshot returns tenant's snapshot whose id or name is ref;
	// none (or another tenant's) gives ErrNotFound.
	GetE2BSnapshot(ctx context.Context, tenant, ref string) (E2BSnapshot, error)
	// ListE2BSnapshots returns every snapshot of tenant, oldest first.
	ListE2BSnapshots(ctx context.Context, tenant string) ([]E2BSnapshot, error)
	// DeleteE2BSnapshot deletes tenant's snapshot id; none gives
	// ErrNotFound.
	DeleteE2BSnapshot(ctx context.Context, tenant, id string) error
}
