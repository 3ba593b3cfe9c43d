package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseScriptContract(t *testing.T) {
	b, err := os.ReadFile("testdata/script/fix_calc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseScript(b)
	if err != nil {
		t.Fatal(err)
	}
	want := &Script{Turns: []ScriptTurn{
		{Text: "Let me run the tests.", ToolCalls: []ScriptCall{{Name: "run_command", Args: json.RawMessage(`{"command":"go test ./..."}`)}}},
		{ToolCalls: []ScriptCall{{Name: "edit_file", Args: json.RawMessage(`{"path":"calc.go","old":"a - b","new":"a + b"}`)}}},
		{ToolCalls: []ScriptCall{{Name: "finish", Args: json.RawMessage(`{"summary":"Fixed the sign error in Add."}`)}}},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseScript =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseScriptValues(t *testing.T) {
	src := `turns:
  - tool_calls:
      - name: f
        args:
          s: plain
          q: "quoted: yes"
          n: 42
          big: 12345678901234
          neg: -7
          f: 1.5
          t: true
          nul: null
          list: [1, "two", {three: 3}]
          multi: |
            line 1
            line 2
          date: 2025-01-02
      - name: g
      - name: h
        args: null
`
	s, err := ParseScript([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"s":"plain","q":"quoted: yes","n":42,"big":12345678901234,"neg":-7,"f":1.5,"t":true,"nul":null,"list":[1,"two",{"three":3}],"multi":"line 1\nline 2\n","date":"2025-01-02"}`
	if got := string(s.Turns[0].ToolCalls[0].Args); got != want {
		t.Errorf("args = %s\nwant %s", got, want)
	}
	for _, c := range s.Turns[0].ToolCalls[1:] {
		if string(c.Args) != "{}" {
			t.Errorf("args of %s = %s, want {}", c.Name, c.Args)
		}
	}
}

func TestParseScriptErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"empty", "", "script is empty"},
		{"comment only", "# nothing\n", "script is empty"},
		{"not a mapping", "- a\n", "line 1: the script must be a mapping"},
		{"unknown top key", "turns:\n  - text: hi\nmodel: x\n", `line 3: unknown key "model" in the script (want turns)`},
		{"turns not a list", "turns: {text: hi}\n", "line 1: turns must be a list"},
		{"no turns", "turns: []\n", "the script has no turns"},
		{"unknown turn key", "turns:\n  - text: hi\n    stop_reason: end_turn\n", `line 3: unknown key "stop_reason" in a turn (want text, tool_calls)`},
		{"misspelt tool_calls", "turns:\n  - toolcalls:\n      - name: f\n", `line 2: unknown key "toolcalls"`},
		{"empty turn", "turns:\n  - text: \"\"\n", "line 2: a turn needs text or tool_calls"},
		{"text not a string", "turns:\n  - text: [a]\n", "line 2: text must be a string"},
		{"unknown call key", "turns:\n  - tool_calls:\n      - name: f\n        arguments: {}\n", `line 4: unknown key "arguments" in a tool call (want name, args)`},
		{"call without name", "turns:\n  - tool_calls:\n      - args: {}\n", "line 3: a tool call needs a name"},
		{"bad tool name", "turns:\n  - tool_calls:\n      - name: run command\n", `line 3: tool name "run command" does not match`},
		{"args a list", "turns:\n  - tool_calls:\n      - name: f\n        args: [1]\n", "line 4: args must be a mapping"},
		{"args a string", "turns:\n  - tool_calls:\n      - name: f\n        args: go test\n", "line 4: args must be a mapping"},
		{"tool_calls a mapping", "turns:\n  - tool_calls: {name: f}\n", "line 2: tool_calls must be a list"},
		{"repeated key", "turns:\n  - text: a\n    text: b\n", `line 3: key "text" repeated in a turn`},
		{"repeated args key", "turns:\n  - tool_calls:\n      - name: f\n        args: {a: 1, a: 2}\n", `line 4: key "a" repeated in args`},
		{"anchor", "turns:\n  - &t {text: hi}\n  - *t\n", "line 2: anchors and aliases are not allowed"},
		{"merge key", "turns:\n  - <<: {text: hi}\n", "line 2: merge keys (<<) are not allowed"},
		{"merge key in args", "turns:\n  - tool_calls:\n      - name: f\n        args: {<<: {a: 1}}\n", "line 4: merge keys (<<) are not allowed"},
		{"custom tag", "turns:\n  - text: !shell ls\n", `line 2: custom tag "!shell" not allowed`},
		{"NaN", "turns:\n  - tool_calls:\n      - name: f\n        args: {x: .nan}\n", "line 4: args: .nan is not a JSON number"},
		{"binary", "turns:\n  - tool_calls:\n      - name: f\n        args: {x: !!binary aGk=}\n", "unsupported tag !!binary"},
		{"non-string key", "turns:\n  - tool_calls:\n      - name: f\n        args: {[1]: x}\n", "args keys must be strings"},
		{"two documents", "turns:\n  - text: a\n---\nturns:\n  - text: b\n", "line 3: a script is one YAML document"},
		{"syntax error", "turns:\n  - text: \"unclosed\n", "yaml: line"},
		{"too deep", "turns:\n  - tool_calls:\n      - name: f\n        args: {a: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "}\n", "nested deeper than 64"},
		{"too large", "turns:\n  - text: \"" + strings.Repeat("x", MaxScriptBytes) + "\"\n", "over the 1048576 limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseScript([]byte(tt.src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseScript = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestScripted(t *testing.T) {
	p, err := New("script:testdata/script/fix_calc.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("Fix calc.")}}}}
	wantCalls := []string{
		`call_1_0 run_command {"command":"go test ./..."}`,
		`call_2_0 edit_file {"path":"calc.go","old":"a - b","new":"a + b"}`,
		`call_3_0 finish {"summary":"Fixed the sign error in Add."}`,
	}
	for turn, want := range wantCalls {
		var log deltaLog
		r, err := p.Complete(ctx, req, log.add)
		if err != nil {
			t.Fatalf("turn %d: %v", turn+1, err)
		}
		log.check(t, r)
		checkRoundTrip(t, r)
		if r.Model != "scripted" || r.ProviderStopReason != "script" || r.StopReason != StopToolUse || r.ID != fmt.Sprintf("script-turn-%d", turn+1) {
			t.Errorf("turn %d = %+v, want an honest scripted tool_use turn", turn+1, r)
		}
		if !r.Usage.Estimated || r.Usage.InputTokens != int64(EstimateTokens(req)) {
			t.Errorf("turn %d usage = %+v, want an estimate marked as such", turn+1, r.Usage)
		}
		c := r.ToolCalls[0]
		if got := fmt.Sprintf("%s %s %s", c.ID, c.Name, c.Args); len(r.ToolCalls) != 1 || got != want {
			t.Errorf("turn %d calls = %v, want %s", turn+1, r.ToolCalls, want)
		}
		if turn == 0 && r.Text != "Let me run the tests." {
			t.Errorf("turn 1 text = %q", r.Text)
		}
		// The same request asks for the same turn: the conversation, not a
		// counter, says where the script is.
		again, err := p.Complete(ctx, req, nil)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Errorf("turn %d repeated = %+v, %v; want the same turn", turn+1, again, err)
		}
		req.Messages = append(req.Messages, r.Message(), Message{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: c.ID, Content: "ok"})}})
	}
	_, err = p.Complete(ctx, req, nil)
	if !errors.Is(err, ErrScriptEnded) || !strings.Contains(err.Error(), "fix_calc.yaml") {
		t.Errorf("Complete past the end = %v, want ErrScriptEnded naming the file", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Complete(cctx, req, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Complete with a cancelled context = %v", err)
	}
	bad := Request{Messages: []Message{{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: "x"})}}}}
	if _, err := p.Complete(ctx, bad, nil); err == nil {
		t.Error("Complete of an invalid conversation succeeded")
	}
}

// TestScriptedAfter: a script that starts after turns it did not write
// (a fork's) answers the first conversation turn after them with its turn
// 1; tool call ids keep the conversation's numbering.
func TestScriptedAfter(t *testing.T) {
	s, err := ParseScript([]byte("turns:\n  - tool_calls:\n      - {name: run_command, args: {command: ls}}\n  - tool_calls:\n      - {name: finish, args: {summary: done}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := NewScripted("fork.yaml", *s).After(2)
	ctx := context.Background()
	req := Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("task")}}}}
	turn := func(id string) {
		req.Messages = append(req.Messages, Message{Role: RoleAssistant, Content: []Part{ToolCallPart(ToolCall{ID: id, Name: "read_file", Args: []byte(`{}`)})}},
			Message{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: id, Content: "ok"})}})
	}
	turn("inherited_1")
	if _, err := p.Complete(ctx, req, nil); err == nil || !strings.Contains(err.Error(), "starts after assistant turn 2, and the conversation has only 1") {
		t.Fatalf("Complete before the script's start = %v", err)
	}
	turn("inherited_2")
	for i, want := range []string{"call_3_0 run_command script-turn-1", "call_4_0 finish script-turn-2"} {
		r, err := p.Complete(ctx, req, nil)
		if err != nil || len(r.ToolCalls) != 1 {
			t.Fatalf("turn %d after the fork = %+v, %v", i+1, r, err)
		}
		c := r.ToolCalls[0]
		if got := c.ID + " " + c.Name + " " + r.ID; got != want {
			t.Errorf("turn %d after the fork = %s, want %s", i+1, got, want)
		}
		req.Messages = append(req.Messages, r.Message(), Message{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: c.ID, Content: "ok"})}})
	}
	_, err = p.Complete(ctx, req, nil)
	if !errors.Is(err, ErrScriptEnded) || !strings.Contains(err.Error(), "4 assistant turns, 2 of them before the script, and the script only 2") {
		t.Errorf("Complete past the end = %v, want ErrScriptEnded counting the turns before the script", err)
	}
}

func TestLoadScriptErrors(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("turns:\n  - text: \""+strings.Repeat("x", MaxScriptBytes)+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.yaml"), "no such file"},
		{big, "over the"},
	} {
		if _, err := LoadScript(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("LoadScript(%s) = %v, want %q", tt.path, err, tt.want)
		}
	}
}
