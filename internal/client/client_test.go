package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/event"
)

const testKey = "airlock_0123456789abcdef0123456789abcdef0123456789abcdef"

func newClient(t *testing.T, url string, o client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, testKey, o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, url, key string
		insecure       bool
		wantErr        string
	}{
		{name: "loopback http", url: "http://127.0.0.1:8080", key: testKey},
		{name: "ipv6 loopback", url: "http://[::1]:8080/", key: testKey},
		{name: "localhost", url: "http://localhost:8080", key: testKey},
		{name: "https with a prefix", url: "https://airlock.example/api/", key: testKey},
		{name: "insecure allowed", url: "http://10.0.0.1:8080", key: testKey, insecure: true},
		{name: "plain http beyond loopback", url: "http://10.0.0.1:8080", key: testKey, wantErr: "clear text"},
		{name: "another scheme", url: "ftp://127.0.0.1", key: testKey, wantErr: "want http:// or https://"},
		{name: "no host", url: "http://", key: testKey, wantErr: "no host"},
		{name: "credentials in the URL", url: "https://user:pw@airlock.example", key: testKey, wantErr: "must not hold credentials"},
		{name: "a query", url: "https://airlock.example/?x=1", key: testKey, wantErr: "query"},
		{name: "no key", url: "http://127.0.0.1", wantErr: "no API key"},
		{name: "a key with a space", url: "http://127.0.0.1", key: "airlock_ x", wantErr: "spaces or control characters"},
		{name: "a key with a newline", url: "http://127.0.0.1", key: "airlock_x\nHost: evil", wantErr: "spaces or control characters"},
		{name: "a long key", url: "http://127.0.0.1", key: strings.Repeat("k", 513), wantErr: "over 512 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.New(tc.url, tc.key, client.Options{Insecure: tc.insecure})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New(%q) = %v, want no error", tc.url, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New(%q) = %v, want an error with %q", tc.url, err, tc.wantErr)
			case err != nil && tc.key != "" && strings.Contains(err.Error(), tc.key):
				t.Fatalf("New's error %q holds the key", err)
			}
		})
	}
}

// TestRequests checks what goes over the wire: the bearer key, the
// method, escaped paths, queries and JSON bodies, and the decoding of the
// answers.
func TestRequests(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			t.Errorf("%s %s: Authorization %q", r.Method, r.URL, r.Header.Get("Authorization"))
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s %s", r.Method, r.URL.RequestURI(), body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/prefix/v1/runs" && r.Method == http.MethodGet:
			fmt.Fprint(w, `{"runs":[{"id":"run_1","tenant":"acme","status":"completed","events":3,"future_field":1}],"next_cursor":"c2"}`)
		case r.URL.Path == "/prefix/v1/runs" && r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"id":"run_2","status":"queued"}`)
		case strings.HasSuffix(r.URL.Path, "/approve"):
			fmt.Fprint(w, `{"id":"run_1.call_1_0","decision":"approved","by":"key_1"}`)
		case r.URL.Path == "/prefix/v1/policies/p1":
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"name":"p1","version":1,"hash":"sha256:00","new":true}`)
		default:
			fmt.Fprint(w, `{}`)
		}
	}))
	defer srv.Close()
	c := newClient(t, srv.URL+"/prefix/", client.Options{})
	ctx := context.Background()

	list, err := c.ListRuns(ctx, client.ListRunsOptions{Statuses: []event.Status{event.StatusCompleted, event.StatusFailed}, Limit: 2, Cursor: "c1", Oldest: true})
	if err != nil || len(list.Runs) != 1 || list.Runs[0].ID != "run_1" || list.Runs[0].Events != 3 || list.NextCursor != "c2" {
		t.Fatalf("ListRuns = %+v, %v", list, err)
	}
	run, err := c.CreateRun(ctx, api.CreateRunRequest{Task: "t", Script: "turns: []", Workspace: &api.WorkspaceSource{Upload: "upl_1"}, MaxSteps: 3})
	if err != nil || run.ID != "run_2" || run.Status != event.StatusQueued {
		t.Fatalf("CreateRun = %+v, %v", run, err)
	}
	if _, err := c.CancelRun(ctx, "run/../x", "why"); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Approve(ctx, "run_1.call_1_0", ""); err != nil || d.By != "key_1" {
		t.Fatalf("Approve = %+v, %v", d, err)
	}
	if _, err := c.Deny(ctx, "run_1.call_1_0", "no"); err != nil {
		t.Fatal(err)
	}
	v, err := c.PutPolicy(ctx, "p1", []byte("budgets: {}\n"))
	if err != nil || v.New == nil || !*v.New || v.Version != 1 {
		t.Fatalf("PutPolicy = %+v, %v", v, err)
	}
	if _, err := c.Events(ctx, "run_1", 5, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Credits(ctx, 7, 10); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /prefix/v1/runs?cursor=c1&limit=2&order=asc&status=completed&status=failed ",
		`POST /prefix/v1/runs {"task":"t","script":"turns: []","workspace":{"upload":"upl_1"},"max_steps":3}`,
		`POST /prefix/v1/runs/run%2F..%2Fx/cancel {"reason":"why"}`,
		`POST /prefix/v1/approvals/run_1.call_1_0/approve {}`,
		`POST /prefix/v1/approvals/run_1.call_1_0/deny {"reason":"no"}`,
		"POST /prefix/v1/policies/p1 budgets: {}\n",
		"GET /prefix/v1/runs/run_1/events?after=5&limit=64 ",
		"GET /prefix/v1/credits?after=7&limit=10 ",
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   client.Error
	}{
		{
			name: "the API's shape", status: 404, body: `{"code":"not_found","message":"no such run","request_id":"req_1"}`,
			want: client.Error{Status: 404, Code: "not_found", Message: "no such run", RequestID: "req_1"},
		},
		{
			name: "rate limited", status: 429, header: map[string]string{"Retry-After": "30"}, body: `{"code":"rate_limited","message":"slow down","request_id":"req_2"}`,
			want: client.Error{Status: 429, Code: "rate_limited", Message: "slow down", RequestID: "req_2", RetryAfter: 30 * time.Second},
		},
		{
			name: "a proxy's page", status: 502, header: map[string]string{"X-Request-Id": "req_3"}, body: `<html>bad gateway</html>`,
			want: client.Error{Status: 502, Code: "unavailable", Message: "bad gateway", RequestID: "req_3"},
		},
		{
			name: "control characters", status: 400, body: `{"code":"bad_request","message":"bad \u001b[31mred\u001b[0m\nline","request_id":"r"}`,
			want: client.Error{Status: 400, Code: "bad_request", Message: "bad  [31mred [0m line", RequestID: "r"},
		},
		{
			name: "a code outside the set's form", status: 403, body: `{"code":"Forbidden!","message":"x"}`,
			want: client.Error{Status: 403, Code: "forbidden", Message: "forbidden"},
		},
		{
			name: "a redirect", status: 302, header: map[string]string{"Location": "http://127.0.0.1:1/elsewhere"},
			want: client.Error{Status: 302, Code: "bad_request", Message: "the server answered with a redirect, which this client does not follow (is AIRLOCK_URL the API's address?)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			c := newClient(t, srv.URL, client.Options{})
			_, err := c.Run(context.Background(), "run_1")
			var e *client.Error
			if !errors.As(err, &e) {
				t.Fatalf("Run = %v, want *client.Error", err)
			}
			if *e != tc.want {
				t.Errorf("Run = %#v, want %#v", *e, tc.want)
			}
			if !client.IsCode(err, tc.want.Code) {
				t.Errorf("IsCode(%v, %q) = false", err, tc.want.Code)
			}
		})
	}
}

// TestRateLimitRetry: a request the rate limit refused is sent again, body
// and all, as often as rateRetries allows.
func TestRateLimitRetry(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != `{"task":"t"}` {
			t.Errorf("attempt %d: body %q", n.Load()+1, b)
		}
		if n.Add(1) < 3 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"code":"rate_limited","message":"slow down","request_id":"r"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"run_1"}`)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, client.Options{})
	r, err := c.CreateRun(context.Background(), api.CreateRunRequest{Task: "t"})
	if err != nil || r.ID != "run_1" || n.Load() != 3 {
		t.Fatalf("CreateRun = %+v, %v after %d attempts", r, err, n.Load())
	}
	// An upload's body is a stream: it is not sent again.
	n.Store(0)
	_, err = c.Upload(context.Background(), strings.NewReader(`{"task":"t"}`))
	if !client.IsCode(err, api.CodeRateLimited) || n.Load() != 1 {
		t.Fatalf("Upload = %v after %d attempts, want rate_limited after 1", err, n.Load())
	}
}

// TestKeepsConnections: a client used by several goroutines at once keeps
// their connections for the next requests instead of dialling again.
func TestKeepsConnections(t *testing.T) {
	var dials atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // the requests of a round overlap
		fmt.Fprint(w, `{"runs":[]}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newClient(t, srv.URL, client.Options{})
	const n = 8
	for range 3 {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := c.ListRuns(context.Background(), client.ListRunsOptions{}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// n for the first round; the slack is for a connection the transport
	// puts back in its pool only after its request returned. With
	// net/http's 2 per host, each later round would dial n-2 more.
	if d := dials.Load(); d > n+n/2 {
		t.Fatalf("3 rounds of %d requests at once dialled %d connections, want at most %d", n, d, n+n/2)
	}
}

func TestBoundedAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"runs":[],"next_cursor":%q}`, strings.Repeat("x", 4096))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, client.Options{MaxResponse: 1024})
	if _, err := c.ListRuns(context.Background(), client.ListRunsOptions{}); err == nil || !strings.Contains(err.Error(), "over 1024 bytes") {
		t.Fatalf("ListRuns = %v, want the answer refused as too large", err)
	}
}

func TestDownload(t *testing.T) {
	content := []byte("--- a/x\n+++ b/x\n")
	sum := sha256.Sum256(content)
	good := "sha256:" + hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		name    string
		digest  string
		body    []byte
		length  string
		wantErr error
	}{
		{name: "whole", digest: good, body: content},
		{name: "another digest", digest: "sha256:" + strings.Repeat("0", 64), body: content, wantErr: client.ErrCorrupt},
		{name: "short", digest: good, body: content[:5], length: fmt.Sprint(len(content)), wantErr: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.EscapedPath() != "/v1/runs/run_1/artifacts/files/a%20b/c.txt" {
					t.Errorf("path %q", r.URL.EscapedPath())
				}
				w.Header().Set("X-Artifact-Digest", tc.digest)
				if tc.length != "" {
					w.Header().Set("Content-Length", tc.length)
				}
				_, _ = w.Write(tc.body)
			}))
			defer srv.Close()
			c := newClient(t, srv.URL, client.Options{})
			var buf bytes.Buffer
			n, err := c.Download(context.Background(), "run_1", "files/a b/c.txt", &buf)
			switch {
			case tc.wantErr == nil && (err != nil || !bytes.Equal(buf.Bytes(), content) || n != int64(len(content))):
				t.Fatalf("Download = %d, %v, %q", n, err, buf.Bytes())
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("Download = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// sseEvent is one event of a fake stream.
func sseEvent(t *testing.T, runID string, seq int64) string {
	t.Helper()
	ev := event.Event{RunID: runID, Seq: seq, Type: event.TypeRunStarted, Time: time.Unix(1764400000, 0).UTC(), Payload: json.RawMessage(`{}`)}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", seq, ev.Type, b)
}

// streamServer answers each connection of a stream with the next of
// answers, a function of the connection's Last-Event-ID.
func streamServer(t *testing.T, answers ...func(w http.ResponseWriter, last string)) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		i := len(lastIDs)
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		if i >= len(answers) {
			t.Errorf("connection %d: no more answers", i+1)
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		answers[i](w, r.Header.Get("Last-Event-ID"))
	}))
	t.Cleanup(srv.Close)
	return srv, &lastIDs
}

func sse(w http.ResponseWriter, frames ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, f := range frames {
		_, _ = io.WriteString(w, f)
	}
}

func TestFollow(t *testing.T) {
	const id = "run_01AAAAAAAAAAAAAAAAAAAAAAAA"
	end := `event: end` + "\n" + `data: {"status":"completed","last_seq":3}` + "\n\n"
	for _, tc := range []struct {
		name    string
		after   int64
		answers []func(t *testing.T) func(http.ResponseWriter, string)
		// reconnects is Options.Reconnects.
		reconnects int
		want       []int64
		wantLast   []string
		wantErr    string
		wantEnd    api.StreamEnd
	}{
		{
			name: "whole",
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) {
						sse(w, "retry: 0\n\n", ": keepalive\n\n", sseEvent(t, id, 1), sseEvent(t, id, 2), sseEvent(t, id, 3), end)
					}
				},
			},
			want: []int64{1, 2, 3}, wantLast: []string{""}, wantEnd: api.StreamEnd{Status: event.StatusCompleted, LastSeq: 3},
		},
		{
			name: "resumed with Last-Event-ID, duplicates dropped",
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w, "retry: 0\n\n", sseEvent(t, id, 1), sseEvent(t, id, 2)) }
				},
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) {
						sse(w, sseEvent(t, id, 1), sseEvent(t, id, 2), sseEvent(t, id, 3), end)
					}
				},
			},
			want: []int64{1, 2, 3}, wantLast: []string{"", "2"}, wantEnd: api.StreamEnd{Status: event.StatusCompleted, LastSeq: 3},
		},
		{
			name:  "from after, the server busy once",
			after: 2,
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w, "retry: 0\n\n") }
				},
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) {
						w.WriteHeader(http.StatusServiceUnavailable)
						fmt.Fprint(w, `{"code":"unavailable","message":"draining","request_id":"r"}`)
					}
				},
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w, sseEvent(t, id, 3), end) }
				},
			},
			want: []int64{3}, wantLast: []string{"2", "2", "2"}, wantEnd: api.StreamEnd{Status: event.StatusCompleted, LastSeq: 3},
		},
		{
			name:  "nothing left: 204",
			after: 3,
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { w.WriteHeader(http.StatusNoContent) }
				},
			},
			wantLast: []string{"3"}, wantEnd: api.StreamEnd{LastSeq: 3},
		},
		{
			name: "a gap",
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w, sseEvent(t, id, 1), sseEvent(t, id, 3), end) }
				},
			},
			want: []int64{1}, wantLast: []string{""}, wantErr: "event 3 after 1",
		},
		{
			name: "another run's event",
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w, sseEvent(t, "run_01BBBBBBBBBBBBBBBBBBBBBBBB", 1)) }
				},
			},
			wantLast: []string{""}, wantErr: "another run",
		},
		{
			name: "an end that skips events",
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w, sseEvent(t, id, 1), end) }
				},
			},
			want: []int64{1}, wantLast: []string{""}, wantErr: "malformed end",
		},
		{
			name: "an event over the size bound is final",
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) {
						sse(w, sseEvent(t, id, 1), "data: "+strings.Repeat("x", event.MaxEncodedSize+2048)+"\n\n")
					}
				},
			},
			want: []int64{1}, wantLast: []string{""}, wantErr: "event too large",
		},
		{
			name: "not found is final",
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) {
						w.WriteHeader(http.StatusNotFound)
						fmt.Fprint(w, `{"code":"not_found","message":"no such run","request_id":"r"}`)
					}
				},
			},
			wantLast: []string{""}, wantErr: "not_found: no such run",
		},
		{
			name:       "gives up",
			reconnects: 2,
			answers: []func(t *testing.T) func(http.ResponseWriter, string){
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w, "retry: 0\n\n", sseEvent(t, id, 1)) }
				},
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w) }
				},
				func(t *testing.T) func(http.ResponseWriter, string) {
					return func(w http.ResponseWriter, _ string) { sse(w) }
				},
			},
			want: []int64{1}, wantLast: []string{"", "1", "1"}, wantErr: "gave up after 3 attempts",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var answers []func(http.ResponseWriter, string)
			for _, a := range tc.answers {
				answers = append(answers, a(t))
			}
			srv, lastIDs := streamServer(t, answers...)
			c := newClient(t, srv.URL, client.Options{Reconnects: tc.reconnects})
			var got []int64
			e, err := c.Follow(context.Background(), id, tc.after, func(ev event.Event) error {
				got = append(got, ev.Seq)
				return nil
			})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Follow = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Follow = %v, want an error with %q", err, tc.wantErr)
			case e != tc.wantEnd:
				t.Errorf("Follow = %+v, want %+v", e, tc.wantEnd)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("events %v, want %v", got, tc.want)
			}
			if fmt.Sprint(*lastIDs) != fmt.Sprint(tc.wantLast) {
				t.Errorf("Last-Event-IDs %q, want %q", *lastIDs, tc.wantLast)
			}
		})
	}
}

// TestFollowIdle: a stream that stays silent past StreamIdle is dropped
// and resumed.
func TestFollowIdle(t *testing.T) {
	const id = "run_01AAAAAAAAAAAAAAAAAAAAAAAA"
	var mu sync.Mutex
	var lastIDs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(lastIDs)
		mu.Unlock()
		if n == 1 {
			// One event, then silence until the client goes away.
			sse(w, "retry: 0\n\n", sseEvent(t, id, 1))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		sse(w, sseEvent(t, id, 2), `event: end`+"\n"+`data: {"status":"failed","last_seq":2}`+"\n\n")
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, client.Options{StreamIdle: 50 * time.Millisecond})
	var got []int64
	e, err := c.Follow(context.Background(), id, 0, func(ev event.Event) error {
		got = append(got, ev.Seq)
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil || e.Status != event.StatusFailed || fmt.Sprint(got) != "[1 2]" || fmt.Sprint(lastIDs) != "[ 1]" {
		t.Fatalf("Follow = %+v, %v; events %v; Last-Event-IDs %q", e, err, got, lastIDs)
	}
}

// TestFollowCallbackError: the callback's error ends Follow at once.
func TestFollowCallbackError(t *testing.T) {
	const id = "run_01AAAAAAAAAAAAAAAAAAAAAAAA"
	srv, _ := streamServer(t, func(w http.ResponseWriter, _ string) { sse(w, sseEvent(t, id, 1), sseEvent(t, id, 2)) })
	c := newClient(t, srv.URL, client.Options{})
	stop := errors.New("stop")
	_, err := c.Follow(context.Background(), id, 0, func(event.Event) error { return stop })
	if !errors.Is(err, stop) {
		t.Fatalf("Follow = %v, want the callback's error", err)
	}
}
