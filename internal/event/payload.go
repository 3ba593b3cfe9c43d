package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Payload is a typed event payload: each type's struct knows its event type.
// JSON field names are snake_case and stable: they are part of the log's
// format and of the CLI's --json output.
type Payload interface {
	EventType() Type
}

// New returns a draft event of p's type with p as its payload, ready for a
// store's Append, which brings the payload to canonical form and fills the
// chain fields (and the time, if zero).
func New(p Payload) (Event, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return Event{}, fmt.Errorf("event: encode %s payload: %w", p.EventType(), err)
	}
	return Event{Type: p.EventType(), Payload: b}, nil
}

// ErrUnknownType is returned by Unpack for a type this build does not know.
var ErrUnknownType = errors.New("unknown event type")

// Unpack decodes e's payload into the typed struct of its type and returns a
// pointer to it (*ToolFinished for TypeToolFinished, ...). Fields the struct
// does not know are ignored, so logs written by a newer airlock still read.
func (e Event) Unpack() (Payload, error) {
	mk, ok := payloads[e.Type]
	if !ok {
		return nil, fmt.Errorf("event: seq %d: %w %q", e.Seq, ErrUnknownType, truncate(string(e.Type)))
	}
	p := mk()
	if err := json.Unmarshal(e.Payload, p); err != nil {
		return nil, fmt.Errorf("event: seq %d: decode %s payload: %w", e.Seq, e.Type, err)
	}
	return p, nil
}

// payloads maps each known type to a constructor of its payload struct. It
// is never modified.
var payloads = map[Type]func() Payload{
	TypeRunCreated:         func() Payload { return new(RunCreated) },
	TypeRunStarted:         func() Payload { return new(RunStarted) },
	TypeRunPaused:          func() Payload { return new(RunPaused) },
	TypeRunResumed:         func() Payload { return new(RunResumed) },
	TypeRunCancelled:       func() Payload { return new(RunCancelled) },
	TypeRunCompleted:       func() Payload { return new(RunCompleted) },
	TypeRunFailed:          func() Payload { return new(RunFailed) },
	TypeRunForked:          func() Payload { return new(RunForked) },
	TypePolicyResolved:     func() Payload { return new(PolicyResolved) },
	TypeSandboxProvisioned: func() Payload { return new(SandboxProvisioned) },
	TypeSandboxLost:        func() Payload { return new(SandboxLost) },
	TypeSandboxDestroyed:   func() Payload { return new(SandboxDestroyed) },
	TypeModelRequest:       func() Payload { return new(ModelRequest) },
	TypeModelResponse:      func() Payload { return new(ModelResponse) },
	TypeToolProposed:       func() Payload { return new(ToolProposed) },
	TypePolicyDecision:     func() Payload { return new(PolicyDecision) },
	TypeToolStarted:        func() Payload { return new(ToolStarted) },
	TypeToolFinished:       func() Payload { return new(ToolFinished) },
	TypeToolUncertain:      func() Payload { return new(ToolUncertain) },
	TypeEgressDecision:     func() Payload { return new(EgressDecision) },
	TypeArtifactStored:     func() Payload { return new(ArtifactStored) },
	TypeSnapshotTaken:      func() Payload { return new(SnapshotTaken) },
	TypeWorkspaceFetched:   func() Payload { return new(WorkspaceFetched) },
	TypeRetry:              func() Payload { return new(Retry) },
	TypeVerificationResult: func() Payload { return new(VerificationResult) },
	TypeBudgetExhausted:    func() Payload { return new(BudgetExhausted) },
	TypeApprovalRequested:  func() Payload { return new(ApprovalRequested) },
	TypeApprovalDecided:    func() Payload { return new(ApprovalDecided) },
	TypeLLMCall:            func() Payload { return new(LLMCall) },
	TypeSandboxCreated:     func() Payload { return new(SandboxCreated) },
	TypeSandboxOp:          func() Payload { return new(SandboxOp) },
	TypeSandboxUsage:       func() Payload { return new(SandboxUsage) },
	TypeSandboxEvent:       func() Payload { return new(SandboxEvent) },
	TypeEventsDropped:      func() Payload { return new(SandboxEventsDropped) },
}

// Types returns every event type this build knows, in no particular order.
func Types() []Type {
	out := make([]Type, 0, len(payloads))
	for t := range payloads {
		out = append(out, t)
	}
	return out
}

// RunCreated is the payload of TypeRunCreated, the first event of a run.
type RunCreated struct {
	Tenant     string `json:"tenant"`
	Task       string `json:"task"`
	Model      string `json:"model"`
	PolicyHash string `json:"policy_hash"`
	// ParentRunID, ParentSeq and ParentHash link a forked run to the event
	// of its parent it starts from; the hash makes the link tamper-evident.
	ParentRunID string `json:"parent_run_id,omitempty"`
	ParentSeq   int64  `json:"parent_seq,omitempty"`
	ParentHash  string `json:"parent_hash,omitempty"`
	// ReplayOf names the run whose recorded model turns a replay re-drives.
	ReplayOf string `json:"replay_of,omitempty"`
	// Config is the run's configuration as the run engine records it (its
	// sandboxes, checks and budgets), so any host process can resume it.
	Config json.RawMessage `json:"config,omitempty"`
	// Metadata is the client's own labels of the run (CheckMetadata
	// bounds them); like every payload it is redacted before it is
	// stored.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Secrets are the secret scanner's rules whose findings were redacted
	// from Task before it was recorded (never the values).
	Secrets []string `json:"secrets,omitempty"`
}

// RunForked is the payload of TypeRunForked, written to the log of the run
// a fork starts from: the link from parent to child (the child's
// run.created holds the link back).
type RunForked struct {
	ChildRunID string `json:"child_run_id"`
	AtStep     int    `json:"at_step"`
	AtSeq      int64  `json:"at_seq"`
}

// RunStarted is the payload of TypeRunStarted.
type RunStarted struct {
	// Host names the process that drives the run (hostname and pid).
	Host string `json:"host,omitempty"`
}

// RunPaused is the payload of TypeRunPaused.
type RunPaused struct {
	Reason string `json:"reason,omitempty"`
	// Snapshots are the digests of the workspace snapshots a resume restores.
	Snapshots []string `json:"snapshots,omitempty"`
	// Kind is what an E2B sandbox's pause kept: "memory" (its processes,
	// frozen in place, besides the snapshot) or "filesystem"; empty for a
	// run's pause.
	Kind string `json:"kind,omitempty"`
	// Note says why a pause asked to keep memory kept only files.
	Note string `json:"note,omitempty"`
	// Sealed is what an E2B sandbox's resume needs besides its record
	// (its checkpoint, tokens, create's envs, lifecycle and template),
	// sealed under the replicas' shared key (as sandbox.created's), so
	// that another replica can resume it when the one that paused it is
	// gone; empty without a shared key or a checkpoint.
	Sealed string `json:"sealed,omitempty"`
}

// RunResumed is the payload of TypeRunResumed.
type RunResumed struct {
	// Reason is "resume" (on request) or "recovery" (after a host restart).
	Reason string `json:"reason"`
	// FromSeq is the last event the resumed state was rebuilt from.
	FromSeq int64  `json:"from_seq"`
	Host    string `json:"host,omitempty"`
	// Kind is what an E2B sandbox's resume restored: "memory" (its frozen
	// processes thawed in place) or "filesystem" (a fresh boot from the
	// pause's snapshot); Note says why a memory pause resumed from files.
	Kind string `json:"kind,omitempty"`
	Note string `json:"note,omitempty"`
}

// RunCancelled is the payload of TypeRunCancelled.
type RunCancelled struct {
	Reason string `json:"reason,omitempty"`
	// By says who cancelled: "user", "signal", "api".
	By string `json:"by,omitempty"`
}

// RunCompleted is the payload of TypeRunCompleted.
type RunCompleted struct {
	Summary string `json:"summary,omitempty"`
	Steps   int    `json:"steps"`
	Usage   Usage  `json:"usage"`
}

// RunFailed is the payload of TypeRunFailed.
type RunFailed struct {
	// Status is the final status: "failed" or "failed_verification".
	Status Status `json:"status"`
	Reason string `json:"reason"`
	Error  string `json:"error,omitempty"`
	Steps  int    `json:"steps"`
	Usage  Usage  `json:"usage"`
}

// PolicyResolved is the payload of TypePolicyResolved.
type PolicyResolved struct {
	// PolicyHash is the policy hash (the canonical hash of the resolved
	// document, see package policy) of the document the run is held to.
	// Runs recorded before it was canonical have the SHA-256 of the
	// document's bytes here.
	PolicyHash string `json:"policy_hash"`
	// Source names where the policy came from (a file, a tenant default).
	Source string `json:"source,omitempty"`
	// Version names the stored policy version the policy given is,
	// "NAME@vN".
	Version string `json:"version,omitempty"`
	// BaseHash, when the run's own settings (command-line flags, a
	// request's fields) changed the policy given, is the policy hash of
	// the policy given (Source, Version); PolicyHash is then of the
	// document as they changed it.
	BaseHash string `json:"base_hash,omitempty"`
}

// SandboxProvisioned is the payload of TypeSandboxProvisioned.
type SandboxProvisioned struct {
	// Sandbox is the run-local name the model uses; SandboxID the backend's id.
	Sandbox   string `json:"sandbox"`
	SandboxID string `json:"sandbox_id"`
	Backend   string `json:"backend,omitempty"`
	// Snapshot is the digest of the workspace snapshot restored, if any.
	Snapshot string `json:"snapshot,omitempty"`
	// Image is the image its root was made of, by digest
	// (NAME@sha256:HEX or sha256:HEX), if any.
	Image      string `json:"image,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// SandboxLost is the payload of TypeSandboxLost.
type SandboxLost struct {
	Sandbox   string `json:"sandbox"`
	SandboxID string `json:"sandbox_id"`
	Reason    string `json:"reason"`
	// CPUMS is the sandbox's CPU time as its host last measured it.
	CPUMS int64 `json:"cpu_ms,omitempty"`
}

// SandboxDestroyed is the payload of TypeSandboxDestroyed.
type SandboxDestroyed struct {
	Sandbox   string `json:"sandbox"`
	SandboxID string `json:"sandbox_id"`
	Reason    string `json:"reason,omitempty"`
	// CPUMS is the CPU time of every process the sandbox ran, as its
	// host measured it (cgroup), in milliseconds.
	CPUMS int64 `json:"cpu_ms,omitempty"`
}

// Usage counts a model's tokens and cost.
type Usage struct {
	InputTokens      int64 `json:"input_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// CostMicroUSD is the cost in millionths of a US dollar, when known.
	CostMicroUSD int64 `json:"cost_micro_usd,omitempty"`
}

// Add returns the sum of u and v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + v.InputTokens,
		OutputTokens:     u.OutputTokens + v.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
		CostMicroUSD:     u.CostMicroUSD + v.CostMicroUSD,
	}
}

// ModelRequest is the payload of TypeModelRequest.
type ModelRequest struct {
	Step     int    `json:"step"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Attempt  int    `json:"attempt"`
	// Messages is the number of messages in the conversation sent.
	Messages int `json:"messages"`
}

// ToolCall is one tool call a model asked for.
type ToolCall struct {
	// ID is the provider's call id, echoed in the tool result.
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ModelResponse is the payload of TypeModelResponse: everything needed to
// rebuild the conversation without calling the model again.
type ModelResponse struct {
	Step       int        `json:"step"`
	Provider   string     `json:"provider"`
	Model      string     `json:"model"`
	Text       string     `json:"text,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	StopReason string     `json:"stop_reason"`
	Usage      Usage      `json:"usage"`
	DurationMS int64      `json:"duration_ms"`
}

// ToolProposed is the payload of TypeToolProposed.
type ToolProposed struct {
	Step   int             `json:"step"`
	CallID string          `json:"call_id"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
}

// Policy decisions.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	DecisionAsk   = "ask"
)

// PolicyDecision is the payload of TypePolicyDecision.
type PolicyDecision struct {
	Step     int    `json:"step"`
	CallID   string `json:"call_id"`
	Tool     string `json:"tool"`
	Decision string `json:"decision"` // allow | deny | ask
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Secrets are the secret scanner's rules that found something in the
	// call's arguments (never the values).
	Secrets []string `json:"secrets,omitempty"`
	// Input names the sandbox event an events rule (events.rules) read
	// to decide: "sandbox.event seq N". A decision with Input and no
	// CallID is the rule's decision on the event itself (stop, ask or
	// deny, for the run); a call's decision with Input is the run's next
	// call held or refused because of it.
	Input string `json:"input,omitempty"`
}

// Where a tool runs.
const (
	PlaceSandbox = "sandbox"
	PlaceHost    = "host"
)

// ToolStarted is the payload of TypeToolStarted.
type ToolStarted struct {
	Step   int    `json:"step"`
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	// Place is PlaceSandbox or PlaceHost; Sandbox names the sandbox.
	Place   string `json:"place"`
	Sandbox string `json:"sandbox,omitempty"`
	// External says the call may change something outside the run's
	// sandboxes, so recovery must not repeat it blindly.
	External bool `json:"external,omitempty"`
}

// Resources is what a command used.
type Resources struct {
	UserMS   int64 `json:"user_ms,omitempty"`
	SystemMS int64 `json:"system_ms,omitempty"`
	MaxRSSKB int64 `json:"max_rss_kb,omitempty"`
}

// ToolFinished is the payload of TypeToolFinished.
type ToolFinished struct {
	Step    int    `json:"step"`
	CallID  string `json:"call_id"`
	Tool    string `json:"tool"`
	Sandbox string `json:"sandbox,omitempty"`
	// Outcome is "ok", "error", or for commands one of the executor's
	// outcomes: exited, signaled, timeout, oom, pids_limit, output_limit,
	// disk_full, sandbox_lost.
	Outcome string `json:"outcome"`
	// IsError says the result was fed back to the model as an error.
	IsError  bool   `json:"is_error,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
	// Output is the (capped) result fed back to the model; OutputBytes the
	// full size before the cap; OutputArtifact the digest of the full
	// output when it was kept.
	Output          string `json:"output,omitempty"`
	OutputBytes     int64  `json:"output_bytes,omitempty"`
	OutputTruncated bool   `json:"output_truncated,omitempty"`
	OutputArtifact  string `json:"output_artifact,omitempty"`
	// Secrets are the secret scanner's rules whose findings were redacted
	// from Output (never the values).
	Secrets []string `json:"secrets,omitempty"`
	// DurationMS is the wall time of the whole call as the loop saw it,
	// WallMS the command's own wall time in the sandbox.
	DurationMS int64     `json:"duration_ms"`
	WallMS     int64     `json:"wall_ms,omitempty"`
	Resources  Resources `json:"resources"`
}

// ToolUncertain is the payload of TypeToolUncertain.
type ToolUncertain struct {
	Step   int    `json:"step"`
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	// StartedSeq is the seq of the tool.started event with no result.
	StartedSeq int64  `json:"started_seq"`
	Reason     string `json:"reason"`
}

// EgressDecision is the payload of TypeEgressDecision, one decision of the
// egress proxy. It never holds a secret: Credential names the secret.
type EgressDecision struct {
	Sandbox    string `json:"sandbox"`
	Decision   string `json:"decision"` // allowed | denied | asked
	Reason     string `json:"reason,omitempty"`
	Rule       string `json:"rule,omitempty"`
	Method     string `json:"method"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Path       string `json:"path,omitempty"`
	Addr       string `json:"addr,omitempty"`
	Status     int    `json:"status,omitempty"`
	BytesIn    int64  `json:"bytes_in"`
	BytesOut   int64  `json:"bytes_out"`
	DurationMS int64  `json:"duration_ms"`
	Inspected  bool   `json:"inspected,omitempty"`
	Credential string `json:"credential,omitempty"`
}

// ArtifactStored is the payload of TypeArtifactStored.
type ArtifactStored struct {
	Name      string `json:"name"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	MediaType string `json:"media_type,omitempty"`
	// Kind is "patch", "file", "report", "output" or "snapshot".
	Kind string `json:"kind,omitempty"`
	// Secrets are the secret scanner's rules that found something in a
	// patch's added lines: redacted from it, or kept as the policy says
	// (SecretsKept).
	Secrets     []string `json:"secrets,omitempty"`
	SecretsKept bool     `json:"secrets_kept,omitempty"`
}

// SnapshotTaken is the payload of TypeSnapshotTaken.
type SnapshotTaken struct {
	Step    int    `json:"step"`
	Sandbox string `json:"sandbox"`
	// Digest names the snapshot: a checkpoint (Format FormatCheckpoint),
	// or a gzipped tar of the whole workspace (Format "", runs recorded
	// before checkpoints).
	Digest string `json:"digest"`
	// Size is the bytes the snapshot added to the store: the whole tar,
	// or a checkpoint's new chunks (compressed) and its manifest.
	Size int64 `json:"size"`
	// Base is the digest of the snapshot this one is incremental to.
	Base       string `json:"base,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	// Format is FormatCheckpoint for a checkpoint, "" for a gzipped tar.
	Format string `json:"format,omitempty"`
	// Start says the snapshot is the workspace as the sandbox started,
	// before any command: what the run's patch is against.
	Start bool `json:"start,omitempty"`
	// Full says a checkpoint holds the whole tree rather than the change
	// to Base's.
	Full bool `json:"full,omitempty"`
	// TreeBytes is the file content of the whole workspace; DeltaBytes
	// what the checkpoint's stream carried; SharedBytes what of it the
	// store held already (deduplicated, not stored again).
	TreeBytes   int64 `json:"tree_bytes,omitempty"`
	DeltaBytes  int64 `json:"delta_bytes,omitempty"`
	SharedBytes int64 `json:"shared_bytes,omitempty"`
	// SandboxID and CPUMS: the sandbox's CPU time so far, as its host
	// measured it (cgroup), in milliseconds.
	SandboxID string `json:"sandbox_id,omitempty"`
	CPUMS     int64  `json:"cpu_ms,omitempty"`
}

// FormatCheckpoint is SnapshotTaken.Format for a checkpoint (package
// checkpoint: a manifest chained to its parent, content in chunks).
const FormatCheckpoint = "checkpoint"

// WorkspaceFetched is the payload of TypeWorkspaceFetched: the tree a git
// source gave, kept as the gzipped tar blob Digest. From then on it is the
// sandbox's source: what a replacement sandbox starts from and what the
// patch is computed against, so a recovery never fetches again.
type WorkspaceFetched struct {
	Sandbox string `json:"sandbox"`
	URL     string `json:"url"`
	Ref     string `json:"ref,omitempty"`
	// Commit is the object id HEAD had after the fetch.
	Commit     string `json:"commit"`
	Digest     string `json:"digest"`
	Size       int64  `json:"size"`
	DurationMS int64  `json:"duration_ms"`
}

// Retry is the payload of TypeRetry.
type Retry struct {
	Step int `json:"step"`
	// What is retried: "model", "tool", "sandbox".
	What    string `json:"what"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
	DelayMS int64  `json:"delay_ms"`
}

// Check is one completion check.
type Check struct {
	Name string `json:"name"`
	// Kind is "command", "changed" or "unchanged_outside".
	Kind     string `json:"kind"`
	Passed   bool   `json:"passed"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// VerificationResult is the payload of TypeVerificationResult.
type VerificationResult struct {
	Passed     bool    `json:"passed"`
	Checks     []Check `json:"checks"`
	DurationMS int64   `json:"duration_ms"`
}

// BudgetExhausted is the payload of TypeBudgetExhausted.
type BudgetExhausted struct {
	// Budget is "steps", "wall_time", "tokens", "sandbox_cpu",
	// "egress_bytes", "credits", "tenant_credits", or one of the LLM
	// gateway's: "llm_tokens", "llm_credits".
	Budget string `json:"budget"`
	Limit  int64  `json:"limit"`
	Used   int64  `json:"used"`
}

// ApprovalRequested is the payload of TypeApprovalRequested.
type ApprovalRequested struct {
	ApprovalID string `json:"approval_id"`
	Step       int    `json:"step,omitempty"`
	// CallID names the tool call asked about; a network approval has none
	// and names the Destination ("host:port") a sandbox's request is held
	// for, and the Sandbox that made it.
	CallID      string    `json:"call_id,omitempty"`
	Destination string    `json:"destination,omitempty"`
	Sandbox     string    `json:"sandbox,omitempty"`
	Action      string    `json:"action"`
	Reason      string    `json:"reason,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
}

// ApprovalDecided is the payload of TypeApprovalDecided.
type ApprovalDecided struct {
	ApprovalID string `json:"approval_id"`
	// Decision is "approved", "denied" or "expired"; a network approval
	// whose held request ended first (the sandbox gave up, the host
	// restarted) is "withdrawn".
	Decision string `json:"decision"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Outcomes of an LLMCall.
const (
	// LLMOutcomeOK: the upstream answered 2xx and the whole answer was
	// passed on.
	LLMOutcomeOK = "ok"
	// LLMOutcomeUpstreamError: the upstream answered with an error, could
	// not be reached, or broke off its stream.
	LLMOutcomeUpstreamError = "upstream_error"
	// LLMOutcomeRefused: the gateway refused the call before forwarding
	// it (Reason says why); nothing was sent upstream.
	LLMOutcomeRefused = "refused"
	// LLMOutcomeBudgetExhausted: a budget (Budget names it) was spent,
	// before the call (nothing was sent upstream) or during its stream
	// (the stream was ended with an error event).
	LLMOutcomeBudgetExhausted = "budget_exhausted"
	// LLMOutcomeCancelled: the sandbox went away before the answer ended.
	LLMOutcomeCancelled = "cancelled"
)

// LLMCall is the payload of TypeLLMCall: one call a sandbox made through
// the LLM gateway. Usage comes from the provider's response, never from
// the sandbox; when the answer was cut before the provider reported it,
// Usage is the gateway's conservative estimate and UsageEstimated is set.
// It never holds a provider key or a run token; the bodies, kept only when
// the policy says log_bodies, went through the host's redactor.
type LLMCall struct {
	Sandbox string `json:"sandbox"`
	// API is "openai.chat", "openai.responses", "openai.embeddings",
	// "anthropic.messages" or "anthropic.count_tokens".
	API string `json:"api"`
	// Model is the model the sandbox asked for; Upstream and
	// UpstreamModel where the gateway sent the call (after the policy's
	// map).
	Model         string `json:"model"`
	Upstream      string `json:"upstream"`
	UpstreamModel string `json:"upstream_model,omitempty"`
	Stream        bool   `json:"stream,omitempty"`
	// Usage are the tokens of the call (cached input counted inside
	// InputTokens); its CostMicroUSD is unused (see CostMicroCredits).
	Usage          Usage `json:"usage"`
	UsageEstimated bool  `json:"usage_estimated,omitempty"`
	// CostMicroCredits is what the call cost by the host's price table,
	// in millionths of a credit; the ledger debit linked to this event
	// has the same amount.
	CostMicroCredits int64 `json:"cost_micro_credits"`
	// LatencyMS is the time from the request to the end of the answer;
	// TTFTMS the time to the first streamed event that carried output.
	LatencyMS int64 `json:"latency_ms"`
	TTFTMS    int64 `json:"ttft_ms,omitempty"`
	// Status is the HTTP status the sandbox got.
	Status int `json:"status"`
	// Outcome is one of the LLMOutcome constants; Reason a short
	// machine-readable detail ("model_not_allowed", "rate_limited",
	// "upstream_status", "stream_broken", ...).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// Budget names the budget that was spent, with Outcome
	// LLMOutcomeBudgetExhausted: "llm_tokens", "llm_credits" or
	// "tenant_credits".
	Budget string `json:"budget,omitempty"`
	// RequestBody and ResponseBody are the bodies (a streamed answer as
	// its event data), redacted and cut to a bound; only with log_bodies.
	RequestBody  string `json:"request_body,omitempty"`
	ResponseBody string `json:"response_body,omitempty"`
}

// EventType implements Payload.
func (RunCreated) EventType() Type { return TypeRunCreated }

// EventType implements Payload.
func (RunStarted) EventType() Type { return TypeRunStarted }

// EventType implements Payload.
func (RunPaused) EventType() Type { return TypeRunPaused }

// EventType implements Payload.
func (RunResumed) EventType() Type { return TypeRunResumed }

// EventType implements Payload.
func (RunCancelled) EventType() Type { return TypeRunCancelled }

// EventType implements Payload.
func (RunCompleted) EventType() Type { return TypeRunCompleted }

// EventType implements Payload.
func (RunFailed) EventType() Type { return TypeRunFailed }

// EventType implements Payload.
func (RunForked) EventType() Type { return TypeRunForked }

// EventType implements Payload.
func (PolicyResolved) EventType() Type { return TypePolicyResolved }

// EventType implements Payload.
func (SandboxProvisioned) EventType() Type { return TypeSandboxProvisioned }

// EventType implements Payload.
func (SandboxLost) EventType() Type { return TypeSandboxLost }

// EventType implements Payload.
func (SandboxDestroyed) EventType() Type { return TypeSandboxDestroyed }

// EventType implements Payload.
func (ModelRequest) EventType() Type { return TypeModelRequest }

// EventType implements Payload.
func (ModelResponse) EventType() Type { return TypeModelResponse }

// EventType implements Payload.
func (ToolProposed) EventType() Type { return TypeToolProposed }

// EventType implements Payload.
func (PolicyDecision) EventType() Type { return TypePolicyDecision }

// EventType implements Payload.
func (ToolStarted) EventType() Type { return TypeToolStarted }

// EventType implements Payload.
func (ToolFinished) EventType() Type { return TypeToolFinished }

// EventType implements Payload.
func (ToolUncertain) EventType() Type { return TypeToolUncertain }

// EventType implements Payload.
func (EgressDecision) EventType() Type { return TypeEgressDecision }

// EventType implements Payload.
func (ArtifactStored) EventType() Type { return TypeArtifactStored }

// EventType implements Payload.
func (SnapshotTaken) EventType() Type { return TypeSnapshotTaken }

// EventType implements Payload.
func (WorkspaceFetched) EventType() Type { return TypeWorkspaceFetched }

// EventType implements Payload.
func (Retry) EventType() Type { return TypeRetry }

// EventType implements Payload.
func (VerificationResult) EventType() Type { return TypeVerificationResult }

// EventType implements Payload.
func (BudgetExhausted) EventType() Type { return TypeBudgetExhausted }

// EventType implements Payload.
func (ApprovalRequested) EventType() Type { return TypeApprovalRequested }

// EventType implements Payload.
func (ApprovalDecided) EventType() Type { return TypeApprovalDecided }

// EventType implements Payload.
func (LLMCall) EventType() Type { return TypeLLMCall }
