package event

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// MaxPayloadSize is the largest payload an event may carry, in bytes of its
// canonical form. Bulky data (command output, snapshots, patches) belongs in
// an artifact that the event names by digest.
const MaxPayloadSize = 1 << 20

// MaxTypeLen is the longest event type name, in bytes.
const MaxTypeLen = 64

// Type names what an event records. Names are lowercase dot-separated words
// ("tool.finished"); Valid checks the syntax, Known the vocabulary.
type Type string

// The event types. A log may hold types this build does not know (written by
// a newer airlock); they decode and verify like any other.
const (
	// TypeRunCreated is the first event of every run (payload RunCreated).
	TypeRunCreated Type = "run.created"
	// TypeRunStarted: a host process began (or took over) driving the run.
	TypeRunStarted Type = "run.started"
	// TypeRunPaused: the run was paused on purpose; its sandboxes are gone.
	TypeRunPaused Type = "run.paused"
	// TypeRunResumed: a paused or interrupted run goes on.
	TypeRunResumed Type = "run.resumed"
	// TypeRunCancelled: the run was cancelled; nothing more runs.
	TypeRunCancelled Type = "run.cancelled"
	// TypeRunCompleted: the run finished and verified.
	TypeRunCompleted Type = "run.completed"
	// TypeRunFailed: the run ended in failure (failed or failed_verification).
	TypeRunFailed Type = "run.failed"
	// TypeRunForked: a new run was forked from this one (payload RunForked).
	TypeRunForked Type = "run.forked"

	// TypePolicyResolved records the policy the run is held to.
	TypePolicyResolved Type = "policy.resolved"

	// TypeSandboxProvisioned: a sandbox was created for the run.
	TypeSandboxProvisioned Type = "sandbox.provisioned"
	// TypeSandboxLost: a sandbox died without being asked to.
	TypeSandboxLost Type = "sandbox.lost"
	// TypeSandboxDestroyed: a sandbox was destroyed on purpose.
	TypeSandboxDestroyed Type = "sandbox.destroyed"

	// TypeModelRequest is written before a model is called.
	TypeModelRequest Type = "model.request"
	// TypeModelResponse records a model's whole answer and its token usage.
	// Recovery never requests a recorded response again.
	TypeModelResponse Type = "model.response"

	// TypeToolProposed: the model asked for a tool call.
	TypeToolProposed Type = "tool.proposed"
	// TypePolicyDecision: policy allowed, denied or asked about a tool call.
	TypePolicyDecision Type = "policy.decision"
	// TypeToolStarted is written before a tool runs.
	TypeToolStarted Type = "tool.started"
	// TypeToolFinished records a tool call's result.
	TypeToolFinished Type = "tool.finished"
	// TypeToolUncertain: a tool call started but its result was never
	// recorded, and it may have had an external effect, so it is not
	// repeated without a decision (fail closed).
	TypeToolUncertain Type = "tool.uncertain"

	// TypeEgressDecision records one decision of the egress proxy.
	TypeEgressDecision Type = "egress.decision"
	// TypeArtifactStored: a file was kept as an artifact.
	TypeArtifactStored Type = "artifact.stored"
	// TypeSnapshotTaken: the workspace of a sandbox was snapshotted.
	TypeSnapshotTaken Type = "snapshot.taken"
	// TypeWorkspaceFetched: a sandbox's workspace source, a git
	// repository, was fetched inside the sandbox and kept as a tar.
	TypeWorkspaceFetched Type = "workspace.fetched"
	// TypeRetry: an operation failed and is tried again.
	TypeRetry Type = "retry"
	// TypeVerificationResult records the completion checks.
	TypeVerificationResult Type = "verification.result"
	// TypeBudgetExhausted: a limit (steps, time, tokens, cost) was reached.
	TypeBudgetExhausted Type = "budget.exhausted"
	// TypeApprovalRequested: an action waits for a person's decision.
	TypeApprovalRequested Type = "approval.requested"
	// TypeApprovalDecided: a pending approval was decided or expired.
	TypeApprovalDecided Type = "approval.decided"
	// TypeLLMCall records one call a sandbox made through the LLM
	// gateway: model, tokens, cost, latency and outcome.
	TypeLLMCall Type = "llm.call"
)

// Valid reports whether t is a well-formed type name: one or more
// dot-separated words of [a-z0-9_], each starting with a letter, at most
// MaxTypeLen bytes in all.
func (t Type) Valid() bool {
	if len(t) == 0 || len(t) > MaxTypeLen {
		return false
	}
	start := true
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= 'a' && c <= 'z':
		case (c >= '0' && c <= '9') || c == '_':
			if start {
				return false
			}
		case c == '.':
			if start {
				return false
			}
			start = true
			continue
		default:
			return false
		}
		start = false
	}
	return !start
}

// Known reports whether t is one of this build's event types.
func (t Type) Known() bool {
	_, ok := payloads[t]
	return ok
}

// Hash is a SHA-256 digest in the hash chain. Its text form is 64 lowercase
// hex digits.
type Hash [32]byte

// String returns h as lowercase hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is all zero bytes.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText returns h as lowercase hex.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText parses exactly 64 lowercase hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	v, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// ParseHash parses exactly 64 lowercase hex digits.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("event: hash: want %d hex digits, got %d", 2*len(h), len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return h, errors.New("event: hash: not lowercase hex")
		}
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("event: hash: %w", err)
	}
	return h, nil
}

// Event is one immutable record in a run's log.
//
// A draft, as given to a store's Append, sets only Type, Payload and
// optionally Time; the store fills RunID, Seq, PrevHash and Hash.
type Event struct {
	// RunID is the run the event belongs to.
	RunID string
	// Seq is the event's position in the run's log: 1, 2, 3... with no gap.
	Seq int64
	// Type says what happened; Payload's shape depends on it.
	Type Type
	// Time is when the event was recorded. Only its UTC nanoseconds count:
	// the location and monotonic reading are not part of the record.
	Time time.Time
	// Payload is a JSON object in canonical form (see CanonicalPayload), at
	// most MaxPayloadSize bytes.
	Payload json.RawMessage
	// PrevHash is the Hash of the event before, or Genesis(RunID) for Seq 1.
	PrevHash Hash
	// Hash is ComputeHash of this event.
	Hash Hash
}

// Validate checks the fields of a stored event (not its place in the chain;
// see Verify): a valid run id, a positive seq, a well-formed type, a time
// that fits in int64 nanoseconds since 1970, and a canonical JSON object
// payload within MaxPayloadSize.
func (e Event) Validate() error {
	if err := ValidRunID(e.RunID); err != nil {
		return err
	}
	if e.Seq < 1 {
		return fmt.Errorf("event: seq %d: must be at least 1", e.Seq)
	}
	if !e.Type.Valid() {
		return fmt.Errorf("event: seq %d: malformed type %q", e.Seq, truncate(string(e.Type)))
	}
	if err := validTime(e.Time); err != nil {
		return fmt.Errorf("event: seq %d: %w", e.Seq, err)
	}
	if err := checkCanonical(e.Payload); err != nil {
		return fmt.Errorf("event: seq %d: %w", e.Seq, err)
	}
	return nil
}

// validTime accepts times whose UTC nanoseconds since 1970 fit in an int64
// (years 1678 to 2262) and that are not the zero time.
func validTime(t time.Time) error {
	if t.IsZero() {
		return errors.New("time is zero")
	}
	if !time.Unix(0, t.UnixNano()).Equal(t) {
		return errors.New("time out of range")
	}
	return nil
}

// MarshalJSON encodes e as one JSON object with the fields run_id, seq,
// type, time (RFC 3339 in UTC with nanoseconds), payload, prev_hash and hash,
// in that order. Decode is its strict inverse.
func (e Event) MarshalJSON() ([]byte, error) {
	payload := e.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("{}")
	}
	if !json.Valid(payload) {
		return nil, fmt.Errorf("event: seq %d: payload is not valid JSON", e.Seq)
	}
	runID, err := json.Marshal(e.RunID)
	if err != nil {
		return nil, err
	}
	typ, err := json.Marshal(string(e.Type))
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(payload)+256)
	b = append(b, `{"run_id":`...)
	b = append(b, runID...)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"type":`...)
	b = append(b, typ...)
	b = append(b, `,"time":"`...)
	b = e.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","payload":`...)
	b = append(b, payload...)
	b = append(b, `,"prev_hash":"`...)
	b = append(b, e.PrevHash.String()...)
	b = append(b, `","hash":"`...)
	b = append(b, e.Hash.String()...)
	b = append(b, `"}`...)
	return b, nil
}

// UnmarshalJSON decodes e strictly; see Decode.
func (e *Event) UnmarshalJSON(b []byte) error {
	v, err := Decode(b)
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// truncate shortens untrusted text quoted in an error message.
func truncate(s string) string {
	const limit = 64
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
