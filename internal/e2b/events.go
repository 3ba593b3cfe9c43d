package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
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
// Each event it keeps is a line of the audit log (op sandbox.event,
// source sandbox) and, on a store that keeps them (store.SandboxEvents),
// a row there, under the tenant's retention; with restore (a sandbox a
// restarted server holds again), the log starts with the rows stored.
func (s *Server) newEventLog(ctx context.Context, b *box, restore bool) *report.Log {
	d := b.template.doc
	if d == nil {
		d = defaultDocument()
	}
	l := report.NewLog(d.Events, b.id, 0, d.ResultScanner())
	var se store.SandboxEvents = s.o.Store
	if restore && se != nil {
		es, err := StoredEvents(ctx, se, b.tenant, b.id, 0)
		if err != nil {
			s.log.Warn("e2b: read a sandbox's stored events", "sandbox_id", b.id, "err", err)
		}
		l.Follow(es)
	}
	l.Persist(func(e report.Entry) {
		s.audit.line(Record{
			Time: e.Time, Tenant: b.tenant, Sandbox: b.id, Run: b.rec.runID, Op: "sandbox.event", Outcome: e.Event.Kind,
			Detail: clipDetail(e.Event.Message + e.Event.Name + e.Event.Path), Source: "sandbox",
		})
		if se == nil {
			return
		}
		body, err := json.Marshal(e.Event)
		if err == nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			err = se.AppendSandboxEvents(sctx, []store.SandboxEvent{{Tenant: b.tenant, Sandbox: b.id, Seq: e.Seq, Time: e.Time, Event: body}})
			cancel()
		}
		if err != nil {
			s.log.Warn("e2b: store a sandbox's event", "sandbox_id", b.id, "seq", e.Seq, "err", err)
		}
	})
	return l
}

// StoredEvents reads the events se holds of tenant's sandbox numbered
// above after, oldest first.
func StoredEvents(ctx context.Context, se store.SandboxEvents, tenant, sandbox string, after uint64) ([]report.Entry, error) {
	var out []report.Entry
	for {
		page, err := se.SandboxEvents(ctx, tenant, sandbox, after, 0)
		if err != nil {
			return out, err
		}
		for _, r := range page {
			e := report.Entry{Seq: r.Seq, Time: r.Time}
			if err := json.Unmarshal(r.Event, &e.Event); err != nil {
				return out, fmt.Errorf("event %d: %w", r.Seq, err)
			}
			out = append(out, e)
			after = r.Seq
		}
		if len(page) < store.PageLimit(0) {
			return out, nil
		}
	}
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

// HeldElsewhere reports whether tenant's sandbox id is live on another
// replica of the service (its record live in the shared store, this
// server not holding it): its events are those that replica stores as
// they come.
func (s *Server) HeldElsewhere(ctx context.Context, tenant, id string) bool {
	if s.lookup(tenant, id) != nil {
		return false
	}
	r, ok := s.recordOf(ctx, id)
	if !ok || r.Tenant != tenant {
		return false
	}
	// The index may be a few seconds old (a sandbox this server just
	// ended is still in it): the record as it is now decides.
	r, err := s.o.Store.GetRun(ctx, r.ID)
	return err == nil && !r.Status.Final()
}
