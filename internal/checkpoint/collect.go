package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// Root names a live checkpoint: one that something that still exists (a
// run's snapshot.taken event, a paused sandbox, a snapshot record) refers
// to, with the tenant it belongs to.
type Root struct {
	Tenant string
	Digest string
}

// CollectStats is what a collection found and removed.
type CollectStats struct {
	// Roots is how many live checkpoints the roots named; Manifests how
	// many manifests their chains hold (each read once).
	Roots, Manifests int
	// Live is how many chunks those manifests refer to; Chunks how many
	// the chunk store listed; Expired how many of the others it removed
	// (the rest were used after the cut: see Collect).
	Live, Chunks, Expired int
}

// Collect removes the chunks that no live checkpoint refers to and that
// were last used (put, or found by a writer) before the time before.
//
// The live checkpoints are what roots returns, and every manifest of their
// chains. Collect calls roots after the caller chose before, and the
// caller must choose before at least a grace period earlier than now:
// then a checkpoint being written while roots runs, whose chunks are
// stored but whose event is not appended yet, is safe, as long as writing
// it takes less than the grace period. Its chunks were put or found during
// its write, after before, and the chunk store's Expire keeps a chunk used
// after before, atomically with the writer's Has (chunk.Backend). A write
// that was killed between its chunks and its event leaves chunks that no
// root names: they go once they are older than the grace period.
//
// A root or a manifest of its chain that does not load fails the
// collection before anything is removed: a chain that cannot be read
// cannot say which chunks it keeps. Manifests themselves are blobs, kept
// by the blob store (not collected here).
func (s *Store) Collect(ctx context.Context, before time.Time, roots func(context.Context) ([]Root, error)) (CollectStats, error) {
	var st CollectStats
	rs, err := roots(ctx)
	if err != nil {
		return st, fmt.Errorf("checkpoint: collect: list the live checkpoints: %w", err)
	}
	st.Roots = len(rs)
	live := map[chunk.ID]bool{}
	marked := map[string]bool{} // manifests whose chains are marked
	for _, r := range rs {
		if err := s.mark(ctx, r, live, marked, &st); err != nil {
			return st, fmt.Errorf("checkpoint: collect: %w", err)
		}
	}
	st.Live = len(live)
	for id, err := range s.chunks.IDs(ctx) {
		if err != nil {
			return st, fmt.Errorf("checkpoint: collect: %w", err)
		}
		st.Chunks++
		if live[id] {
			continue
		}
		gone, err := s.chunks.Expire(ctx, id, before)
		if err != nil {
			return st, fmt.Errorf("checkpoint: collect: %w", err)
		}
		if gone {
			st.Expired++
		}
	}
	return st, nil
}

// mark adds the chunks of r's chain to live, manifest by manifest back to
// its full one or to one marked already.
func (s *Store) mark(ctx context.Context, r Root, live map[chunk.ID]bool, marked map[string]bool, st *CollectStats) error {
	key := chunk.TenantKey(r.Tenant)
	n := 0
	for d := r.Digest; d != "" && !marked[d]; n++ {
		if n == MaxChain {
			return fmt.Errorf("checkpoint %s of tenant %q: %w: no full checkpoint in %d", r.Digest, r.Tenant, ErrCorrupt, MaxChain)
		}
		m, err := s.load(ctx, key, d)
		if err != nil {
			return fmt.Errorf("checkpoint %s of tenant %q: %w", r.Digest, r.Tenant, err)
		}
		marked[d] = true
		st.Manifests++
		for _, id := range m.ChunkIDs() {
			live[id] = true
		}
		if m.Full {
			break
		}
		d = m.Parent
	}
	return nil
}
