package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/sse"
)

// FuzzParseRequest: whatever the body, ParseRequest refuses it with a
// RequestError or accepts it; an accepted request encodes (model renamed,
// output capped) into a body that parses again to the same model and
// stream, with every output bound within the cap, and with the usage of a
// Chat Completions stream asked for.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []struct {
		a     API
		body  string
		limit int64
	}{
		{Chat, `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"<hi> & bye"}]}`, 100},
		{Chat, `{"model":"m","max_tokens":5000,"max_completion_tokens":null,"stream_options":{"include_usage":false,"x":1}}`, 4096},
		{Responses, `{"model":"gpt-4.1","input":"x","max_output_tokens":12,"stream":false}`, 7},
		{Embeddings, `{"model":"e","input":["a","b"]}`, 0},
		{Messages, `{"model":"claude","max_tokens":1024,"stream":true,"system":"\u2028"}`, 1},
		{CountTokens, `{"model":"claude","model":"other","messages":[]}`, 0},
		{Chat, `{"model":"","stream":"yes"}`, 5},
		{Messages, `[{"model":"x"}]`, 5},
	} {
		f.Add(byte(s.a), []byte(s.body), s.limit, "upstream-model")
	}
	f.Fuzz(func(t *testing.T, ab byte, body []byte, limit int64, model string) {
		a := API(ab%7) + Chat
		r, err := ParseRequest(a, body)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("ParseRequest error %T %v is not a RequestError", err, err)
			}
			return
		}
		if !ValidModel(r.Model) {
			t.Fatalf("accepted the model %q", r.Model)
		}
		if !ValidModel(model) {
			model = "m"
		}
		limit = max(limit, 0) % (1 << 32)
		out, err := r.Encode(model, limit)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		r2, err := ParseRequest(a, out)
		if err != nil {
			t.Fatalf("the encoded body does not parse: %v\n%s", err, out)
		}
		if r2.Model != model || r2.Stream != r.Stream {
			t.Fatalf("encoded model %q stream %v, want %q %v", r2.Model, r2.Stream, model, r.Stream)
		}
		if a == Chat && r.Stream && !r2.IncludeUsage {
			t.Fatalf("a chat stream went out without include_usage: %s", out)
		}
		if limit > 0 && a.Generates() {
			for _, fld := range a.MaxFields() {
				if raw, ok := r2.fields[fld]; ok && !isNull(raw) {
					var n int64
					if json.Unmarshal(raw, &n) != nil || n > limit {
						t.Fatalf("%s = %s over the cap %d", fld, raw, limit)
					}
				}
			}
			if _, ok := r2.fields[a.MaxFields()[0]]; !ok && r2.MaxTokens == 0 {
				if _, ok := r2.fields[a.MaxFields()[len(a.MaxFields())-1]]; !ok {
					t.Fatalf("no output bound went out under a cap: %s", out)
				}
			}
		}
		for k := range r.fields {
			if _, ok := r2.fields[k]; !ok {
				t.Fatalf("field %q was dropped", k)
			}
		}
	})
}

// FuzzMeter: any stream, of any API, meters without panicking, to counts
// that are never negative; each event the Meter passes on writes out in a
// form that reads back as the same event.
func FuzzMeter(f *testing.F) {
	for _, s := range []struct {
		a    API
		file string
	}{
		{Chat, "chat/tool_calls.sse"},
		{Chat, "chat/text.sse"},
		{Chat, "chat/vllm_error.sse"},
		{Responses, "responses/function_call.sse"},
		{Responses, "responses/failed.sse"},
		{Messages, "anthropic/tool_use.sse"},
		{Messages, "anthropic/text_thinking.sse"},
		{Chat, "chat/completion.json"},
		{Messages, "anthropic/message.json"},
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "model", "testdata", s.file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(s.a), b, true)
	}
	f.Add(byte(Chat), []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1e300,\"completion_tokens\":-4}}\n\ndata: [DONE]\n\n"), false)
	f.Add(byte(Messages), []byte("event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":\"7\"}}\r\ndata: x\r\n\r\n"), false)
	f.Fuzz(func(t *testing.T, ab byte, stream []byte, includeUsage bool) {
		a := API(ab%7) + Chat
		m := &Meter{API: a}
		rd := sse.NewReader(bytes.NewReader(stream), 1<<16)
		var out bytes.Buffer
		var sent []sse.Event
		for {
			ev, err := rd.Next()
			if err != nil {
				break
			}
			forward, toks := m.Event(ev, includeUsage)
			if toks < 0 {
				t.Fatalf("event %+v carries %d tokens", ev, toks)
			}
			m.Est += toks
			if forward {
				WriteEvent(&out, ev)
				sent = append(sent, ev)
			}
		}
		back := sse.NewReader(bytes.NewReader(out.Bytes()), 1<<17)
		for i, want := range sent {
			got, err := back.Next()
			if want.Type == "" {
				want.Type = "message"
			}
			if err != nil || got.Type != want.Type || got.Data != want.Data {
				t.Fatalf("event %d written as %q reads back as %+v, %v; want %+v", i, out.Bytes(), got, err, want)
			}
		}
		if _, err := back.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("more events read back than were written: %v", err)
		}
		u, _ := m.Usage(int64(len(stream)) / 4)
		w := &Meter{API: a}
		w.Body(stream)
		u2, _ := w.Usage(0)
		for _, n := range []int64{
			u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens,
			u2.InputTokens, u2.OutputTokens, u2.CacheReadTokens, u2.CacheWriteTokens,
		} {
			if n < 0 || n > 4*MaxCount {
				t.Fatalf("usage %+v / %+v out of range", u, u2)
			}
		}
	})
}
