package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
)

// The compaction policy: the writer writes a full checkpoint in place of
// a delta once the chain from the last full one would hold more than
// compactDepth deltas, or its deltas more than 1/CompactShare as many
// entries as the full one. A full checkpoint made so costs its manifest
// only: it refers to the chunks stored already, but that manifest lists
// the whole tree, the one cost of a step that grows with the tree. So the
// depth allowed grows with the tree too: CompactDepth, and one delta more
// for every DepthEntries entries of the full checkpoint, up to
// MaxChain-1 (what every reader follows). A compaction's cost spread over
// its chain's steps then stays about what a step in a small tree costs
// (a 19k-entry tree: a 22 ms compaction every 64 steps rather than every
// 17, against a 3 ms step). Restores read at most a chain's manifests,
// one small read each for a restore that reads the whole tree anyway,
// and replay at most 1/CompactShare more entries than the tree holds.
const (
	CompactDepth = 16
	DepthEntries = 256
	CompactShare = 4
)

// compactDepth is the most deltas a chain on a full checkpoint of base
// entries holds.
func compactDepth(base int64) int {
	return int(min(max(CompactDepth, base/DepthEntries), MaxChain-1))
}

// Result is what Write stored.
type Result struct {
	// Digest names the checkpoint (its manifest's blob digest).
	Digest string
	// Parent is the checkpoint it changes; "" when it is full.
	Parent string
	// Full says the checkpoint is a whole tree; Compacted that it is one
	// only by the compaction policy (the stream was a delta).
	Full      bool
	Compacted bool
	// Depth counts the deltas since the last full checkpoint.
	Depth int
	// Stats is what it holds and what it cost (also in its manifest).
	Stats Stats
	// ManifestBytes is the size of its manifest as stored.
	ManifestBytes int64
}

// Write reads a delta stream ("airlock delta v1", docs/checkpoints.md) of
// tenant's workspace and stores it as a checkpoint: the content of its
// files as deduplicated chunks, and a manifest. With full, the stream is
// the whole tree and parent is not read (a full checkpoint stands alone);
// otherwise it is the change to the tree of the checkpoint parent, which
// must be tenant's.
//
// Every entry is checked against the contract and the tree it applies to;
// the first that breaks it fails Write with an error wrapping ErrStream
// that names it. File content goes through the chunker as one stream
// across files, with the tenant's gear table, so the same tree is cut
// into the same chunks every time; chunks the store holds already are
// neither compressed nor written again. Every chunk the checkpoint
// refers to is synced before the manifest is stored (also those it found
// stored: the Write that put them may have failed before its sync), so a
// checkpoint never refers to chunks a crash can lose. Memory is bounded by a few chunks (chunk.MaxSize each) per CPU and
// the entries of the tree, never by a file's size.
//
// ctx is checked between reads of delta: a stream that stalls holds Write
// until its writer writes or closes it (the caller closes the stream it
// cancels). On an error nothing refers to what was stored: chunks already
// written stay for the next checkpoint to share, or a collector to delete.
func (s *Store) Write(ctx context.Context, tenant, parent string, full bool, delta io.Reader) (Result, error) {
	key := chunk.TenantKey(tenant)
	fp := key.Fingerprint()
	t := newTree()
	var pm *Manifest
	var chain []string // the parent's chain, parent first
	var err error
	if !full {
		if parent == "" {
			return Result{}, errors.New("checkpoint: write: a delta with no parent checkpoint")
		}
		if c := s.trees.take(fp, parent); c != nil {
			t, pm, chain = c.t, c.head, c.chain
		} else if t, pm, chain, err = s.resolveChain(ctx, key, parent); err != nil {
			return Result{}, fmt.Errorf("checkpoint: write: parent: %w", err)
		}
		// The chain's manifests are used now: a collection whose cut is
		// before this keeps them (see Collect), though no root names
		// this checkpoint yet. One already collected makes the delta
		// unreadable: refused, as a parent that does not load is.
		for _, d := range chain {
			ok, err := s.blobs.Has(ctx, d)
			if err != nil {
				return Result{}, fmt.Errorf("checkpoint: write: parent: %w", err)
			}
			if !ok {
				return Result{}, fmt.Errorf("checkpoint: write: parent %s: %w: its chain's manifest %s was collected", parent, blob.ErrNotFound, d)
			}
		}
	}
	dr := newDeltaReader(&ctxReader{ctx: ctx, r: delta}, t, full)
	refs, stats, err := s.storeContent(ctx, key, s.cutter(dr, key))
	if err != nil {
		return Result{}, fmt.Errorf("checkpoint: write: %w", err)
	}
	fillSlices(dr.files, refs)
	for _, l := range dr.links {
		l.e.Slices = l.target.Slices
	}
	if err := s.chunks.Sync(ctx, chunkIDs(refs)); err != nil {
		return Result{}, fmt.Errorf("checkpoint: write: %w", err)
	}

	stats.TreeEntries = t.n
	stats.DeltaEntries, stats.DeltaBytes = int64(len(dr.entries)), dr.bytes
	m := &Manifest{Key: fp, Full: true, BaseEntries: t.n, Stats: stats}
	compacted := false
	if !full {
		depth := pm.Depth + 1
		chainEntries := pm.ChainEntries + int64(len(dr.entries))
		if depth > compactDepth(pm.BaseEntries) || chainEntries*CompactShare > pm.BaseEntries {
			compacted = true
		} else {
			m.Full, m.Parent, m.Depth = false, parent, depth
			m.BaseEntries, m.ChainEntries = pm.BaseEntries, chainEntries
		}
	}
	var list []*Entry
	if m.Full {
		// Normal form, sorted: what costs what the tree holds is done
		// for full checkpoints only. The entries are encoded as the
		// tree holds them, not copied into m.
		list, m.Stats.TreeBytes = t.normalize()
	} else {
		m.Stats.TreeBytes = t.contentBytes()
		list = slices.Clone(dr.entries)
		slices.SortFunc(list, func(a, b *Entry) int { return compareNames(a.Name, b.Name) })
	}
	digest, n, err := s.putEncoded(ctx, m.encodeEntries(list))
	if err != nil {
		return Result{}, fmt.Errorf("checkpoint: write: %w", err)
	}
	if m.Full {
		chain = nil
	}
	s.trees.put(fp, append([]string{digest}, chain...), t, m)
	return Result{
		Digest: digest, Parent: m.Parent, Full: m.Full, Compacted: compacted, Depth: m.Depth,
		Stats: m.Stats, ManifestBytes: n,
	}, nil
}

// chunkRef is a chunk of the content stream: where it starts, its length
// and (once a worker hashed it) its ID.
type chunkRef struct {
	start  int64
	length uint32
	id     chunk.ID
}

// storeContent cuts the content r yields into chunks and stores those the
// store does not hold. The chunker runs here; hashing, the existence
// check, compression and the write run in one worker per CPU, fed through
// a channel, so reading goes on while they work. Buffers circulate among
// a fixed few: memory stays at most 2 per worker plus 2 chunks.
func (s *Store) storeContent(ctx context.Context, key chunk.Key, c cutter) ([]*chunkRef, Stats, error) {
	type job struct {
		ref  *chunkRef
		data []byte
	}
	nbuf := 2*s.workers + 2
	jobs := make(chan job, s.workers)
	free := make(chan []byte, nbuf) // every buffer fits: returning one never blocks
	var (
		mu      sync.Mutex
		claimed = map[chunk.ID]bool{} // chunks this write has seen
		st      struct{ newChunks, newBytes, sharedChunks, sharedBytes atomic.Int64 }
	)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(wctx)
	for range s.workers {
		g.Go(func() error {
			h := key.Hasher()
			for j := range jobs {
				id := h.Sum(j.data)
				j.ref.id = id
				mu.Lock()
				mine := !claimed[id]
				claimed[id] = true
				mu.Unlock()
				stored := false
				if mine {
					ok, err := s.chunks.Has(gctx, id)
					if err != nil {
						return err
					}
					if !ok {
						n, err := s.chunks.Put(gctx, id, j.data)
						if err != nil {
							return err
						}
						st.newChunks.Add(1)
						st.newBytes.Add(n)
						stored = true
					}
				}
				if !stored {
					st.sharedChunks.Add(1)
					st.sharedBytes.Add(int64(len(j.data)))
				}
				free <- j.data[:0]
			}
			return nil
		})
	}

	var refs []*chunkRef
	err := func() error {
		defer close(jobs)
		made := 0
		var off int64
		for {
			var buf []byte
			select {
			case buf = <-free:
			default:
				if made < nbuf {
					buf = s.chunkBuf()
					made++
				} else {
					select {
					case buf = <-free:
					case <-gctx.Done():
						return nil // a worker's error, returned by Wait
					}
				}
			}
			data, err := c.Next(buf)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			ref := &chunkRef{start: off, length: uint32(len(data))}
			off += int64(len(data))
			refs = append(refs, ref)
			select {
			case jobs <- job{ref: ref, data: data}:
			case <-gctx.Done():
				return nil
			}
		}
	}()
	if err != nil {
		cancel()
	}
	if werr := g.Wait(); err == nil {
		err = werr
	}
	// Every buffer is back once the workers are done (or with the
	// chunker, which is done too): keep them for the next write.
	close(free)
	for b := range free {
		s.bufs.Put(&b)
	}
	if err != nil {
		return nil, Stats{}, err
	}
	return refs, Stats{
		NewChunks: st.newChunks.Load(), NewBytes: st.newBytes.Load(),
		SharedChunks: st.sharedChunks.Load(), SharedBytes: st.sharedBytes.Load(),
	}, nil
}

// cutter cuts a content stream into chunks: Next returns the next one in
// buf (reusing its room), or io.EOF after the last. Chunks are 1 to
// chunk.MaxSize bytes.
type cutter interface {
	Next(buf []byte) ([]byte, error)
}

// cutter returns the chunker of r for the tenant whose key is key:
// FastCDC with the tenant's gear table (cdc.go), or what a test put in
// s.newCutter. Nothing but dedup depends on where chunks are cut: a
// manifest records each file's slices of chunks, so a restore reads what
// a checkpoint refers to, whichever chunker cut it.
func (s *Store) cutter(r io.Reader, key chunk.Key) cutter {
	if s.newCutter != nil {
		return s.newCutter(r, key)
	}
	return newCDC(r, s.gearTable(key))
}

// chunkBuf returns a buffer for the chunker to cut a chunk into: one a
// write before used, or a new one of one read's room (cdcRead), which the
// chunker grows to what its chunks need. Reusing them matters: first
// touching memory costs more here than hashing and compressing it. A new
// one starts small because most writes are a step's few small files:
// one of a chunk's full size (2 MiB, zeroed) cost such a step a fifth
// of its CPU time whenever a collection had emptied the pool.
func (s *Store) chunkBuf() []byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, cdcRead)
}

// chunkIDs returns the IDs of refs, each once.
func chunkIDs(refs []*chunkRef) []chunk.ID {
	seen := make(map[chunk.ID]bool, len(refs))
	ids := make([]chunk.ID, 0, len(refs))
	for _, r := range refs {
		if !seen[r.id] {
			seen[r.id] = true
			ids = append(ids, r.id)
		}
	}
	return ids
}

// fillSlices sets the slices of each file from the chunks of the content
// stream: files and chunks both in stream order.
func fillSlices(files []fileRange, refs []*chunkRef) {
	i := 0
	for _, f := range files {
		start, end := f.off, f.off+f.e.Size
		for i < len(refs) && refs[i].start+int64(refs[i].length) <= start {
			i++
		}
		var out []Slice
		for j := i; j < len(refs) && refs[j].start < end; j++ {
			r := refs[j]
			lo, hi := max(start, r.start), min(end, r.start+int64(r.length))
			out = append(out, Slice{Chunk: r.id, Offset: uint32(lo - r.start), Length: uint32(hi - lo)})
		}
		f.e.Slices = out
	}
}

// ctxReader stops a read when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
