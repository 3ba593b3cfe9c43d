package model

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addFixtures seeds f with every response fixture of dir.
func addFixtures(f *testing.F, dir string) {
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*"))
	for _, name := range files {
		if strings.HasSuffix(name, ".want.json") {
			continue
		}
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
}

// fuzzDecoder checks that a decoder never panics on any input, and that
// whatever it accepts is a Response that survives the JSON round trip, with
// valid JSON arguments, and that its deltas add up to it.
func fuzzDecoder(f *testing.F, dir string) {
	addFixtures(f, dir)
	dec := decoders[dir]
	f.Fuzz(func(t *testing.T, b []byte) {
		var log deltaLog
		if r, err := dec.stream(strings.NewReader(string(b)), log.add); err == nil {
			checkDecoded(t, r)
			// The Responses API's final output is authoritative over what
			// was streamed; the other replies are made of their deltas.
			if dir != "responses" {
				log.check(t, r)
			}
		}
		if r, err := dec.json(b); err == nil {
			checkDecoded(t, r)
		}
	})
}

func checkDecoded(t *testing.T, r Response) {
	t.Helper()
	for _, c := range r.ToolCalls {
		if !json.Valid(c.Args) {
			t.Fatalf("tool call %s args %q are not valid JSON", c.ID, c.Args)
		}
		if c.ID == "" {
			t.Fatalf("tool call without ID: %+v", c)
		}
	}
	checkRoundTrip(t, r)
}

func FuzzAnthropicStream(f *testing.F) { fuzzDecoder(f, "anthropic") }

func FuzzChatStream(f *testing.F) { fuzzDecoder(f, "chat") }

func FuzzResponsesStream(f *testing.F) { fuzzDecoder(f, "responses") }

// FuzzParseScript checks that the parser never panics, and that every
// script it accepts replays turn by turn into valid, recordable responses.
func FuzzParseScript(f *testing.F) {
	if b, err := os.ReadFile("testdata/script/fix_calc.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("turns:\n  - text: hi\n"))
	f.Add([]byte("turns:\n  - tool_calls:\n      - name: f\n        args: {a: [1, {b: null}], c: 1e3}\n"))
	f.Add([]byte("turns:\n  - &a {text: x}\n  - *a\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseScript(b)
		if err != nil {
			return
		}
		p := NewScripted("fuzz", *s)
		req := Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("go")}}}}
		for i, turn := range s.Turns {
			if turn.Text == "" && len(turn.ToolCalls) == 0 {
				t.Fatalf("turn %d is empty", i)
			}
			r, err := p.Complete(context.Background(), req, nil)
			if err != nil {
				t.Fatalf("turn %d: %v", i, err)
			}
			for _, c := range r.ToolCalls {
				if !isJSONObject(c.Args) {
					t.Fatalf("turn %d: args %s are not an object", i, c.Args)
				}
			}
			checkRoundTrip(t, r)
			req.Messages = append(req.Messages, r.Message())
			if len(r.ToolCalls) > 0 {
				m := Message{Role: RoleTool}
				for _, c := range r.ToolCalls {
					m.Content = append(m.Content, ToolResultPart(ToolResult{CallID: c.ID}))
				}
				req.Messages = append(req.Messages, m)
			} else {
				req.Messages = append(req.Messages, Message{Role: RoleUser, Content: []Part{TextPart("next")}})
			}
		}
	})
}
