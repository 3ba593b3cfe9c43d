package api

import (
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// Run is a run as the API shows it (GET /v1/runs/{id}, the items of
// RunList, the answers to create, fork and the control actions). The
// fields from Steps on are only in GET /v1/runs/{id}.
type Run struct {
	ID          string       `json:"id"`
	Tenant      string       `json:"tenant"`
	Status      event.Status `json:"status"`
	Model       string       `json:"model"`
	Task        string       `json:"task"`
	Created     time.Time    `json:"created"`
	Updated     time.Time    `json:"updated"`
	Finished    *time.Time   `json:"finished,omitempty"`
	ParentRunID string       `json:"parent_run_id,omitempty"`
	ParentSeq   int64        `json:"parent_seq,omitempty"`
	// Events is the seq of the run's last event, LastHash its hash (hex):
	// the end of the run's hash chain, as the store records it.
	Events int64 `json:"events"`
	// PolicyHash is the policy hash of the document the run is held to:
	// the canonical hash of the resolved document, which policy check and
	// the stored policies show too (a run recorded before airlock hashed
	// policies so has the SHA-256 of its document's bytes).
	PolicyHash string `json:"policy_hash"`
	LastHash   string `json:"last_hash,omitempty"`

	Steps        *int                      `json:"steps,omitempty"`
	Usage        *event.Usage              `json:"usage,omitempty"`
	Reason       string                    `json:"reason,omitempty"`
	Summary      string                    `json:"summary,omitempty"`
	Verification *event.VerificationResult `json:"verification,omitempty"`
	// Checkpoints is what the run's workspace checkpoints hold and cost.
	Checkpoints *Checkpoints `json:"checkpoints,omitempty"`
	// PayloadsDeleted says that retention replaced payloads of the run's
	// log (or its parents' up to its fork) by tombstones: steps, usage,
	// summary and verification are then unknown.
	PayloadsDeleted *PayloadsDeleted `json:"payloads_deleted,omitempty"`
	// Metadata is the client's own labels, as its run.created event
	// records them.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Policy says where the run's policy came from, as its
	// policy.resolved event records it.
	Policy *RunPolicy `json:"policy,omitempty"`
	// Image is the image the run's sandboxes are made of, by digest
	// (NAME@sha256:HEX or sha256:HEX), as its run.created event records
	// it; empty when they run on the host's system directories.
	Image string `json:"image,omitempty"`
}

// RunPolicy is where a run's policy came from.
type RunPolicy struct {
	// Source names it (a file, "policy NAME vN", "api (inline)", the
	// default) and Version the stored version it is ("NAME@vN").
	Source  string `json:"source,omitempty"`
	Version string `json:"version,omitempty"`
	// BaseHash, when the run's own settings (command-line flags, the
	// request's verify, artifacts and max_steps) changed that policy, is
	// its policy hash; the run's PolicyHash is of the policy as they
	// changed it.
	BaseHash string `json:"base_hash,omitempty"`
}

// RunList is the body of GET /v1/runs.
type RunList struct {
	Runs []Run `json:"runs"`
	// NextCursor, when not empty, fetches the next page (?cursor=).
	NextCursor string `json:"next_cursor,omitempty"`
}

// CreateRunRequest is the body of POST /v1/runs.
type CreateRunRequest struct {
	Task string `json:"task"`
	// Model is "PROVIDER:MODEL" (anthropic, openai, openai-responses),
	// or empty with Script.
	Model string `json:"model,omitempty"`
	// Script is the YAML of a scripted model's turns (tests, demos).
	Script string `json:"script,omitempty"`
	// Policy names a stored policy of the tenant, NAME[@vN|@HASHPREFIX];
	// PolicyDocument is a policy document (YAML) instead. Neither: the
	// built-in strict default.
	Policy         string `json:"policy,omitempty"`
	PolicyDocument string `json:"policy_document,omitempty"`
	// Template names a stored template of the tenant, NAME or NAME@vN
	// (default: its latest version), that the run's sandboxes start from:
	// its policy (which Policy and PolicyDocument must then not give),
	// its image by digest, its environment and limits; its start command
	// runs and its readiness check passes in each sandbox first. A
	// template with a workdir or user is refused: a run's tools work in
	// /workspace as the sandbox's user.
	Template string `json:"template,omitempty"`
	// Workspace is what /workspace starts as; none: empty.
	Workspace *WorkspaceSource `json:"workspace,omitempty"`
	// Verify adds completion checks to the policy's.
	Verify *VerifySpec `json:"verify,omitempty"`
	// Artifacts adds globs of workspace files kept after verification.
	Artifacts []string `json:"artifacts,omitempty"`
	// MaxSteps lowers the policy's step budget (never raises it).
	MaxSteps int `json:"max_steps,omitempty"`
	// Metadata is the client's own labels (event.CheckMetadata bounds
	// them), recorded in the run's run.created event and returned with
	// the run.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// WorkspaceSource is where a run's workspace comes from: an upload or a
// git repository.
type WorkspaceSource struct {
	// Upload is the id of an uploaded tarball (POST /v1/uploads).
	Upload string `json:"upload,omitempty"`
	// Git is a repository's http(s) URL, fetched inside the run's sandbox
	// through its egress proxy, so the run's policy must allow its host.
	// It carries no credential: the policy's network.credentials do.
	Git string `json:"git,omitempty"`
	// Ref is the branch, tag or commit id of Git to check out (default:
	// the repository's default branch).
	Ref string `json:"ref,omitempty"`
}

// VerifySpec are completion checks.
type VerifySpec struct {
	Commands    []string `json:"commands,omitempty"`
	Changed     []string `json:"changed,omitempty"`
	OnlyChanged []string `json:"only_changed,omitempty"`
}

// ForkRequest is the body of POST /v1/runs/{id}/fork.
type ForkRequest struct {
	// AtStep is the step after which the new run starts (0: from the
	// start). Required.
	AtStep *int `json:"at_step"`
	// Model, Script, Policy and PolicyDocument replace the parent's, as in
	// CreateRunRequest; empty keeps the parent's. A new Script starts at
	// the fork point: its first turn is the model's first after AtStep.
	Model          string `json:"model,omitempty"`
	Script         string `json:"script,omitempty"`
	Policy         string `json:"policy,omitempty"`
	PolicyDocument string `json:"policy_document,omitempty"`
	MaxSteps       int    `json:"max_steps,omitempty"`
}

// ActionRequest is the optional body of cancel and pause (and resume,
// which ignores it).
type ActionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// EventPage is the body of GET /v1/runs/{id}/events.
type EventPage struct {
	Events []event.Event `json:"events"`
	// NextAfter is the ?after= of the next page: the last seq returned
	// (or the one asked for, when none was).
	NextAfter int64 `json:"next_after"`
	// More says the log had more events than this page.
	More bool `json:"more"`
}

// StreamEnd is the data of the "end" event an event stream sends last,
// once the run is final and every event up to LastSeq was sent. Status is
// empty when a client made it up from a 204 (nothing left to send), which
// does not say.
type StreamEnd struct {
	Status  event.Status `json:"status"`
	LastSeq int64        `json:"last_seq"`
}

// Artifact is a run's stored result as the API lists it: the patch
// (patch.diff), a kept file (files/PATH).
type Artifact struct {
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	MediaType string    `json:"media_type"`
	Created   time.Time `json:"created"`
}

// ArtifactList is the body of GET /v1/runs/{id}/artifacts.
type ArtifactList struct {
	Artifacts []Artifact `json:"artifacts"`
}

// Upload is the answer to POST /v1/uploads.
type Upload struct {
	// ID names the upload in a run's workspace.upload.
	ID string `json:"id"`
	// Size is the stored (gzipped) tarball's size in bytes; Received how
	// many bytes the request carried.
	Size     int64 `json:"size"`
	Received int64 `json:"received"`
	// Gzipped says the body was gzipped already (else the server
	// gzipped it).
	Gzipped bool `json:"gzipped"`
}

// Checkpoints is what a run's workspace checkpoints hold and cost: each
// stores what its step changed, and only what its tenant's store does not
// hold already.
type Checkpoints struct {
	// Count is the checkpoints the run took (its sandboxes' starts and
	// its steps').
	Count int `json:"count"`
	// StoredBytes is what they added to the store: new chunks
	// (compressed) and manifests.
	StoredBytes int64 `json:"stored_bytes"`
	// SharedBytes is the content they found stored already (by this run,
	// another run or a fork of the tenant), not stored again.
	SharedBytes int64 `json:"shared_bytes"`
	// TreeBytes is the file content of the run's workspaces as of their
	// latest checkpoints.
	TreeBytes int64 `json:"tree_bytes"`
}

// PayloadsDeleted is how many event payloads retention deleted, the latest
// when.
type PayloadsDeleted struct {
	Count int       `json:"count"`
	At    time.Time `json:"at"`
}
