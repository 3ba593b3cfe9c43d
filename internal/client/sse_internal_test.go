package client

import (
	"errors"
	"fmt"
	"github.com/airlockrun/airlock/internal/api"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// readAll reads every message of an SSE stream, as "name|id|retry|data".
func readAll(in string, max int) ([]string, error) {
	r := newSSEReader(strings.NewReader(in), max)
	var out []string
	for {
		m, err := r.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("%s|%s|%d|%s", m.name, m.id, m.retry, m.data))
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		wantErr  error
	}{
		{name: "LF", in: "id: 1\nevent: a\ndata: x\n\n", want: []string{"a|1|-1|x"}},
		{name: "CRLF", in: "id: 1\r\nevent: a\r\ndata: x\r\n\r\n", want: []string{"a|1|-1|x"}},
		{name: "CR", in: "id: 1\revent: a\rdata: x\r\r", want: []string{"a|1|-1|x"}},
		{name: "CR at the end of the stream", in: "data: x\r\r", want: []string{"||-1|x"}},
		{name: "multi-line data", in: "data: a\ndata:b\ndata:  c\n\n", want: []string{"||-1|a\nb\n c"}},
		{name: "comments and unknown fields", in: ": keepalive\n\nfoo: bar\ndata: x\n\n", want: []string{"||-1|x"}},
		{name: "a field without a colon", in: "data\n\n", want: []string{"||-1|"}},
		{name: "a BOM", in: "\xef\xbb\xbfdata: x\n\n", want: []string{"||-1|x"}},
		{name: "retry alone", in: "retry: 2000\n\n", want: []string{"||2000|"}},
		{name: "a malformed retry", in: "retry: 2s\ndata: x\n\nretry: -1\ndata: y\n\n", want: []string{"||-1|x", "||-1|y"}},
		{name: "a name without data is not dispatched", in: "event: end\n\ndata: x\n\n", want: []string{"||-1|x"}},
		{name: "an id with NUL is ignored", in: "id: 1\x002\ndata: x\n\n", want: []string{"||-1|x"}},
		{name: "an unterminated event is dropped", in: "data: x\n\ndata: y\n", want: []string{"||-1|x"}},
		{name: "a line too long", in: "data: " + strings.Repeat("x", 100) + "\n\n", wantErr: ErrStream},
		{name: "data too long", in: strings.Repeat("data: xxxxxxxxxx\n", 10) + "\n", wantErr: ErrStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(tc.in, 64)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("read(%q) = %v, want %v", tc.in, err, tc.wantErr)
			}
			if tc.wantErr == nil && strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("read(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzSSEReader: any byte stream reads without a panic, and no message
// holds more data than the bound.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("retry: 2000\n\nid: 1\nevent: run.created\ndata: {}\n\n"))
	f.Add([]byte("id: 1\r\nevent: end\r\ndata: {\"status\":\"completed\",\"last_seq\":1}\r\n\r\n"))
	f.Add([]byte(": keepalive\r\rdata\rdata: a\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		const max = 256
		r := newSSEReader(strings.NewReader(string(b)), max)
		for i := 0; ; i++ {
			m, err := r.next()
			if err != nil {
				return
			}
			if len(m.data) > max {
				t.Fatalf("message %d has %d bytes of data, bound %d", i, len(m.data), max)
			}
			if i > len(b) {
				t.Fatalf("%d messages from %d bytes", i, len(b))
			}
		}
	})
}

// FuzzDecodeError: any error answer decodes to a code of the closed set's
// form and a message fit to print.
func FuzzDecodeError(f *testing.F) {
	f.Add(404, []byte(`{"code":"not_found","message":"no such run","request_id":"req_1"}`), "")
	f.Add(429, []byte(`{"code":"rate_limited","message":"slow\u001b[2J","request_id":"r"}`), "30")
	f.Add(502, []byte("<html>bad gateway</html>"), "x")
	f.Fuzz(func(t *testing.T, status int, body []byte, retry string) {
		h := http.Header{}
		h.Set("Retry-After", retry)
		h.Set("X-Request-Id", string(body))
		e := decodeError(status, h, body)
		if e.Code == "" || !printableCode(e.Code) {
			t.Fatalf("code %q", e.Code)
		}
		for _, s := range []string{e.Message, e.RequestID, e.Error()} {
			if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
				t.Fatalf("%q is not fit to print", s)
			}
		}
		if len(e.Message) > maxMessage+len("…") || e.Message == "" {
			t.Fatalf("message of %d bytes", len(e.Message))
		}
		if e.RetryAfter < 0 {
			t.Fatalf("Retry-After %v", e.RetryAfter)
		}
	})
}

// TestCodeOf: an answer without the API's error body gets the code of its
// status, the one api.Codes gives it; a gateway's errors are unavailable,
// other 5xx internal, anything else a bad request.
func TestCodeOf(t *testing.T) {
	for code, status := range api.Codes {
		if got := codeOf(status); got != code {
			t.Errorf("codeOf(%d) = %s, want %s", status, got, code)
		}
	}
	for status, want := range map[int]string{502: api.CodeUnavailable, 504: api.CodeUnavailable, 501: api.CodeInternal, 418: api.CodeBadRequest} {
		if got := codeOf(status); got != want {
			t.Errorf("codeOf(%d) = %s, want %s", status, got, want)
		}
	}
}
