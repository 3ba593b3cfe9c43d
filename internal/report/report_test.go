package report_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
)

func cfg() policy.Events {
	return policy.Events{Kinds: []policy.EventKindRule{{Name: "coverage", MaxSize: 64}}}.Resolved()
}

func TestDecode(t *testing.T) {
	pct, val := 40.0, 1.5
	for _, tt := range []struct {
		name, line string
		want       event.SandboxEvent
	}{
		{"progress", `{"kind":"progress","pct":40,"message":"running tests"}`, event.SandboxEvent{Kind: "progress", Pct: &pct, Message: "running tests"}},
		{"log", `{"kind":"log","level":"warn","message":"careful"}`, event.SandboxEvent{Kind: "log", Level: "warn", Message: "careful"}},
		{"metric", `{"kind":"metric","name":"latency","value":1.5,"unit":"s"}`, event.SandboxEvent{Kind: "metric", Name: "latency", Value: &val, Unit: "s"}},
		{"artifact", `{"kind":"artifact","path":"/workspace/./out/../report.html","type":"text/html","name":"report.html"}`, event.SandboxEvent{Kind: "artifact", Path: "/workspace/report.html", MediaType: "text/html", Name: "report.html"}},
		{"test", `{"kind":"test","name":"t1","status":"fail"}`, event.SandboxEvent{Kind: "test", Name: "t1", Status: "fail"}},
		{"custom kind", `{"kind":"coverage","data":{ "pct" : 81 }}`, event.SandboxEvent{Kind: "coverage", Data: json.RawMessage(`{"pct":81}`)}},
		{"terminal escapes are replaced", "{\"kind\":\"log\",\"message\":\"a\\u001b[2Jb\\u202e\"}", event.SandboxEvent{Kind: "log", Message: "a\uFFFD[2Jb"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := report.Decode([]byte(tt.line), cfg())
			tt.want.Source = event.SourceSandbox
			if err != nil {
				t.Fatalf("Decode(%s) = %v", tt.line, err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tt.want)
			if string(g) != string(w) {
				t.Errorf("Decode(%s) = %s, want %s", tt.line, g, w)
			}
		})
	}
}

// TestDecodeRefused: each kind of bad line is refused with its reason.
func TestDecodeRefused(t *testing.T) {
	for _, tt := range []struct{ name, line, reason string }{
		{"not JSON", `{"kind":"log",`, report.ReasonMalformed},
		{"not an object", `["log"]`, report.ReasonMalformed},
		{"two objects", `{"kind":"log","message":"a"}{}`, report.ReasonMalformed},
		{"no kind", `{"message":"a"}`, report.ReasonMalformed},
		{"unknown field", `{"kind":"log","message":"a","x":1}`, report.ReasonMalformed},
		{"the host's field source", `{"kind":"log","message":"a","source":"host"}`, report.ReasonMalformed},
		{"the host's field artifact", `{"kind":"artifact","path":"/workspace/a","artifact":"patch.diff"}`, report.ReasonMalformed},
		{"wrong type", `{"kind":"progress","pct":"40"}`, report.ReasonMalformed},
		{"huge number", `{"kind":"metric","name":"x","value":1e999}`, report.ReasonMalformed},
		{"unknown kind", `{"kind":"shell","data":"rm -rf /"}`, report.ReasonUnknownKind},
		{"custom kind too big", `{"kind":"coverage","data":"` + strings.Repeat("x", 64) + `"}`, report.ReasonOversize},
		{"built-in too big", `{"kind":"log","message":"` + strings.Repeat("x", 5000) + `"}`, report.ReasonOversize},
		{"a field of another kind", `{"kind":"log","message":"a","pct":3}`, report.ReasonInvalid},
		{"a missing field", `{"kind":"metric","name":"x"}`, report.ReasonInvalid},
		{"pct out of range", `{"kind":"progress","pct":101}`, report.ReasonInvalid},
		{"empty progress", `{"kind":"progress"}`, report.ReasonInvalid},
		{"bad level", `{"kind":"log","level":"fatal","message":"a"}`, report.ReasonInvalid},
		{"bad status", `{"kind":"test","name":"a","status":"flaky"}`, report.ReasonInvalid},
		{"negative duration", `{"kind":"test","name":"a","status":"pass","duration_s":-1}`, report.ReasonInvalid},
		{"relative artifact path", `{"kind":"artifact","path":"report.html"}`, report.ReasonInvalid},
		{"artifact name escaping", `{"kind":"artifact","path":"/workspace/a","name":"../patch.diff"}`, report.ReasonInvalid},
		{"bad media type", `{"kind":"artifact","path":"/workspace/a","type":"text/html; charset=\"x\""}`, report.ReasonInvalid},
		{"custom kind with fields", `{"kind":"coverage","message":"a","data":1}`, report.ReasonInvalid},
		{"custom kind without data", `{"kind":"coverage"}`, report.ReasonInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := report.Decode([]byte(tt.line), cfg())
			var re *report.RefusedError
			if !errors.As(err, &re) || re.Reason != tt.reason {
				t.Errorf("Decode(%.80s) = %v, want a refusal for %s", tt.line, err, tt.reason)
			}
		})
	}
}

// TestFilterRate: the rate limit holds per sandbox, with time passing as
// the caller says, and every refusal is counted by reason.
func TestFilterRate(t *testing.T) {
	f := report.NewFilter(policy.Events{Rate: 10, Burst: 5}, "main")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := 0
	for range 100 {
		if _, err := f.Accept([]byte(`{"kind":"log","message":"x"}`), t0); err == nil {
			ok++
		}
	}
	if ok != 5 {
		t.Errorf("accepted %d of 100 lines at once, want the burst of 5", ok)
	}
	ev, err := f.Accept([]byte(`{"kind":"log","message":"x"}`), t0.Add(time.Second/10))
	if err != nil || ev.Sandbox != "main" || ev.Source != event.SourceSandbox {
		t.Errorf("Accept after 0.1 s = %+v, %v; want an event of sandbox main", ev, err)
	}
	_, _ = f.Accept([]byte(`nope`), t0.Add(time.Hour))
	_, _ = f.Accept([]byte(`{"kind":"x"}`), t0.Add(time.Hour))
	f.RefuseArtifact()
	f.Executor(1, 2, 3, 4)
	want := event.SandboxEventsDropped{Sandbox: "main", Rate: 95, Malformed: 1, UnknownKind: 1, Artifacts: 1, ExecOversize: 1, ExecRate: 2, ExecQueue: 3, ExecConns: 4}
	if got := f.Dropped(); got != want {
		t.Errorf("Dropped = %+v, want %+v", got, want)
	}
	off := report.NewFilter(policy.Events{Off: true}, "main")
	if _, err := off.Accept([]byte(`{"kind":"log","message":"x"}`), t0); err == nil {
		t.Error("a filter of a policy that turns events off accepted one")
	}
}
