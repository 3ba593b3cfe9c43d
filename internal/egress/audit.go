package egress

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Decisions a Record can carry.
const (
	// DecisionAllowed: a rule allowed the request.
	DecisionAllowed = "allowed"
	// DecisionDenied: policy, the address guard, a limit, or a failed
	// approval refused the request; Reason says which.
	DecisionDenied = "denied"
	// DecisionAsked: policy said ask and the Approver allowed the request.
	DecisionAsked = "asked"
)

// Record is one decision of the proxy: a CONNECT tunnel, or one HTTP request
// (absolute-form, inside an inspected tunnel, or origin-form served by the
// Local handler). It never holds a secret value: Credential names the
// secret, and Reason and Rule are fixed strings.
type Record struct {
	Time       time.Time     `json:"time"`
	Tenant     string        `json:"tenant"`
	Run        string        `json:"run"`
	Sandbox    string        `json:"sandbox"`
	Decision   string        `json:"decision"`         // allowed | denied | asked
	Reason     string        `json:"reason,omitempty"` // ReasonHeader value when denied; "approved" when asked
	Rule       string        `json:"rule,omitempty"`   // the policy rule that decided, or "default"
	Method     string        `json:"method"`           // "CONNECT" for a tunnel
	Host       string        `json:"host"`             // normalized host
	Port       int           `json:"port"`
	Addr       string        `json:"addr,omitempty"`   // the address dialled
	Status     int           `json:"status,omitempty"` // HTTP status sent to the sandbox (200 for an established tunnel)
	BytesIn    int64         `json:"bytes_in"`         // bytes sent to the sandbox
	BytesOut   int64         `json:"bytes_out"`        // bytes received from the sandbox
	Duration   time.Duration `json:"duration_ns"`
	Inspected  bool          `json:"inspected"`            // the proxy saw the request itself (plain HTTP or a terminated tunnel)
	Credential string        `json:"credential,omitempty"` // secret NAME(s) injected, comma-separated
	Local      bool          `json:"local,omitempty"`      // served by Config.Local (Rule "local"; Host and Port empty)
	Path       string        `json:"path,omitempty"`       // the path of a Local request, without its query
}

// AuditSink receives every Record. Record must be safe for concurrent use
// and should not block for long: it runs on the request path.
type AuditSink interface {
	Record(Record)
}

// NewJSONLSink returns an AuditSink that writes each Record to w as one JSON
// object per line. Writes are serialized, so lines never interleave. A write
// error is not reported back (the interface has no error path); the sink
// keeps trying on later records.
func NewJSONLSink(w io.Writer) AuditSink {
	return &jsonlSink{enc: json.NewEncoder(w)}
}

type jsonlSink struct {
	mu sync.Mutex
	// enc is guarded by mu.
	enc *json.Encoder
}

func (s *jsonlSink) Record(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.enc.Encode(r)
}
