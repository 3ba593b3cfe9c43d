package report_test

import (
	"encoding/json"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
)

// FuzzDecode: whatever a sandbox writes, Decode does not panic, and what
// it accepts is a payload the event log takes (a canonical JSON object
// within the size limit) with the host's own fields unset.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"kind":"progress","pct":40,"message":"running tests"}`,
		`{"kind":"log","level":"warn","message":"a\u001b[2J"}`,
		`{"kind":"metric","name":"x","value":-1.5e300,"unit":"s"}`,
		`{"kind":"artifact","path":"/workspace/../etc/shadow","type":"text/html","name":"a/b"}`,
		`{"kind":"test","name":"t","status":"skip","duration_s":0.25}`,
		`{"kind":"coverage","data":{"a":[1,2,{"b":null}]}}`,
		`{"kind":"coverage","data":"\ud800"}`,
		`{"kind":"log","message":"\xff\xfe"}`,
		`{"kind":"log","message":"a","source":"host"}`,
	} {
		f.Add([]byte(s))
	}
	c := policy.Events{Kinds: []policy.EventKindRule{{Name: "coverage"}}}.Resolved()
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := report.Decode(line, c)
		if err != nil {
			return
		}
		if ev.Source != event.SourceSandbox || ev.Sandbox != "" || ev.Artifact != "" || ev.Refused != "" {
			t.Fatalf("Decode(%q) set the host's fields: %+v", line, ev)
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("Decode(%q) = %+v, which does not encode: %v", line, ev, err)
		}
		if _, err := event.CanonicalPayload(b, nil); err != nil {
			t.Fatalf("Decode(%q) = %s, which the log refuses: %v", line, b, err)
		}
	})
}
