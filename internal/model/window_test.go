package model

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// longRun builds a conversation of n steps, each one tool call whose result
// is size bytes.
func longRun(n, size int) Request {
	req := Request{System: "sys", Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("task")}}}}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%d", i)
		req.Messages = append(req.Messages,
			Message{Role: RoleAssistant, Content: []Part{ToolCallPart(ToolCall{ID: id, Name: "read_file", Args: json.RawMessage(`{}`)})}},
			Message{Role: RoleTool, Content: []Part{ToolResultPart(ToolResult{CallID: id, Content: strings.Repeat(string(rune('a'+i%26)), size)})}},
		)
	}
	return req
}

func TestEstimateTokens(t *testing.T) {
	req := Request{
		System:   "12345678",                                                                     // 8 bytes
		Tools:    []ToolSpec{{Name: "abcd", Description: "efgh", Schema: json.RawMessage(`{}`)}}, // 10 bytes
		Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("1234567")}}},              // 7 bytes, 4 framing
	}
	if got, want := EstimateTokens(req), 4+(8+10+7+3)/4; got != want {
		t.Errorf("EstimateTokens = %d, want %d", got, want)
	}
}

func TestFit(t *testing.T) {
	const size = 4000
	tests := []struct {
		name          string
		req           Request
		opts          FitOptions
		wantTruncated int
		wantFits      bool
	}{
		{"already fits", longRun(3, size), FitOptions{Budget: 1 << 20}, 0, true},
		{"oldest results go first", longRun(6, size), FitOptions{Budget: EstimateTokens(longRun(6, size)) - 1500}, 2, true},
		{"latest turns kept whole", longRun(6, size), FitOptions{Budget: 10}, 4, false},
		{"keep one turn", longRun(6, size), FitOptions{Budget: 10, KeepTurns: 1}, 5, false},
		{"too few turns to cut", longRun(2, size), FitOptions{Budget: 10}, 0, false},
		{"short results are left", longRun(6, 100), FitOptions{Budget: 10}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := longRunCopy(tt.req)
			got, res := Fit(tt.req, tt.opts)
			if !reflect.DeepEqual(tt.req, orig) {
				t.Fatal("Fit modified its input")
			}
			if res.Truncated != tt.wantTruncated || res.Fits != tt.wantFits {
				t.Errorf("Fit = %+v, want %d truncated, fits %v", res, tt.wantTruncated, tt.wantFits)
			}
			if res.Before != EstimateTokens(tt.req) || res.After != EstimateTokens(got) {
				t.Errorf("Fit estimates %d -> %d, want %d -> %d", res.Before, res.After, EstimateTokens(tt.req), EstimateTokens(got))
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Fit broke the conversation: %v", err)
			}
			if len(got.Messages) != len(tt.req.Messages) {
				t.Fatalf("Fit dropped messages: %d -> %d", len(tt.req.Messages), len(got.Messages))
			}
			keep := tt.opts.KeepTurns
			if keep <= 0 {
				keep = 2
			}
			cut := 0
			for i, m := range got.Messages {
				before := tt.req.Messages[i]
				if m.Role != RoleTool {
					if !reflect.DeepEqual(m, before) {
						t.Errorf("message %d (%s) changed", i, m.Role)
					}
					continue
				}
				r, r0 := m.Content[0].ToolResult, before.Content[0].ToolResult
				if r.Content == r0.Content {
					continue
				}
				cut++
				if i >= len(got.Messages)-2*keep {
					t.Errorf("message %d is in the latest %d turns and was cut", i, keep)
				}
				if !strings.HasPrefix(r.Content, r0.Content[:512]) || !strings.Contains(r.Content, "[airlock: tool output truncated to fit the context window: kept the first 512 of 4000 bytes]") {
					t.Errorf("cut result %d = %q, want the first 512 bytes and the marker", i, r.Content[512:])
				}
			}
			if cut != res.Truncated {
				t.Errorf("%d results differ, Fit reported %d", cut, res.Truncated)
			}
			// Fitting again changes nothing more.
			again, res2 := Fit(got, tt.opts)
			if res2.Truncated != 0 || !reflect.DeepEqual(again, got) {
				t.Errorf("Fit is not idempotent: second pass truncated %d", res2.Truncated)
			}
		})
	}
}

func TestFitUTF8(t *testing.T) {
	req := longRun(4, 10)
	req.Messages[2].Content[0].ToolResult.Content = strings.Repeat("é", 2000) // 2 bytes each: byte 511 is mid-rune
	got, res := Fit(req, FitOptions{Budget: 10, KeepBytes: 511})
	if res.Truncated != 1 {
		t.Fatalf("Fit truncated %d, want 1", res.Truncated)
	}
	c := got.Messages[2].Content[0].ToolResult.Content
	if !utf8.ValidString(c) || !strings.HasPrefix(c, strings.Repeat("é", 255)+"\n[airlock:") {
		t.Errorf("cut result = %q, want 255 whole runes then the marker", c[:600])
	}
}

func longRunCopy(r Request) Request {
	b, _ := json.Marshal(r)
	var out Request
	_ = json.Unmarshal(b, &out)
	return out
}
