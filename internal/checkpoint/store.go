package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
)

// Errors callers branch on.
var (
	// ErrStream: a delta stream is outside the contract ("airlock delta
	// v1", docs/checkpoints.md); the error names the entry.
	ErrStream = errors.New("checkpoint: bad delta stream")
	// ErrCorrupt: a manifest cannot be decoded, or a chain of them
	// cannot be applied.
	ErrCorrupt = errors.New("checkpoint: corrupt manifest")
	// ErrTenant: a checkpoint belongs to another tenant than the one
	// named.
	ErrTenant = errors.New("checkpoint: another tenant's checkpoint")
	// ErrOverLimit: a sandbox's stream ran past TakeRequest.Limit.
	ErrOverLimit = errors.New("checkpoint: the workspace is over its limit")
)

// Store writes, resolves and restores the checkpoints of every tenant:
// manifests in a blob store, chunks in a chunk store. It is safe for
// concurrent use.
type Store struct {
	blobs   *blob.Store
	chunks  *chunk.Store
	workers int
	menc    *zstd.Encoder
	mdec    *zstd.Decoder
	gears   sync.Map // chunk.Key -> *gearTable
	// bufs keeps the chunk buffers (*[]byte) of writes for the next.
	bufs  sync.Pool
	trees treeCache
	// newCutter, when a test sets it, replaces the chunker.
	newCutter func(io.Reader, chunk.Key) cutter
	// removed, when a test sets it, runs after Collect removes a manifest
	// or a chunk.
	removed func()
}

// New returns a Store that keeps manifests in blobs and chunks in chunks.
func New(blobs *blob.Store, chunks *chunk.Store) (*Store, error) {
	// Manifests at the fastest level: a compaction writes the whole
	// tree's, and at the default level compressing it was a third of the
	// compaction's CPU time for no smaller manifest (names and varints).
	menc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: new store: %w", err)
	}
	mdec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxManifest))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: new store: %w", err)
	}
	return &Store{blobs: blobs, chunks: chunks, workers: max(1, runtime.GOMAXPROCS(0)), menc: menc, mdec: mdec}, nil
}

// Manifest returns the manifest of the checkpoint digest, which must be
// tenant's (else an error wrapping ErrTenant). Its Stats are what
// `runs show` reports.
func (s *Store) Manifest(ctx context.Context, tenant, digest string) (*Manifest, error) {
	return s.load(ctx, chunk.TenantKey(tenant), digest)
}

// load reads, checks and decodes the manifest digest of the tenant whose
// key is key.
func (s *Store) load(ctx context.Context, key chunk.Key, digest string) (*Manifest, error) {
	r, err := s.blobs.Open(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", digest, err)
	}
	defer r.Close()
	if r.Size() > MaxManifest {
		return nil, fmt.Errorf("checkpoint: load %s: %w: %d bytes", digest, ErrCorrupt, r.Size())
	}
	// Read to the end, so the blob store checks the digest.
	z, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", digest, err)
	}
	raw, err := s.mdec.DecodeAll(z, nil)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w: %w", digest, ErrCorrupt, err)
	}
	m, err := decodeManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: load %s: %w", digest, err)
	}
	if key == (chunk.Key{}) {
		return m, nil // anyKey: a collector's, which only reads chunk IDs
	}
	if m.Key != key.Fingerprint() {
		return nil, fmt.Errorf("checkpoint: load %s: %w (its key is %s, the tenant's %s)", digest, ErrTenant, m.Key, key.Fingerprint())
	}
	return m, nil
}

// resolve loads the chain of checkpoints that ends in digest, back to its
// full one, and applies it. It returns the tree and digest's manifest.
func (s *Store) resolve(ctx context.Context, key chunk.Key, digest string) (*tree, *Manifest, error) {
	t, m, _, err := s.resolveChain(ctx, key, digest)
	return t, m, err
}

// resolveChain is resolve that also returns the chain's digests, digest's
// first and the full checkpoint's last.
func (s *Store) resolveChain(ctx context.Context, key chunk.Key, digest string) (*tree, *Manifest, []string, error) {
	var chain []*Manifest
	var digests []string
	seen := map[string]bool{}
	for d := digest; ; {
		if seen[d] {
			return nil, nil, nil, fmt.Errorf("checkpoint: resolve %s: %w: a cycle at %s", digest, ErrCorrupt, d)
		}
		if len(chain) == MaxChain {
			return nil, nil, nil, fmt.Errorf("checkpoint: resolve %s: %w: no full checkpoint in %d", digest, ErrCorrupt, MaxChain)
		}
		seen[d] = true
		m, err := s.load(ctx, key, d)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("checkpoint: resolve %s: %w", digest, err)
		}
		if len(chain) > 0 && chain[len(chain)-1].Depth != m.Depth+1 {
			return nil, nil, nil, fmt.Errorf("checkpoint: resolve %s: %w: %s has depth %d, its parent %s %d", digest, ErrCorrupt, digests[len(digests)-1], chain[len(chain)-1].Depth, d, m.Depth)
		}
		chain, digests = append(chain, m), append(digests, d)
		if m.Full {
			break
		}
		d = m.Parent
	}
	t := newTree()
	for i := len(chain) - 1; i >= 0; i-- {
		for j := range chain[i].Entries {
			e := &chain[i].Entries[j]
			if err := t.apply(e); err != nil {
				return nil, nil, nil, fmt.Errorf("checkpoint: resolve %s: %w: %s: entry %q: %w", digest, ErrCorrupt, digests[i], clip(e.Name), err)
			}
		}
	}
	return t, chain[0], digests, nil
}

// keyStream is an endless stream of bytes derived from a seed: SHA-256 of
// the seed and a counter, block after block.
type keyStream struct {
	seed [sha256.Size]byte
	n    uint64
	buf  []byte
}

func (k *keyStream) Read(p []byte) (int, error) {
	if len(k.buf) == 0 {
		var b [sha256.Size + 8]byte
		copy(b[:], k.seed[:])
		binary.BigEndian.PutUint64(b[sha256.Size:], k.n)
		k.n++
		sum := sha256.Sum256(b[:])
		k.buf = sum[:]
	}
	n := copy(p, k.buf)
	k.buf = k.buf[n:]
	return n, nil
}

// putManifest encodes, compresses and stores m; it returns the digest
// and the bytes stored.
func (s *Store) putManifest(ctx context.Context, m *Manifest) (string, int64, error) {
	return s.putEncoded(ctx, m.encode())
}

// putEncoded compresses and stores a manifest's encoding; it returns the
// digest and the bytes stored.
func (s *Store) putEncoded(ctx context.Context, enc []byte) (string, int64, error) {
	z := s.menc.EncodeAll(enc, nil)
	digest, n, err := s.blobs.Put(ctx, bytes.NewReader(z))
	if err != nil {
		return "", 0, fmt.Errorf("checkpoint: store manifest: %w", err)
	}
	return digest, n, nil
}
