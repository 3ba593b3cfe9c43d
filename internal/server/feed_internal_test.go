package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// TestFeedSince: the feed hands a stream the events that follow its last
// seq only when it holds all of them, contiguously; anything else sends the
// stream to the store.
func TestFeedSince(t *testing.T) {
	f := NewFeed()
	ev := func(seq int64) event.Event { return event.Event{RunID: "r", Seq: seq, Type: event.TypeToolFinished} }
	f.publish1(ev(1)) // no stream yet: not kept
	stop := f.subscribe("r", nil, 0).stop
	if _, ok := f.since("r", 0); ok {
		t.Fatal("events published before any stream were kept")
	}
	for seq := int64(2); seq <= 4; seq++ {
		f.publish1(ev(seq))
	}
	for _, tc := range []struct {
		after int64
		want  []int64 // nil: not held; empty: nothing new
	}{
		{0, nil}, {1, []int64{2, 3, 4}}, {2, []int64{3, 4}}, {3, []int64{4}}, {4, []int64{}}, {9, []int64{}},
	} {
		got, ok := f.since("r", tc.after)
		if ok != (tc.want != nil) || len(got) != len(tc.want) {
			t.Errorf("since(%d) = %v, %v; want %v", tc.after, got, ok, tc.want)
			continue
		}
		for i := range got {
			if got[i].ev.Seq != tc.want[i] {
				t.Errorf("since(%d)[%d] = %d, want %d", tc.after, i, got[i].ev.Seq, tc.want[i])
			}
		}
	}
	f.publish1(ev(7)) // a gap: what came before no longer leads up to it
	if _, ok := f.since("r", 4); ok {
		t.Error("since(4) across a gap")
	}
	if got, ok := f.since("r", 6); !ok || len(got) != 1 || got[0].ev.Seq != 7 {
		t.Errorf("since(6) = %v, %v", got, ok)
	}
	for seq := int64(8); seq < 8+2*feedKeep; seq++ {
		f.publish1(ev(seq))
	}
	if _, ok := f.since("r", 7); ok {
		t.Errorf("more than %d events kept", feedKeep)
	}
	// A batch wakes a stream once, with all of it there to read.
	sub := f.subscribe("r", nil, 0)
	batch := []event.Event{ev(8 + 2*feedKeep), ev(9 + 2*feedKeep), ev(10 + 2*feedKeep)}
	f.Publish(batch)
	<-sub.wake
	select {
	case <-sub.wake:
		t.Error("one batch woke a stream twice")
	default:
	}
	if got, ok := sub.since(7 + 2*feedKeep); !ok || len(got) != 3 {
		t.Errorf("since before the batch = %d events, %v; want the batch's 3", len(got), ok)
	}
	sub.stop()
	stop()
	if _, ok := f.since("r", 100); ok {
		t.Error("a run without streams keeps events")
	}
}

// TestFeedPoll: events another process appends reach a run's streams
// through the one poller the run's first stream started, each once; the
// engine's copy of an event the poller published already changes nothing;
// the poller stops with the last stream.
func TestFeedPoll(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := event.NewRunID(time.Now())
	if _, err := st.CreateRun(ctx, store.Run{ID: id, Tenant: "a", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	appendOne := func(next int64) event.Event {
		t.Helper()
		evs, err := st.Append(ctx, id, next, []event.Event{{Type: event.TypeRetry, Payload: []byte(`{"what":"x"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0]
	}
	appendOne(1)
	f := NewFeed()
	sub := f.subscribe(id, st, 10*time.Millisecond)
	wake, stop := sub.wake, sub.stop
	stop2 := f.subscribe(id, st, 10*time.Millisecond).stop
	e2 := appendOne(2) // by "another process": nobody publishes it
	var got []feedEvent
	for len(got) == 0 {
		select {
		case <-wake:
		case <-time.After(10 * time.Second):
			t.Fatal("the poller did not publish an appended event")
		}
		got, _ = sub.since(1)
	}
	if len(got) != 1 || got[0].ev.Seq != 2 || !strings.Contains(string(got[0].frame), "id: 2\nevent: retry\n") {
		t.Fatalf("since(1) = %+v", got)
	}
	f.Publish([]event.Event{e2}) // the engine's late copy
	if got, ok := f.since(id, 1); !ok || len(got) != 1 {
		t.Fatalf("a duplicate publish changed the feed: %+v, %v", got, ok)
	}
	stop()
	stop2()
	appendOne(3)
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	n := len(f.runs)
	f.mu.Unlock()
	if n != 0 {
		t.Errorf("the feed still watches %d runs after the last stream left", n)
	}
}

func (f *Feed) publish1(ev event.Event) { f.Publish([]event.Event{ev}) }
