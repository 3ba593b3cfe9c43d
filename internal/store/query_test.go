package store_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// appendsBetween appends one event to run after VerifyRun read the run and
// before it reads the log, as a live run's driver does.
type appendsBetween struct {
	store.Store
	run  string
	once sync.Once
	t    *testing.T
}

func (s *appendsBetween) Events(ctx context.Context, id string, from int64, n int) ([]event.Event, error) {
	s.once.Do(func() {
		r, err := s.Store.GetRun(ctx, id)
		if err != nil {
			s.t.Fatal(err)
		}
		ev, _ := event.New(event.RunStarted{Host: "h"})
		if _, err := s.Store.Append(ctx, id, r.LastSeq+1, []event.Event{ev}); err != nil {
			s.t.Fatal(err)
		}
	})
	return s.Store.Events(ctx, id, from, n)
}

// TestVerifyRunLive: events appended after VerifyRun read the run are not
// a broken log; the log is verified up to the seq the run recorded.
func TestVerifyRunLive(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	created, _ := event.New(event.RunCreated{Tenant: "a", Task: "t"})
	r, _, err := st.CreateRunWith(ctx, store.Run{ID: event.NewRunID(time.Now()), Tenant: "a", Status: event.StatusQueued}, []event.Event{created, created})
	if err != nil {
		t.Fatal(err)
	}
	n, err := store.VerifyRun(ctx, &appendsBetween{Store: st, run: r.ID, t: t}, r.ID)
	if err != nil || n != 2 {
		t.Fatalf("VerifyRun of a log that grew meanwhile = %d, %v; want 2 verified", n, err)
	}
	if n, err := store.VerifyRun(ctx, st, r.ID); err != nil || n != 3 {
		t.Fatalf("VerifyRun afterwards = %d, %v; want 3", n, err)
	}
}
