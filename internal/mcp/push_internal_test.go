package mcp

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/report"
)

// TestPushBounds: a session's push queue refuses what does not fit,
// without waiting, and counts it; the next notification says how many
// were dropped; an event over PushMaxEvent is pushed as its kind and size.
func TestPushBounds(t *testing.T) {
	se := &session{push: make(chan report.Entry, 2)}
	for i := range 5 {
		se.queue(report.Entry{Seq: uint64(i + 1)})
	}
	if len(se.push) != 2 || se.pushDropped.Load() != 3 {
		t.Fatalf("queued %d, dropped %d: want 2 and 3", len(se.push), se.pushDropped.Load())
	}
	d := pushData(<-se.push, se.pushDropped.Swap(0))
	if d["dropped_before"] != uint64(3) || d["untrusted"] != true {
		t.Errorf("data = %v, want dropped_before 3, untrusted", d)
	}
	if d := pushData(<-se.push, se.pushDropped.Swap(0)); d["dropped_before"] != nil {
		t.Errorf("data = %v, want no dropped_before once it was said", d)
	}
	big := report.Entry{Seq: 9, Event: event.SandboxEvent{Kind: "log", Message: strings.Repeat("x", PushMaxEvent)}}
	d = pushData(big, 0)
	if ev, _ := d["event"].(map[string]any); ev["kind"] != "log" || len(ev) != 1 || d["bytes"].(int) <= PushMaxEvent || d["omitted"] == nil {
		t.Errorf("data of a large event = %v, want its kind and size only", d)
	}
}
