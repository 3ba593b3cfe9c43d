package event_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// TestTombstoneVerifies deletes payloads from a chain and checks that it
// still verifies, counts the deletions with their latest date, and that no
// edit can pass as a deletion.
func TestTombstoneVerifies(t *testing.T) {
	id := event.NewRunID(t0)
	evs := chain(t, id, 5)
	at1, at2 := t0.Add(time.Hour), t0.Add(2*time.Hour)
	var err error
	if evs[1], err = event.Tombstone(evs[1], at1, event.ReasonRetention); err != nil {
		t.Fatal(err)
	}
	if evs[3], err = event.Tombstone(evs[3], at2, "purge"); err != nil {
		t.Fatal(err)
	}
	if again, err := event.Tombstone(evs[3], at2.Add(time.Hour), "x"); err != nil || string(again.Payload) != string(evs[3].Payload) {
		t.Errorf("Tombstone(tombstoned) = %s, %v; want it unchanged", again.Payload, err)
	}
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			t.Fatalf("tombstoned event does not validate: %v", err)
		}
		// A tombstone survives the JSON form (exports, the API).
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := event.Decode(b); err != nil || string(d.Payload) != string(e.Payload) {
			t.Fatalf("Decode(Marshal(tombstoned)) = %s, %v", d.Payload, err)
		}
	}
	c := event.NewChain(id)
	for _, e := range evs {
		if err := c.Next(e); err != nil {
			t.Fatalf("Next(seq %d) = %v", e.Seq, err)
		}
	}
	if n, last := c.Deleted(); n != 2 || !last.Equal(at2) {
		t.Errorf("Deleted() = %d, %v; want 2, %v", n, last, at2)
	}
	tomb, ok := event.ParseTombstone(evs[1].Payload)
	if !ok || tomb.Reason != event.ReasonRetention || !tomb.DeletedAt.Equal(at1) {
		t.Errorf("ParseTombstone = %+v, %v", tomb, ok)
	}
}

// TestTombstoneForgeries: a tombstone that names another digest, a payload
// edited rather than deleted, and a real payload shaped like a tombstone.
func TestTombstoneForgeries(t *testing.T) {
	id := event.NewRunID(t0)
	evs := chain(t, id, 2)
	dead, err := event.Tombstone(evs[0], t0, event.ReasonRetention)
	if err != nil {
		t.Fatal(err)
	}
	other, err := event.Tombstone(evs[1], t0, event.ReasonRetention)
	if err != nil {
		t.Fatal(err)
	}
	wrongDigest := evs[0]
	wrongDigest.Payload = other.Payload // evs[1]'s digest under evs[0]'s hash
	edited := evs[0]
	edited.Payload = json.RawMessage(`{"step":0,"call_id":"c","tool":"rm -rf","outcome":"exited"}`)
	for name, e := range map[string]event.Event{"wrong digest": wrongDigest, "edited": edited} {
		if err := event.Verify([]event.Event{e, evs[1]}); !errors.Is(err, event.ErrHashMismatch) {
			t.Errorf("%s: Verify = %v, want ErrHashMismatch", name, err)
		}
	}
	// A payload that is itself shaped like a tombstone is sealed over its
	// own bytes: it verifies as content, not counted as a deletion.
	d := event.Event{Type: "sandbox.custom", Time: t0, Payload: dead.Payload}
	event.Seal(id, 0, event.Hash{}, &d)
	c := event.NewChain(id)
	if err := c.Next(d); err != nil {
		t.Fatalf("Next(tombstone-shaped payload) = %v", err)
	}
	if n, _ := c.Deleted(); n != 0 {
		t.Errorf("Deleted() = %d for a sealed tombstone-shaped payload, want 0", n)
	}
}
