package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrContextOverflow matches (errors.Is) an APIError by which the provider
// refused a conversation too long for the model's context window. The caller
// may shrink the conversation (see Fit) and try again.
var ErrContextOverflow = errors.New("model: conversation exceeds the context window")

// ErrScriptEnded is returned (wrapped) by the scripted provider when the
// conversation asks for a turn past the end of its script.
var ErrScriptEnded = errors.New("model: script ended")

// APIError is an error reported by a provider: an HTTP error status, or an
// error event inside a stream. Its text never holds the API key: Message is
// scrubbed of it before the error is built.
type APIError struct {
	// Provider is "anthropic", "openai", "openai-responses" or
	// "openai-compatible".
	Provider string `json:"provider"`
	// StatusCode is the HTTP status; 0 for an error event in a stream that
	// began with 200.
	StatusCode int `json:"status_code,omitempty"`
	// Type and Code are the provider's error type and code, when given
	// (e.g. "overloaded_error"; "context_length_exceeded").
	Type string `json:"type,omitempty"`
	Code string `json:"code,omitempty"`
	// Message is the provider's explanation, redacted and cut to 1 KiB.
	Message   string `json:"message,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// RetryAfter is how long the provider asked to wait, when it did.
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// Retryable says whether repeating the same request may succeed.
	Retryable bool `json:"retryable"`
}

// Error returns a one-line description.
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.StatusCode)
	} else {
		b.WriteString(": stream error")
	}
	if e.Type != "" {
		b.WriteString(" " + e.Type)
	}
	if e.Code != "" && e.Code != e.Type {
		b.WriteString(" (" + e.Code + ")")
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.RequestID != "" {
		b.WriteString(" [request " + e.RequestID + "]")
	}
	return b.String()
}

// Is reports whether e matches target; ErrContextOverflow matches an error
// that says the input did not fit the model's context window.
func (e *APIError) Is(target error) bool {
	return target == ErrContextOverflow && e.contextOverflow()
}

func (e *APIError) contextOverflow() bool {
	if e.StatusCode != 0 && e.StatusCode != 400 && e.StatusCode != 413 {
		return false
	}
	switch e.Code {
	case "context_length_exceeded", "string_above_max_length":
		return true
	}
	if e.Type == "exceed_context_size_error" { // llama.cpp server
		return true
	}
	m := strings.ToLower(e.Message)
	for _, s := range []string{
		"prompt is too long",                       // Anthropic
		"exceed context limit",                     // Anthropic, input + max_tokens
		"context window",                           // several
		"maximum context length",                   // OpenAI, vLLM
		"context length exceeded",                  // several
		"exceeds the available context size",       // llama.cpp
		"input tokens exceed the configured limit", // OpenAI Responses
	} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// statusRetryable reports whether an HTTP status is worth retrying: request
// timeout, conflict (the providers' "try again"), rate limit and 5xx
// (Anthropic's 529 "overloaded" included). Any other 4xx is the caller's
// mistake and repeating it cannot help.
func statusRetryable(code int) bool {
	return code == 408 || code == 409 || code == 429 || code >= 500
}

// providerError is the union of the error bodies the supported servers send:
// Anthropic {"type":"error","error":{"type","message"},"request_id"},
// OpenAI {"error":{"message","type","param","code"}}, vLLM's and llama.cpp's
// variants with a numeric code or top-level fields, and Ollama's
// {"error":"text"}.
type providerError struct {
	Error     json.RawMessage `json:"error"`
	Type      string          `json:"type"`
	Message   string          `json:"message"`
	Code      json.RawMessage `json:"code"`
	RequestID string          `json:"request_id"`
}

type providerErrorDetail struct {
	Type    string          `json:"type"`
	Message string          `json:"message"`
	Code    json.RawMessage `json:"code"`
}

// parseErrorBody fills e's Type, Code and Message from an error body; a body
// that is not a known JSON shape becomes the message as text.
func (e *APIError) parseErrorBody(body []byte) {
	var pe providerError
	if err := json.Unmarshal(body, &pe); err == nil {
		var d providerErrorDetail
		var s string
		switch {
		case len(pe.Error) > 0 && json.Unmarshal(pe.Error, &d) == nil && (d.Message != "" || d.Type != ""):
			e.Type, e.Message, e.Code = d.Type, d.Message, rawCode(d.Code)
		case len(pe.Error) > 0 && json.Unmarshal(pe.Error, &s) == nil:
			e.Message = s
		case pe.Message != "":
			e.Type, e.Message, e.Code = pe.Type, pe.Message, rawCode(pe.Code)
			if e.Type == "error" {
				e.Type = ""
			}
		default:
			e.Message = string(body)
		}
		if e.RequestID == "" {
			e.RequestID = pe.RequestID
		}
		return
	}
	e.Message = string(body)
}

// rawCode renders an error code that some servers send as a string and
// others as a number.
func rawCode(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// maxErrorMessage bounds APIError.Message.
const maxErrorMessage = 1024

// cleanMessage makes provider text fit for an error string: valid UTF-8, no
// control characters, whitespace collapsed, at most maxErrorMessage bytes.
func cleanMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxErrorMessage {
		cut := maxErrorMessage
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// parseRetryAfter reads the wait a provider asks for: OpenAI's
// retry-after-ms (milliseconds), then the standard Retry-After (seconds or
// an HTTP date, measured against now). It returns 0 when neither is usable.
func parseRetryAfter(ms, ra string, now time.Time) time.Duration {
	if ms != "" {
		if f, err := strconv.ParseFloat(strings.TrimSpace(ms), 64); err == nil && f > 0 && f < 1e9 {
			return time.Duration(f * float64(time.Millisecond))
		}
	}
	ra = strings.TrimSpace(ra)
	if ra == "" {
		return 0
	}
	if f, err := strconv.ParseFloat(ra, 64); err == nil {
		if f > 0 && f < 1e6 {
			return time.Duration(f * float64(time.Second))
		}
		return 0
	}
	if t, err := http.ParseTime(ra); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
