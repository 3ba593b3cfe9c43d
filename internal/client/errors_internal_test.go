package client

import (
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
)

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
