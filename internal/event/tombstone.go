package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// TombstonePayload is what replaces a payload deleted by a data policy
// (retention, a purge): the SHA-256 of the payload it replaces, which the
// event's hash covers (ComputeHash), so the chain still verifies without
// the payload, and when and why it was deleted, never any of its content.
type TombstonePayload struct {
	// Digest is the SHA-256 of the deleted payload, in lowercase hex.
	Digest string `json:"payload_sha256"`
	// DeletedAt is when the payload was deleted, in UTC.
	DeletedAt time.Time `json:"deleted_at"`
	// Reason says why: "retention" for the retention sweeper.
	Reason string `json:"reason"`

	digest Hash
}

// tombstoneEnvelope is the payload's one member, a name no event type's
// payload uses.
type tombstoneEnvelope struct {
	Deleted *TombstonePayload `json:"airlock_deleted_payload"`
}

// ReasonRetention is the Reason of payloads the retention sweeper deleted.
const ReasonRetention = "retention"

// ErrV1Payload means the event was sealed under the v1 encoding, whose hash
// covers the payload bytes, so deleting its payload would break the chain.
var ErrV1Payload = errors.New("event sealed before payload digests (v1): its payload cannot be deleted verifiably")

// Tombstone returns e with its payload replaced by a tombstone naming the
// payload's digest, when and why: the event keeps its hash, and Verify
// accepts it and counts it (Chain.Deleted). e must verify under the current
// encoding (a v1 event gives ErrV1Payload; an already tombstoned one comes
// back as it is). reason is a short word such as ReasonRetention.
func Tombstone(e Event, at time.Time, reason string) (Event, error) {
	if _, ok := ParseTombstone(e.Payload); ok && e.ComputeHash() != e.Hash {
		return e, nil
	}
	if e.ComputeHash() != e.Hash {
		if e.computeHashV1() == e.Hash {
			return e, fmt.Errorf("tombstone seq %d: %w", e.Seq, ErrV1Payload)
		}
		return e, fmt.Errorf("tombstone seq %d: %w", e.Seq, ErrHashMismatch)
	}
	d := sha256.Sum256(e.Payload)
	t := TombstonePayload{Digest: hex.EncodeToString(d[:]), DeletedAt: at.UTC(), Reason: reason}
	p, err := json.Marshal(tombstoneEnvelope{Deleted: &t})
	if err != nil {
		return e, fmt.Errorf("tombstone seq %d: %w", e.Seq, err)
	}
	e.Payload = p
	return e, nil
}

// ParseTombstone reports whether payload is a tombstone Tombstone wrote,
// byte for byte, and returns it.
func ParseTombstone(payload []byte) (TombstonePayload, bool) {
	if !bytes.HasPrefix(payload, []byte(`{"airlock_deleted_payload":`)) {
		return TombstonePayload{}, false
	}
	var env tombstoneEnvelope
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil || env.Deleted == nil {
		return TombstonePayload{}, false
	}
	t := *env.Deleted
	d, err := ParseHash(t.Digest)
	if err != nil {
		return TombstonePayload{}, false
	}
	// Only the exact bytes Tombstone writes: one form per tombstone.
	again, err := json.Marshal(tombstoneEnvelope{Deleted: &t})
	if err != nil || !bytes.Equal(again, payload) {
		return TombstonePayload{}, false
	}
	t.digest = d
	return t, true
}
