package engine_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/tools"
)

// allowNetwork gives each sandbox a real egress proxy that lets it reach
// egress.test, pinned to a loopback server.
type allowNetwork struct {
	t        *testing.T
	hostPort string // "egress.test:PORT"
	to       string
	port     int
}

func (n *allowNetwork) Attach(_ context.Context, a sandbox.Attachment) (func(), error) {
	pol := &policy.Network{
		Default: policy.Deny, Resolve: []policy.Pin{{Host: n.hostPort, To: n.to}},
		Allow: []policy.Rule{{Host: "egress.test", Ports: []int{n.port}}},
	}
	return attachProxy(n.t, a, pol, nil)
}

// TestHostChannelsDuringTheLoop: a sandbox's background process keeps its
// egress proxy recording decisions (from the proxy's goroutines) while the
// loop goes on: through a model turn, a wait for a person's approval and
// the next calls. Every one is recorded into one whole log, and the run
// ends as it would without them. Under -race, a fold of those decisions
// that raced the loop's reads of the run's state fails it.
func TestHostChannelsDuringTheLoop(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var port int
	fmt.Sscan(portStr, &port)
	nw := &allowNetwork{t: t, hostPort: "egress.test:" + portStr, to: "127.0.0.1:" + portStr, port: port}
	h := newHarness(t, func(o *engine.Options) { o.Network = nw; o.Policy = askPushes })
	// The background loop outlives its command: it runs until the
	// sandbox is destroyed at the run's end.
	background := fmt.Sprintf(`(while :; do curl -s -o /dev/null http://egress.test:%s/; done) >/dev/null 2>&1 & curl -sS http://egress.test:%s/`, portStr, portStr)
	script := fmt.Sprintf(`
turns:
  - tool_calls:
      - name: run_command
        args: {command: %q}
  - tool_calls:
      - name: run_command
        args: {command: "git push origin main || echo pushed"}
  - tool_calls:
      - name: write_file
        args: {path: a.txt, content: "a"}
      - name: list_dir
        args: {path: "."}
  - tool_calls:
      - name: run_command
        args: {command: "cat a.txt"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, background)
	r := h.start("traffic", script, engine.Config{})
	done := drive(t, ctxT(t, 2*time.Minute), h, r.ID)
	a := waitApproval(t, h)
	if err := h.eng.Decide(context.Background(), a.ID, "", "alice", true, ""); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s)", o.Status, o.Reason)
	}
	evs := h.verifyLog(r.ID)
	if n := count(evs, event.TypeEgressDecision); n == 0 || served.Load() == 0 {
		t.Errorf("%d egress decisions recorded, %d requests served; want some of each", n, served.Load())
	}
	for _, f := range h.finished(r.ID) {
		if f.IsError {
			t.Errorf("call %s (%s) failed: %s", f.CallID, f.Tool, f.Output)
		}
	}
}

// capturedNetwork keeps the attachment of the first sandbox, as a proxy
// and a gateway would, and reports nothing by itself.
type capturedNetwork struct {
	mu sync.Mutex
	a  *sandbox.Attachment
}

func (n *capturedNetwork) Attach(_ context.Context, a sandbox.Attachment) (func(), error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.a == nil {
		n.a = &a
	}
	return func() {}, nil
}

// TestHostChannelsFenced: the host channels of a drive (the egress
// proxy's audit, the gateway's log) append under the drive's lease, as
// the loop does, whatever context they call with: once another process
// has taken the run's lease, a late call of either writes nothing.
func TestHostChannelsFenced(t *testing.T) {
	nw := &capturedNetwork{}
	h := newHarness(t, func(o *engine.Options) { o.Network = nw })
	r := h.start("fenced", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 600\"}\n", engine.Config{})
	done := drive(t, ctxT(t, time.Minute), h, r.ID)
	waitFor(t, h, r.ID, event.TypeToolStarted)
	if err := h.eng.Pause(context.Background(), r.ID, "for the test"); err != nil {
		t.Fatal(err)
	}
	if o := <-done; o.Status != event.StatusPaused {
		t.Fatalf("status %s, want paused", o.Status)
	}
	// Another process takes the run over.
	if _, err := h.store.AcquireLease(context.Background(), r.ID, "thief:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	before := len(h.verifyLog(r.ID))
	nw.mu.Lock()
	a := nw.a
	nw.mu.Unlock()
	if a == nil {
		t.Fatal("the sandbox was never attached")
	}
	a.Audit(event.EgressDecision{Decision: "allowed", Host: "late.test", Port: 443, BytesIn: 10})
	if _, err := a.Log(context.Background(), event.LLMCall{Sandbox: a.Sandbox, API: "openai.chat", Model: "m", Upstream: "openai", Status: 200}); err == nil {
		t.Error("a late gateway log was recorded after another process took the run over")
	}
	if evs := h.verifyLog(r.ID); len(evs) != before {
		t.Errorf("the log grew from %d to %d events after the takeover: %v", before, len(evs), types(evs[before:]))
	}
}

// refusedAudit reports, while the sandbox is attached, one egress decision
// that the log cannot take (its payload is over event.MaxPayloadSize).
type refusedAudit struct{}

func (refusedAudit) Attach(_ context.Context, a sandbox.Attachment) (func(), error) {
	a.Audit(event.EgressDecision{Decision: "denied", Host: "big.test", Port: 443, Reason: strings.Repeat("x", event.MaxPayloadSize)})
	return func() {}, nil
}

// TestUnrecordedEgressStopsTheDrive: an egress decision that cannot be
// recorded is not dropped: the drive stops with the reason, leaving the
// run resumable, rather than going on as if the decision were on record.
func TestUnrecordedEgressStopsTheDrive(t *testing.T) {
	h := newHarness(t, func(o *engine.Options) { o.Network = refusedAudit{} })
	r := h.start("refused", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo hi\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n", engine.Config{})
	o, err := h.eng.Drive(ctxT(t, time.Minute), r.ID)
	if err == nil || !strings.Contains(err.Error(), "record an egress decision") {
		t.Fatalf("Drive = %+v, %v; want the unrecorded decision's error", o, err)
	}
	got, gerr := h.store.GetRun(context.Background(), r.ID)
	if gerr != nil {
		t.Fatal(gerr)
	}
	if got.Status != event.StatusRunning {
		t.Errorf("status %s, want running (resumable)", got.Status)
	}
	if evs := h.verifyLog(r.ID); count(evs, event.TypeToolFinished) != 0 {
		t.Errorf("the call ran on without its sandbox's egress on record: %v", types(evs))
	}
}

// TestNewRefusesBadTools: the host tools an engine gives every run are
// checked when the engine is made (a name taken twice, one of the
// built-in tools' names), not at each run's start.
func TestNewRefusesBadTools(t *testing.T) {
	st, bl, b := openStack(t, t.TempDir())
	var calls atomic.Int32
	for _, tc := range []struct {
		name  string
		tools []tools.Tool
	}{
		{"twice", []tools.Tool{notifyTool{&calls}, notifyTool{&calls}}},
		{"a built-in name", []tools.Tool{tools.Finish()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: b, Tools: tc.tools}); err == nil || !strings.Contains(err.Error(), "registered twice") {
				t.Errorf("New = %v, want the tools refused", err)
			}
		})
	}
	if _, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: b, Tools: []tools.Tool{notifyTool{&calls}}}); err != nil {
		t.Errorf("New with one host tool = %v", err)
	}
}
