package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
)

// countingBody is a request body of n bytes that counts what the client
// read of it (what it sent).
type countingBody struct {
	n, read int64
	sent    *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.read >= b.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), b.n-b.read))
	clear(p[:k])
	b.read += int64(k)
	b.sent.Add(int64(k))
	return k, nil
}

// TestExpectContinue: a client that announces a body over the route's
// limit and asks first (Expect: 100-continue, curl's default for large
// bodies) is answered 413 with the API's error body, and never 100
// Continue, so it sends none of the body; a body within the limit gets
// its 100 Continue and is read. The client is net/http's, over loopback
// HTTP/1.1.
func TestExpectContinue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{config: server.Config{MaxUpload: 1 << 20}})
	key := h.key("alpha", "admin")
	// The client waits this long for the server's word before it sends
	// the body anyway: long enough that it never does here.
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	post := func(method, path string, body io.Reader, size int64) (*http.Response, []byte, bool) {
		t.Helper()
		var got100 atomic.Bool
		trace := &httptrace.ClientTrace{
			Got100Continue: func() { got100.Store(true) },
			Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
				if code == http.StatusContinue {
					got100.Store(true)
				}
				return nil
			},
		}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), method, h.url+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = size
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Expect", "100-continue")
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s with Expect: 100-continue: %v", path, err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("POST %s: read the answer: %v", path, err)
		}
		if res.ProtoMajor != 1 || res.ProtoMinor != 1 {
			t.Fatalf("POST %s answered over %s, want HTTP/1.1", path, res.Proto)
		}
		return res, b, got100.Load()
	}

	for _, tt := range []struct {
		method, path string
		size, limit  int64
	}{
		{"POST", "/v1/runs", 10 << 20, server.DefaultMaxBody},
		{"POST", "/v1/runs", server.DefaultMaxBody + 1, server.DefaultMaxBody},
		{"POST", "/v1/uploads", 10 << 20, 1 << 20},
		{"POST", "/v1/policies/big", 10 << 20, store.MaxPolicyLen},
		{"PUT", "/v1/secrets/BIG", 10 << 20, -1},
		{"POST", "/ui/login", 10 << 20, -1},
	} {
		var sent atomic.Int64
		res, b, got100 := post(tt.method, tt.path, &countingBody{n: tt.size, sent: &sent}, tt.size)
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s of %d bytes = %d %s, want 413", tt.method, tt.path, tt.size, res.StatusCode, b)
			continue
		}
		if got100 {
			t.Errorf("%s %s of %d bytes: the server sent 100 Continue before its 413", tt.method, tt.path, tt.size)
		}
		if n := sent.Load(); n != 0 {
			t.Errorf("%s %s: the client sent %d bytes of a body the server refused", tt.method, tt.path, n)
		}
		var e api.ErrorBody
		if err := json.Unmarshal(b, &e); err != nil || e.Code != api.CodeTooLarge || e.RequestID == "" || !strings.Contains(e.Message, "over") {
			t.Errorf("%s %s: body %s, want the API's too_large error (%v)", tt.method, tt.path, b, err)
		}
		if tt.limit > 0 && !strings.Contains(e.Message, strconv.FormatInt(tt.limit, 10)) {
			t.Errorf("%s %s: message %q does not name the limit %d", tt.method, tt.path, e.Message, tt.limit)
		}
	}

	// Within the limit, the client is told to go on, and the body is
	// read.
	body, _ := json.Marshal(map[string]any{"task": "asked first", "script": finishScript})
	res, b, got100 := post("POST", "/v1/runs", bytes.NewReader(body), int64(len(body)))
	if res.StatusCode != http.StatusCreated || !got100 {
		t.Errorf("POST /v1/runs of %d bytes = %d %s, 100 Continue %v; want 201 after a 100 Continue", len(body), res.StatusCode, b, got100)
	}
}
