package model

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// decoders maps a testdata directory to the decoders of its API.
var decoders = map[string]struct {
	stream func(io.Reader, func(Delta)) (Response, error)
	json   func([]byte) (Response, error)
}{
	"anthropic": {decodeAnthropicStream, decodeAnthropicJSON},
	"chat":      {decodeChatStream, decodeChatJSON},
	"responses": {decodeResponsesStream, decodeResponsesJSON},
}

// wantFile is the expected outcome of decoding a fixture (NAME.want.json).
type wantFile struct {
	Response      *Response `json:"response"`
	Error         *APIError `json:"error"`
	UnexpectedEOF bool      `json:"unexpected_eof"`
}

func readWant(t *testing.T, fixture string) wantFile {
	t.Helper()
	name := strings.TrimSuffix(strings.TrimSuffix(fixture, ".sse"), ".json") + ".want.json"
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var w wantFile
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return w
}

// fixtures lists the response fixtures of dir: *.sse and *.json, without
// want files and request goldens.
func fixtures(t *testing.T, dir string) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join("testdata", dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range all {
		base := filepath.Base(f)
		if strings.HasSuffix(base, ".want.json") || strings.HasPrefix(base, "request") {
			continue
		}
		if strings.HasSuffix(base, ".sse") || strings.HasSuffix(base, ".json") {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no fixtures in testdata/%s", dir)
	}
	return out
}

// deltaLog accumulates streamed deltas the way a display would.
type deltaLog struct {
	text  strings.Builder
	calls map[int]*struct{ id, name, args string }
	reset int
}

func (l *deltaLog) add(d Delta) {
	switch d.Kind {
	case DeltaText:
		l.text.WriteString(d.Text)
	case DeltaToolCall:
		if l.calls == nil {
			l.calls = map[int]*struct{ id, name, args string }{}
		}
		c := l.calls[d.Index]
		if c == nil {
			c = &struct{ id, name, args string }{}
			l.calls[d.Index] = c
		}
		c.id += d.ID
		c.name += d.Name
		c.args += d.Args
	case DeltaReset:
		l.reset++
		l.text.Reset()
		l.calls = nil
	}
}

// check verifies that the deltas add up to the response.
func (l *deltaLog) check(t *testing.T, r Response) {
	t.Helper()
	if got := l.text.String(); got != r.Text {
		t.Errorf("streamed text = %q, response text %q", got, r.Text)
	}
	if len(l.calls) != len(r.ToolCalls) {
		t.Fatalf("streamed %d tool calls, response has %d", len(l.calls), len(r.ToolCalls))
	}
	for i, c := range r.ToolCalls {
		s := l.calls[i]
		if s == nil {
			t.Fatalf("tool call %d never streamed", i)
		}
		// A call streamed without an ID gets a generated one at the end.
		if s.id != c.ID && s.id != "" || s.name != c.Name || string(CanonicalArgs(s.args)) != string(c.Args) {
			t.Errorf("streamed call %d = %q %q %q, response %q %q %s", i, s.id, s.name, s.args, c.ID, c.Name, c.Args)
		}
	}
}

// checkRoundTrip verifies the invariant the run engine relies on.
func checkRoundTrip(t *testing.T, r Response) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("marshal response: %v", err)
	}
	var back Response
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal response: %v", err)
	}
	if !reflect.DeepEqual(r, back) {
		t.Fatalf("response does not round-trip through JSON:\n%#v\n%#v", r, back)
	}
}

func checkOutcome(t *testing.T, w wantFile, got Response, err error) {
	t.Helper()
	switch {
	case w.UnexpectedEOF:
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("decode = %v, want unexpected EOF", err)
		}
		if !retryable(err) {
			t.Errorf("a cut stream must be retryable: %v", err)
		}
	case w.Error != nil:
		var ae *APIError
		if !errors.As(err, &ae) {
			t.Fatalf("decode = %v, want an APIError", err)
		}
		if ae.Type != w.Error.Type || ae.Code != w.Error.Code || ae.Message != w.Error.Message || ae.Retryable != w.Error.Retryable {
			t.Errorf("decode error = %+v, want %+v", ae, w.Error)
		}
	default:
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, *w.Response) {
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(w.Response)
			t.Errorf("decode =\n%s\nwant\n%s", gb, wb)
		}
		checkRoundTrip(t, got)
	}
}

// TestDecodeFixtures decodes every recorded fixture with LF, CRLF and CR
// line endings, whole and one byte per read, and compares the result, the
// deltas and the JSON round trip with the fixture's want file.
func TestDecodeFixtures(t *testing.T) {
	for dir, dec := range decoders {
		for _, f := range fixtures(t, dir) {
			t.Run(dir+"/"+filepath.Base(f), func(t *testing.T) {
				w := readWant(t, f)
				raw, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasSuffix(f, ".json") {
					got, err := dec.json(raw)
					checkOutcome(t, w, got, err)
					return
				}
				for _, eol := range []struct{ name, s string }{{"LF", "\n"}, {"CRLF", "\r\n"}, {"CR", "\r"}} {
					body := strings.ReplaceAll(string(raw), "\n", eol.s)
					for _, split := range []struct {
						name string
						r    func() io.Reader
					}{
						{"whole", func() io.Reader { return strings.NewReader(body) }},
						{"bytewise", func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }},
					} {
						t.Run(eol.name+"/"+split.name, func(t *testing.T) {
							var log deltaLog
							got, err := dec.stream(split.r(), log.add)
							checkOutcome(t, w, got, err)
							if err == nil {
								log.check(t, got)
							}
						})
					}
				}
			})
		}
	}
}

func TestChatMissingToolCallID(t *testing.T) {
	stream := `data: {"id":"x","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"finish","arguments":"{}"}}]},"finish_reason":null}]}

data: {"id":"x","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

`
	r1, err := decodeChatStream(strings.NewReader(stream), func(Delta) {})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := decodeChatStream(strings.NewReader(stream), func(Delta) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.ToolCalls) != 1 || !strings.HasPrefix(r1.ToolCalls[0].ID, "call_") {
		t.Fatalf("tool calls = %+v, want one with a generated call_ ID", r1.ToolCalls)
	}
	if r1.ToolCalls[0].ID == r2.ToolCalls[0].ID {
		t.Errorf("generated IDs repeat across replies: %s", r1.ToolCalls[0].ID)
	}
}

func TestDecodeLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString(`data: {"id":"x","model":"m","choices":[{"index":0,"delta":{"tool_calls":[`)
	for i := 0; i <= maxToolCalls; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"index":` + itoa(i) + `,"id":"c` + itoa(i) + `","function":{"name":"f","arguments":"{}"}}`)
	}
	b.WriteString("]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
	if _, err := decodeChatStream(strings.NewReader(b.String()), func(Delta) {}); err == nil || !strings.Contains(err.Error(), "tool calls") {
		t.Errorf("decode of %d tool calls = %v, want a limit error", maxToolCalls+1, err)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// BenchmarkDecodeAnthropicStream decodes a long reply: 5,000 text deltas
// and a tool call streamed in 1,000 fragments.
func BenchmarkDecodeAnthropicStream(b *testing.B) {
	var s strings.Builder
	s.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
	s.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := 0; i < 5000; i++ {
		s.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word \"}}\n\n")
	}
	s.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"write_file\",\"input\":{}}}\n\n")
	s.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"content\\\": \\\"\"}}\n\n")
	for i := 0; i < 1000; i++ {
		s.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"line of code\\\\n\"}}\n\n")
	}
	s.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"}\"}}\n\n")
	s.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":9000}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	stream := s.String()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := decodeAnthropicStream(strings.NewReader(stream), func(Delta) {})
		if err != nil || len(r.ToolCalls) != 1 || len(r.Text) != 25000 {
			b.Fatalf("decode = %d calls, %d bytes of text, %v", len(r.ToolCalls), len(r.Text), err)
		}
	}
}
