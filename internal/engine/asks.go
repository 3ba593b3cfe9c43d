package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// An MCP session's calls that a sandbox's policy answers with ask wait as
// approvals in a record of kind store.KindMCP, one per sandbox that asked:
// its policy is the sandbox's (so approvals.approvers applies to who
// decides), its log starts with sandbox.created and holds each ask
// (approval.requested, id "RECORD.call-N") and its decision
// (approval.decided: approved or denied by a person, expired, or
// withdrawn when the call ended first), and it is completed with
// sandbox.destroyed when the sandbox or its session ends. Approvals and
// Decide list and decide these asks beside the runs' own, from any
// process on the store; the process holding the call (MCPHold) reads
// the decision from the record's log. The holder keeps the record's lease
// (renewed every third of Options.LeaseTTL); once it lapses, any engine
// listing approvals closes the record as failed (sandbox.lost) and
// withdraws its asks, so a crashed session's asks do not wait for a
// decision no one can act on.

// MCPRecord is what an MCP record is opened for.
type MCPRecord struct {
	Tenant  string
	Session string
	// Sandbox is the sandbox's id, PolicyName its policy as the session
	// knows it ("default", "NAME@vN"); Policy decides who may decide.
	Sandbox    string
	PolicyName string
	Policy     *policy.Document
	// KeyID is the API key of the call that opened the record.
	KeyID string
}

// OpenMCPRecord creates the running record of kind store.KindMCP in which
// the asks of m's sandbox wait, and takes its lease for this engine
// (Options.Owner, Options.LeaseTTL): the returned MCPHold renews it until
// Close. A record whose lease has expired (its process died, or stalled
// past it) is closed by any engine on the store that lists approvals
// (Approvals), its pending asks withdrawn.
func (e *Engine) OpenMCPRecord(ctx context.Context, m MCPRecord) (*MCPHold, error) {
	doc := m.Policy
	if doc == nil {
		doc = policy.Default()
	}
	r := store.Run{
		ID: event.NewRunID(e.o.Now()), Tenant: m.Tenant, Kind: store.KindMCP, Status: event.StatusRunning,
		Task:   fmt.Sprintf("MCP session %s, sandbox %s (policy %s)", m.Session, m.Sandbox, m.PolicyName),
		Policy: doc.Canonical(), PolicyHash: doc.Hash(),
	}
	first, err := drafts(event.SandboxCreated{SandboxID: m.Sandbox, Template: m.PolicyName, KeyID: m.KeyID})
	if err != nil {
		return nil, err
	}
	_, stored, err := e.o.Store.CreateRunWith(ctx, r, first)
	if err != nil {
		return nil, fmt.Errorf("engine: open the mcp record of sandbox %s: %w", m.Sandbox, err)
	}
	e.emit(stored)
	l, err := e.o.Store.AcquireLease(ctx, r.ID, e.o.Owner, e.o.LeaseTTL)
	if err != nil {
		// Nothing holds it: close it now rather than leave it to a reaper.
		_ = e.closeMCP(context.WithoutCancel(ctx), r.ID, event.StatusFailed, "airlock", "its lease could not be taken")
		return nil, fmt.Errorf("engine: lease the mcp record of sandbox %s: %w", m.Sandbox, err)
	}
	h := &MCPHold{e: e, id: r.ID, lease: l, stop: make(chan struct{}), done: make(chan struct{})}
	go h.renew(context.WithoutCancel(ctx))
	return h, nil
}

// MCPAsk is a call of an MCP session that waits for a person.
type MCPAsk struct {
	// Action is the call as the person reads it ("run_command {...}"),
	// Reason the policy's reason and rule.
	Action, Reason string
	// Timeout is how long it waits (the policy's approvals.timeout; the
	// engine's default when zero).
	Timeout time.Duration
}

// MCPHold is an open MCP record this engine holds the lease of: its
// asks are appended under the lease's fence, so that once another engine
// has taken the record over (the lease expired) nothing more is written
// into it from here.
type MCPHold struct {
	e     *Engine
	id    string
	lease store.Lease
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when renew returns
	once  sync.Once
}

// ID is the record's id.
func (h *MCPHold) ID() string { return h.id }

// renew renews the lease every third of its time to live, until Close or
// until the lease is lost (taken over, or the record closed).
func (h *MCPHold) renew(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.e.o.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, h.e.o.LeaseTTL)
		_, err := h.e.o.Store.RenewLease(rctx, h.id, h.lease.Owner, h.lease.Token, h.e.o.LeaseTTL)
		cancel()
		if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrFinal) {
			return
		}
	}
}

// fenced is ctx carrying the hold's fencing token.
func (h *MCPHold) fenced(ctx context.Context) context.Context {
	return store.WithFence(ctx, h.lease.Token)
}

// Hold appends q as a pending approval, calls held with its id once it
// is stored, and waits for its decision (AwaitMCPAsk).
func (h *MCPHold) Hold(ctx context.Context, q MCPAsk, held func(approvalID string)) (event.ApprovalDecided, error) {
	req, err := h.Request(ctx, q)
	if err != nil {
		return event.ApprovalDecided{}, err
	}
	if held != nil {
		held(req.ApprovalID)
	}
	return h.e.AwaitMCPAsk(ctx, req.ApprovalID)
}

// Request appends q to the record as a pending approval and returns it
// as stored. A record taken over by another engine (its lease lost) or
// closed gives an error wrapping ErrFinal or store.ErrLeaseLost: the
// caller opens a new record.
func (h *MCPHold) Request(ctx context.Context, q MCPAsk) (event.ApprovalRequested, error) {
	e := h.e
	timeout := q.Timeout
	if timeout <= 0 {
		timeout = e.o.ApprovalTimeout
	}
	var req event.ApprovalRequested
	err := e.appendMCP(h.fenced(ctx), h.id, func(r store.Run, asks *mcpAsks) ([]event.Payload, error) {
		if r.Status.Final() {
			return nil, fmt.Errorf("%w: mcp record %s is %s", ErrFinal, r.ID, r.Status)
		}
		call := "call-" + strconv.Itoa(len(asks.order)+1)
		req = event.ApprovalRequested{
			ApprovalID: approvalID(r.ID, call), CallID: call,
			Action: q.Action, Reason: q.Reason, Expires: e.o.Now().Add(timeout).UTC(),
		}
		return []event.Payload{req}, nil
	})
	return req, err
}

// Close completes the record (its sandbox or session ended): every ask
// still pending is withdrawn, sandbox.destroyed with reason ends the log,
// and the lease is released. A record already closed (or taken over) is
// left as it is. Close may be called more than once.
func (h *MCPHold) Close(ctx context.Context, reason string) error {
	err := h.e.closeMCP(h.fenced(ctx), h.id, event.StatusCompleted, "mcp-client", reason)
	if errors.Is(err, ErrFinal) || errors.Is(err, store.ErrLeaseLost) {
		err = nil
	}
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		_ = h.e.o.Store.ReleaseLease(context.WithoutCancel(ctx), h.id, h.lease.Owner, h.lease.Token)
	})
	return err
}

// AwaitMCPAsk waits for the decision on pending MCP approval approvalID:
// a person's (Decide, from this process or another on the store), or
// "expired" once its expiry has passed (appended here; the caller applies
// on_timeout). When ctx ends first, the ask is recorded as withdrawn and
// ctx's cause returned.
func (e *Engine) AwaitMCPAsk(ctx context.Context, approvalID string) (event.ApprovalDecided, error) {
	id, _, ok := splitApprovalID(approvalID)
	if !ok {
		return event.ApprovalDecided{}, fmt.Errorf("%w: %q", ErrNoApproval, approvalID)
	}
	withdraw := func() (event.ApprovalDecided, error) {
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		w := event.ApprovalDecided{ApprovalID: approvalID, Decision: "withdrawn", By: "mcp-client", Reason: "the call ended before a decision"}
		_ = e.decideMCP(stop, approvalID, "", "", w, true) // decided meanwhile: that decision stands, and the call is gone anyway
		return event.ApprovalDecided{}, context.Cause(ctx)
	}
	for {
		if ctx.Err() != nil {
			return withdraw()
		}
		asks, err := e.loadMCP(ctx, id)
		if err != nil && ctx.Err() != nil {
			return withdraw()
		}
		if err != nil {
			return event.ApprovalDecided{}, err
		}
		a := asks.byID[approvalID]
		if a == nil {
			return event.ApprovalDecided{}, fmt.Errorf("%w: %q", ErrNoApproval, approvalID)
		}
		if a.decided != nil {
			return *a.decided, nil
		}
		if !e.o.Now().Before(a.req.Expires) {
			expired := event.ApprovalDecided{ApprovalID: approvalID, Decision: "expired", By: "timeout", Reason: "no decision by " + a.req.Expires.UTC().Format(time.RFC3339)}
			err := e.decideMCP(ctx, approvalID, "", "", expired, true)
			if err != nil && !errors.Is(err, ErrDecided) {
				return event.ApprovalDecided{}, err
			}
			continue // decided by a person just before, or expired now: read which
		}
		select {
		case <-ctx.Done():
			return withdraw()
		case <-time.After(e.o.Poll):
		}
	}
}

// AnswerMCPAsk records d, the decision of the person at the MCP client
// (an elicitation's answer), on pending MCP approval approvalID of tenant,
// if it asks about action: an answer cannot be carried over to another
// call.
func (e *Engine) AnswerMCPAsk(ctx context.Context, approvalID, tenant, action string, d event.ApprovalDecided) error {
	d.ApprovalID = approvalID
	return e.decideMCP(ctx, approvalID, tenant, action, d, false)
}

// closeMCP moves MCP record id from running to status to: every ask
// still pending is withdrawn by by, and the log ends with
// sandbox.destroyed (completed: the sandbox or its session ended) or
// sandbox.lost (failed: the process holding it is gone), with reason. A
// record already final gives ErrFinal.
func (e *Engine) closeMCP(ctx context.Context, id string, to event.Status, by, reason string) error {
	return e.appendMCPStatus(ctx, id, to, func(r store.Run, asks *mcpAsks) ([]event.Payload, error) {
		var ps []event.Payload
		for _, a := range asks.open() {
			ps = append(ps, event.ApprovalDecided{ApprovalID: a.req.ApprovalID, Decision: "withdrawn", By: by, Reason: reason})
		}
		sb := ""
		if asks.created != nil {
			sb = asks.created.SandboxID
		}
		if to == event.StatusCompleted {
			return append(ps, event.SandboxDestroyed{Sandbox: sb, SandboxID: sb, Reason: reason}), nil
		}
		return append(ps, event.SandboxLost{Sandbox: sb, SandboxID: sb, Reason: reason}), nil
	})
}

// reapMCP closes running MCP record r if its lease has expired: the
// process that held it died, or stalled past its lease (its later writes
// are fenced off). It reports whether the record is closed now; one whose
// holder renewed meanwhile is left as it is.
func (e *Engine) reapMCP(ctx context.Context, r store.Run) (bool, error) {
	l, err := e.o.Store.AcquireLease(ctx, r.ID, e.o.Owner, e.o.LeaseTTL)
	switch {
	case errors.Is(err, store.ErrLeased):
		return false, nil
	case errors.Is(err, store.ErrFinal):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("engine: take over mcp record %s: %w", r.ID, err)
	}
	defer func() { _ = e.o.Store.ReleaseLease(context.WithoutCancel(ctx), r.ID, l.Owner, l.Token) }()
	err = e.closeMCP(store.WithFence(ctx, l.Token), r.ID, event.StatusFailed, "airlock", mcpGone)
	if err != nil && !errors.Is(err, ErrFinal) {
		return false, err
	}
	return true, nil
}

// mcpGone is why a reaped record's asks are withdrawn.
const mcpGone = "the MCP session holding it is gone (its lease expired: the process died or stalled)"

// mcpLeaseExpired reports whether r's lease ran out by now: its holder
// has not renewed it. A record never leased counts from its creation.
func (e *Engine) mcpLeaseExpired(r store.Run) bool {
	if r.LeaseOwner == "" {
		return r.Created.Add(e.o.LeaseTTL).Before(e.o.Now())
	}
	return r.LeaseExpires.Before(e.o.Now())
}

// mcpAsk is one ask of an MCP record.
type mcpAsk struct {
	req       event.ApprovalRequested
	requested time.Time
	decided   *event.ApprovalDecided
}

// mcpAsks is the fold of an MCP record's log: its asks and their
// decisions.
type mcpAsks struct {
	created *event.SandboxCreated
	order   []*mcpAsk
	byID    map[string]*mcpAsk
}

// open returns the undecided asks, oldest first.
func (m *mcpAsks) open() []*mcpAsk {
	var out []*mcpAsk
	for _, a := range m.order {
		if a.decided == nil {
			out = append(out, a)
		}
	}
	return out
}

func foldMCP(evs []event.Event) (*mcpAsks, error) {
	m := &mcpAsks{byID: map[string]*mcpAsk{}}
	for _, ev := range evs {
		switch ev.Type {
		case event.TypeSandboxCreated, event.TypeApprovalRequested, event.TypeApprovalDecided:
		default:
			continue
		}
		p, err := ev.Unpack()
		if err != nil {
			return nil, fmt.Errorf("engine: mcp record %s seq %d: %w", ev.RunID, ev.Seq, err)
		}
		switch p := p.(type) {
		case *event.SandboxCreated:
			m.created = p
		case *event.ApprovalRequested:
			a := &mcpAsk{req: *p, requested: ev.Time}
			m.order = append(m.order, a)
			m.byID[p.ApprovalID] = a
		case *event.ApprovalDecided:
			if a := m.byID[p.ApprovalID]; a != nil && a.decided == nil {
				a.decided = p
			}
		}
	}
	return m, nil
}

// mcpRecord returns record id, which must be of kind store.KindMCP.
func (e *Engine) mcpRecord(ctx context.Context, id string) (store.Run, error) {
	r, err := e.o.Store.GetRun(ctx, id)
	if err != nil {
		return r, err
	}
	if r.Kind != store.KindMCP {
		return r, fmt.Errorf("engine: %s is not an mcp record: %w", id, store.ErrNotFound)
	}
	return r, nil
}

func (e *Engine) loadMCP(ctx context.Context, id string) (*mcpAsks, error) {
	evs, err := e.events(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	return foldMCP(evs)
}

// appendMCP appends what build returns to MCP record id, built on the
// record's latest state (again after a concurrent append).
func (e *Engine) appendMCP(ctx context.Context, id string, build func(store.Run, *mcpAsks) ([]event.Payload, error)) error {
	return e.appendMCPStatus(ctx, id, "", build)
}

// appendMCPStatus is appendMCP that also moves the record from running to
// status to, when not empty; a record already final gives ErrFinal.
func (e *Engine) appendMCPStatus(ctx context.Context, id string, to event.Status, build func(store.Run, *mcpAsks) ([]event.Payload, error)) error {
	return e.appendRetry(ctx, "mcp record", id, e.mcpRecord, func(r store.Run) (event.Status, []event.Payload, error) {
		if to != "" && r.Status.Final() {
			return "", nil, fmt.Errorf("%w: mcp record %s is %s", ErrFinal, id, r.Status)
		}
		asks, err := e.loadMCP(ctx, id)
		if err != nil {
			return "", nil, err
		}
		ps, err := build(r, asks)
		return to, ps, err
	})
}

// decideMCP appends decision d to the MCP record its approval id names,
// if the ask is pending: tenant, when not empty, must own the record, and
// action, when not empty, must be the ask's. internal marks the holder's
// own decisions (expired, withdrawn), which may be made past the ask's
// expiry.
func (e *Engine) decideMCP(ctx context.Context, id, tenant, action string, d event.ApprovalDecided, internal bool) error {
	recID, _, ok := splitApprovalID(id)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNoApproval, id)
	}
	if r, err := e.mcpRecord(ctx, recID); err == nil && !internal && r.Status == event.StatusRunning && e.mcpLeaseExpired(r) {
		// No one would act on a decision: close it first, and the
		// decision below finds it ended.
		if _, err := e.reapMCP(ctx, r); err != nil {
			return err
		}
	}
	err := e.appendMCP(ctx, recID, func(r store.Run, asks *mcpAsks) ([]event.Payload, error) {
		if tenant != "" && r.Tenant != tenant {
			return nil, fmt.Errorf("%w: %q", ErrNoApproval, id) // another tenant's record does not exist for this one
		}
		a := asks.byID[id]
		switch {
		case a == nil, action != "" && a.req.Action != action:
			return nil, fmt.Errorf("%w: %q", ErrNoApproval, id)
		case a.decided != nil:
			return nil, fmt.Errorf("%w: %s %s by %s", ErrDecided, id, a.decided.Decision, a.decided.By)
		case r.Status.Final():
			return nil, fmt.Errorf("%w: the mcp session of %s has ended", ErrFinal, id)
		case !internal && !e.o.Now().Before(a.req.Expires):
			// Its holder appends the expiry; a holder gone with its
			// process leaves it pending, and no decision can reach it.
			return nil, fmt.Errorf("%w: %s expired at %s", ErrDecided, id, a.req.Expires.UTC().Format(time.RFC3339))
		}
		return []event.Payload{d}, nil
	})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) {
		return fmt.Errorf("%w: %q", ErrNoApproval, id)
	}
	return err
}

// mcpApprovals lists the pending asks of tenant's open MCP records (every
// tenant's when empty); an ask past its expiry is left out (its holder
// records the expiry, or is gone).
func (e *Engine) mcpApprovals(ctx context.Context, tenant string) ([]Approval, error) {
	var out []Approval
	now := e.o.Now()
	f := store.RunFilter{Tenant: tenant, Kind: store.KindMCP, Statuses: []event.Status{event.StatusRunning}}
	for {
		recs, err := e.o.Store.ListRuns(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if e.mcpLeaseExpired(r) {
				closed, err := e.reapMCP(ctx, r)
				if err != nil {
					return nil, err
				}
				if closed {
					continue
				}
			}
			asks, err := e.loadMCP(ctx, r.ID)
			if err != nil {
				return nil, err
			}
			sb := ""
			if asks.created != nil {
				sb = asks.created.SandboxID
			}
			for _, a := range asks.open() {
				if !now.Before(a.req.Expires) {
					continue
				}
				out = append(out, Approval{
					ID: a.req.ApprovalID, RunID: r.ID, Tenant: r.Tenant, Task: r.Task, CallID: a.req.CallID,
					Sandbox: sb, Action: a.req.Action, Reason: a.req.Reason, Requested: a.requested.UTC(), Expires: a.req.Expires.UTC(),
				})
			}
		}
		if len(recs) < store.PageLimit(f.Limit) {
			return out, nil
		}
		f.After = recs[len(recs)-1].ID
	}
}
