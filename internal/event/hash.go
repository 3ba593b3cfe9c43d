package event

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// hashVersion tags the canonical encoding events are sealed with. Changing
// any detail of appendCanonical or Genesis needs a new tag, and Verify must
// then accept every earlier one: a log is kept for years.
//
// v2 hashes the SHA-256 of the payload where v1 hashed the payload itself,
// so that a payload can be deleted (replaced by a Tombstone naming its
// digest) while the chain still verifies; logs sealed under v1 still
// verify, but their payloads cannot be tombstoned.
const hashVersion = "airlock.event.v2"

// hashVersionV1 tagged the encoding before payload digests.
const hashVersionV1 = "airlock.event.v1"

// genesisVersion tags the input of Genesis.
const genesisVersion = "airlock.genesis.v1"

// Genesis returns the PrevHash of a run's first event: SHA-256 over the
// length-prefixed tag "airlock.genesis.v1" and the length-prefixed run id.
// Binding the start of the chain to the run id means a log (or its first
// event) copied under another run's id does not verify, and no real event
// hash can be mistaken for a chain start.
func Genesis(runID string) Hash {
	b := make([]byte, 0, 8+len(genesisVersion)+len(runID))
	b = appendBytes(b, []byte(genesisVersion))
	b = appendBytes(b, []byte(runID))
	return sha256.Sum256(b)
}

// ComputeHash returns SHA-256 over the canonical encoding of e, which is,
// in order, with every length a 4-byte big-endian unsigned integer and every
// integer big-endian:
//
//	len | "airlock.event.v2"         version tag
//	len | run id                     UTF-8 bytes
//	8-byte seq                       two's complement
//	len | type
//	8-byte time                      UTC nanoseconds since 1970, two's complement
//	32-byte payload digest           SHA-256 of the stored payload bytes
//	32-byte prev hash
//
// Variable fields are length-prefixed and the others have fixed widths, so
// two different events never share an encoding. e.Hash itself is ignored.
// Hashing the payload's digest rather than the payload lets a payload be
// deleted while the chain verifies (see Tombstone).
func (e Event) ComputeHash() Hash {
	return e.hashWithDigest(sha256.Sum256(e.Payload))
}

// hashWithDigest is ComputeHash for a payload whose SHA-256 is digest.
func (e Event) hashWithDigest(digest Hash) Hash {
	return sha256.Sum256(appendCanonical(make([]byte, 0, canonicalSize(e)), e, digest))
}

// computeHashV1 is the hash of the v1 encoding, which had the payload bytes
// (length-prefixed) where v2 has their digest. Only Verify uses it, for
// logs sealed before v2.
func (e Event) computeHashV1() Hash {
	b := make([]byte, 0, canonicalSize(e)+len(e.Payload))
	b = appendBytes(b, []byte(hashVersionV1))
	b = appendBytes(b, []byte(e.RunID))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Seq))
	b = appendBytes(b, []byte(e.Type))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time.UnixNano()))
	b = appendBytes(b, e.Payload)
	return sha256.Sum256(append(b, e.PrevHash[:]...))
}

func canonicalSize(e Event) int {
	return 3*4 + len(hashVersion) + len(e.RunID) + 8 + len(e.Type) + 8 + 32 + len(e.PrevHash)
}

func appendCanonical(b []byte, e Event, digest Hash) []byte {
	b = appendBytes(b, []byte(hashVersion))
	b = appendBytes(b, []byte(e.RunID))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Seq))
	b = appendBytes(b, []byte(e.Type))
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time.UnixNano()))
	b = append(b, digest[:]...)
	return append(b, e.PrevHash[:]...)
}

func appendBytes(b, field []byte) []byte {
	if len(field) > math.MaxUint32 {
		// Unreachable for a valid event (MaxPayloadSize); a broken
		// invariant, not bad input.
		panic("event: field too long for the canonical encoding")
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(field)))
	return append(b, field...)
}

// parseCanonical is the inverse of appendCanonical. It exists to prove the
// encoding unambiguous (FuzzCanonical): every byte string parses to at most
// one (event, payload digest), which encodes back to the same bytes. The
// event it returns has no payload.
func parseCanonical(b []byte) (Event, Hash, error) {
	var e Event
	var digest Hash
	version, b, err := cutBytes(b)
	if err != nil {
		return e, digest, err
	}
	if string(version) != hashVersion {
		return e, digest, errors.New("unknown version tag")
	}
	runID, b, err := cutBytes(b)
	if err != nil {
		return e, digest, err
	}
	if len(b) < 8 {
		return e, digest, errors.New("short seq")
	}
	seq := int64(binary.BigEndian.Uint64(b))
	b = b[8:]
	typ, b, err := cutBytes(b)
	if err != nil {
		return e, digest, err
	}
	if len(b) < 8 {
		return e, digest, errors.New("short time")
	}
	ns := int64(binary.BigEndian.Uint64(b))
	b = b[8:]
	if len(b) != len(digest)+len(e.PrevHash) {
		return e, digest, errors.New("digest and prev hash have the wrong length")
	}
	e.RunID = string(runID)
	e.Seq = seq
	e.Type = Type(typ)
	e.Time = time.Unix(0, ns).UTC()
	copy(digest[:], b)
	copy(e.PrevHash[:], b[len(digest):])
	return e, digest, nil
}

func cutBytes(b []byte) (field, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, errors.New("short length prefix")
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return nil, nil, errors.New("length prefix past the end")
	}
	return b[:n], b[n:], nil
}

// Seal fills e's chain fields as the event after prev in run runID: RunID,
// Seq = prevSeq+1, PrevHash = prev (Genesis(runID) when prevSeq is 0), and
// Hash. Stores use it in Append.
func Seal(runID string, prevSeq int64, prev Hash, e *Event) {
	if prevSeq == 0 {
		prev = Genesis(runID)
	}
	e.RunID = runID
	e.Seq = prevSeq + 1
	e.PrevHash = prev
	e.Hash = e.ComputeHash()
}

// SealChain seals evs in order as the events after prev, the event at
// prevSeq of run runID (see Seal): each links to the one before it.
func SealChain(runID string, prevSeq int64, prev Hash, evs []Event) {
	for i := range evs {
		Seal(runID, prevSeq+int64(i), prev, &evs[i])
		prev = evs[i].Hash
	}
}

// Sentinel causes carried by VerifyError; match them with errors.Is.
var (
	// ErrGap: an event is missing (the next seq is higher than expected).
	ErrGap = errors.New("gap")
	// ErrOrder: an event comes out of order or twice (the next seq is lower
	// than expected).
	ErrOrder = errors.New("out of order")
	// ErrWrongRun: an event belongs to another run.
	ErrWrongRun = errors.New("wrong run")
	// ErrBrokenLink: an event's PrevHash is not its predecessor's Hash.
	ErrBrokenLink = errors.New("prev hash does not match the previous event")
	// ErrHashMismatch: an event's content does not match its Hash (it was
	// edited after it was written).
	ErrHashMismatch = errors.New("hash mismatch")
	// ErrMalformed: an event fails Validate.
	ErrMalformed = errors.New("malformed event")
	// ErrTruncated: the log ends before the last event its run records
	// (stores keep the last seq and hash beside the log).
	ErrTruncated = errors.New("log ends early")
)

// VerifyError reports where a log stops verifying.
type VerifyError struct {
	// RunID is the run being verified.
	RunID string
	// Seq is the sequence number where the chain breaks: the missing seq for
	// ErrGap, otherwise the seq of the offending event.
	Seq int64
	// Got is the seq actually found at that position (for ErrGap, ErrOrder).
	Got int64
	// Err is one of the sentinel causes above, possibly wrapping detail.
	Err error
}

func (e *VerifyError) Error() string {
	switch {
	case errors.Is(e.Err, ErrGap) || errors.Is(e.Err, ErrOrder):
		return fmt.Sprintf("event: run %s: seq %d: %v: found seq %d", e.RunID, e.Seq, e.Err, e.Got)
	default:
		return fmt.Sprintf("event: run %s: seq %d: %v", e.RunID, e.Seq, e.Err)
	}
}

// Unwrap returns the cause.
func (e *VerifyError) Unwrap() error { return e.Err }

// Chain verifies a run's log one event at a time, in order, so a long log
// can be checked page by page without holding it all. The zero Chain is not
// usable; use NewChain.
type Chain struct {
	runID string
	seq   int64
	last  Hash
	// deleted counts the tombstones accepted; deletedAt is the latest
	// DeletedAt among them.
	deleted   int
	deletedAt time.Time
}

// NewChain returns a Chain that expects run runID's first event.
func NewChain(runID string) *Chain {
	return &Chain{runID: runID, last: Genesis(runID)}
}

// Resume returns a Chain that expects the event after one with seq and hash
// already verified, e.g. to check only the events appended since.
func Resume(runID string, seq int64, hash Hash) *Chain {
	if seq == 0 {
		return NewChain(runID)
	}
	return &Chain{runID: runID, seq: seq, last: hash}
}

// Seq returns the seq of the last event accepted (0 before the first).
func (c *Chain) Seq() int64 { return c.seq }

// Last returns the hash of the last event accepted (Genesis before the
// first).
func (c *Chain) Last() Hash { return c.last }

// Next checks that e is the next event of the chain and accepts it. It
// returns a *VerifyError, and after an error the Chain stays where it was.
func (c *Chain) Next(e Event) error {
	want := c.seq + 1
	fail := func(seq int64, err error) error {
		return &VerifyError{RunID: c.runID, Seq: seq, Got: e.Seq, Err: err}
	}
	switch {
	case e.RunID != c.runID:
		return fail(want, fmt.Errorf("%w: %q", ErrWrongRun, truncate(e.RunID)))
	case e.Seq > want:
		return fail(want, ErrGap)
	case e.Seq < want:
		return fail(want, ErrOrder)
	}
	if err := e.Validate(); err != nil {
		return fail(want, fmt.Errorf("%w: %w", ErrMalformed, err))
	}
	if e.PrevHash != c.last {
		return fail(want, ErrBrokenLink)
	}
	tomb, err := matchHash(e)
	if err != nil {
		return fail(want, err)
	}
	c.seq = want
	c.last = e.Hash
	if tomb != nil {
		c.deleted++
		if tomb.DeletedAt.After(c.deletedAt) {
			c.deletedAt = tomb.DeletedAt
		}
	}
	return nil
}

// Deleted returns how many of the events accepted so far had their payload
// deleted (a Tombstone in its place), and the latest time one was deleted.
func (c *Chain) Deleted() (n int, last time.Time) { return c.deleted, c.deletedAt }

// matchHash checks e's content against e.Hash under each encoding a log may
// have been sealed with: v2 over the payload's digest; v2 over the digest a
// tombstone names, when the payload is a tombstone (the tombstone is then
// returned); v1 over the payload bytes. A payload that looks like a
// tombstone but is the event's own payload verifies by the first case, so
// no payload can pose as a deletion: a tombstone verifies only where its
// digest is what the event was sealed with.
func matchHash(e Event) (*TombstonePayload, error) {
	if e.ComputeHash() == e.Hash {
		return nil, nil
	}
	if t, ok := ParseTombstone(e.Payload); ok {
		if e.hashWithDigest(t.digest) == e.Hash {
			return &t, nil
		}
		return nil, fmt.Errorf("%w: the deleted payload's digest does not match", ErrHashMismatch)
	}
	if e.computeHashV1() == e.Hash {
		return nil, nil
	}
	return nil, ErrHashMismatch
}

// Verify checks a whole log: events must be one run's, starting at seq 1,
// with no gap, in order, each linked to its predecessor and matching its
// own hash. It returns nil for an empty log, and otherwise reports the first
// problem as a *VerifyError with its seq.
func Verify(events []Event) error {
	if len(events) == 0 {
		return nil
	}
	c := NewChain(events[0].RunID)
	for _, e := range events {
		if err := c.Next(e); err != nil {
			return err
		}
	}
	return nil
}
