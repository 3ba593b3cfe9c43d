package model

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// echoKey answers with an error whose text holds the key the client sent.
func echoKey(code int, body func(key string) string, sse bool) step {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("x-api-key")
		if key == "" {
			key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		if sse {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, body(key))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("request-id", "req_"+key)
		w.Header().Set("x-request-id", "req_"+key)
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body(key))
	}
}

// TestKeyNeverInErrors makes servers echo the API key in every place an
// error can carry text, and checks that neither the returned error, in any
// format, nor the retry log holds the key or a large piece of it.
func TestKeyNeverInErrors(t *testing.T) {
	bodies := []struct {
		name string
		step step
	}{
		{"401 json", echoKey(401, func(k string) string {
			return `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + k + `"},"request_id":"req_` + k + `"}`
		}, false)},
		{"401 openai json", echoKey(401, func(k string) string {
			return `{"error":{"message":"Incorrect API key provided: ` + k + `.","type":"invalid_request_error","param":null,"code":"invalid_api_key ` + k + `"}}`
		}, false)},
		{"400 text", echoKey(400, func(k string) string { return "bad key " + k + "\n" + k }, false)},
		{"500 retried", echoKey(500, func(k string) string { return `{"error":{"message":"boom ` + k + `","type":"server_error"}}` }, false)},
		{"anthropic stream error", echoKey(200, func(k string) string {
			return "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"key " + k + "\"}}\n\n"
		}, true)},
		{"chat stream error", echoKey(200, func(k string) string {
			return "data: {\"error\":{\"message\":\"key " + k + "\",\"type\":\"invalid_request_error\",\"code\":\"" + k + "\"}}\n\n"
		}, true)},
		{"responses stream error", echoKey(200, func(k string) string {
			return "event: error\ndata: {\"type\":\"error\",\"code\":\"" + k + "\",\"message\":\"key " + k + "\"}\n\n"
		}, true)},
		{"event name", echoKey(200, func(k string) string { return "event: " + k + "\ndata: not json\n\n" }, true)},
	}
	specs := []string{"anthropic:claude", "openai:gpt-4.1", "openai-responses:gpt-5", "openai-compatible:m"}
	for _, b := range bodies {
		for _, spec := range specs {
			t.Run(b.name+"/"+spec, func(t *testing.T) {
				fp := newFakeProvider(t, b.step)
				logs := &syncBuffer{}
				opts := testOptions(t, fp.URL+"/v1", newFakeClock(), logs)
				opts.Retry.MaxAttempts = 3
				p, err := New(spec, opts)
				if err != nil {
					t.Fatal(err)
				}
				_, err = p.Complete(context.Background(), Request{Messages: []Message{{Role: RoleUser, Content: []Part{TextPart("x")}}}}, nil)
				if err == nil {
					t.Fatal("Complete succeeded against an error server")
				}
				for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
					if s := fmt.Sprintf(f, err); strings.Contains(s, testKey[4:16]) {
						t.Errorf("error formatted with %s holds the key: %s", f, s)
					}
				}
				var ae *APIError
				// Stream errors are APIErrors for the API whose format they are.
				native := map[string][]string{
					"anthropic stream error": {"anthropic:claude"},
					"chat stream error":      {"openai:gpt-4.1", "openai-compatible:m"},
					"responses stream error": {"openai-responses:gpt-5"},
					"event name":             {},
				}
				if want, ok := native[b.name]; !ok || slices.Contains(want, spec) {
					if !errors.As(err, &ae) {
						t.Errorf("Complete = %v, want an APIError still", err)
					} else if !strings.Contains(ae.Message, "[redacted]") {
						t.Errorf("APIError message %q, want the key replaced by [redacted]", ae.Message)
					}
				}
				if s := logs.String(); strings.Contains(s, testKey[4:16]) {
					t.Errorf("log holds the key: %s", s)
				}
			})
		}
	}
}
