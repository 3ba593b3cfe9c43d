package server

import (
	"testing"

	"github.com/airlockrun/airlock/internal/event"
)

// TestFeedSince: the feed hands a stream the events that follow its last
// seq only when it holds all of them, contiguously; anything else sends the
// stream to the store.
func TestFeedSince(t *testing.T) {
	f := NewFeed()
	ev := func(seq int64) event.Event { return event.Event{RunID: "r", Seq: seq, Type: event.TypeToolFinished} }
	f.Publish(ev(1)) // no stream yet: not kept
	_, stop := f.subscribe("r")
	if _, ok := f.since("r", 0); ok {
		t.Fatal("events published before any stream were kept")
	}
	for seq := int64(2); seq <= 4; seq++ {
		f.Publish(ev(seq))
	}
	for _, tc := range []struct {
		after int64
		want  []int64 // nil: not held
	}{
		{0, nil}, {1, []int64{2, 3, 4}}, {2, []int64{3, 4}}, {3, []int64{4}}, {4, nil}, {9, nil},
	} {
		got, ok := f.since("r", tc.after)
		if ok != (tc.want != nil) || len(got) != len(tc.want) {
			t.Errorf("since(%d) = %v, %v; want %v", tc.after, got, ok, tc.want)
			continue
		}
		for i := range got {
			if got[i].Seq != tc.want[i] {
				t.Errorf("since(%d)[%d] = %d, want %d", tc.after, i, got[i].Seq, tc.want[i])
			}
		}
	}
	f.Publish(ev(7)) // a gap: what came before no longer leads up to it
	if _, ok := f.since("r", 4); ok {
		t.Error("since(4) across a gap")
	}
	if got, ok := f.since("r", 6); !ok || len(got) != 1 || got[0].Seq != 7 {
		t.Errorf("since(6) = %v, %v", got, ok)
	}
	for seq := int64(8); seq < 8+2*feedKeep; seq++ {
		f.Publish(ev(seq))
	}
	if _, ok := f.since("r", 7); ok {
		t.Errorf("more than %d events kept", feedKeep)
	}
	stop()
	if _, ok := f.since("r", 100); ok {
		t.Error("a run without streams keeps events")
	}
}
