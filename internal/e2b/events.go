package e2b

import (
	"context"
	"sync"

	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// An E2B sandbox's events: what its processes write to the event channel
// (airlock-event, /run/airlock/events) is read by the host from each boot,
// filtered by its template's policy as a run's events are, and kept in
// one log per sandbox (box.events) that lives as long as the sandbox: a
// pause stops reading the boot's channel (before it freezes or destroys
// the boot, so what ended commands wrote is in the log), a resume starts
// reading the new or thawed boot, and the log ends when the sandbox ends.
// The E2B API has no place for them; the native API serves them
// (GET /v1/sandboxes/{id}/events, through Server.Events).

// newEventLog is the event log of b, under its template's policy: its
// kinds, size and rate caps and the redaction of what the sandbox sends.
func newEventLog(b *box) *report.Log {
	d := b.template.doc
	if d == nil {
		d = defaultDocument()
	}
	return report.NewLog(d.Events, b.id, 0, d.ResultScanner())
}

// eventWatch is the reading of one boot's event channel.
type eventWatch struct {
	mu   sync.Mutex
	stop func() // guarded by mu: nil when not reading
}

// watch starts reading lv's event channel into b's log, unless it is
// read already.
func (s *Server) watch(ctx context.Context, b *box, lv *live) {
	lv.events.mu.Lock()
	defer lv.events.mu.Unlock()
	if lv.events.stop == nil && b.events != nil {
		lv.events.stop = sandbox.WatchEvents(ctx, lv.sb, b.events)
	}
}

// unwatch stops reading lv's event channel, once what it holds is in the
// log. It must come before lv is frozen or destroyed.
func (lv *live) unwatch() {
	lv.events.mu.Lock()
	defer lv.events.mu.Unlock()
	if lv.events.stop != nil {
		lv.events.stop()
		lv.events.stop = nil
	}
}

// Events returns the log of what tenant's sandbox id (running or paused)
// reported through its event channel; false when the tenant has no such
// sandbox on this server.
func (s *Server) Events(tenant, id string) (*report.Log, bool) {
	b := s.lookup(tenant, id)
	if b == nil || b.events == nil {
		return nil, false
	}
	return b.events, true
}
