// Package chunk stores the content chunks of workspace checkpoints
// (internal/checkpoint): pieces of file content of at most MaxSize bytes,
// each named by an ID, the keyed BLAKE3 of its bytes under its tenant's Key
// (HMAC-SHA256 for chunks stored before 2026-12-06, still read: Hasher),
// and kept zstd-compressed in a Backend: a directory (Dir) on one host, or
// PostgreSQL's chunks table (postgres.Store's Chunks) when several hosts
// share one database.
//
// Why the IDs are keyed per tenant: a checkpoint reports what it stored
// new, and a writer skips a chunk the store holds already. Were IDs plain
// hashes of content, shared by every tenant, a tenant could write a file it
// guesses another tenant holds (a configuration with a password in it, a
// private dependency) and learn from "nothing new stored" that someone
// does. Keyed IDs make the same bytes two different chunks in two tenants:
// a tenant deduplicates only against itself, and learns nothing of the
// others. Within a tenant every run and fork shares every chunk. The key is
// derived from the tenant's name and a fixed domain string (TenantKey), not
// kept secret: the separation rests on the IDs differing, and nobody
// outside the host can ask the store about an ID.
//
// Invariants:
//   - Store.Get returns a chunk's bytes only after decompressing them and
//     checking that they hash, under the key it is given, to the ID
//     (Hasher.Check): bytes
//     that are corrupt, truncated, substituted, too large, or a chunk of
//     another tenant give an error wrapping ErrCorrupt, never data.
//   - A Backend stores a chunk complete or not at all, under an ID it is
//     given; putting an ID stored already changes nothing. A chunk is
//     durable once a Sync that names it returns (a backend may make it
//     durable sooner), so a writer calls Sync once, with the chunks it
//     refers to, before it records what refers to them.
//   - Nothing here deletes a chunk on its own: Expire is the hook of a
//     collector (checkpoint.Store.Collect). A chunk's last use is when it
//     was last put or found (Has); Expire removes only chunks unused since
//     a time, atomically with Has, so a writer that found a chunk stored
//     keeps it for the collector's grace period.
//
// Importers: the checkpoint library (internal/checkpoint), PostgreSQL's
// backend (internal/store/postgres), the conformance suite
// (internal/store/chunk/chunktest), the run engine (internal/engine: its
// default store beside the blobs) and host wiring (internal/host).
package chunk

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"iter"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/blake3"
)

// MaxSize is the most bytes of content one chunk holds: the chunker's
// largest chunk (8 MiB).
const MaxSize = 8 << 20

// MaxStored is the most bytes a Backend may hold for one chunk: MaxSize
// compressed, plus zstd's worst-case overhead on bytes that do not
// compress, with room to spare. A backend's chunk larger than this is
// corrupt, and is never read whole into memory.
const MaxStored = MaxSize + MaxSize/64 + 4096

// Errors callers branch on.
var (
	// ErrNotFound: no chunk has that ID.
	ErrNotFound = errors.New("chunk: not found")
	// ErrCorrupt: a chunk's stored bytes do not decompress to bytes that
	// hash to its ID under the reader's key.
	ErrCorrupt = errors.New("chunk: corrupt")
)

// ID names a chunk: the keyed hash of its content under its tenant's Key
// (see Hasher).
type ID [sha256.Size]byte

// String returns the ID in lowercase hex, as backends key chunks.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// ParseID parses an ID in the form String returns.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("chunk: malformed id %q: want %d hex digits", clip(s), 2*len(id))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return id, fmt.Errorf("chunk: malformed id %q: want lowercase hex", clip(s))
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("chunk: malformed id %q: %w", clip(s), err)
	}
	return id, nil
}

// keyDomain separates chunk keys from every other use of a tenant's name.
const keyDomain = "airlock checkpoint chunk key v1\x00"

// Key is a tenant's chunk key: what makes the same content two different
// chunks in two tenants (see the package doc). The zero Key is not a key.
type Key struct {
	k [sha256.Size]byte
}

// TenantKey returns the chunk key of tenant: the SHA-256 of a fixed domain
// string and the name. Every host derives the same key, with nothing to
// configure or keep.
func TenantKey(tenant string) Key {
	return Key{k: sha256.Sum256([]byte(keyDomain + tenant))}
}

// Fingerprint names the key without revealing it: 16 hex digits a
// checkpoint records, so that a restore under another tenant's key is
// refused before any chunk is read.
func (k Key) Fingerprint() string {
	d := k.Derive("fingerprint")
	return hex.EncodeToString(d[:8])
}

// Derive returns 32 bytes derived from the key for one purpose, named by
// label (the checkpoint library derives its chunker's gear table from it, so
// that a tenant's trees are cut into chunks the same way every time).
func (k Key) Derive(label string) [sha256.Size]byte {
	m := hmac.New(sha256.New, k.k[:])
	m.Write([]byte("derive\x00" + label))
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

// Hasher computes and checks the IDs of chunks under one key, reusing its
// state. It is not safe for concurrent use: give each goroutine its own.
//
// A chunk's ID is the keyed BLAKE3 (32 bytes) of its content under a key
// derived from the tenant's (Key.Derive), since 2026-12-06; chunks stored
// before were named by HMAC-SHA256 under the tenant's key, and a reader
// still accepts them (Check). Both are keyed hashes with the same property
// the IDs need (the same bytes are two different chunks in two tenants;
// content that is not the chunk's does not hash to its ID); BLAKE3 costs
// a reader about a third of the HMAC's CPU time (docs/benchmarks.md).
type Hasher struct {
	b *blake3.Hasher
	// legacy is the HMAC-SHA256 of chunks named before BLAKE3, made on
	// first use.
	legacy hash.Hash
	key    *Key
	// legacyFirst: the last chunk Check accepted was a legacy one, so
	// the next (most likely of the same tree) is tried under HMAC first.
	legacyFirst bool
}

// blake3Label derives the BLAKE3 key from a tenant's key.
const blake3Label = "chunk id blake3"

// Hasher returns a new Hasher of IDs under k.
func (k Key) Hasher() *Hasher {
	bk := k.Derive(blake3Label)
	b, err := blake3.NewKeyed(bk[:])
	if err != nil {
		panic(err) // only for a key that is not 32 bytes
	}
	return &Hasher{b: b, key: &k}
}

// Sum returns the ID of a chunk holding data: its keyed BLAKE3.
func (h *Hasher) Sum(data []byte) ID {
	h.b.Reset()
	h.b.Write(data)
	var id ID
	h.b.Sum(id[:0])
	return id
}

// legacySum returns the ID a chunk holding data had before BLAKE3: its
// HMAC-SHA256 under the tenant's key.
func (h *Hasher) legacySum(data []byte) ID {
	if h.legacy == nil {
		h.legacy = hmac.New(sha256.New, h.key.k[:])
	}
	h.legacy.Reset()
	h.legacy.Write(data)
	var id ID
	h.legacy.Sum(id[:0])
	return id
}

// Check reports whether data is the content of the chunk named id under
// the hasher's key: whether its BLAKE3 is id, or (a chunk stored before
// BLAKE3) its HMAC-SHA256. Content must match one of the two keyed hashes
// of the ID, so a forger needs a second preimage of one of them; which
// is tried first follows the last chunk accepted, so a tree of either
// kind costs one hash per chunk.
func (h *Hasher) Check(data []byte, id ID) bool {
	first, second := h.Sum, h.legacySum
	if h.legacyFirst {
		first, second = second, first
	}
	if first(data) == id {
		return true
	}
	if second(data) == id {
		h.legacyFirst = !h.legacyFirst
		return true
	}
	return false
}

// Backend keeps the compressed bytes of chunks: a directory (Dir) or a
// database table (postgres.Store's Chunks). It stores what it is given
// under the ID it is given; the Store compresses, names and checks.
// Implementations must be safe for concurrent use, also by several
// processes sharing what they store in. chunktest.Run is the suite every
// implementation passes.
type Backend interface {
	// Put stores data (1 to MaxStored bytes) under id, unless id is
	// stored already: then it does nothing, since an ID names content.
	// A chunk is stored complete or not at all. Put is durable once
	// Sync returns. It does not keep data.
	Put(ctx context.Context, id ID, data []byte) error
	// Get appends the bytes stored under id to dst and returns the
	// result, or an error wrapping ErrNotFound, or one wrapping
	// ErrCorrupt for stored bytes that cannot be a chunk's (none, or more
	// than MaxStored).
	Get(ctx context.Context, id ID, dst []byte) ([]byte, error)
	// Has reports whether id is stored. When it is, Has records now (the
	// backend's clock: the wall clock, as the collector's) as the chunk's
	// last use, as Put does for a chunk it
	// stores, in one step with finding it: a writer that counts on a
	// chunk it found stored has it kept by Expire for a grace period.
	Has(ctx context.Context, id ID) (bool, error)
	// Delete removes id, or returns an error wrapping ErrNotFound.
	Delete(ctx context.Context, id ID) error
	// Expire removes id if its last use (Put, Has) was before the time
	// before, and reports whether it did. It is atomic with Has: a Has
	// that finds the chunk after the time before keeps it, and a Has
	// that runs after Expire removed it finds nothing (its writer stores
	// the chunk again). A chunk not stored is not an error.
	Expire(ctx context.Context, id ID, before time.Time) (bool, error)
	// IDs yields every stored ID once, in increasing byte order, and
	// stops at the first error, which it yields with a zero ID. IDs put or
	// deleted while it runs may or may not be yielded.
	IDs(ctx context.Context) iter.Seq2[ID, error]
	// Sync makes the chunks ids durable, if stored: those a checkpoint
	// is about to refer to, put by this process or another, before or
	// not (a Put whose writer failed before its own Sync is durable only
	// once a Sync names it). A backend may make more durable.
	Sync(ctx context.Context, ids []ID) error
}

// Store reads and writes chunks in a Backend: compressed with zstd on the
// way in, decompressed and checked against their ID on the way out. It is
// safe for concurrent use.
type Store struct {
	b   Backend
	enc *zstd.Encoder
	dec *zstd.Decoder
	// bufs holds *[]byte of compressed bytes, reused between calls: on a
	// machine where first touching a page is dear, a fresh buffer per
	// chunk costs more than compressing it.
	bufs sync.Pool
}

// NewStore returns a Store of chunks in b.
func NewStore(b Backend) (*Store, error) {
	// The fastest level: the first checkpoint of a workspace must cost no
	// more than tar | zstd -1 of it. No checksum in the frame: Get checks
	// the HMAC of what it decompresses, which a checksum would only repeat.
	// One encoder per P: EncodeAll calls beyond them wait for one.
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithWindowSize(MaxSize),
	)
	if err != nil {
		return nil, fmt.Errorf("chunk: new store: %w", err)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(MaxSize),
		zstd.WithDecoderMaxWindow(MaxSize),
		zstd.IgnoreChecksum(true),
	)
	if err != nil {
		return nil, fmt.Errorf("chunk: new store: %w", err)
	}
	return &Store{b: b, enc: enc, dec: dec}, nil
}

// Backend returns the store's backend.
func (s *Store) Backend() Backend { return s.b }

// buf returns a buffer for about n compressed bytes: one a call before
// used (grown by its user as it needs), or a new one of n bytes' room, not
// more: most chunks a step stores are a few small files, for which a
// chunk's full room (zeroed, first touched) would cost more than the rest.
func (s *Store) buf(n int) *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, max(n, 4<<10))
	return &b
}

// Put compresses data, the content of the chunk named id (the caller
// computed id with a Hasher of the chunk's tenant), and stores it. It
// returns how many bytes the backend stores for it. Put does not ask
// whether id is stored already; callers that may have it ask Has first,
// which costs less than compressing.
func (s *Store) Put(ctx context.Context, id ID, data []byte) (stored int64, err error) {
	if len(data) == 0 || len(data) > MaxSize {
		return 0, fmt.Errorf("chunk: put %s: %d bytes, want 1 to %d", id, len(data), MaxSize)
	}
	bp := s.buf(len(data) + len(data)/64 + 64)
	defer s.bufs.Put(bp)
	z := s.compress(data, (*bp)[:0])
	*bp = z
	if err := s.b.Put(ctx, id, z); err != nil {
		return 0, fmt.Errorf("chunk: put %s: %w", id, err)
	}
	return int64(len(z)), nil
}

// sample is the size of the pieces of a chunk compress tries first.
const sample = 32 << 10

// compress appends data compressed to dst: a zstd frame. Content that
// does not compress (media, archives, packs: half of a repository's
// bytes, often) costs as much to compress as content that does, for
// nothing; so three samples of it (start, middle, end) are compressed
// first, and if none of them shrinks by 1/32, the chunk is stored in a
// frame of raw blocks, which any zstd decoder reads.
func (s *Store) compress(data, dst []byte) []byte {
	if len(data) >= 4*sample {
		shrinks := false
		for _, at := range []int{0, len(data)/2 - sample/2, len(data) - sample} {
			z := s.enc.EncodeAll(data[at:at+sample], dst[:0])
			if len(z) < sample-sample/32 {
				shrinks = true
				break
			}
		}
		if !shrinks {
			return rawFrame(data, dst[:0])
		}
	}
	return s.enc.EncodeAll(data, dst)
}

// rawFrame appends to dst a zstd frame that holds data uncompressed
// (RFC 8878): the magic number, a frame header of one segment with the
// content size in 4 bytes and no checksum, then raw blocks of at most
// 128 KiB, each behind a 3-byte block header, the last one marked.
func rawFrame(data, dst []byte) []byte {
	const maxBlock = 128 << 10
	dst = append(dst, 0x28, 0xb5, 0x2f, 0xfd, 0xa0)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(data)))
	for len(data) > 0 {
		n := min(len(data), maxBlock)
		h := uint32(n) << 3 // block type 0: raw
		if n == len(data) {
			h |= 1 // last block
		}
		dst = append(dst, byte(h), byte(h>>8), byte(h>>16))
		dst = append(dst, data[:n]...)
		data = data[n:]
	}
	return dst
}

// Get returns the content of the chunk named id, of the tenant whose key
// is k, in dst[:0] (reusing its room when it has enough). Content that
// does not hash to id under k gives an error wrapping ErrCorrupt; a
// missing chunk one wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, k Key, id ID, dst []byte) ([]byte, error) {
	return s.get(ctx, k.Hasher(), id, dst)
}

// GetWith is Get with a Hasher of the key, reused between calls by a
// caller that reads many chunks.
func (s *Store) GetWith(ctx context.Context, h *Hasher, id ID, dst []byte) ([]byte, error) {
	return s.get(ctx, h, id, dst)
}

func (s *Store) get(ctx context.Context, h *Hasher, id ID, dst []byte) ([]byte, error) {
	bp := s.buf(cap(dst))
	defer s.bufs.Put(bp)
	z, err := s.b.Get(ctx, id, (*bp)[:0])
	if err != nil {
		return dst[:0], fmt.Errorf("chunk: get %s: %w", id, err)
	}
	*bp = z
	data, err := s.dec.DecodeAll(z, dst[:0])
	if err != nil {
		return dst[:0], fmt.Errorf("chunk: get %s: %w: %w", id, ErrCorrupt, err)
	}
	if len(data) == 0 {
		return dst[:0], fmt.Errorf("chunk: get %s: %w: no content", id, ErrCorrupt)
	}
	if !h.Check(data, id) {
		return dst[:0], fmt.Errorf("chunk: get %s: %w: content hashes to %s (another tenant's chunk, or damaged)", id, ErrCorrupt, h.Sum(data))
	}
	return data, nil
}

// Has reports whether the chunk named id is stored.
func (s *Store) Has(ctx context.Context, id ID) (bool, error) {
	ok, err := s.b.Has(ctx, id)
	if err != nil {
		return false, fmt.Errorf("chunk: stat %s: %w", id, err)
	}
	return ok, nil
}

// Delete removes the chunk named id, or returns an error wrapping
// ErrNotFound.
func (s *Store) Delete(ctx context.Context, id ID) error {
	if err := s.b.Delete(ctx, id); err != nil {
		return fmt.Errorf("chunk: delete %s: %w", id, err)
	}
	return nil
}

// Expire removes the chunk named id if it was last put or found (Has)
// before the time before (Backend.Expire), and reports whether it did:
// what a collector calls for a chunk no live checkpoint refers to.
func (s *Store) Expire(ctx context.Context, id ID, before time.Time) (bool, error) {
	ok, err := s.b.Expire(ctx, id, before)
	if err != nil {
		return false, fmt.Errorf("chunk: expire %s: %w", id, err)
	}
	return ok, nil
}

// IDs yields the ID of every stored chunk, in increasing order (see
// Backend.IDs): what a collector compares with the chunks checkpoints
// refer to.
func (s *Store) IDs(ctx context.Context) iter.Seq2[ID, error] { return s.b.IDs(ctx) }

// Sync makes the chunks ids durable: call it once after the chunks of a
// checkpoint are put, with every chunk the checkpoint refers to, and
// before the checkpoint is recorded.
func (s *Store) Sync(ctx context.Context, ids []ID) error {
	if err := s.b.Sync(ctx, ids); err != nil {
		return fmt.Errorf("chunk: sync: %w", err)
	}
	return nil
}

// clip shortens untrusted text quoted in an error message.
func clip(s string) string {
	const limit = 80
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
