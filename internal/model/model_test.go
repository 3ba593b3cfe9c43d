package model

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	user := Message{Role: RoleUser, Content: []Part{TextPart("hi")}}
	call := func(id string) Part {
		return ToolCallPart(ToolCall{ID: id, Name: "run_command", Args: json.RawMessage(`{}`)})
	}
	result := func(id string) Part { return ToolResultPart(ToolResult{CallID: id, Content: "ok"}) }
	tests := []struct {
		name    string
		req     Request
		wantErr string
	}{
		{"sample", sampleRequest(), ""},
		{"no messages", Request{}, "no messages"},
		{"unknown role", Request{Messages: []Message{{Role: "system", Content: []Part{TextPart("x")}}}}, `unknown role "system"`},
		{"empty message", Request{Messages: []Message{{Role: RoleUser}}}, "no content"},
		{"tool call from user", Request{Messages: []Message{{Role: RoleUser, Content: []Part{call("c1")}}}}, "tool call outside an assistant message"},
		{"text in tool message", Request{Messages: []Message{user, {Role: RoleAssistant, Content: []Part{call("c1")}}, {Role: RoleTool, Content: []Part{TextPart("x")}}}}, "text in a tool message"},
		{"orphan result", Request{Messages: []Message{user, {Role: RoleTool, Content: []Part{result("c1")}}}}, "answers no call"},
		{"result for an older turn", Request{Messages: []Message{
			user,
			{Role: RoleAssistant, Content: []Part{call("c1")}},
			{Role: RoleTool, Content: []Part{result("c1")}},
			{Role: RoleAssistant, Content: []Part{call("c2")}},
			{Role: RoleTool, Content: []Part{result("c1")}},
		}}, "answers no call"},
		{"unanswered call", Request{Messages: []Message{
			user,
			{Role: RoleAssistant, Content: []Part{call("c1"), call("c2")}},
			{Role: RoleTool, Content: []Part{result("c1")}},
			user,
		}}, `tool calls "c2" of the preceding assistant message have no result`},
		{"unanswered last call", Request{Messages: []Message{user, {Role: RoleAssistant, Content: []Part{call("c1")}}}}, "of the last assistant message have no result"},
		{"answered twice", Request{Messages: []Message{
			user,
			{Role: RoleAssistant, Content: []Part{call("c1")}},
			{Role: RoleTool, Content: []Part{result("c1")}},
			{Role: RoleTool, Content: []Part{result("c1")}},
		}}, "answered twice"},
		{"results split over tool messages", Request{Messages: []Message{
			user,
			{Role: RoleAssistant, Content: []Part{call("c1"), call("c2")}},
			{Role: RoleTool, Content: []Part{result("c2")}},
			{Role: RoleTool, Content: []Part{result("c1")}},
			user,
		}}, ""},
		{"tool after user", Request{Messages: []Message{
			user,
			{Role: RoleAssistant, Content: []Part{call("c1")}},
			user,
			{Role: RoleTool, Content: []Part{result("c1")}},
		}}, "does not follow the assistant message"},
		{"duplicate call ID", Request{Messages: []Message{user, {Role: RoleAssistant, Content: []Part{call("c1"), call("c1")}}}}, "duplicate ID"},
		{"bad args", Request{Messages: []Message{user, {Role: RoleAssistant, Content: []Part{ToolCallPart(ToolCall{ID: "c", Name: "f", Args: json.RawMessage(`{`)})}}, {Role: RoleTool, Content: []Part{result("c")}}}}, "not valid JSON"},
		{"mixed part", Request{Messages: []Message{{Role: RoleUser, Content: []Part{{Type: PartText, Text: "x", ToolResult: &ToolResult{}}}}}}, "tool field set"},
		{"unknown part", Request{Messages: []Message{{Role: RoleUser, Content: []Part{{Type: "image"}}}}}, `unknown part type "image"`},
		{"bad tool name", Request{Messages: []Message{user}, Tools: []ToolSpec{{Name: "run command"}}}, "does not match"},
		{"duplicate tool", Request{Messages: []Message{user}, Tools: []ToolSpec{{Name: "a"}, {Name: "a"}}}, "duplicate name"},
		{"schema not object", Request{Messages: []Message{user}, Tools: []ToolSpec{{Name: "a", Schema: json.RawMessage(`[]`)}}}, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestCanonicalArgs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "{}"},
		{" \n\t", "{}"},
		{`{"a": 1, "b": [1, 2]}`, `{"a":1,"b":[1,2]}`},
		{`{"html": "<a href='x'>&</a>"}`, `{"html":"\u003ca href='x'\u003e\u0026\u003c/a\u003e"}`},
		{"{\"ls\": \"\u2028\"}", `{"ls":"\u2028"}`},
		{`{"command": "go test`, `"{\"command\": \"go test"`},
		{`not json`, `"not json"`},
		{`"a string"`, `"a string"`},
		{`42`, `42`},
	}
	for _, tt := range tests {
		got := CanonicalArgs(tt.in)
		if string(got) != tt.want {
			t.Errorf("CanonicalArgs(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if !json.Valid(got) {
			t.Errorf("CanonicalArgs(%q) = %s is not valid JSON", tt.in, got)
		}
		if again := CanonicalArgs(string(got)); string(again) != string(got) {
			t.Errorf("CanonicalArgs is not idempotent on %q: %s then %s", tt.in, got, again)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, r := range []Response{
		{},
		{StopReason: StopEndTurn, Text: "héllo <b> \u2028"},
		{
			ID: "msg_1", Model: "m", Text: "t", StopReason: StopToolUse, ProviderStopReason: "tool_use",
			ToolCalls: []ToolCall{
				{ID: "a", Name: "f", Args: CanonicalArgs(`{"x": "<&>", "y": [1.50, 2e3]}`)},
				{ID: "b", Name: "g", Args: CanonicalArgs(`garbage`)},
			},
			Usage:             Usage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: 3, CacheWriteTokens: 2, Estimated: true},
			ProviderRequestID: "req_1",
		},
	} {
		checkRoundTrip(t, r)
	}
}

func TestResponseMessage(t *testing.T) {
	r := Response{Text: "Running.", ToolCalls: []ToolCall{{ID: "c1", Name: "run_command", Args: json.RawMessage(`{}`)}}}
	m := r.Message()
	req := Request{Messages: []Message{
		{Role: RoleUser, Content: []Part{TextPart("go")}},
		m,
		{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: "c1", Content: "ok"})}},
	}}
	if err := req.Validate(); err != nil {
		t.Fatalf("a conversation built from Response.Message is invalid: %v", err)
	}
	if m.Role != RoleAssistant || len(m.Content) != 2 || m.Content[0].Text != "Running." || m.Content[1].ToolCall.ID != "c1" {
		t.Errorf("Message() = %+v", m)
	}
}

func TestUsageAdd(t *testing.T) {
	got := Usage{InputTokens: 1, OutputTokens: 2, CacheReadTokens: 3}.Add(Usage{InputTokens: 10, OutputTokens: 20, CacheWriteTokens: 4, Estimated: true})
	want := Usage{InputTokens: 11, OutputTokens: 22, CacheReadTokens: 3, CacheWriteTokens: 4, Estimated: true}
	if got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
}
