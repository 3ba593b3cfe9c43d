package sse

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// readAll collects every event of in, and the error that ended the stream.
func readAll(r io.Reader, limit int) ([]Event, error) {
	rd := NewReader(r, limit)
	var evs []Event
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return evs, nil
			}
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Event
	}{
		{"empty", "", nil},
		{"one event LF", "data: hello\n\n", []Event{{Type: "message", Data: "hello"}}},
		{"named event", "event: ping\ndata: {}\n\n", []Event{{Type: "ping", Data: "{}"}}},
		{"CRLF", "event: a\r\ndata: x\r\n\r\n", []Event{{Type: "a", Data: "x"}}},
		{"CR only", "event: a\rdata: x\r\r", []Event{{Type: "a", Data: "x"}}},
		{"mixed endings", "data: 1\r\n\ndata: 2\r\rdata: 3\n\r\n", []Event{
			{Type: "message", Data: "1"}, {Type: "message", Data: "2"}, {Type: "message", Data: "3"},
		}},
		{"multi-line data", "data: a\ndata:b\ndata:  c\n\n", []Event{{Type: "message", Data: "a\nb\n c"}}},
		{"empty data line", "data\n\n", []Event{{Type: "message", Data: ""}}},
		{"data colon only", "data:\ndata:\n\n", []Event{{Type: "message", Data: "\n"}}},
		{"comments and keep-alives", ": ping\n:\n\ndata: x\n: mid\n\n", []Event{{Type: "message", Data: "x"}}},
		{"no data no dispatch", "event: lonely\n\ndata: y\n\n", []Event{{Type: "message", Data: "y"}}},
		{"unterminated last event dropped", "data: a\n\ndata: b\n", []Event{{Type: "message", Data: "a"}}},
		{"unterminated line dropped", "data: a\n\ndata: b", []Event{{Type: "message", Data: "a"}}},
		{"id persists", "id: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n", []Event{
			{Type: "message", Data: "a", ID: "7"}, {Type: "message", Data: "b", ID: "7"}, {Type: "message", Data: "c"},
		}},
		{"id with NUL ignored", "id: 1\ndata: a\n\nid: x\x00y\ndata: b\n\n", []Event{
			{Type: "message", Data: "a", ID: "1"}, {Type: "message", Data: "b", ID: "1"},
		}},
		{"unknown fields ignored, retry dispatches nothing", "retry: 100\nfoo: bar\ndata: z\n\nretry: 5\n\n", []Event{{Type: "message", Data: "z"}}},
		{"only one space stripped", "data:   x\n\n", []Event{{Type: "message", Data: "  x"}}},
		{"colon in value", "data: {\"a\":\"b:c\"}\n\n", []Event{{Type: "message", Data: `{"a":"b:c"}`}}},
		{"BOM", "\xEF\xBB\xBFdata: x\n\n", []Event{{Type: "message", Data: "x"}}},
		{"type resets between events", "event: a\ndata: 1\n\ndata: 2\n\n", []Event{
			{Type: "a", Data: "1"}, {Type: "message", Data: "2"},
		}},
		{"done sentinel is just data", "data: {\"x\":1}\n\ndata: [DONE]\n\n", []Event{
			{Type: "message", Data: `{"x":1}`}, {Type: "message", Data: "[DONE]"},
		}},
		{"field name case matters", "Data: x\ndata: y\n\n", []Event{{Type: "message", Data: "y"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, split := range []struct {
				name string
				r    func(string) io.Reader
			}{
				{"whole", func(s string) io.Reader { return strings.NewReader(s) }},
				{"one byte", func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) }},
				{"half", func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) }},
			} {
				got, err := readAll(split.r(tt.in), 0)
				if err != nil {
					t.Fatalf("%s: read %q: %v", split.name, tt.in, err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Errorf("%s: read %q = %#v, want %#v", split.name, tt.in, got, tt.want)
				}
			}
		})
	}
}

// TestRetry: a "retry" field of digits sets the reconnection time, alone
// or with an event; anything else is ignored and keeps the last one.
func TestRetry(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{"none", "data: x\n\n", 0, false},
		{"alone", "retry: 2000\n\n", 2 * time.Second, true},
		{"with an event", "retry: 5\ndata: x\n\n", 5 * time.Millisecond, true},
		{"zero", "retry: 0\n\n", 0, true},
		{"the last one wins", "retry: 1\n\nretry: 3\n\n", 3 * time.Millisecond, true},
		{"a unit", "retry: 2s\n\n", 0, false},
		{"negative", "retry: -1\n\n", 0, false},
		{"empty", "retry:\n\n", 0, false},
		{"a bad one keeps the last good one", "retry: 7\n\nretry: x\n\n", 7 * time.Millisecond, true},
		{"too large", "retry: 99999999999999999999999\n\n", 0, false},
		{"unterminated still counts", "retry: 9\n", 9 * time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), 0)
			for {
				if _, err := r.Next(); err != nil {
					break
				}
			}
			if got, ok := r.Retry(); got != tt.want || ok != tt.ok {
				t.Errorf("read %q: Retry() = %v, %v, want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestReaderLimits(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"long line", "data: " + strings.Repeat("x", 100) + "\n\n"},
		{"long line no newline", strings.Repeat("x", 1000)},
		{"many data lines", strings.Repeat("data: 0123456789\n", 20) + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readAll(strings.NewReader(tt.in), 64)
			if !errors.Is(err, ErrTooLarge) {
				t.Errorf("read with limit 64 = %v, want ErrTooLarge", err)
			}
		})
	}
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom))
	evs, err := readAll(r, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("read = %v, want %v", err, boom)
	}
	if len(evs) != 1 || evs[0].Data != "a" {
		t.Errorf("events before the error = %#v, want one with data a", evs)
	}
}

// FuzzReader checks that the parser never panics, honours its limit, and
// yields the same events however the input is split into reads.
func FuzzReader(f *testing.F) {
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\"}\n\n"))
	f.Add([]byte("data: a\r\ndata: b\r\n\r\n: comment\r\n\r\ndata: [DONE]\r\n\r\n"))
	f.Add([]byte("data: x\r\rid: 1\rdata\r\r"))
	f.Add([]byte("\xEF\xBB\xBFevent: e\nid: \x00\ndata: y\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 256
		whole, errWhole := readAll(strings.NewReader(string(b)), limit)
		bytewise, errByte := readAll(iotest.OneByteReader(strings.NewReader(string(b))), limit)
		if (errWhole == nil) != (errByte == nil) {
			t.Fatalf("errors differ by split: %v vs %v", errWhole, errByte)
		}
		if errWhole == nil && !reflect.DeepEqual(whole, bytewise) {
			t.Fatalf("events differ by split:\n%#v\n%#v", whole, bytewise)
		}
		for _, ev := range whole {
			if len(ev.Data) > limit {
				t.Fatalf("event data of %d bytes passed limit %d", len(ev.Data), limit)
			}
		}
	})
}
