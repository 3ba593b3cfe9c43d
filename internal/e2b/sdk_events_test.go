package e2b_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

// TestSDKEvents: what an E2B sandbox's commands report through
// airlock-event, run by the official SDK, is kept in one log across a
// pause that keeps memory and one that does not, marked as the sandbox's
// and filtered by its policy (an unknown kind refused and counted); the
// log is the tenant's alone and ends with the sandbox.
func TestSDKEvents(t *testing.T) {
	needRoot(t)
	node := needNode(t)
	dir := installSDKs(t)
	h := newHarness(t, harnessOptions{})
	script, err := filepath.Abs("testdata/events.js")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ID    string `json:"id"`
		Exits []int  `json:"exits"`
	}
	h.runNode(t, node, 2*time.Minute, "alpha", &got, script, filepath.Join(dir, "node_modules", "e2b"))
	if len(got.Exits) != 3 || got.Exits[0] != 0 || got.Exits[1] != 0 || got.Exits[2] != 0 {
		t.Fatalf("commands' exits = %v, want three 0", got.Exits)
	}
	if _, ok := h.srv.Events("beta", got.ID); ok {
		t.Error("tenant beta reads alpha's sandbox's events")
	}
	log, ok := h.srv.Events("alpha", got.ID)
	if !ok {
		t.Fatalf("no event log for sandbox %s", got.ID)
	}
	// The last command's line is read from the sandbox as it comes.
	waitFor(t, "the third event", func() bool { return len(log.After(0, 0).Events) >= 3 })
	snap := log.After(0, 0)
	type want struct {
		seq uint64
		pct float64
		msg string
	}
	wants := []want{{1, 40, "x"}, {2, 60, "y"}, {3, 80, "z"}}
	if len(snap.Events) != len(wants) {
		t.Fatalf("log = %+v, want %d progress events", snap.Events, len(wants))
	}
	for i, w := range wants {
		e := snap.Events[i]
		if e.Seq != w.seq || e.Event.Kind != "progress" || e.Event.Source != "sandbox" || e.Event.Sandbox != got.ID ||
			e.Event.Pct == nil || *e.Event.Pct != w.pct || e.Event.Message != w.msg {
			t.Errorf("event %d = %+v, want seq %d progress %v%% %q from sandbox %s", i, e, w.seq, w.pct, w.msg, got.ID)
		}
	}
	if snap.Dropped.UnknownKind != 1 || snap.Ended {
		t.Errorf("dropped %+v, ended %v; want the unknown kind counted, the log open", snap.Dropped, snap.Ended)
	}
	// Each event is an audit line marked as the sandbox's.
	var audited int
	for _, r := range h.audit.records(t) {
		if r.Op == "sandbox.event" && r.Sandbox == got.ID && r.Source == "sandbox" && r.Tenant == "alpha" {
			audited++
		}
	}
	if audited != 3 {
		t.Errorf("%d audit lines of source sandbox, want 3", audited)
	}

	// Paused, then its server restarts: the new one holds the same log
	// (from the store), and the numbering goes on after a resume.
	if r := h.api("alpha", "POST", "/sandboxes/"+got.ID+"/pause", map[string]any{}); r.status != 204 {
		t.Fatalf("pause = %s", r)
	}
	h.serve(t, harnessOptions{}, h.store)
	log, ok = h.srv.Events("alpha", got.ID)
	if !ok {
		t.Fatal("no event log after the restart")
	}
	if snap := log.After(0, 0); len(snap.Events) != 3 || snap.Events[2].Event.Message != "z" || snap.Next != 4 || snap.Ended {
		t.Fatalf("after the restart: %+v (next %d, ended %v), want the 3 events, next 4", snap.Events, snap.Next, snap.Ended)
	}
	res := h.api("alpha", "POST", "/sandboxes/"+got.ID+"/connect", map[string]any{"timeout": 600})
	var again sbx
	if res.status != 201 || json.Unmarshal(res.body, &again) != nil {
		t.Fatalf("resume after the restart = %s", res)
	}
	if r := parseRun(t, h.stream(again, "process.Process/Start", bash("airlock-event progress --pct 100 w"), nil)); r.exit != 0 {
		t.Fatalf("command after the restart = %+v", r)
	}
	waitFor(t, "the fourth event", func() bool { return len(log.After(0, 0).Events) >= 4 })
	if e := log.After(3, 0).Events[0]; e.Seq != 4 || e.Event.Message != "w" {
		t.Errorf("event after the restart = %+v, want seq 4 w", e)
	}

	if r := h.api("alpha", "DELETE", "/sandboxes/"+got.ID, nil); r.status != 204 {
		t.Fatalf("kill = %s", r)
	}
	if snap := log.After(0, 0); !snap.Ended || len(snap.Events) != 4 {
		t.Errorf("after the kill: ended %v, %d events; want ended, 4", snap.Ended, len(snap.Events))
	}
	if _, ok := h.srv.Events("alpha", got.ID); ok {
		t.Error("a killed sandbox's log is still served")
	}
	// The store keeps them, for the tenant's retention to delete.
	if rows, err := h.store.SandboxEvents(context.Background(), "alpha", got.ID, 0, 0); err != nil || len(rows) != 4 {
		t.Errorf("stored = %d, %v; want 4", len(rows), err)
	}
}
