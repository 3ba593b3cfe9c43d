package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/event"
)

// The functions in this file are for implementations of Store: they hold the
// validation and redaction every implementation must apply the same way, so
// the conformance suite tests them once and no backend can drift.

// PrepareRun validates r for CreateRun and returns it as it must be stored:
// Task redacted, Created and Updated defaulted to now (in UTC; a time a
// store cannot hold as nanoseconds since 1970 is refused), Finished,
// LastSeq, LastHash and the lease fields cleared. Errors wrap ErrInvalid.
func PrepareRun(r Run, now time.Time, red Redactor) (Run, error) {
	if err := event.ValidRunID(r.ID); err != nil {
		return r, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := validTenant(r.Tenant); err != nil {
		return r, err
	}
	switch {
	case !r.Status.Valid():
		return r, fmt.Errorf("%w: run %s: unknown status %q", ErrInvalid, r.ID, clip(string(r.Status)))
	case r.Status.Final():
		return r, fmt.Errorf("%w: run %s: cannot create a run in final status %s", ErrInvalid, r.ID, r.Status)
	case len(r.Task) > MaxTaskLen || !text(r.Task):
		return r, fmt.Errorf("%w: run %s: task is not UTF-8 text without NUL of at most %d bytes", ErrInvalid, r.ID, MaxTaskLen)
	case len(r.Model) > MaxModelLen || !printable(r.Model):
		return r, fmt.Errorf("%w: run %s: model is not printable text of at most %d bytes", ErrInvalid, r.ID, MaxModelLen)
	case len(r.Policy) > MaxPolicyLen:
		return r, fmt.Errorf("%w: run %s: policy is %d bytes, limit %d", ErrInvalid, r.ID, len(r.Policy), MaxPolicyLen)
	case len(r.PolicyHash) > MaxNameLen || !printable(r.PolicyHash):
		return r, fmt.Errorf("%w: run %s: malformed policy hash", ErrInvalid, r.ID)
	case r.ParentRunID == "" && r.ParentSeq != 0:
		return r, fmt.Errorf("%w: run %s: parent seq without a parent run", ErrInvalid, r.ID)
	case r.Kind != "" && r.Kind != KindAgent && r.Kind != KindSandbox && r.Kind != KindMCP:
		return r, fmt.Errorf("%w: run %s: kind %q is not %s, %s or %s", ErrInvalid, r.ID, clip(r.Kind), KindAgent, KindSandbox, KindMCP)
	case (r.Kind == KindSandbox || r.Kind == KindMCP) && r.ParentRunID != "":
		return r, fmt.Errorf("%w: run %s: a %s record is not a fork", ErrInvalid, r.ID, r.Kind)
	}
	if r.Kind == KindAgent {
		r.Kind = ""
	}
	if r.ParentRunID != "" {
		if err := event.ValidRunID(r.ParentRunID); err != nil {
			return r, fmt.Errorf("%w: run %s: parent: %w", ErrInvalid, r.ID, err)
		}
		if r.ParentSeq < 1 {
			return r, fmt.Errorf("%w: run %s: a fork needs a parent seq of at least 1", ErrInvalid, r.ID)
		}
		if r.ParentRunID == r.ID {
			return r, fmt.Errorf("%w: run %s: a run cannot be its own parent", ErrInvalid, r.ID)
		}
	}
	if red == nil {
		red = NoRedaction
	}
	r.Task = string(red.Bytes([]byte(r.Task)))
	if r.Created.IsZero() {
		r.Created = now
	}
	if r.Updated.IsZero() {
		r.Updated = r.Created
	}
	if !nanoTime(r.Created) || !nanoTime(r.Updated) {
		return r, fmt.Errorf("%w: run %s: creation or update time out of range", ErrInvalid, r.ID)
	}
	r.Created, r.Updated = r.Created.UTC(), r.Updated.UTC()
	r.Finished = time.Time{}
	r.LastSeq, r.LastHash = 0, event.Hash{}
	r.LeaseOwner, r.LeaseToken, r.LeaseExpires = "", 0, time.Time{}
	if r.Policy == nil {
		r.Policy = []byte{}
	}
	return r, nil
}

// PrepareRunWith is for implementations of Store: it validates r and
// first for CreateRunWith and returns them as they must be stored: r as
// PrepareRun returns it, and first prepared (PrepareDrafts) and sealed as
// the first events of a new log. A new run's lease token is 0, so a ctx
// fenced by another (CheckFence) is refused here, before any write, with
// an error wrapping ErrLeaseLost, as Append would refuse it; other errors
// wrap ErrInvalid.
func PrepareRunWith(ctx context.Context, r Run, first []event.Event, now time.Time, red Redactor) (Run, []event.Event, error) {
	r, err := PrepareRun(r, now, red)
	if err != nil {
		return r, nil, fmt.Errorf("create run: %w", err)
	}
	if len(first) == 0 {
		return r, nil, fmt.Errorf("create run %s: %w: no first events", r.ID, ErrInvalid)
	}
	evs, err := PrepareDrafts(r.ID, 1, first, now, red)
	if err != nil {
		return r, nil, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	if err := CheckFence(ctx, r.ID, 0); err != nil {
		return r, nil, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	event.SealChain(r.ID, 0, event.Hash{}, evs)
	return r, evs, nil
}

// CheckParent is for implementations of Store: called inside the write
// transaction of CreateRun with the last seq of the run r.ParentRunID
// names (found is false when there is no such run), it returns nil when r
// may fork from it at r.ParentSeq, and an error wrapping ErrInvalid
// otherwise. A log only grows, so a seq it has when checked it keeps.
func CheckParent(r Run, found bool, lastSeq int64) error {
	switch {
	case !found:
		return fmt.Errorf("%w: parent run %s does not exist", ErrInvalid, r.ParentRunID)
	case r.ParentSeq > lastSeq:
		return fmt.Errorf("%w: parent run %s has no event %d (its last is %d)", ErrInvalid, r.ParentRunID, r.ParentSeq, lastSeq)
	}
	return nil
}

// PrepareDrafts validates the drafts of an Append of run runID starting at
// seq next and returns copies with their payloads redacted and in canonical
// form and their Time defaulted to now (all times in UTC). It does not seal
// them: the chain fields depend on the log's tail, which the implementation
// reads inside its transaction, then seals each draft with event.Seal.
// Errors wrap ErrInvalid and never quote a payload.
func PrepareDrafts(runID string, next int64, drafts []event.Event, now time.Time, red Redactor) ([]event.Event, error) {
	if err := event.ValidRunID(runID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if next < 1 {
		return nil, fmt.Errorf("%w: run %s: next seq %d is below 1", ErrInvalid, runID, next)
	}
	if len(drafts) == 0 || len(drafts) > MaxBatch {
		return nil, fmt.Errorf("%w: run %s: append needs 1 to %d events, got %d", ErrInvalid, runID, MaxBatch, len(drafts))
	}
	if red == nil {
		red = NoRedaction
	}
	now = now.UTC()
	out := make([]event.Event, len(drafts))
	for i, d := range drafts {
		seq := next + int64(i)
		switch {
		case d.RunID != "" && d.RunID != runID:
			return nil, fmt.Errorf("%w: run %s: draft %d names run %q", ErrInvalid, runID, i, clip(d.RunID))
		case d.Seq != 0 && d.Seq != seq:
			return nil, fmt.Errorf("%w: run %s: draft %d has seq %d, its place is %d", ErrInvalid, runID, i, d.Seq, seq)
		case !d.PrevHash.IsZero() || !d.Hash.IsZero():
			return nil, fmt.Errorf("%w: run %s: draft %d has hashes set; the store computes them", ErrInvalid, runID, i)
		case !d.Type.Valid():
			return nil, fmt.Errorf("%w: run %s: draft %d: malformed type %q", ErrInvalid, runID, i, clip(string(d.Type)))
		}
		p, err := event.CanonicalPayload(d.Payload, red.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: run %s: draft %d (%s): %w", ErrInvalid, runID, i, d.Type, err)
		}
		t := d.Time
		if t.IsZero() {
			t = now
		}
		// Run id, seq, type and payload are checked above; what is left
		// of event.Validate is the time. (Validate would also re-check the
		// payload that CanonicalPayload just produced, at a cost that shows
		// in the append benchmark.)
		if !time.Unix(0, t.UnixNano()).Equal(t) {
			return nil, fmt.Errorf("%w: run %s: draft %d: time out of range", ErrInvalid, runID, i)
		}
		out[i] = event.Event{RunID: runID, Seq: seq, Type: d.Type, Time: t.UTC(), Payload: p}
	}
	return out, nil
}

// CheckTail is for implementations of Store: called inside the write
// transaction of Append with run runID's last seq and lease token, read
// under the run's lock, it returns nil when drafts from seq next may be
// appended, and otherwise the error Append must return: first a fence in
// ctx that is not token (CheckFence), since a writer that lost its lease
// must stop rather than re-read the tail and retry, then an
// *AppendConflictError when the log's next seq is not next.
func CheckTail(ctx context.Context, runID string, next, lastSeq, token int64) error {
	if err := CheckFence(ctx, runID, token); err != nil {
		return err
	}
	if lastSeq+1 != next {
		return &AppendConflictError{RunID: runID, Want: next, Got: lastSeq + 1}
	}
	return nil
}

// PrepareArtifact validates a for PutArtifact and returns it as it must be
// stored: MediaType defaulted to application/octet-stream, Created to now
// (in UTC). Errors wrap ErrInvalid.
func PrepareArtifact(a Artifact, now time.Time) (Artifact, error) {
	if err := event.ValidRunID(a.RunID); err != nil {
		return a, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case !validArtifactName(a.Name):
		return a, fmt.Errorf("%w: run %s: artifact name must be 1 to %d printable bytes", ErrInvalid, a.RunID, MaxNameLen)
	case !validDigest(a.Digest):
		return a, fmt.Errorf("%w: run %s: artifact %q: digest is not sha256: and 64 lowercase hex digits", ErrInvalid, a.RunID, a.Name)
	case a.Size < 0:
		return a, fmt.Errorf("%w: run %s: artifact %q: negative size", ErrInvalid, a.RunID, a.Name)
	case len(a.MediaType) > MaxNameLen || !printable(a.MediaType):
		return a, fmt.Errorf("%w: run %s: artifact %q: malformed media type", ErrInvalid, a.RunID, a.Name)
	}
	if a.MediaType == "" {
		a.MediaType = "application/octet-stream"
	}
	if a.Created.IsZero() {
		a.Created = now
	}
	if !nanoTime(a.Created) {
		return a, fmt.Errorf("%w: run %s: artifact %q: creation time out of range", ErrInvalid, a.RunID, a.Name)
	}
	a.Created = a.Created.UTC()
	return a, nil
}

// SameArtifact is for implementations of Store: given the artifact old
// already stored under a's run and name, it returns nil when a is a retry
// of it (same digest, size and media type: old is what PutArtifact
// returns), and an error wrapping ErrExists otherwise.
func SameArtifact(old, a Artifact) error {
	if old.Digest != a.Digest || old.Size != a.Size || old.MediaType != a.MediaType {
		return fmt.Errorf("%w with another digest, size or media type", ErrExists)
	}
	return nil
}

// CheckRunID is for implementations of Store: a read or write that looks
// a run up by id (GetRun, UpdateRunStatus, Events, LastEvent,
// ListArtifacts) calls it first, and it returns an error wrapping
// ErrNotFound when id is not a run id: no run has it. So no store sends
// its database a text the database may not hold (PostgreSQL's text holds
// no NUL, and only UTF-8), and all answer alike.
func CheckRunID(id string) error {
	if event.ValidRunID(id) != nil {
		return fmt.Errorf("run %q: %w", clip(id), ErrNotFound)
	}
	return nil
}

// CheckArtifactKey is CheckRunID for GetArtifact: it also returns an error
// wrapping ErrNotFound when name is not a name an artifact may have.
func CheckArtifactKey(runID, name string) error {
	if err := CheckRunID(runID); err != nil {
		return err
	}
	if !validArtifactName(name) {
		return fmt.Errorf("run %s: artifact %q: %w", runID, clip(name), ErrNotFound)
	}
	return nil
}

func validArtifactName(name string) bool {
	return name != "" && len(name) <= MaxNameLen && printable(name)
}

// ValidateFilter checks f and returns it with Limit brought into 1..MaxPage
// and an empty Kind made KindAgent. Errors wrap ErrInvalid.
func ValidateFilter(f RunFilter) (RunFilter, error) {
	if f.Tenant != "" {
		if err := validTenant(f.Tenant); err != nil {
			return f, err
		}
	}
	for _, s := range f.Statuses {
		if !s.Valid() {
			return f, fmt.Errorf("%w: unknown status %q", ErrInvalid, clip(string(s)))
		}
	}
	switch f.Kind {
	case "", KindAgent:
		f.Kind = KindAgent
	case KindSandbox, KindMCP, KindAny:
	default:
		return f, fmt.Errorf("%w: kind %q is not %s, %s, %s or %s", ErrInvalid, clip(f.Kind), KindAgent, KindSandbox, KindMCP, KindAny)
	}
	if err := event.CheckMetadata(f.Metadata); err != nil {
		return f, fmt.Errorf("%w: metadata filter: %w", ErrInvalid, err)
	}
	if f.After != "" {
		if err := event.ValidRunID(f.After); err != nil {
			return f, fmt.Errorf("%w: after: %w", ErrInvalid, err)
		}
	}
	f.Limit = PageLimit(f.Limit)
	return f, nil
}

// PageLimit brings a requested page size into 1..MaxPage.
func PageLimit(n int) int {
	if n <= 0 || n > MaxPage {
		return MaxPage
	}
	return n
}

func validTenant(t string) error {
	if t == "" || len(t) > MaxTenantLen {
		return fmt.Errorf("%w: tenant must be 1 to %d bytes", ErrInvalid, MaxTenantLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		ok := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '@'
		if !ok {
			return fmt.Errorf("%w: tenant %q: only letters, digits and . _ - @", ErrInvalid, clip(t))
		}
	}
	return nil
}

func validDigest(d string) bool {
	const prefix = "sha256:"
	if len(d) != len(prefix)+64 || d[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(d); i++ {
		if c := d[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// text reports whether s is valid UTF-8 without NUL, which PostgreSQL's
// text cannot hold.
func text(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

// Clip is for implementations of Store: it shortens untrusted text (an
// id, a name) quoted in an error message.
func Clip(s string) string { return clip(s) }

// clip shortens untrusted text quoted in an error message.
func clip(s string) string {
	const limit = 64
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}

// MetadataOf returns the metadata a run's first events record: its
// run.created event's (see CreatedMetadata); nil when there is none.
func MetadataOf(first []event.Event) map[string]string {
	for _, ev := range first {
		if ev.Type == event.TypeRunCreated {
			return CreatedMetadata(ev.Payload)
		}
	}
	return nil
}

// CreatedMetadata returns the metadata a run.created payload records, for
// the run_metadata index (of new runs, and of runs stored before the index
// existed); nil when it has none that a run may have.
func CreatedMetadata(payload []byte) map[string]string {
	var c struct {
		Metadata map[string]string `json:"metadata"`
	}
	if json.Unmarshal(payload, &c) != nil || event.CheckMetadata(c.Metadata) != nil {
		return nil
	}
	return c.Metadata
}
