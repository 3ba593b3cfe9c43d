package host

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// BlobStats counts what CollectBlobs did.
type BlobStats struct {
	// Named is how many blobs the store names (runs' events and
	// artifacts, uploads); Blobs how many the blob store holds.
	Named, Blobs int
	// Manifests is how many of the others are checkpoint manifests,
	// left to the checkpoint collection (CollectCheckpoints).
	Manifests int
	// Expired is how many it removed: named by nothing, and not written
	// or found within the grace period.
	Expired int
}

// blobName matches a blob's name (package blob) in an event's payload.
var blobName = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// CollectBlobs removes the blobs that nothing names and that no writer
// stored or found within grace (blob.Store.Expire, atomic with a
// writer's Has): what a deletion freed but a writer found meanwhile and
// whose reference never came, an upload refused for its tenant's budget,
// the receipts and tars of uploads made before schema version 17. The
// named are those every run's events and artifacts name (of every
// tenant, every kind) and every upload; checkpoint manifests are the
// checkpoint collection's (CollectCheckpoints) and are left alone. Every
// writer of a blob records its reference within moments of its Put or
// Has, far inside the grace (at least MinCheckpointGrace); a fork copies
// its parent's references, which were named already. On SQLite and
// PostgreSQL alike; any host sharing the store may collect, and several
// at once.
func (h *Host) CollectBlobs(ctx context.Context, grace time.Duration) (BlobStats, error) {
	var st BlobStats
	if grace < MinCheckpointGrace {
		return st, &InputError{Err: fmt.Errorf("grace period %s: at least %s", grace, MinCheckpointGrace)}
	}
	rs, err := h.run()
	if err != nil {
		return st, err
	}
	// The cut before the listing: a blob named after it was used after it.
	before := time.Now().Add(-grace)
	named, err := namedBlobs(ctx, rs.store)
	if err != nil {
		return st, fmt.Errorf("collect blobs: %w", err)
	}
	st.Named = len(named)
	for d, err := range rs.blobs.Digests(ctx) {
		if err != nil {
			return st, fmt.Errorf("collect blobs: %w", err)
		}
		st.Blobs++
		if named[d] {
			continue
		}
		if rs.checkpoints != nil {
			m, err := rs.checkpoints.IsManifest(ctx, d)
			if err != nil {
				return st, fmt.Errorf("collect blobs: %w", err)
			}
			if m {
				st.Manifests++
				continue
			}
		}
		gone, err := rs.blobs.Expire(ctx, d, before)
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			return st, fmt.Errorf("collect blobs: %w", err)
		}
		if gone {
			st.Expired++
		}
	}
	return st, nil
}

// namedBlobs returns the digests st names: in every run's event payloads
// (a script, a workspace tar, a snapshot...), its artifacts, and the
// uploads.
func namedBlobs(ctx context.Context, st store.Store) (map[string]bool, error) {
	named := map[string]bool{}
	err := eachRun(ctx, st, func(r store.Run) error {
		err := eachEvent(ctx, st, r.ID, func(e event.Event) error {
			for _, m := range blobName.FindAll(e.Payload, -1) {
				named[string(m)] = true
			}
			return nil
		})
		if err != nil {
			return err
		}
		as, err := st.ListArtifacts(ctx, r.ID)
		if err != nil {
			return fmt.Errorf("artifacts of %s: %w", r.ID, err)
		}
		for _, a := range as {
			named[a.Digest] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ups, err := st.UploadDigests(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range ups {
		named[d] = true
	}
	return named, nil
}
