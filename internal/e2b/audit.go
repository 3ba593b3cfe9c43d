package e2b

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Record is one audited operation: a line of the audit log.
type Record struct {
	Time time.Time `json:"time"`
	// Tenant owns the sandbox; empty when the caller named no sandbox it
	// could be shown.
	Tenant string `json:"tenant,omitempty"`
	// KeyID is the control-plane API key's public id.
	KeyID   string `json:"key_id,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// Op names the operation: sandbox.create, process.start, files.write,
	// egress...
	Op string `json:"op"`
	// Outcome is "ok", or what went wrong: "not_found", "denied",
	// "invalid", "error", "exit:N"...
	Outcome string `json:"outcome"`
	// Detail says more in one line: a path, a command (clipped), a host.
	// It never holds a token, an environment value or file contents.
	Detail string `json:"detail,omitempty"`
}

// auditLog appends records as JSON lines to a writer.
type auditLog struct {
	now func() time.Time

	mu sync.Mutex
	w  io.Writer // guarded by mu
}

func (a *auditLog) record(r Record) {
	if a.w == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = a.now().UTC()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _ = a.w.Write(b) // best effort: a failing audit sink must not stop a sandbox
}

// clipDetail bounds a record's detail.
func clipDetail(s string) string {
	const max = 512
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
