package engine_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// askNetwork gives each sandbox a real egress proxy whose policy lists
// nothing and asks for everything, with ask.test pinned to a loopback
// server: the only destination a request can reach once approved.
type askNetwork struct {
	t    *testing.T
	pin  string // "ask.test:PORT" -> the server
	to   string
	asks atomic.Int32 // calls of Attachment.Ask
}

func (n *askNetwork) Attach(_ context.Context, a sandbox.Attachment) (func(), error) {
	pol := &policy.Network{Default: policy.Ask, Resolve: []policy.Pin{{Host: n.pin, To: n.to}}}
	return attachProxy(n.t, a, pol, approverFunc(func(ctx context.Context, r policy.Request) (bool, error) {
		n.asks.Add(1)
		return a.Ask(ctx, r.Host, r.Port)
	}))
}

// attachProxy gives the sandbox of a a real egress proxy under pol, on a
// unix socket of its own, recording its decisions in the run's log.
func attachProxy(t *testing.T, a sandbox.Attachment, pol *policy.Network, ask egress.Approver) (func(), error) {
	if err := pol.Validate(); err != nil {
		return nil, err
	}
	p, err := egress.New(egress.Config{
		Identity: bridge.Identity{Tenant: "t", Run: a.RunID, Sandbox: a.Spec.ID},
		Policy:   pol,
		Audit: auditFunc(func(r egress.Record) {
			a.Audit(event.EgressDecision{Decision: r.Decision, Reason: r.Reason, Rule: r.Rule, Host: r.Host, Port: r.Port, Status: r.Status})
		}),
		Approver: ask,
	})
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(t.TempDir(), "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	go func() { _ = p.Serve(ln) }()
	a.Spec.Network, a.Spec.ProxySocket = sandbox.NetworkProxy, sock
	return func() { _ = p.Close() }, nil
}

type auditFunc func(egress.Record)

func (f auditFunc) Record(r egress.Record) { f(r) }

type approverFunc func(context.Context, policy.Request) (bool, error)

func (f approverFunc) Ask(ctx context.Context, _ bridge.Identity, r policy.Request) (bool, error) {
	return f(ctx, r)
}

// TestNetworkAsk: a request to a destination the network policy does not
// list is held at the proxy while a person decides; the decision covers the
// destination for the rest of the run, so the second request does not ask
// again.
func TestNetworkAsk(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		fmt.Fprintf(w, "hello from %s\n", r.URL.Path)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	curl := func(path string) string {
		return fmt.Sprintf(`curl -sS -w ' code=%%{http_code}' http://ask.test:%s%s`, port, path)
	}
	script := fmt.Sprintf(`
turns:
  - tool_calls:
      - name: run_command
        args: {command: %q}
  - tool_calls:
      - name: run_command
        args: {command: %q}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, curl("/first"), curl("/second"))

	for _, tc := range []struct {
		name   string
		decide string // approve, deny, or "" (let the hold expire)
		want   string // in both calls' output
		served int32
	}{
		{"approve", "approve", "code=200", 2},
		{"deny", "deny", "code=403", 0},
		{"expire", "", "code=403", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := &askNetwork{t: t, pin: "ask.test:" + port, to: "127.0.0.1:" + port}
			served.Store(0)
			h := newHarness(t, func(o *engine.Options) {
				o.Network = nw
				o.NetworkHold = 2 * time.Second
				if tc.decide != "" {
					o.NetworkHold = time.Minute
				}
			})
			r := h.start("fetch", script, engine.Config{})
			done := drive(t, ctxT(t, 2*time.Minute), h, r.ID)
			if tc.decide != "" {
				a := waitApproval(t, h)
				if a.RunID != r.ID || a.Destination != "ask.test:"+port || a.Sandbox == "" || !strings.Contains(a.Action, "connect to ask.test") {
					t.Errorf("approval = %+v", a)
				}
				if err := h.eng.Decide(context.Background(), a.ID, "", "alice", tc.decide == "approve", "not this host"); err != nil {
					t.Fatal(err)
				}
			}
			o := <-done
			if o.Status != event.StatusCompleted {
				t.Fatalf("status %s (%s)", o.Status, o.Reason)
			}
			for _, f := range h.finished(r.ID) {
				if f.Tool == "run_command" && !strings.Contains(f.Output, tc.want) {
					t.Errorf("%s: output %q, want %q", f.CallID, f.Output, tc.want)
				}
			}
			if got := served.Load(); got != tc.served {
				t.Errorf("the server answered %d requests, want %d", got, tc.served)
			}
			evs := h.verifyLog(r.ID)
			if count(evs, event.TypeApprovalRequested) != 1 || count(evs, event.TypeApprovalDecided) != 1 {
				t.Errorf("one ask for the run, one decision; log: %v", types(evs))
			}
			if nw.asks.Load() != 2 {
				t.Errorf("the proxy asked %d times, want 2 (one per request)", nw.asks.Load())
			}
			if as, _ := h.eng.Approvals(context.Background(), ""); len(as) != 0 {
				t.Errorf("approvals left pending: %+v", as)
			}
		})
	}
}

// logNetwork records a host channel's events through Attachment.Log, as the
// LLM gateway does: one call, then its budget spent.
type logNetwork struct{ seq int64 }

func (n *logNetwork) Attach(ctx context.Context, a sandbox.Attachment) (func(), error) {
	seq, err := a.Log(ctx, event.LLMCall{
		Sandbox: a.Sandbox, API: "openai.chat", Model: "m", Upstream: "openai", Status: 429,
		Outcome: event.LLMOutcomeBudgetExhausted, Budget: "llm_tokens",
	},
		event.BudgetExhausted{Budget: "llm_tokens", Limit: 10, Used: 12})
	n.seq = seq
	return func() {}, err
}

// TestHostChannelBudget: a budget a host channel finds spent ends the run
// at its next boundary, named in the run's end; Log returns the seq of the
// first event it recorded.
func TestHostChannelBudget(t *testing.T) {
	nw := &logNetwork{}
	h := newHarness(t, func(o *engine.Options) { o.Network = nw })
	o := h.run("spend", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo one\"}\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo two\"}\n", engine.Config{})
	if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "llm_tokens") {
		t.Fatalf("status %s (%s), want failed for llm_tokens", o.Status, o.Reason)
	}
	evs := h.verifyLog(o.RunID)
	var llmSeq int64
	for _, e := range evs {
		if e.Type == event.TypeLLMCall {
			llmSeq = e.Seq
		}
	}
	if llmSeq == 0 || llmSeq != nw.seq {
		t.Errorf("Log returned seq %d, the llm.call is at %d", nw.seq, llmSeq)
	}
	if n := count(evs, event.TypeToolFinished); n != 1 {
		t.Errorf("%d calls ran, want 1 (the run ends at the step boundary)", n)
	}
}
