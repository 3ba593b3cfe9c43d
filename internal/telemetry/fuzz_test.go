package telemetry_test

import (
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// FuzzEvent: any payload of any event type, in the middle of a run, is
// taken without a panic, leaves the metrics gatherable (label values
// valid), and the run's spans end.
func FuzzEvent(f *testing.F) {
	f.Add(uint8(0), []byte(`{"step":1,"call_id":"c","tool":"run_command","outcome":"exited","duration_ms":-5,"wall_ms":99999999999}`))
	f.Add(uint8(1), []byte(`{"sandbox":"main","decision":"allowed\xff","method":"GET","host":"h","port":-1,"duration_ms":-1}`))
	f.Add(uint8(2), []byte(`{"approval_id":"x","decision":"approved"}`))
	f.Add(uint8(3), []byte(`{"step":-7,"provider":"","model":"\u0000","duration_ms":9223372036854775807}`))
	f.Add(uint8(4), []byte(`not json`))
	types := event.Types()
	slices.Sort(types)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	runID := event.NewRunID(t0)
	f.Fuzz(func(t *testing.T, typ uint8, payload []byte) {
		exp := tracetest.NewInMemoryExporter()
		tel, err := telemetry.New(telemetry.Options{SpanExporter: exp, Redactor: newRedactor()})
		if err != nil {
			t.Fatal(err)
		}
		seq := int64(0)
		feed := func(p event.Payload, raw []byte, ty event.Type) {
			seq++
			ev := event.Event{RunID: runID, Seq: seq, Type: ty, Time: t0.Add(time.Duration(seq) * time.Millisecond), Payload: raw}
			if p != nil {
				e, err := event.New(p)
				if err != nil {
					t.Fatal(err)
				}
				ev.Type, ev.Payload = e.Type, e.Payload
			}
			tel.Event(ev)
		}
		feed(event.RunCreated{Tenant: "acme", Model: "m"}, nil, "")
		feed(event.ModelRequest{Step: 1, Model: "m"}, nil, "")
		feed(event.ToolStarted{Step: 1, CallID: "c", Tool: "run_command", Sandbox: "main"}, nil, "")
		feed(nil, payload, types[int(typ)%len(types)])
		feed(event.RunFailed{Status: event.StatusFailed, Reason: "model"}, nil, "")
		if _, err := tel.Registry().Gather(); err != nil {
			t.Fatalf("Gather: %v", err)
		}
		runs := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "run" {
				runs++
			}
		}
		// One, or two when the fuzzed event itself ended the run.
		if runs < 1 || runs > 2 {
			t.Fatalf("%d run spans, want 1 or 2", runs)
		}
	})
}
