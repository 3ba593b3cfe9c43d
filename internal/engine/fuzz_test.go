package engine

import (
	"encoding/json"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/tools"
)

// FuzzConfig: a run config from a log is decoded and validated without
// panicking, and a valid one survives a round trip unchanged.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(`{"model":"script:x","script":"sha256:00","sandboxes":[{"name":"main","workspace":"/w"}],"checks":{"commands":["make test"],"only_changed":["src/**"]}}`))
	f.Add([]byte(`{"model":"anthropic:m","sandboxes":[{"name":"a"},{"name":"a"}],"max_steps":-1}`))
	f.Add([]byte(`{"model":"x:y","artifacts":["[x"],"checks":{"changed":["../../etc"]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := decodeConfig(raw)
		if err != nil {
			return
		}
		if c.Validate() != nil {
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		c2, err := decodeConfig(b)
		if err != nil {
			t.Fatal(err)
		}
		b2, _ := json.Marshal(c2)
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("round trip:\n%s\n%s", b, b2)
		}
	})
}

// FuzzFold: folding any sequence of events of known types, with any
// payloads, into a run's state never panics, and the conversation it
// yields only holds tool results for calls it made.
func FuzzFold(f *testing.F) {
	f.Add([]byte("\x0b{\"step\":1,\"tool_calls\":[{\"id\":\"a\",\"name\":\"run_command\",\"args\":{}}]}\x00\x11{\"step\":1,\"call_id\":\"a\",\"place\":\"sandbox\",\"tool\":\"run_command\",\"sandbox\":\"main\"}\x00\x12{\"step\":1,\"call_id\":\"a\",\"tool\":\"run_command\"}\x00\x14{\"step\":1,\"sandbox\":\"main\",\"digest\":\"d\"}"))
	f.Add([]byte("\x0b{\"step\":1}\x00\x0b{\"step\":2,\"text\":\"hi\"}\x00\x12{\"step\":2,\"call_id\":\"x\",\"tool\":\"finish\"}"))
	f.Add([]byte("\x02{}\x00\x03{}\x00\x0b{\"step\":1,\"tool_calls\":[{\"id\":\"a\",\"name\":\"finish\",\"args\":{\"summary\":\"s\"}}]}"))
	types := []event.Type{
		event.TypeRunCreated, event.TypeRunStarted, event.TypeRunResumed, event.TypeRunPaused, event.TypeRunCancelled,
		event.TypeRunCompleted, event.TypeRunFailed, event.TypeRunForked, event.TypePolicyResolved, event.TypeSandboxProvisioned,
		event.TypeModelRequest, event.TypeModelResponse, event.TypeToolProposed, event.TypePolicyDecision, event.TypeSandboxLost,
		event.TypeSandboxDestroyed, event.TypeToolUncertain, event.TypeToolStarted, event.TypeToolFinished, event.TypeRetry,
		event.TypeSnapshotTaken, event.TypeVerificationResult, event.TypeArtifactStored,
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newState("run_x", tools.Default(tools.Limits{}))
		for i, rec := range strings.Split(string(data), "\x00") {
			if rec == "" {
				continue
			}
			typ := types[int(rec[0])%len(types)]
			e := event.Event{RunID: "run_x", Seq: int64(i + 1), Type: typ, Payload: json.RawMessage(rec[1:]), Time: time.Unix(int64(i), 0)}
			for _, o := range []origin{own, inherited, pending} {
				_ = s.apply(e, o)
			}
		}
		calls := map[string]bool{}
		for _, m := range s.conversation() {
			for _, p := range m.Content {
				switch p.Type {
				case model.PartToolCall:
					calls[p.ToolCall.ID] = true
				case model.PartToolResult:
					if !calls[p.ToolResult.CallID] {
						t.Fatalf("a result for call %q that no turn made", p.ToolResult.CallID)
					}
				}
			}
		}
		_ = s.elapsed(time.Unix(100, 0))
		_ = s.finishSummary()
	})
}

// FuzzPaths: model- and user-given workspace paths and globs never resolve
// outside the workspace, and the patch parser never panics.
func FuzzPaths(f *testing.F) {
	for _, s := range []string{"calc.py", "/workspace/a/b", "../etc/passwd", "/etc", "a/../../b", "src/**", "/workspace", "diff --git a/x y b/x y\n"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, p, g string) {
		if rel, err := workspaceRel(p); err == nil {
			if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("workspaceRel(%q) = %q escapes", p, rel)
			}
		}
		_ = matchGlob(g, p)
		for _, c := range changedPaths(p + "\n" + g) {
			if c == "" && !strings.Contains(p+g, "diff --git a/ b/") {
				continue
			}
		}
	})
}
