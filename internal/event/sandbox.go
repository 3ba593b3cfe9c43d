package event

import "time"

// The event types of a sandbox record (a run record of kind "sandbox" in
// the store): the log of one E2B sandbox. Its life is told with the
// types runs use too: sandbox.provisioned at each boot, run.paused and
// run.resumed, and sandbox.destroyed or sandbox.lost at its end.
const (
	// TypeSandboxCreated is the first event of a sandbox record (payload
	// SandboxCreated): what the sandbox was made from.
	TypeSandboxCreated Type = "sandbox.created"
	// TypeSandboxOp records one operation on a sandbox, on the control or
	// the data plane (payload SandboxOp).
	TypeSandboxOp Type = "sandbox.op"
	// TypeSandboxUsage records what a sandbox used since the previous one
	// and what that costs (payload SandboxUsage); the ledger debit of the
	// cost names this event.
	TypeSandboxUsage Type = "sandbox.usage"
)

// SandboxCreated is the payload of TypeSandboxCreated. It holds what a
// host needs to list and resume the sandbox, and no secret: environment
// variables are named, never valued, and the access token is not here.
type SandboxCreated struct {
	// SandboxID is the id clients use.
	SandboxID string `json:"sandbox_id"`
	// Template is the template name the client asked for, TemplateSource
	// the policy version it resolved to; the run record's Policy holds
	// that policy's document (empty for the default policy).
	Template       string `json:"template"`
	TemplateSource string `json:"template_source,omitempty"`
	// KeyID is the public id of the API key that created it.
	KeyID string `json:"key_id,omitempty"`
	// Metadata is the client's metadata, as given.
	Metadata map[string]string `json:"metadata,omitempty"`
	// EnvKeys are the names of the environment variables the client set.
	EnvKeys []string `json:"env_keys,omitempty"`
	// Internet says whether the client let the sandbox use the network
	// its template's policy allows.
	Internet bool `json:"internet"`
	// TimeoutMS is the lifetime the sandbox got.
	TimeoutMS int64 `json:"timeout_ms"`
	// CPUs, MemoryBytes and DiskBytes are its limits (0: none).
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	// Host names the server that made it.
	Host string `json:"host,omitempty"`
	// TokenSHA256 and TrafficSHA256 are the hex SHA-256 of the sandbox's
	// envd access token and traffic access token: verifiers, not the
	// tokens, so that any replica sharing the store can check a
	// data-plane request before it relays it to the replica holding the
	// sandbox.
	TokenSHA256   string `json:"token_sha256,omitempty"`
	TrafficSHA256 string `json:"traffic_sha256,omitempty"`
	// Sealed is the sandbox's secrets (its tokens, create's envs) and
	// lifecycle, sealed (AES-256-GCM) under the key the E2B servers of
	// one service share (e2b.seal_key_file), bound to this record and
	// sandbox: what another replica needs to take the sandbox over. It
	// is empty when the server has no such key.
	Sealed string `json:"sealed,omitempty"`
}

// SandboxOp is the payload of TypeSandboxOp. It never holds a token, an
// environment value or file contents.
type SandboxOp struct {
	// Op names the operation: sandbox.kill, process.start, process.input,
	// files.write, egress...
	Op string `json:"op"`
	// Outcome is "ok", or what went wrong: "not_found", "denied",
	// "invalid", "limited", "error", "exit:N"...
	Outcome string `json:"outcome"`
	// KeyID is the public id of the control-plane API key used, if any.
	KeyID string `json:"key_id,omitempty"`
	// Detail says more in one line (clipped): a path, a pid, a command.
	Detail string `json:"detail,omitempty"`
	// Count, when above 1, says the event stands for that many
	// operations of the same kind that were not recorded one by one.
	Count int64 `json:"count,omitempty"`
}

// SandboxUsage is the payload of TypeSandboxUsage: what a sandbox used
// from Start to End, as its host measured it (never as the sandbox
// says), and its cost by the host's prices.
type SandboxUsage struct {
	SandboxID string    `json:"sandbox_id"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	// SandboxMS is the time the sandbox was up, in milliseconds.
	SandboxMS int64 `json:"sandbox_ms"`
	// CPUMS is the CPU time of its processes (cgroup), in milliseconds.
	CPUMS int64 `json:"cpu_ms"`
	// MemoryMiBMS is its memory allocation (its limit) times SandboxMS, in
	// MiB-milliseconds.
	MemoryMiBMS int64 `json:"memory_mib_ms"`
	// CostMicroCredits is what that costs by the host's prices; the
	// ledger debit linked to this event has the same amount.
	CostMicroCredits int64 `json:"cost_micro_credits"`
	// Final marks the last usage of a boot (pause, kill, timeout).
	Final bool `json:"final,omitempty"`
}

// EventType implements Payload.
func (SandboxCreated) EventType() Type { return TypeSandboxCreated }

// EventType implements Payload.
func (SandboxOp) EventType() Type { return TypeSandboxOp }

// EventType implements Payload.
func (SandboxUsage) EventType() Type { return TypeSandboxUsage }
