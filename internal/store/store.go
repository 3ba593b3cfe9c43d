// Package store is the contract of the durable record of runs: the runs
// themselves, their append-only event logs, artifact metadata, each
// tenant's credit ledger, each tenant's named policies with every
// version they had, and the tenants themselves with their API keys.
// Implementations live in store/sqlite (the embedded default) and
// store/postgres (several host processes on one database); both are built
// from one schema (store/schema), read its rows with one set of scanners
// (store/sqlrow), and pass the conformance suite in store/storetest. The
// functions for implementations (PrepareRun, CheckTail, DecideAcquire,
// DecidePolicy...) hold every rule the contract states that needs no
// database, so that no implementation can drift from another.
//
// Invariants every implementation keeps:
//   - A run's events have seq 1, 2, 3... with no gap and form a hash chain
//     (see package event); Append is all or nothing, and the events are
//     durable when it returns, so an effect can be treated as done once
//     the event recording it is appended.
//   - Two writers never interleave a run's log: Append is a compare-and-set
//     on the run's next seq, and a writer that lost the race gets an
//     *AppendConflictError, whatever process it runs in.
//   - A run's status only changes along event.CheckTransition, and only by
//     compare-and-set on the current status (*StatusConflictError).
//   - A run is driven by one worker at a time through a lease
//     (AcquireLease) with a fencing token; a write whose context carries a
//     token (WithFence) that is no longer the run's current one is refused
//     with ErrLeaseLost and writes nothing, whatever process it runs in.
//   - A tenant's credit balance is the sum of its ledger entries (grants
//     minus debits), never a stored number, and a run's event is debited
//     at most once.
//   - Every payload (and run task, and ledger note) passes through the
//     store's Redactor before it is hashed and written; no store can be
//     opened without saying which Redactor it uses (NoRedaction is an
//     explicit choice).
//   - A named policy's versions are append-only and numbered 1, 2, 3...
//     without gaps; each is named by the SHA-256 of its document's bytes
//     (DocumentHash) and carries the canonical hash its caller gave
//     (PolicyVersion.PolicyHash), the hash a run under it records.
//     Documents are kept byte for byte, like a run's Policy: they hold
//     secret references, not values, and redacting them would change
//     what the hash names.
//   - A named template's versions are numbered and hashed as a policy's,
//     each with the image digest its caller resolved; removing a template
//     removes every version of it at once.
//   - An API key is stored as the SHA-256 of the key string, never the
//     key; keys belong to one existing tenant, and reads and revocations
//     name the tenant, so one tenant never sees or revokes another's.
//   - Data is deleted only through Deletions, and each deletion leaves an
//     audit record (who, when, what, counts; never the content) that
//     outlives it. A payload deleted by retention is replaced by its
//     event.Tombstone, so the run's chain still verifies; a purge or a
//     tenant deletion removes rows, and the SQLite store zeroes them in
//     the file (secure_delete) and checkpoints its WAL, so no copy of the
//     deleted bytes stays readable in the database. A purge keeps the
//     run's ledger entries: deleting a run does not refund it.
//
// Importers: its implementations (internal/store/sqlite,
// internal/store/postgres), their schema and rows (internal/store/schema,
// internal/store/sqlrow) and suite (internal/store/storetest), the
// run engine (internal/engine), the APIs (internal/server,
// internal/server/servertest, internal/e2b; internal/mcp for its
// sandboxes' events), API keys (internal/auth), the policy credentials
// (internal/secret: their sealed rows), the
// credit meter (internal/credit), telemetry (internal/telemetry), template
// documents' names (internal/template) and host wiring (internal/host).
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// Store is the durable record of runs: each domain's interface below, and
// Close. Implementations are safe for concurrent use. Every method that
// takes a run id returns an error wrapping ErrNotFound when the run does
// not exist. Code that needs only some domains names their interfaces
// (the gateway's Ledger, a key watch's Keys), so what it may touch is
// plain and a fake of it stays small.
type Store interface {
	Runs
	Log
	Leases
	Artifacts
	Ledger
	Policies
	Templates
	Tenants
	Keys
	Deletions
	SandboxEvents
	Uploads
	UISessions
	Secrets

	// Close releases the store's resources. Other calls after Close fail
	// with an error wrapping ErrClosed; Close itself may be called again.
	Close() error
}

// RunLog is runs with their logs: what code that reads a run and its
// events together needs (VerifyRun, a stream that follows a run).
type RunLog interface {
	Runs
	Log
}

// Runs creates runs, reads them and moves their status.
type Runs interface {
	// CreateRun stores a new run and returns it as stored. r.ID, r.Tenant
	// and r.Status are required; r.Status must not be final. Created and
	// Updated default to the current time. A run with a parent must name an
	// existing parent and a seq its log has. An id already taken gives
	// ErrExists. Task is redacted like payloads.
	CreateRun(ctx context.Context, r Run) (Run, error)

	// CreateRunWith is CreateRun and then Append(ctx, r.ID, 1, first) in
	// one write: the run is stored with its first events or not at all.
	// first must not be empty. It returns the run as stored, its tail the
	// last event's, and the events as stored.
	CreateRunWith(ctx context.Context, r Run, first []event.Event) (Run, []event.Event, error)

	// GetRun returns the run with the given id.
	GetRun(ctx context.Context, id string) (Run, error)

	// ListRuns returns runs matching f, ordered by id (so by creation time),
	// ascending or, with f.Desc, descending.
	ListRuns(ctx context.Context, f RunFilter) ([]Run, error)

	// UpdateRunStatus moves run id from status from to status to, if the
	// transition is legal (else an error wrapping event.ErrTransition) and
	// the run's status is still from (else a *StatusConflictError). It sets
	// Updated, and Finished when to is final, and returns the updated run.
	// When ctx carries a fence (WithFence) that is not the run's current
	// lease token, nothing changes and the error wraps ErrLeaseLost.
	UpdateRunStatus(ctx context.Context, id string, from, to event.Status) (Run, error)
}

// Log is the runs' append-only, hash-chained event logs: it appends to
// a run's log (moving its status with it, when asked) and reads it.
type Log interface {
	// Append adds drafts to run runID's log, the first with seq next, and
	// returns them as stored: payloads redacted and in canonical form, Time
	// set where it was zero, and RunID, Seq, PrevHash and Hash filled. A
	// draft may leave RunID and Seq zero or set them to exactly these
	// values; PrevHash and Hash must be zero. If the log's next seq is not
	// next, nothing is written and the error is an *AppendConflictError.
	// All drafts are written or none, and they are durable on return.
	// When ctx carries a fence (WithFence) that is not the run's current
	// lease token, nothing is written and the error wraps ErrLeaseLost
	// (checked in the same transaction, before the seq); without a fence
	// there is no lease check. The run's Updated moves to the store's now
	// (never back), in the statement that moves its log's tail.
	Append(ctx context.Context, runID string, next int64, drafts []event.Event) ([]event.Event, error)

	// AppendStatus is Append and UpdateRunStatus in one transaction: the
	// events are written and the status changes, or neither happens. Use it
	// for the event that records a status change (run.completed with
	// running -> completed), so the log and the status never disagree.
	// A fence in ctx is checked as in Append.
	AppendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (Run, []event.Event, error)

	// Events returns up to limit events of run runID with seq >= from, in
	// seq order; limit <= 0 or above MaxPage means MaxPage. Page through a
	// log by passing the last seq + 1 as the next from.
	Events(ctx context.Context, runID string, from int64, limit int) ([]event.Event, error)

	// LastEvent returns the last event of run runID, or an error wrapping
	// ErrNotFound if the log is empty.
	LastEvent(ctx context.Context, runID string) (event.Event, error)
}

// Leases are the runs' leases: the right of one worker at a time to
// drive a run, fenced by a token every write under it carries.
type Leases interface {
	// AcquireLease gives owner the lease on run runID for ttl (at most
	// MaxLeaseTTL) by the store's clock. It succeeds when no one holds the
	// lease, when it expired, or when owner holds it unexpired; in that
	// last case it is a renewal and keeps the token, otherwise the run's
	// fencing token grows by one (the first is 1). Another owner's
	// unexpired lease gives a *LeasedError (matching ErrLeased) naming it
	// and its expiry; a run in a final status gives ErrFinal. Owner is 1 to
	// MaxNameLen printable bytes naming the worker; a restarted worker
	// should use a new one.
	AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (Lease, error)

	// RenewLease extends the lease (owner, token) on run runID to ttl from
	// now, if it is still the run's lease: else the error wraps
	// ErrLeaseLost (another owner acquired it, or it was released). A lease
	// that expired while no one else acquired it is still the caller's and
	// is renewed. A run in a final status gives ErrFinal.
	RenewLease(ctx context.Context, runID, owner string, token int64, ttl time.Duration) (Lease, error)

	// ReleaseLease drops the lease (owner, token) on run runID if it is
	// still the run's lease, so another worker can take the run at once;
	// otherwise it does nothing. It is idempotent. The fencing token is
	// kept: the next acquisition still gets a larger one.
	ReleaseLease(ctx context.Context, runID, owner string, token int64) error
}

// Artifacts is the metadata of the files kept from runs (their bytes are
// in a blob store).
type Artifacts interface {
	// PutArtifact records artifact metadata. Artifacts are immutable: a
	// second Put of the same run and name succeeds if digest, size and media
	// type are the same (a retry), and fails with ErrExists otherwise.
	PutArtifact(ctx context.Context, a Artifact) (Artifact, error)

	// GetArtifact returns the artifact of run runID called name.
	GetArtifact(ctx context.Context, runID, name string) (Artifact, error)

	// ListArtifacts returns run runID's artifacts ordered by name.
	ListArtifacts(ctx context.Context, runID string) ([]Artifact, error)
}

// Ledger is the tenants' credit ledgers: append-only entries, and the
// balances summed from them.
type Ledger interface {
	// AddLedgerEntry appends e to tenant e.Tenant's credit ledger and
	// returns it as stored: ID assigned, Note redacted, Created set. It is
	// atomic and durable on return, like Append. Errors wrapping
	// ErrInvalid: a kind other than LedgerGrant or LedgerDebit, an amount
	// not in 1..MaxLedgerAmount, a malformed tenant or note, an ID set by
	// the caller, a debit without a run id or a seq >= 1, a grant with a
	// seq, a run that does not exist or is another tenant's, a seq past
	// the run's last event. A debit is idempotent per (RunID, Seq): adding
	// it again with the same tenant and amount writes nothing and returns
	// the stored entry; a different amount gives ErrExists. Grants are not
	// idempotent: each call adds one.
	AddLedgerEntry(ctx context.Context, e LedgerEntry) (LedgerEntry, error)

	// Balance returns tenant's grants minus its debits, in micro-credits,
	// summed from the ledger's rows; 0 for a tenant without entries. It
	// may be negative: the ledger records debits, it does not refuse
	// them (deciding whether a tenant may spend is the caller's job). A
	// malformed tenant gives ErrInvalid.
	Balance(ctx context.Context, tenant string) (int64, error)

	// LedgerEntries returns up to limit of tenant's ledger entries with
	// ID > after, in ID order; limit <= 0 or above MaxPage means MaxPage.
	// Page through a ledger by passing the last ID as the next after. A
	// tenant without entries has none (no error).
	LedgerEntries(ctx context.Context, tenant string, after int64, limit int) ([]LedgerEntry, error)
}

// Policies is the tenants' named policies, every version of each kept.
type Policies interface {
	// PutPolicy stores v.Document as the next version of tenant v.Tenant's
	// policy v.Name and returns it as stored (Version, Hash and CreatedAt
	// set; Source and By redacted) with created true; atomic and durable
	// on return, like Append. When the name's latest version already has
	// the document's hash, nothing is written and that version is returned
	// with created false, so a retry (or a run under an unchanged file) is
	// idempotent (a latest version stored without a PolicyHash gets v's);
	// an older version with the hash does not count: going back to it
	// appends a new version. Concurrent puts of one name get distinct
	// versions, whatever process they run in. Errors wrapping ErrInvalid:
	// a malformed tenant or name (ValidatePolicyName), an empty document
	// or one over MaxPolicyLen, a Hash that is not DocumentHash(v.Document),
	// a PolicyHash that is not a hash, a Version set by the caller, a
	// malformed Source or By.
	PutPolicy(ctx context.Context, v PolicyVersion) (stored PolicyVersion, created bool, err error)

	// PolicyVersions returns up to MaxPage versions of tenant's policy
	// name, newest first, without their documents (GetPolicy reads any
	// one, older ones too). A name without versions gives an error
	// wrapping ErrNotFound; a malformed tenant or name ErrInvalid.
	PolicyVersions(ctx context.Context, tenant, name string) ([]PolicyVersion, error)

	// GetPolicy returns one version of tenant's policy name, with its
	// document: the latest when ref is "", version N for "vN", or the
	// newest version whose Hash or PolicyHash starts with ref
	// (ParsePolicyRef). A name or
	// version that does not exist gives an error wrapping ErrNotFound; a
	// malformed ref, or a hash prefix two different hashes share,
	// ErrInvalid.
	GetPolicy(ctx context.Context, tenant, name, ref string) (PolicyVersion, error)

	// ListPolicies returns the latest version of each of tenant's
	// policies, up to MaxPage, ordered by name, without their documents.
	// A tenant without policies has none (no error).
	ListPolicies(ctx context.Context, tenant string) ([]PolicyVersion, error)
}

// Tenants creates and reads the tenants, and marks one whose deletion
// began (Deletions.DeleteTenant deletes it).
type Tenants interface {
	// CreateTenant creates tenant name (ValidateTenantName, else
	// ErrInvalid) and returns it as stored, CreatedAt set. A name already
	// taken gives an error wrapping ErrExists, also when another process
	// created it a moment before.
	CreateTenant(ctx context.Context, name string) (Tenant, error)

	// GetTenant returns tenant name, or an error wrapping ErrNotFound.
	GetTenant(ctx context.Context, name string) (Tenant, error)

	// ListTenants returns every tenant, ordered by name.
	ListTenants(ctx context.Context) ([]Tenant, error)

	// MarkTenantDeleting records that tenant name's deletion began, at the
	// store's now unless it was marked before (the first time is kept),
	// and returns the tenant as stored. Durable on return, and seen at
	// once by every process on the database: APIKeyByHash fills the
	// tenant's keys' TenantDeleting, and CreateRun, CreateRunWith and
	// CreateAPIKey of the tenant fail with an error wrapping ErrConflict
	// (TenantDeletingError), so no run starts that the deletion would
	// find still going. A tenant that does not exist gives ErrNotFound.
	MarkTenantDeleting(ctx context.Context, name string) (Tenant, error)
}

// Keys is the tenants' API keys, stored by the hash of the key string.
type Keys interface {
	// CreateAPIKey stores k (PrepareAPIKey says what is valid; else
	// ErrInvalid): Name redacted, CreatedAt defaulted to now. Its tenant
	// must exist (else ErrNotFound). An id or hash already stored gives
	// ErrExists. Atomic and durable on return, like Append.
	CreateAPIKey(ctx context.Context, k APIKey) error

	// APIKeyByHash returns the key whose Hash is hash (sha256.Size bytes,
	// else ErrInvalid), revoked or not, with TenantDeleting filled: the
	// caller decides what a revoked key, or one of a tenant being
	// deleted, means. No such key gives ErrNotFound. Errors never quote hash.
	APIKeyByHash(ctx context.Context, hash []byte) (APIKey, error)

	// ListAPIKeys returns every key of tenant, revoked ones too, oldest
	// first. A tenant that does not exist gives ErrNotFound; there is no
	// "every tenant" form, so a query cannot cross tenants by accident.
	ListAPIKeys(ctx context.Context, tenant string) ([]APIKey, error)

	// RevokeAPIKey revokes tenant's key id at the store's current time. A
	// key that does not exist and a key of another tenant both give
	// ErrNotFound, and look the same. Revoking a revoked key succeeds and
	// keeps its first revocation time.
	RevokeAPIKey(ctx context.Context, tenant, id string) error

	// TouchAPIKey records that key id was used at at. LastUsedAt only
	// moves forward: a touch older than the recorded use (another
	// process's, say) changes nothing and succeeds. An unknown id gives
	// ErrNotFound.
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// Kinds of run record.
const (
	// KindAgent is an agent run, driven by the run engine's workers. It
	// is stored as the empty kind, which Run.Kind shows.
	KindAgent = "agent"
	// KindSandbox is the record of an E2B sandbox: its log holds what
	// was done in it and what it used. No worker ever drives one.
	KindSandbox = "sandbox"
	// KindMCP is the record of a sandbox of an MCP session whose policy
	// asked a person about a call: its log holds the asks
	// (approval.requested) and their decisions (approval.decided). The
	// MCP server that holds the calls is its only writer besides the
	// deciders; no worker ever drives one.
	KindMCP = "mcp"
	// KindAny, in a RunFilter only, lists records of every kind.
	KindAny = "any"
)

// MaxPage is the most events, runs, artifacts, ledger entries or policy
// versions one call returns.
const MaxPage = 1000

// MaxBatch is the most events one Append takes.
const MaxBatch = 10000

// Limits on run fields, in bytes.
const (
	MaxTenantLen = 128
	MaxTaskLen   = 64 << 10
	MaxModelLen  = 256
	MaxPolicyLen = 1 << 20
	MaxNameLen   = 256
)

// Run is one agent task and its state, or (Kind KindSandbox) the record
// of one E2B sandbox: the same append-only, hash-chained log, but nothing
// a worker drives. The store sets LastSeq and LastHash.
type Run struct {
	ID     string
	Tenant string
	// Kind is empty for an agent run (KindAgent is accepted on create and
	// stored as empty), KindSandbox for a sandbox record and KindMCP for
	// an MCP session's record of asks. It never changes.
	Kind  string
	Task  string
	Model string
	// Policy is the resolved policy document the run is held to, and
	// PolicyHash its content hash as the policy package computes it; the
	// store keeps both as given.
	Policy     []byte
	PolicyHash string
	Status     event.Status
	Created    time.Time
	// Updated is when the run last changed: its status or its log.
	Updated time.Time
	// Finished is when the run reached a final status; zero before.
	Finished time.Time
	// ParentRunID and ParentSeq name the run and event a forked run
	// started from; empty and 0 for a run that is not a fork.
	ParentRunID string
	ParentSeq   int64
	// LastSeq and LastHash are the seq and hash of the last event in the
	// run's log (0 and the zero hash when it is empty). Append's next is
	// LastSeq+1.
	LastSeq  int64
	LastHash event.Hash
	// LeaseOwner and LeaseExpires describe the run's lease; "" and zero
	// when no one holds it (an expired lease is still shown until someone
	// else acquires it). LeaseToken is the run's current fencing token, 0
	// before its first acquisition; a release keeps it.
	LeaseOwner   string
	LeaseToken   int64
	LeaseExpires time.Time
}

// RunFilter selects runs for ListRuns. The zero value lists the first
// MaxPage agent runs of every tenant.
type RunFilter struct {
	// Tenant, when not empty, keeps only that tenant's runs.
	Tenant string
	// Kind selects by kind: empty or KindAgent keeps agent runs only (so
	// no listing made for agent runs, the workers' least of all, ever
	// sees a sandbox record), KindSandbox sandbox records only, KindMCP
	// MCP records only, KindAny every kind.
	Kind string
	// Statuses, when not empty, keeps only runs in one of them.
	Statuses []event.Status
	// Metadata, when not empty, keeps only runs whose metadata (their
	// run.created event's, stored by CreateRunWith) has every one of these
	// keys with exactly its value.
	Metadata map[string]string
	// Limit caps the result; <= 0 or above MaxPage means MaxPage.
	Limit int
	// After, when not empty, starts the listing after the run with that id,
	// in the listing's order: pass the last id of a page to get the next.
	After string
	// Desc lists newest first.
	Desc bool
}

// Artifact is the metadata of a file kept from a run; the bytes live in a
// content-addressed blob store under Digest.
type Artifact struct {
	RunID string
	Name  string
	// Digest is "sha256:" and 64 lowercase hex digits.
	Digest    string
	Size      int64
	MediaType string
	Created   time.Time
}

// Redactor scrubs secret values from bytes. internal/secret's *Redactor
// satisfies it. Bytes must return a new slice (or b unchanged) and be safe
// for concurrent use.
type Redactor interface {
	Bytes(b []byte) []byte
}

// NoRedaction is the Redactor of a store that is deliberately given no
// secrets to scrub (tests, tools that only read).
var NoRedaction Redactor = noRedaction{}

type noRedaction struct{}

func (noRedaction) Bytes(b []byte) []byte { return b }

// Errors callers branch on.
var (
	// ErrNotFound: no such run, event, artifact, policy version, tenant
	// or API key.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: the id or name (or API key hash) is taken.
	ErrExists = errors.New("store: already exists")
	// ErrConflict is matched (errors.Is) by *StatusConflictError and
	// *AppendConflictError: someone else changed the run first.
	ErrConflict = errors.New("store: conflict")
	// ErrInvalid: the request is malformed (a bad id, an oversized field,
	// a payload that is not a JSON object...); nothing was written.
	ErrInvalid = errors.New("store: invalid request")
	// ErrSchemaTooNew is matched by *SchemaVersionError.
	ErrSchemaTooNew = errors.New("store: database schema is newer than this airlock")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrLeased is matched by *LeasedError: another owner holds an
	// unexpired lease on the run.
	ErrLeased = errors.New("store: run is leased")
	// ErrLeaseLost: the caller's lease (or fencing token) is no longer
	// the run's; another worker has taken it over, or it was released.
	// Nothing was written: the caller must stop driving the run.
	ErrLeaseLost = errors.New("store: lease lost")
	// ErrFinal: the run is in a final status and cannot be leased.
	ErrFinal = errors.New("store: run is final")
)

// StatusConflictError reports that a run's status was not the expected one.
type StatusConflictError struct {
	RunID string
	// Want is the status the caller expected, Got the run's actual status.
	Want, Got event.Status
}

func (e *StatusConflictError) Error() string {
	return fmt.Sprintf("store: run %s: status is %s, not %s", e.RunID, e.Got, e.Want)
}

// Is matches ErrConflict.
func (e *StatusConflictError) Is(target error) bool { return target == ErrConflict }

// AppendConflictError reports that a run's log had moved on: another writer
// appended since the caller last looked.
type AppendConflictError struct {
	RunID string
	// Want is the next seq the caller passed, Got the log's actual next seq.
	Want, Got int64
}

func (e *AppendConflictError) Error() string {
	return fmt.Sprintf("store: run %s: next seq is %d, not %d", e.RunID, e.Got, e.Want)
}

// Is matches ErrConflict.
func (e *AppendConflictError) Is(target error) bool { return target == ErrConflict }

// SchemaVersionError reports a database whose schema is newer than this
// build knows; opening it could corrupt it, so the store refuses.
type SchemaVersionError struct {
	Have, Supported int
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("store: database schema version %d is newer than the %d this airlock supports", e.Have, e.Supported)
}

// Is matches ErrSchemaTooNew.
func (e *SchemaVersionError) Is(target error) bool { return target == ErrSchemaTooNew }
