package model

import (
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	anthropicOverloaded = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`
	anthropicRateLimit  = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization."}}`
	anthropicInvalid    = `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`
	anthropicAuth       = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
	anthropicTooLong    = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`
	openaiRateLimit     = `{"error":{"message":"Rate limit reached for gpt-4.1 in organization org-x on tokens per min (TPM): Limit 30000, Used 30000, Requested 120. Please try again in 240ms.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	openaiContext       = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
)

func TestRetry(t *testing.T) {
	ok := serveFixture("anthropic/max_tokens.sse")
	tests := []struct {
		name       string
		steps      []step
		policy     RetryPolicy
		wantErr    string // substring; empty means success
		attempts   int
		sleeps     []time.Duration
		wantResets int
	}{
		{name: "success first time", steps: []step{ok}, attempts: 1},
		{
			name:  "429 honours retry-after seconds",
			steps: []step{status(429, anthropicRateLimit, "retry-after", "7"), ok}, attempts: 2, sleeps: []time.Duration{7 * time.Second},
		},
		{
			name:   "429 honours retry-after-ms",
			steps:  []step{status(429, openaiRateLimit, "retry-after-ms", "240", "retry-after", "1"), ok},
			policy: RetryPolicy{Jitter: func(time.Duration) time.Duration { return 0 }}, attempts: 2, sleeps: []time.Duration{240 * time.Millisecond},
		},
		{
			name:   "retry-after as HTTP date",
			steps:  []step{status(503, "", "retry-after", "Thu, 02 Jan 2025 03:04:35 GMT"), ok},
			policy: RetryPolicy{Jitter: func(time.Duration) time.Duration { return 0 }}, attempts: 2, sleeps: []time.Duration{30 * time.Second},
		},
		{
			name:  "backoff longer than retry-after wins",
			steps: []step{status(429, anthropicRateLimit, "retry-after", "0.5"), ok}, attempts: 2, sleeps: []time.Duration{time.Second},
		},
		{
			name:     "529 then 500 then 503: exponential backoff",
			steps:    []step{status(529, anthropicOverloaded), status(500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`), status(503, "<html>503 Service Unavailable</html>"), ok},
			attempts: 4, sleeps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second},
		},
		{
			name:     "backoff capped at MaxDelay",
			steps:    []step{status(500, ""), status(500, ""), status(500, ""), ok},
			policy:   RetryPolicy{BaseDelay: 3 * time.Second, MaxDelay: 5 * time.Second},
			attempts: 4, sleeps: []time.Duration{3 * time.Second, 5 * time.Second, 5 * time.Second},
		},
		{
			name:  "408 and 409 are retried",
			steps: []step{status(408, ""), status(409, ""), ok}, attempts: 3, sleeps: []time.Duration{time.Second, 2 * time.Second},
		},
		{
			name:    "gives up after MaxAttempts",
			steps:   []step{status(500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`)},
			wantErr: "giving up after 5 attempts: anthropic: HTTP 500 api_error: Internal server error", attempts: 5,
			sleeps: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second},
		},
		{
			name:  "MaxAttempts 1 disables retries",
			steps: []step{status(503, "")}, policy: RetryPolicy{MaxAttempts: 1}, wantErr: "giving up after 1 attempt:", attempts: 1,
		},
		{
			name:  "400 is not retried",
			steps: []step{status(400, anthropicInvalid), ok}, wantErr: "HTTP 400 invalid_request_error: max_tokens: Field required", attempts: 1,
		},
		{
			name:  "401 is not retried",
			steps: []step{status(401, anthropicAuth), ok}, wantErr: "HTTP 401 authentication_error", attempts: 1,
		},
		{
			name:  "x-should-retry false stops a 429",
			steps: []step{status(429, anthropicRateLimit, "x-should-retry", "false"), ok}, wantErr: "HTTP 429", attempts: 1,
		},
		{
			name:  "x-should-retry true does not make a 400 retryable",
			steps: []step{status(400, anthropicInvalid, "x-should-retry", "true"), ok}, wantErr: "HTTP 400", attempts: 1,
		},
		{
			name:  "retry-after beyond the budget gives up at once",
			steps: []step{status(429, anthropicRateLimit, "retry-after", "3600"), ok}, wantErr: "would pass the 10m0s retry budget", attempts: 1,
		},
		{
			name:    "budget ends the backoff",
			steps:   []step{status(500, "")},
			policy:  RetryPolicy{MaxAttempts: 100, BaseDelay: time.Minute, MaxDelay: time.Minute, MaxElapsed: 150 * time.Second},
			wantErr: "retry budget", attempts: 3, sleeps: []time.Duration{time.Minute, time.Minute},
		},
		{name: "connection reset", steps: []step{hangUp(true), ok}, attempts: 2, sleeps: []time.Duration{time.Second}},
		{name: "connection closed before the answer", steps: []step{hangUp(false), ok}, attempts: 2, sleeps: []time.Duration{time.Second}},
		{
			name:  "stream cut midway restarts the deltas",
			steps: []step{serveFixture("anthropic/truncated.sse"), ok}, attempts: 2, sleeps: []time.Duration{time.Second}, wantResets: 1,
		},
		{
			name:  "overloaded error event midway",
			steps: []step{serveFixture("anthropic/overloaded.sse"), ok}, attempts: 2, sleeps: []time.Duration{time.Second}, wantResets: 1,
		},
		{
			name:  "invalid request error event is final",
			steps: []step{serveFixture("anthropic/invalid_request.sse"), ok}, wantErr: "stream error invalid_request_error", attempts: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := newFakeProvider(t, tt.steps...)
			clock := newFakeClock()
			opts := testOptions(t, fp.URL, clock, nil)
			if tt.policy.Jitter == nil {
				tt.policy.Jitter = opts.Retry.Jitter
			}
			opts.Retry = tt.policy
			p, err := NewAnthropic("claude-haiku-4-5", opts)
			if err != nil {
				t.Fatal(err)
			}
			var log deltaLog
			resp, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("count")}}}}, log.add)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if resp.Text != "One, two, th" || log.text.String() != resp.Text {
					t.Errorf("Complete text %q, streamed %q, want the fixture's", resp.Text, log.text.String())
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Complete error = %v, want it to contain %q", err, tt.wantErr)
			}
			if n := len(fp.requests()); n != tt.attempts {
				t.Errorf("attempts = %d, want %d", n, tt.attempts)
			}
			if got := clock.slept(); !reflect.DeepEqual(got, tt.sleeps) && (len(got) != 0 || len(tt.sleeps) != 0) {
				t.Errorf("waits = %v, want %v", got, tt.sleeps)
			}
			if log.reset != tt.wantResets {
				t.Errorf("reset deltas = %d, want %d", log.reset, tt.wantResets)
			}
		})
	}
}

func TestAPIErrorDetails(t *testing.T) {
	tests := []struct {
		name     string
		step     step
		want     APIError
		overflow bool
	}{
		{
			"anthropic overloaded", status(529, anthropicOverloaded, "request-id", "req_hdr"),
			APIError{Provider: "anthropic", StatusCode: 529, Type: "overloaded_error", Message: "Overloaded", RequestID: "req_hdr", Retryable: true},
			false,
		},
		{
			"anthropic body request id", status(529, anthropicOverloaded),
			APIError{Provider: "anthropic", StatusCode: 529, Type: "overloaded_error", Message: "Overloaded", RequestID: "req_011CSHoEeqs5C35K2UUqR7Fy", Retryable: true},
			false,
		},
		{
			"anthropic prompt too long", status(400, anthropicTooLong),
			APIError{Provider: "anthropic", StatusCode: 400, Type: "invalid_request_error", Message: "prompt is too long: 208310 tokens > 200000 maximum"},
			true,
		},
		{
			"openai context length", status(400, openaiContext),
			APIError{
				Provider: "anthropic", StatusCode: 400, Type: "invalid_request_error", Code: "context_length_exceeded",
				Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
			},
			true,
		},
		{
			"vllm numeric code", status(400, `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.","type":"BadRequestError","param":null,"code":400}`),
			APIError{
				Provider: "anthropic", StatusCode: 400, Type: "BadRequestError", Code: "400",
				Message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
			},
			true,
		},
		{
			"llama.cpp context size", status(400, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`),
			APIError{
				Provider: "anthropic", StatusCode: 400, Type: "exceed_context_size_error", Code: "400",
				Message: "the request exceeds the available context size, try increasing it",
			},
			true,
		},
		{
			"ollama string error", status(404, `{"error":"model \"llama9\" not found, try pulling it first"}`),
			APIError{Provider: "anthropic", StatusCode: 404, Message: `model "llama9" not found, try pulling it first`},
			false,
		},
		{
			"html gateway error", status(502, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n</html>"),
			APIError{Provider: "anthropic", StatusCode: 502, Message: "<html> <head><title>502 Bad Gateway</title></head> </html>", Retryable: true},
			false,
		},
		{
			"empty body", status(503, ""),
			APIError{Provider: "anthropic", StatusCode: 503, Message: "Service Unavailable", Retryable: true},
			false,
		},
		{
			"huge body is cut", status(400, `{"error":{"message":"`+strings.Repeat("x", 5000)+`"}}`),
			APIError{Provider: "anthropic", StatusCode: 400, Message: strings.Repeat("x", maxErrorMessage) + "…"},
			false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := newFakeProvider(t, tt.step)
			opts := testOptions(t, fp.URL, newFakeClock(), nil)
			opts.Retry.MaxAttempts = 1
			p, err := NewAnthropic("claude", opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}, nil)
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("Complete = %v, want an APIError", err)
			}
			if !reflect.DeepEqual(*ae, tt.want) {
				t.Errorf("APIError = %+v\nwant %+v", *ae, tt.want)
			}
			if got := errors.Is(err, ErrContextOverflow); got != tt.overflow {
				t.Errorf("errors.Is(err, ErrContextOverflow) = %v, want %v", got, tt.overflow)
			}
		})
	}
}

// TestStreamErrorsRetriedAcrossAPIs checks each API's mid-stream error form
// is classified and retried.
func TestStreamErrorsRetriedAcrossAPIs(t *testing.T) {
	tests := []struct {
		name, spec, fail, ok string
	}{
		{"openai server_error chunk", "openai:gpt-4.1", "chat/server_error.sse", "chat/text.sse"},
		{"compatible vllm 500 chunk", "openai-compatible:m", "chat/vllm_error.sse", "chat/text.sse"},
		{"compatible cut stream", "openai-compatible:m", "chat/truncated.sse", "chat/text.sse"},
		{"responses failed", "openai-responses:gpt-5", "responses/failed.sse", "responses/text.sse"},
		{"responses cut stream", "openai-responses:gpt-5", "responses/truncated.sse", "responses/text.sse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := newFakeProvider(t, serveFixture(tt.fail), serveFixture(tt.ok))
			p, err := New(tt.spec, testOptions(t, fp.URL+"/v1", newFakeClock(), nil))
			if err != nil {
				t.Fatal(err)
			}
			var log deltaLog
			resp, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}, log.add)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if n := len(fp.requests()); n != 2 {
				t.Errorf("attempts = %d, want 2", n)
			}
			log.check(t, resp)
		})
	}
}

func TestIdleTimeout(t *testing.T) {
	for _, headers := range []bool{false, true} {
		name := map[bool]string{false: "before headers", true: "after headers"}[headers]
		t.Run(name, func(t *testing.T) {
			fp := newFakeProvider(t, stall(headers), serveFixture("anthropic/max_tokens.sse"))
			opts := testOptions(t, fp.URL, newFakeClock(), nil)
			opts.IdleTimeout = 100 * time.Millisecond
			p, err := NewAnthropic("claude", opts)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}, nil)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if resp.Text != "One, two, th" || len(fp.requests()) != 2 {
				t.Errorf("Complete = %q after %d attempts, want the fixture after 2", resp.Text, len(fp.requests()))
			}
		})
	}
	t.Run("gives up with a timeout error", func(t *testing.T) {
		fp := newFakeProvider(t, stall(true))
		opts := testOptions(t, fp.URL, newFakeClock(), nil)
		opts.IdleTimeout = 50 * time.Millisecond
		opts.Retry.MaxAttempts = 2
		p, err := NewAnthropic("claude", opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}, nil)
		if err == nil || !strings.Contains(err.Error(), "no data from the provider after 50ms") {
			t.Errorf("Complete = %v, want an idle timeout", err)
		}
	})
}

func TestCancel(t *testing.T) {
	req := Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}
	t.Run("mid-stream", func(t *testing.T) {
		left := make(chan struct{})
		fp := newFakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			close(left)
		})
		p, err := NewAnthropic("claude", testOptions(t, fp.URL, newFakeClock(), nil))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		_, err = p.Complete(ctx, req, func(d Delta) {
			if d.Kind == DeltaText {
				cancel()
			}
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Complete = %v, want context.Canceled", err)
		}
		<-left // the server saw the client go
		if n := len(fp.requests()); n != 1 {
			t.Errorf("attempts = %d, want 1", n)
		}
	})
	t.Run("during backoff", func(t *testing.T) {
		fp := newFakeProvider(t, status(503, ""))
		clock := newFakeClock()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		clock.onSleep = cancel
		p, err := NewAnthropic("claude", testOptions(t, fp.URL, clock, nil))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Complete(ctx, req, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Complete = %v, want context.Canceled", err)
		}
		if n := len(fp.requests()); n != 1 {
			t.Errorf("attempts = %d, want 1", n)
		}
	})
	t.Run("before the call", func(t *testing.T) {
		fp := newFakeProvider(t, serveFixture("anthropic/max_tokens.sse"))
		p, err := NewAnthropic("claude", testOptions(t, fp.URL, newFakeClock(), nil))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.Complete(ctx, req, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("Complete = %v, want context.Canceled", err)
		}
	})
}

func TestResponseTooLarge(t *testing.T) {
	fp := newFakeProvider(t, serveFixture("anthropic/tool_use.sse"))
	opts := testOptions(t, fp.URL, newFakeClock(), nil)
	opts.MaxResponseBytes = 1000
	p, err := NewAnthropic("claude", opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}, nil)
	if !errors.Is(err, errBodyTooLarge) {
		t.Fatalf("Complete = %v, want errBodyTooLarge", err)
	}
	if n := len(fp.requests()); n != 1 {
		t.Errorf("attempts = %d, want 1 (an oversized reply is not retried)", n)
	}
}

// TestNoRedirect checks that a redirect is an error, not a second request
// carrying the key to another host.
func TestNoRedirect(t *testing.T) {
	other := newFakeProvider(t, serveFixture("anthropic/max_tokens.sse"))
	fp := newFakeProvider(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/messages", http.StatusTemporaryRedirect)
	})
	for _, hc := range []*http.Client{nil, {}} {
		opts := testOptions(t, fp.URL, newFakeClock(), nil)
		opts.HTTPClient = hc
		p, err := NewAnthropic("claude", opts)
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}, nil)
		var ae *APIError
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusTemporaryRedirect || ae.Retryable {
			t.Errorf("Complete = %v, want a final HTTP 307 error", err)
		}
	}
	if n := len(other.requests()); n != 0 {
		t.Errorf("the redirect target saw %d requests, want 0", n)
	}
}
