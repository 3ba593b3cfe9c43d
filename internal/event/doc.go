// Package event is the vocabulary of a run's durable log: the event types,
// their typed payloads, the Event record with its hash chain, run ids and run
// statuses with their legal transitions.
//
// Invariants:
//   - A run's events carry sequence numbers 1, 2, 3... with no gap, and each
//     event's PrevHash is the Hash of the event before it (Genesis(runID) for
//     the first), so a lost, reordered or edited event is detected by Verify.
//   - Hash is SHA-256 over a versioned, length-prefixed encoding of (run id,
//     seq, type, time in UTC nanoseconds, SHA-256 of the payload bytes, prev
//     hash); see Event.ComputeHash. Changing that encoding needs a new
//     version tag, and Verify keeps accepting the old ones (v1 hashed the
//     payload bytes themselves).
//   - A payload may be deleted (a data policy's retention, a purge) only by
//     replacing it with its Tombstone, which names its digest: the chain
//     still verifies, and Chain.Deleted counts the deletions.
//   - A payload is a JSON object of at most MaxPayloadSize bytes in the
//     canonical form CanonicalPayload returns (compact, members in the order
//     written, strings as encoding/json writes them), so encoding an event
//     to JSON and decoding it again gives back the very bytes that were
//     hashed.
//
// The package does no I/O and imports nothing else from airlock: the store,
// the run engine, the CLI and the API all import it.
package event
