package e2b

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Record is one audited operation: a line of the audit log, and a
// sandbox.op event in the log of the sandbox it is about.
type Record struct {
	Time time.Time `json:"time"`
	// Tenant owns the sandbox; empty when the caller named no sandbox it
	// could be shown.
	Tenant string `json:"tenant,omitempty"`
	// KeyID is the control-plane API key's public id.
	KeyID   string `json:"key_id,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// Run is the sandbox's record (a run of kind sandbox), when the
	// record names one of the caller's sandboxes: a purge of the run
	// removes the line.
	Run string `json:"run,omitempty"`
	// Op names the operation: sandbox.create, process.start, files.write,
	// egress...
	Op string `json:"op"`
	// Outcome is "ok", or what went wrong: "not_found", "denied",
	// "invalid", "error", "exit:N"...
	Outcome string `json:"outcome"`
	// Detail says more in one line: a path, a command (clipped), a host.
	// It never holds a token, an environment value or file contents.
	Detail string `json:"detail,omitempty"`
	// Source is "sandbox" for what the sandbox itself reported (op
	// sandbox.event: its kind as the outcome, its message as the detail):
	// untrusted data, written by code in the sandbox.
	Source string `json:"source,omitempty"`
	// Port, Client, BytesIn, BytesOut and DurationMS describe a request
	// through a preview URL (op "port"): the sandbox's port, the client's
	// address, the bytes it sent to the sandbox's server and got back,
	// and how long it took (an upgraded connection's whole life).
	Port       int    `json:"port,omitempty"`
	Client     string `json:"client,omitempty"`
	BytesIn    int64  `json:"bytes_in,omitempty"`
	BytesOut   int64  `json:"bytes_out,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

// auditLog records operations: in the log of the sandbox they are about
// (journal), and as JSON lines to a writer.
type auditLog struct {
	now func() time.Time
	// journal appends a record to its sandbox's log, if it names one of
	// the caller's sandboxes, and returns it as it must be written: its
	// detail scrubbed of the sandbox's environment values.
	journal func(Record) Record

	mu sync.Mutex
	w  io.Writer // guarded by mu
}

// record records r in its sandbox's log and as a line.
func (a *auditLog) record(r Record) {
	if r.Time.IsZero() {
		r.Time = a.now().UTC()
	}
	if a.journal != nil {
		r = a.journal(r)
	}
	a.line(r)
}

// line writes r as a JSON line only (its sandbox's log has it already,
// in another form, or it has none).
func (a *auditLog) line(r Record) {
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
	const limit = 512
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
