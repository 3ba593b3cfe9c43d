package store

import (
	"context"
	"time"
)

// SandboxEvent is one event a sandbox outside runs (an E2B sandbox, an MCP
// session's) reported through its event channel and the host accepted:
// its number in the sandbox's log (from 1), when the host accepted it,
// and the event's JSON (an event.SandboxEvent, marked as the sandbox's:
// untrusted data).
type SandboxEvent struct {
	Tenant, Sandbox string
	Seq             uint64
	Time            time.Time
	Event           []byte
}

// MaxSandboxEvent bounds an event's JSON.
const MaxSandboxEvent = 64 << 10

// SandboxEvents keeps what sandboxes outside runs report, so that it
// outlives the process that read it (a restart of serve) and is kept and
// deleted under the data policy as a run's events are. Part of Store:
// a wrapper (serve's timed store) that lacked it would lose them.
type SandboxEvents interface {
	// AppendSandboxEvents stores es; an event of a (tenant, sandbox, seq)
	// stored already is left as it is.
	AppendSandboxEvents(ctx context.Context, es []SandboxEvent) error
	// SandboxEvents returns tenant's sandbox's events of seq above after,
	// oldest first, at most limit (PageLimit).
	SandboxEvents(ctx context.Context, tenant, sandbox string, after uint64, limit int) ([]SandboxEvent, error)
	// ExpireSandboxEvents deletes tenant's events accepted before before
	// and returns how many.
	ExpireSandboxEvents(ctx context.Context, tenant string, before time.Time) (int64, error)
}
