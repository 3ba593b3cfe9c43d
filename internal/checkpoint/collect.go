package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/airlockrun/airlock/internal/store/blob"
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
	// Live is how many chunks those manifests, and the manifests used
	// after the cut, refer to; Chunks how many
	// the chunk store listed; Expired how many of the others it removed
	// (the rest were used after the cut: see Collect).
	Live, Chunks, Expired int
	// Blobs is how many blobs the blob store listed; Orphans how many of
	// them are manifests that no live chain holds; ManifestsExpired how
	// many of those it removed (the rest were used after the cut).
	Blobs, Orphans, ManifestsExpired int
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
// The manifests no live chain holds go the same way: Collect lists the
// blob store, which keeps other blobs too (artifacts, uploads), and
// expires each blob that is a manifest (it decompresses to a manifest's
// magic: Orphans) and that no live chain holds, if it was last written or
// found before the time before (blob.Store.Expire). A writer of a delta
// marks its parent's chain used when it starts (Write), so a chain that a
// checkpoint being written extends is kept, and the chunks of every
// manifest kept so are live too. A manifest
// holds the names of the files it checkpoints: collecting it is what
// removes them once the runs that named them are deleted.
//
// A root or a manifest of its chain that does not load fails the
// collection before anything is removed: a chain that cannot be read
// cannot say which chunks it keeps. Nothing is removed before every root
// is marked, so a collection killed at any point has removed only what no
// root named; the next one removes the rest.
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
	if err := s.collectManifests(ctx, before, live, marked, &st); err != nil {
		return st, fmt.Errorf("checkpoint: collect: %w", err)
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
			if s.removed != nil {
				s.removed()
			}
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

// collectManifests expires the manifests in the blob store that are not in
// marked and were last used before the time before.
func (s *Store) collectManifests(ctx context.Context, before time.Time, live map[chunk.ID]bool, marked map[string]bool, st *CollectStats) error {
	for d, err := range s.blobs.Digests(ctx) {
		if err != nil {
			return err
		}
		st.Blobs++
		if marked[d] {
			continue
		}
		ok, err := s.isManifest(ctx, d)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		st.Orphans++
		gone, err := s.blobs.Expire(ctx, d, before)
		if err != nil {
			return err
		}
		if gone {
			st.ManifestsExpired++
			if s.removed != nil {
				s.removed()
			}
			continue
		}
		// Used after the cut: a writer is extending its chain (Write
		// marked it), or wrote it, and will record it. Its chain's chunks
		// stay too.
		s.markOrphan(ctx, d, live, marked)
	}
	return nil
}

// markOrphan adds the chunks of the chain ending in the manifest digest,
// which no root names, to live, and its manifests to marked. Its tenant is
// not known, so its key is not checked: marking more chunks live than it
// should only keeps them. A manifest of the chain that does not load (gone
// meanwhile, damaged) ends the chain: what is marked stays.
func (s *Store) markOrphan(ctx context.Context, digest string, live map[chunk.ID]bool, marked map[string]bool) {
	for n, d := 0, digest; d != "" && !marked[d] && n < MaxChain; n++ {
		m, err := s.load(ctx, chunk.Key{}, d)
		if err != nil {
			return
		}
		marked[d] = true
		for _, id := range m.ChunkIDs() {
			live[id] = true
		}
		if m.Full {
			return
		}
		d = m.Parent
	}
}

// IsManifest reports whether the blob digest is a checkpoint manifest
// (what Collect and Forget own): another collector of the blob store
// leaves those to them.
func (s *Store) IsManifest(ctx context.Context, digest string) (bool, error) {
	return s.isManifest(ctx, digest)
}

// isManifest reports whether the blob digest is a checkpoint manifest: a
// zstd frame whose content starts with the manifest magic. Only that much
// is read and decompressed. A blob removed meanwhile is not one.
func (s *Store) isManifest(ctx context.Context, digest string) (bool, error) {
	r, err := s.blobs.Open(ctx, digest)
	if errors.Is(err, blob.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer r.Close()
	br := bufio.NewReaderSize(r, 512)
	head, err := br.Peek(4)
	if err != nil || !bytes.Equal(head, zstdMagic) {
		return false, nil // shorter than a frame, or not zstd
	}
	dec, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxMemory(MaxManifest))
	if err != nil {
		return false, fmt.Errorf("manifest %s: %w", digest, err)
	}
	defer dec.Close()
	magic := make([]byte, len(manifestMagic))
	if _, err := io.ReadFull(dec, magic); err != nil {
		return false, nil // a zstd frame, too short or not a manifest's
	}
	return string(magic) == manifestMagic, nil
}

// zstdMagic starts every zstd frame (RFC 8878).
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Forget removes the manifests of the chains of gone (checkpoints that a
// deletion left without a reference: a purged run's, a deleted tenant's)
// that no chain of the roots live returns holds, if they were last used
// before the time before, and returns how many it removed. A deletion
// calls it at once, so the file names its manifests hold go with it; their
// chunks go with the next collection (Collect), after its grace period.
//
// The caller lists gone before its deletion and calls Forget after it, with
// before when the deletion began: a manifest that a writer wrote or found
// since (the same tree checkpointed again, by another run of the tenant)
// stays for Collect to decide. A live root that does not load fails Forget
// before anything is removed, unless a manifest of its chain is missing
// (the chain is broken already; what is marked stays); a gone chain that
// does not load ends there.
func (s *Store) Forget(ctx context.Context, gone []Root, before time.Time, live func(context.Context) ([]Root, error)) (int, error) {
	rs, err := live(ctx)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: forget: list the live checkpoints: %w", err)
	}
	keep := map[chunk.ID]bool{}
	marked := map[string]bool{}
	var st CollectStats
	for _, r := range rs {
		// A chain with a manifest missing is broken already: what is
		// below the gap restores nothing, so it keeps nothing (a record
		// naming a checkpoint collected long ago must not stop every
		// deletion). Any other failure does.
		if err := s.mark(ctx, r, keep, marked, &st); err != nil && !errors.Is(err, blob.ErrNotFound) {
			return 0, fmt.Errorf("checkpoint: forget: %w", err)
		}
	}
	n := 0
	seen := map[string]bool{}
	for _, r := range gone {
		key := chunk.TenantKey(r.Tenant)
		for i, d := 0, r.Digest; d != "" && !seen[d] && i < MaxChain; i++ {
			seen[d] = true
			if marked[d] {
				break // a live chain holds it, and what is below it
			}
			m, err := s.load(ctx, key, d)
			if err != nil {
				break
			}
			ok, err := s.blobs.Expire(ctx, d, before)
			if err != nil {
				return n, fmt.Errorf("checkpoint: forget: %w", err)
			}
			if ok {
				n++
				s.trees.forget(d)
			}
			if m.Full {
				break
			}
			d = m.Parent
		}
	}
	return n, nil
}
