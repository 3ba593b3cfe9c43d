package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// fakeNow is a clock the test moves.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

// askEngines are two engines on one store, as two processes are: one
// holds MCP calls, the other decides (the CLI, another replica).
func askEngines(t *testing.T, st store.Store, clock *fakeNow) (holder, decider *engine.Engine) {
	t.Helper()
	dir := t.TempDir()
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	mk := func() *engine.Engine {
		e, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: b, Poll: 10 * time.Millisecond, Now: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	return mk(), mk()
}

// TestMCPAsks holds MCP calls in records of kind mcp on SQLite and
// PostgreSQL and decides them from another engine: approved, denied,
// expired, withdrawn by the call's end, and withdrawn by the session's
// end; listed only for their tenant and while pending; never decided
// twice or by another tenant.
func TestMCPAsks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the engine's sandbox backend")
	}
	stores := map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			st, _, _ := openStack(t, t.TempDir())
			return st
		},
		"postgres": func(t *testing.T) store.Store {
			srv, err := pgtest.Start(context.Background())
			if err != nil {
				if pgtest.Required() {
					t.Fatal(err)
				}
				t.Skipf("no PostgreSQL: %v", err)
			}
			t.Cleanup(func() { _ = srv.Stop() })
			st, err := postgres.Open(context.Background(), srv.URL("postgres"), postgres.Options{Redactor: store.NoRedaction})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) { testMCPAsks(t, open(t)) })
	}
}

func testMCPAsks(t *testing.T, st store.Store) {
	ctx := ctxT(t, 2*time.Minute)
	clock := &fakeNow{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	holder, decider := askEngines(t, st, clock)
	doc, err := policy.Parse([]byte("approvals:\n  approvers: [alice]\n"))
	if err != nil {
		t.Fatal(err)
	}
	hd, err := holder.OpenMCPRecord(ctx, engine.MCPRecord{Tenant: "acme", Session: "s1", Sandbox: "sb-1", PolicyName: "guarded@v1", Policy: doc, KeyID: "key_1"})
	if err != nil {
		t.Fatalf("OpenMCPRecord = %v", err)
	}
	rec := hd.ID()
	r, err := st.GetRun(ctx, rec)
	if err != nil || r.Kind != store.KindMCP || r.Tenant != "acme" || r.Status != event.StatusRunning || r.PolicyHash != doc.Hash() {
		t.Fatalf("GetRun(%s) = %+v, %v, want a running mcp record of acme with the sandbox's policy", rec, r, err)
	}
	if back, err := policy.Parse(r.Policy); err != nil || len(back.Approvals.Approvers) != 1 {
		t.Errorf("the record's policy = %q, %v, want the sandbox's (approvers alice)", r.Policy, err)
	}

	// hold starts an ask and returns its id and a channel of its outcome.
	type outcome struct {
		d   event.ApprovalDecided
		err error
	}
	hold := func(ctx context.Context, action string) (string, <-chan outcome) {
		t.Helper()
		ids := make(chan string, 1)
		done := make(chan outcome, 1)
		go func() {
			d, err := hd.Hold(ctx, engine.MCPAsk{Action: action, Reason: "a person looks (tools.run_command.rules[0])", Timeout: time.Minute}, func(id string) { ids <- id })
			done <- outcome{d, err}
		}()
		select {
		case id := <-ids:
			return id, done
		case o := <-done:
			t.Fatalf("Hold(%s) = %+v, %v before it was held", action, o.d, o.err)
		}
		return "", nil
	}
	listed := func(tenant string) []engine.Approval {
		t.Helper()
		as, err := decider.Approvals(ctx, tenant)
		if err != nil {
			t.Fatalf("Approvals(%q) = %v", tenant, err)
		}
		return as
	}

	// Approved from the other engine.
	id, done := hold(ctx, "run_command {\"command\":\"ask 1\"}")
	if as := listed("acme"); len(as) != 1 || as[0].ID != id || as[0].RunID != rec || as[0].Sandbox != "sb-1" || as[0].Action != "run_command {\"command\":\"ask 1\"}" {
		t.Fatalf("Approvals(acme) = %+v, want the ask %s of sandbox sb-1", as, id)
	}
	if as := listed("other"); len(as) != 0 {
		t.Errorf("Approvals(other) = %+v, want none of acme's", as)
	}
	if err := decider.Decide(ctx, id, "other", "mallory", true, ""); !errors.Is(err, engine.ErrNoApproval) {
		t.Errorf("Decide by another tenant = %v, want ErrNoApproval", err)
	}
	if err := decider.Decide(ctx, id, "acme", "alice", true, "fine"); err != nil {
		t.Fatalf("Decide(approve) = %v", err)
	}
	if o := <-done; o.err != nil || o.d.Decision != "approved" || o.d.By != "alice" {
		t.Errorf("Hold = %+v, %v, want approved by alice", o.d, o.err)
	}
	if err := decider.Decide(ctx, id, "acme", "alice", false, "changed my mind"); !errors.Is(err, engine.ErrDecided) {
		t.Errorf("Decide twice = %v, want ErrDecided", err)
	}
	if as := listed(""); len(as) != 0 {
		t.Errorf("Approvals after the decision = %+v, want none", as)
	}

	// Denied.
	id, done = hold(ctx, "run_command {\"command\":\"ask 2\"}")
	if err := decider.Decide(ctx, id, "", "alice", false, "not now"); err != nil {
		t.Fatalf("Decide(deny) = %v", err)
	}
	if o := <-done; o.err != nil || o.d.Decision != "denied" || o.d.Reason != "not now" {
		t.Errorf("Hold = %+v, %v, want denied: not now", o.d, o.err)
	}

	// Expired: the holder records it once its timeout has passed.
	id, done = hold(ctx, "run_command {\"command\":\"ask 3\"}")
	clock.add(time.Minute)
	if o := <-done; o.err != nil || o.d.Decision != "expired" || o.d.By != "timeout" {
		t.Errorf("Hold past its timeout = %+v, %v, want expired", o.d, o.err)
	}
	if err := decider.Decide(ctx, id, "acme", "alice", true, ""); !errors.Is(err, engine.ErrDecided) {
		t.Errorf("Decide after the expiry = %v, want ErrDecided", err)
	}

	// Answered at the MCP client (an elicitation): only for the call it
	// asked about, and only for a pending approval.
	req, err := hd.Request(ctx, engine.MCPAsk{Action: "run_command {\"command\":\"ask 6\"}", Timeout: time.Minute})
	if err != nil {
		t.Fatalf("Request = %v", err)
	}
	yes := event.ApprovalDecided{Decision: "approved", By: "mcp-user"}
	for _, bad := range []struct{ id, tenant, action string }{
		{req.ApprovalID, "acme", "run_command {\"command\":\"rm -rf /\"}"},
		{req.ApprovalID, "other", req.Action},
		{rec + ".call-99", "acme", req.Action},
		{"run_00000000000000000000000000.call-1", "acme", req.Action},
		{"not an id", "acme", req.Action},
	} {
		if err := holder.AnswerMCPAsk(ctx, bad.id, bad.tenant, bad.action, yes); !errors.Is(err, engine.ErrNoApproval) {
			t.Errorf("AnswerMCPAsk(%s, %s, %s) = %v, want ErrNoApproval", bad.id, bad.tenant, bad.action, err)
		}
	}
	if err := holder.AnswerMCPAsk(ctx, req.ApprovalID, "acme", req.Action, yes); err != nil {
		t.Fatalf("AnswerMCPAsk = %v", err)
	}
	if d, err := holder.AwaitMCPAsk(ctx, req.ApprovalID); err != nil || d.Decision != "approved" || d.By != "mcp-user" {
		t.Errorf("AwaitMCPAsk after the answer = %+v, %v, want approved by mcp-user", d, err)
	}

	// Withdrawn: the call's context ends first.
	cctx, cancel := context.WithCancel(ctx)
	id, done = hold(cctx, "run_command {\"command\":\"ask 4\"}")
	cancel()
	if o := <-done; !errors.Is(o.err, context.Canceled) {
		t.Errorf("Hold cancelled = %+v, %v, want context.Canceled", o.d, o.err)
	}
	if err := decider.Decide(ctx, id, "acme", "alice", true, ""); !errors.Is(err, engine.ErrDecided) {
		t.Errorf("Decide of a withdrawn ask = %v, want ErrDecided", err)
	}

	// The session ends while an ask waits: withdrawn, the record completed.
	id, done = hold(ctx, "run_command {\"command\":\"ask 5\"}")
	if err := hd.Close(ctx, "the session ended"); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if o := <-done; o.err != nil || o.d.Decision != "withdrawn" {
		t.Errorf("Hold when the session ends = %+v, %v, want withdrawn", o.d, o.err)
	}
	if err := hd.Close(ctx, "again"); err != nil {
		t.Errorf("Close twice = %v, want nil", err)
	}
	if err := decider.Decide(ctx, id, "acme", "alice", true, ""); !errors.Is(err, engine.ErrDecided) {
		t.Errorf("Decide after the session's end = %v, want ErrDecided", err)
	}
	if r, err := st.GetRun(ctx, rec); err != nil || r.Status != event.StatusCompleted {
		t.Errorf("the record after Close = %s, %v, want completed", r.Status, err)
	}
	evs, err := st.Events(ctx, rec, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []event.Type
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	want := []event.Type{event.TypeSandboxCreated}
	for range 6 {
		want = append(want, event.TypeApprovalRequested, event.TypeApprovalDecided)
	}
	want = append(want, event.TypeSandboxDestroyed)
	if len(types) != len(want) {
		t.Errorf("the record's log = %v, want %v", types, want)
	}
	if _, err := store.VerifyRun(ctx, st, rec); err != nil {
		t.Errorf("VerifyRun(%s) = %v", rec, err)
	}
	// Nothing of it is an agent run's business.
	if _, err := decider.Drive(ctx, rec); !errors.Is(err, engine.ErrNotAgentRun) {
		t.Errorf("Drive(an mcp record) = %v, want ErrNotAgentRun", err)
	}
}
