package storetest

import (
	"context"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// testText: what PostgreSQL's text cannot hold (NUL, bytes that are not
// UTF-8) no store holds, so that every store answers alike: a write that
// would store it is refused with ErrInvalid, and a read by an id or name
// that holds it finds nothing (ErrNotFound), as for any id no run has.
func testText(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	appendN(t, s, r.ID, 1, 1)
	for _, bad := range []string{"\x00", "\xff"} {
		id := r.ID[:len(r.ID)-1] + bad // a run id's length, one byte off
		for _, c := range []struct {
			what string
			call func() error
		}{
			{"GetRun", func() error { _, err := s.GetRun(ctx, id); return err }},
			{"UpdateRunStatus", func() error {
				_, err := s.UpdateRunStatus(ctx, id, event.StatusQueued, event.StatusRunning)
				return err
			}},
			{"Events", func() error { _, err := s.Events(ctx, id, 1, 0); return err }},
			{"LastEvent", func() error { _, err := s.LastEvent(ctx, id); return err }},
			{"ListArtifacts", func() error { _, err := s.ListArtifacts(ctx, id); return err }},
			{"GetArtifact(run)", func() error { _, err := s.GetArtifact(ctx, id, "patch"); return err }},
			{"GetArtifact(name)", func() error { _, err := s.GetArtifact(ctx, r.ID, "patch"+bad); return err }},
		} {
			wantErr(t, c.what+"(text with "+quote(bad)+")", c.call(), store.ErrNotFound)
		}
		_, err := s.CreateRun(ctx, store.Run{ID: runID(2), Tenant: "acme", Status: event.StatusQueued, Task: "a" + bad + "b"})
		wantErr(t, "CreateRun(task with "+quote(bad)+")", err, store.ErrInvalid)
		_, err = s.ListRuns(ctx, store.RunFilter{Metadata: map[string]string{"team": "a" + bad + "b"}})
		wantErr(t, "ListRuns(label with "+quote(bad)+")", err, store.ErrInvalid)
	}
	// A run whose run.created payload carries a label that is not text
	// is stored, its label not indexed (no listing can ask for it).
	created := event.Event{Type: event.TypeRunCreated, Payload: []byte(`{"tenant":"acme","task":"t","metadata":{"team":"a\u0000b","ok":"yes"}}`)}
	if _, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(3), Tenant: "acme", Status: event.StatusQueued}, []event.Event{created}); err != nil {
		t.Fatalf("CreateRunWith(a label with NUL) = %v", err)
	}
	if runs, err := s.ListRuns(ctx, store.RunFilter{Metadata: map[string]string{"ok": "yes"}}); err != nil || len(runs) != 0 {
		t.Fatalf("ListRuns(the other label of a run with a NUL label) = %+v, %v, want none", ids(runs), err)
	}
	verify(t, s, runID(3), 1)
}

func quote(s string) string {
	if s == "\x00" {
		return "NUL"
	}
	return "a byte that is not UTF-8"
}
