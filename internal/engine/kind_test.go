package engine_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestSandboxRecordsAreNotDriven: the record of an E2B sandbox, running
// or paused, is never work for the engine: the workers' query leaves it
// out, and no engine call drives, leases or changes it.
func TestSandboxRecordsAreNotDriven(t *testing.T) {
	h := newHarness(t)
	ctx := ctxT(t, time.Minute)
	agent := h.start("an agent run", pushScript, engine.Config{})
	var records []store.Run
	for _, st := range []event.Status{event.StatusRunning, event.StatusPaused} {
		r, err := h.store.CreateRun(ctx, store.Run{
			ID: event.NewRunID(time.Now()), Tenant: agent.Tenant, Kind: store.KindSandbox,
			Task: "E2B sandbox", Status: event.StatusRunning,
		})
		if err != nil {
			t.Fatal(err)
		}
		d, err := event.New(event.SandboxCreated{SandboxID: "sb-0123456789ab", Template: "base"})
		if err != nil {
			t.Fatal(err)
		}
		if st == event.StatusRunning {
			_, err = h.store.Append(ctx, r.ID, 1, []event.Event{d})
		} else {
			_, _, err = h.store.AppendStatus(ctx, r.ID, 1, event.StatusRunning, st, []event.Event{d})
		}
		if err != nil {
			t.Fatal(err)
		}
		if r, err = h.store.GetRun(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		records = append(records, r)
	}

	unfinished, err := store.Unfinished(ctx, h.store)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range unfinished {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, []string{agent.ID}) {
		t.Fatalf("Unfinished() = %v, want only the agent run %s", got, agent.ID)
	}

	for _, r := range records {
		calls := []struct {
			name string
			call func(context.Context) error
		}{
			{"Drive", func(ctx context.Context) error { _, err := h.eng.Drive(ctx, r.ID); return err }},
			{"Resume", func(ctx context.Context) error { _, err := h.eng.Resume(ctx, r.ID); return err }},
			{"Cancel", func(ctx context.Context) error { return h.eng.Cancel(ctx, r.ID, "user", "test") }},
			{"Pause", func(ctx context.Context) error { return h.eng.Pause(ctx, r.ID, "test") }},
			{"Fork", func(ctx context.Context) error { _, err := h.eng.Fork(ctx, r.ID, 0, engine.ForkOptions{}); return err }},
			{"Replay", func(ctx context.Context) error { _, err := h.eng.Replay(ctx, r.ID); return err }},
		}
		for _, c := range calls {
			if err := c.call(ctx); !errors.Is(err, engine.ErrNotAgentRun) {
				t.Errorf("%s(%s record) = %v, want ErrNotAgentRun", c.name, r.Status, err)
			}
		}
		after, err := h.store.GetRun(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if after.Status != r.Status || after.LastSeq != r.LastSeq || after.LeaseToken != 0 || after.LeaseOwner != "" {
			t.Errorf("the %s record changed: %+v, was %+v", r.Status, after, r)
		}
	}
}
