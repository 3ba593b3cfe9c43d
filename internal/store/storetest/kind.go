package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// testKind: a run's kind is kept as created (KindAgent as empty), is
// filtered on in ListRuns (agent runs only unless told otherwise), and a
// sandbox or MCP record is never unfinished work for the workers, whatever
// its status.
func testKind(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	var agents, sandboxes, mcps, all []string
	for i, c := range []struct {
		tenant, kind string
		status       event.Status
	}{
		{"a", "", event.StatusQueued},
		{"a", store.KindSandbox, event.StatusRunning},
		{"a", store.KindAgent, event.StatusRunning},
		{"b", store.KindSandbox, event.StatusPaused},
		{"b", "", event.StatusAwaitingApproval},
		{"b", store.KindSandbox, event.StatusQueued},
		{"a", store.KindMCP, event.StatusRunning},
		{"b", store.KindMCP, event.StatusCompleted},
	} {
		id := runID(i + 1)
		r := createRun(t, s, store.Run{ID: id, Tenant: c.tenant, Kind: c.kind})
		want := c.kind
		if want == store.KindAgent {
			want = ""
		}
		if r.Kind != want {
			t.Errorf("CreateRun(kind %q).Kind = %q, want %q", c.kind, r.Kind, want)
		}
		if got, err := s.GetRun(ctx, id); err != nil || got.Kind != want {
			t.Errorf("GetRun(%s).Kind = %q, %v, want %q", id, got.Kind, err, want)
		}
		moveTo(t, s, id, c.status)
		switch want {
		case store.KindSandbox:
			sandboxes = append(sandboxes, id)
		case store.KindMCP:
			mcps = append(mcps, id)
		default:
			agents = append(agents, id)
		}
		all = append(all, id)
	}
	for _, tt := range []struct {
		name string
		f    store.RunFilter
		want []string
	}{
		{"zero filter", store.RunFilter{}, agents},
		{"agent", store.RunFilter{Kind: store.KindAgent}, agents},
		{"sandbox", store.RunFilter{Kind: store.KindSandbox}, sandboxes},
		{"any", store.RunFilter{Kind: store.KindAny}, all},
		{"sandbox of b", store.RunFilter{Kind: store.KindSandbox, Tenant: "b"}, sandboxes[1:]},
		{"running sandboxes", store.RunFilter{Kind: store.KindSandbox, Statuses: []event.Status{event.StatusRunning}}, sandboxes[:1]},
		{"any, desc, after", store.RunFilter{Kind: store.KindAny, Desc: true, After: all[3]}, []string{all[2], all[1], all[0]}},
		{"mcp", store.RunFilter{Kind: store.KindMCP}, mcps},
		{"running mcp of a", store.RunFilter{Kind: store.KindMCP, Tenant: "a", Statuses: []event.Status{event.StatusRunning}}, mcps[:1]},
	} {
		got, err := s.ListRuns(ctx, tt.f)
		if err != nil || !slices.Equal(ids(got), tt.want) {
			t.Errorf("ListRuns(%s) = %v, %v, want %v", tt.name, ids(got), err, tt.want)
		}
	}
	if got, err := store.ForTenant(s, "a").ListRuns(ctx, store.RunFilter{Kind: store.KindSandbox}); err != nil || !slices.Equal(ids(got), sandboxes[:1]) {
		t.Errorf("ForTenant(a).ListRuns(sandbox) = %v, %v, want %v", ids(got), err, sandboxes[:1])
	}
	// The workers' query: sandbox records in queued and running are
	// left alone.
	got, err := store.Unfinished(ctx, s)
	if want := []string{agents[0], agents[1], agents[2]}; err != nil || !slices.Equal(ids(got), want) {
		t.Errorf("Unfinished() = %v, %v, want the agent runs %v only", ids(got), err, want)
	}
	_, err = s.ListRuns(ctx, store.RunFilter{Kind: "robot"})
	wantErr(t, "ListRuns(kind robot)", err, store.ErrInvalid)
	_, err = s.CreateRun(ctx, store.Run{ID: runID(20), Tenant: "a", Kind: "robot", Status: event.StatusQueued})
	wantErr(t, "CreateRun(kind robot)", err, store.ErrInvalid)
	_, err = s.CreateRun(ctx, store.Run{ID: runID(21), Tenant: "a", Kind: store.KindAny, Status: event.StatusQueued})
	wantErr(t, "CreateRun(kind any)", err, store.ErrInvalid)
	_, err = s.CreateRun(ctx, store.Run{
		ID: runID(22), Tenant: "a", Kind: store.KindSandbox, Status: event.StatusQueued,
		ParentRunID: agents[0], ParentSeq: 1,
	})
	wantErr(t, "CreateRun(a sandbox record forked)", err, store.ErrInvalid)
	_, err = s.CreateRun(ctx, store.Run{
		ID: runID(23), Tenant: "a", Kind: store.KindMCP, Status: event.StatusRunning,
		ParentRunID: agents[0], ParentSeq: 1,
	})
	wantErr(t, "CreateRun(an mcp record forked)", err, store.ErrInvalid)
	if got, err := s.ListRuns(ctx, store.RunFilter{Kind: store.KindAny}); err != nil || len(got) != len(all) {
		t.Errorf("after refused creates, ListRuns(any) = %v, %v, want %v", ids(got), err, all)
	}
}
