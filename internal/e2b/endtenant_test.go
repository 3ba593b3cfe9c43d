package e2b_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/store"
)

// records returns tenant's sandbox records by status.
func sandboxRecords(t *testing.T, st store.Store, tenant string) map[event.Status]int {
	t.Helper()
	runs, err := st.ListRuns(context.Background(), store.RunFilter{Tenant: tenant, Kind: store.KindSandbox})
	if err != nil {
		t.Fatal(err)
	}
	out := map[event.Status]int{}
	for _, r := range runs {
		out[r.Status]++
	}
	return out
}

// TestEndTenant: a forced deletion of a tenant ends every sandbox of it
// this server holds, a running one and a frozen one (memory pause), with
// their processes, and closes their records cancelled; another tenant's
// sandbox runs on. A frozen sandbox whose record another process closed
// (the deletion run from another host) is destroyed at the server's next
// meter tick.
func TestEndTenant(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{MeterInterval: time.Second}})
	ctx := context.Background()
	running := h.create("alpha", nil)
	frozen := h.create("alpha", nil)
	other := h.create("beta", nil)
	h.streamStarted(running, "process.Process/Start", bash("exec sleep 4701"))
	h.streamStarted(frozen, "process.Process/Start", bash("exec sleep 4702"))
	h.streamStarted(other, "process.Process/Start", bash("exec sleep 4703"))
	for _, c := range []string{"sleep 4701", "sleep 4702", "sleep 4703"} {
		waitFor(t, c+" to run", func() bool { return sandboxtest.HostRuns(c) })
	}
	if kind, _ := h.pause(frozen, nil); kind != "memory" {
		t.Fatalf("pause = %q, want memory", kind)
	}
	if !sandboxtest.HostRuns("sleep 4702") {
		t.Fatal("the frozen sandbox's process is gone before the deletion")
	}

	if n := h.srv.EndTenant(ctx, "alpha"); n != 2 {
		t.Errorf("EndTenant(alpha) = %d, want 2", n)
	}
	for _, s := range []sbx{running, frozen} {
		if res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil); res.status != 404 {
			t.Errorf("info of an ended sandbox = %s, want 404", res)
		}
	}
	for _, c := range []string{"sleep 4701", "sleep 4702"} {
		waitFor(t, c+" to end", func() bool { return !sandboxtest.HostRuns(c) })
	}
	if got := sandboxRecords(t, h.store, "alpha"); got[event.StatusCancelled] != 2 || len(got) != 1 {
		t.Errorf("alpha's records = %v, want 2 cancelled", got)
	}
	if res := h.api("beta", "GET", "/sandboxes/"+other.ID, nil); res.status != 200 || !sandboxtest.HostRuns("sleep 4703") {
		t.Errorf("beta's sandbox after alpha's end = %s, want it running", res)
	}

	// Closed elsewhere: the record of a frozen sandbox is cancelled
	// behind the server's back, as another host's deletion does.
	late := h.create("alpha", nil)
	h.streamStarted(late, "process.Process/Start", bash("exec sleep 4704"))
	waitFor(t, "sleep 4704 to run", func() bool { return sandboxtest.HostRuns("sleep 4704") })
	if kind, _ := h.pause(late, nil); kind != "memory" {
		t.Fatalf("pause = %q, want memory", kind)
	}
	d, err := event.New(event.RunCancelled{By: "tenant deletion", Reason: "elsewhere"})
	if err != nil {
		t.Fatal(err)
	}
	var r store.Run
	for attempt := 0; ; attempt++ {
		runs, err := h.store.ListRuns(ctx, store.RunFilter{Tenant: "alpha", Kind: store.KindSandbox, Statuses: []event.Status{event.StatusPaused}})
		if err != nil || len(runs) != 1 {
			t.Fatalf("paused records = %d, %v; want 1", len(runs), err)
		}
		r = runs[0]
		_, _, err = h.store.AppendStatus(ctx, r.ID, r.LastSeq+1, r.Status, event.StatusCancelled, []event.Event{d})
		if err == nil {
			break
		}
		// The server may still append to the record (what its pause
		// recorded last): as another host's deletion does, read the
		// record again and retry.
		if !errors.Is(err, store.ErrConflict) || attempt == 20 {
			t.Fatal(err)
		}
	}
	waitFor(t, "the frozen sandbox to go", func() bool { return !sandboxtest.HostRuns("sleep 4704") })
	if res := h.api("alpha", "GET", "/sandboxes/"+late.ID, nil); res.status != 404 {
		t.Errorf("info of a sandbox whose record was closed = %s, want 404", res)
	}
	after, err := h.store.GetRun(ctx, r.ID)
	if err != nil || after.Status != event.StatusCancelled {
		t.Errorf("the closed record = %+v, %v; want it cancelled", after, err)
	}
	evs, err := h.store.Events(ctx, r.ID, r.LastSeq+2, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		t.Logf("after the close: %s %s", e.Type, e.Payload)
		if e.Type == event.TypeSandboxDestroyed || e.Type == event.TypeSandboxLost {
			t.Errorf("the server recorded an end after the record was closed: %s", e.Type)
		}
	}
	var list []json.RawMessage
	if res := h.api("beta", "GET", "/v2/sandboxes", nil); res.status != 200 || json.Unmarshal(res.body, &list) != nil || len(list) != 1 {
		t.Errorf("beta's sandboxes = %s, want its one", res)
	}
}
