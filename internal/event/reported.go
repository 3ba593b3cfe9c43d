package event

import "encoding/json"

// The events a sandbox reports about itself through its event channel
// (airlock-event, /run/airlock/events), after the host validated them.
const (
	// TypeSandboxEvent is one event a sandbox reported (payload
	// SandboxEvent).
	TypeSandboxEvent Type = "sandbox.event"
	// TypeEventsDropped counts what a sandbox sent that was not
	// recorded (payload SandboxEventsDropped).
	TypeEventsDropped Type = "sandbox.events_dropped"
)

// SourceSandbox marks what came from inside a sandbox.
const SourceSandbox = "sandbox"

// SandboxEvent is the payload of TypeSandboxEvent. Source and Sandbox are
// the host's; everything else came from inside the sandbox and is untrusted
// data: the host shows it and keeps it, and never takes it for an
// instruction or a decision's input. Which fields are set depends on Kind:
//
//   - progress: Message, Pct (0 to 100)
//   - log: Message, Level (debug, info, warn, error)
//   - metric: Name, Value, Unit
//   - artifact: Path, MediaType, Name; the host sets Artifact (the name it
//     stored the file under) or Refused (why it did not)
//   - any kind: Secrets, set by the host when it redacted what looks
//     like a secret
//   - test: Name, Status (pass, fail, skip), DurationS
//   - a custom kind the policy lists: Data
type SandboxEvent struct {
	Source    string          `json:"source"`
	Sandbox   string          `json:"sandbox"`
	Kind      string          `json:"kind"`
	Message   string          `json:"message,omitempty"`
	Level     string          `json:"level,omitempty"`
	Pct       *float64        `json:"pct,omitempty"`
	Name      string          `json:"name,omitempty"`
	Value     *float64        `json:"value,omitempty"`
	Unit      string          `json:"unit,omitempty"`
	Status    string          `json:"status,omitempty"`
	DurationS *float64        `json:"duration_s,omitempty"`
	Path      string          `json:"path,omitempty"`
	MediaType string          `json:"media_type,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Artifact  string          `json:"artifact,omitempty"`
	Refused   string          `json:"refused,omitempty"`
	// Secrets are the secret scanner's rules that found something in the
	// event's text, redacted from it (unless the policy keeps results).
	Secrets []string `json:"secrets,omitempty"`
}

// SandboxEventsDropped is the payload of TypeEventsDropped: counts
// since the sandbox was made of what it sent that was not recorded. The
// executor's counts (lines too long, too fast, queued too long,
// connections over the limit) come from inside the sandbox as well; the
// host's are its own.
type SandboxEventsDropped struct {
	Sandbox string `json:"sandbox"`
	// Executor: dropped inside the sandbox before the host saw them.
	ExecOversize int64 `json:"exec_oversize,omitempty"`
	ExecRate     int64 `json:"exec_rate,omitempty"`
	ExecQueue    int64 `json:"exec_queue,omitempty"`
	ExecConns    int64 `json:"exec_conns,omitempty"`
	// Host: refused by the host's checks, by reason.
	Malformed   int64 `json:"malformed,omitempty"`
	UnknownKind int64 `json:"unknown_kind,omitempty"`
	Oversize    int64 `json:"oversize,omitempty"`
	Rate        int64 `json:"rate,omitempty"`
	Invalid     int64 `json:"invalid,omitempty"`
	// Artifacts counts declared artifacts the host did not store.
	Artifacts int64 `json:"artifacts,omitempty"`
}

// EventType implements Payload.
func (SandboxEvent) EventType() Type { return TypeSandboxEvent }

// EventType implements Payload.
func (SandboxEventsDropped) EventType() Type { return TypeEventsDropped }
