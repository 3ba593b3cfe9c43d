package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/server/servertest"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// harness is the API on a real SQLite store, blob directory, engine and
// (as root) sandbox backend, served over loopback HTTP, with two tenants,
// alpha and beta, and keys for them.
type harness struct {
	t     *testing.T
	url   string
	store *sqlite.Store
	blobs *blob.Store
	eng   *engine.Engine
	srv   *server.Server
	keys  *auth.Keys
	clock *clock.Fake
	// secrets is the server's secret store, red its redactor.
	secrets *secret.Store
	red     *secret.Redactor

	// logs holds the server's log; bodies every response body the
	// harness received (both guarded by seenMu).
	seenMu sync.Mutex
	logs   bytes.Buffer
	bodies bytes.Buffer

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	driving map[string]bool
	resumes []string
}

type harnessOptions struct {
	// drive starts a worker loop that drives queued runs (needs root).
	drive bool
	// config tunes the server.
	config server.Config
	// clock, when set, is the server's clock (rate limits).
	clock *clock.Fake
	// noSecrets serves without a secret store.
	noSecrets bool
	// wrapStore, when set, wraps the store the server (not the engine)
	// uses.
	wrapStore func(store.Store) store.Store
	// resolveImage is the server's (templates' images); nil: none.
	resolveImage server.ImageResolver
	// sandboxes is the server's (/v1/sandboxes); nil: none.
	sandboxes server.Sandboxes
	// uploadBudget is the server's (tenants' upload budgets); nil: none.
	uploadBudget func(tenant string) int64
}

// decideByPolicy is the engine's policy hook, as the host's: the run's
// policy document decides each tool call.
func decideByPolicy(_ context.Context, q engine.PolicyQuery) event.PolicyDecision {
	doc := policy.Default()
	if len(q.Run.Policy) > 0 {
		var err error
		if doc, err = policy.Parse(q.Run.Policy); err != nil {
			return event.PolicyDecision{Decision: event.DecisionDeny, Rule: "policy", Reason: "does not load"}
		}
	}
	return engine.DecideTool(doc, q)
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	if o.drive && os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var backend sandbox.Backend = servertest.NoSandboxes{}
	if o.drive {
		b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		backend = b
	}
	feed := server.NewFeed()
	eng, err := engine.New(engine.Options{
		Store: st, Blobs: bl, Backend: backend, LockDir: filepath.Join(dir, "locks"),
		Poll: 20 * time.Millisecond, Policy: decideByPolicy, OnEvents: feed.Publish,
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.config.Rate == 0 {
		// Tests poll: no limit unless the test sets one.
		o.config.Rate, o.config.Burst = 1e6, 1e6
	}
	h := &harness{
		t: t, store: st, blobs: bl, eng: eng, keys: auth.NewKeys(st, nil), clock: o.clock, driving: map[string]bool{},
		red: secret.NewRedactor(),
	}
	if h.secrets, err = secret.Open(filepath.Join(dir, "secrets"), secret.KeyFile(filepath.Join(dir, "secrets", "key"))); err != nil {
		t.Fatal(err)
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	opts := server.Options{
		Store: st, Blobs: bl, Engine: eng, Auth: h.keys, Feed: feed, Config: o.config, Secrets: h.secrets, Redactor: h.red,
		Logger: slog.New(slog.NewTextHandler(testWriter{t: t, h: h}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if o.noSecrets {
		opts.Secrets = nil
	}
	opts.ResolveImage = o.resolveImage
	opts.Sandboxes = o.sandboxes
	opts.UploadBudget = o.uploadBudget
	if o.wrapStore != nil {
		opts.Store = o.wrapStore(st)
	}
	if o.clock != nil {
		opts.Now = o.clock.Now
	}
	if o.drive {
		opts.Resume = func(_ context.Context, id string) error {
			h.mu.Lock()
			h.resumes = append(h.resumes, id)
			h.mu.Unlock()
			return nil
		}
	}
	if h.srv, err = server.New(opts); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = h.srv.HTTPServer()
	ts.Start()
	h.url = ts.URL
	t.Cleanup(func() {
		h.srv.CloseStreams()
		ts.Close()
		h.cancel()
		h.wg.Wait()
	})
	for _, tenant := range []string{"alpha", "beta"} {
		if _, err := st.CreateTenant(context.Background(), tenant); err != nil {
			t.Fatal(err)
		}
	}
	if o.drive {
		h.wg.Add(1)
		go h.worker()
	}
	return h
}

// testWriter sends the server's log to the test's, and keeps it in the
// harness.
type testWriter struct {
	t *testing.T
	h *harness
}

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	w.h.seenMu.Lock()
	w.h.logs.Write(b)
	w.h.seenMu.Unlock()
	return len(b), nil
}

// seen returns the server's log so far and every response body the
// harness received.
func (h *harness) seen() (logs, bodies []byte) {
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	return bytes.Clone(h.logs.Bytes()), bytes.Clone(h.bodies.Bytes())
}

// worker drives queued and unfinished runs, like airlock serve's workers.
func (h *harness) worker() {
	defer h.wg.Done()
	for {
		h.mu.Lock()
		resumes := h.resumes
		h.resumes = nil
		h.mu.Unlock()
		for _, id := range resumes {
			if !h.start(id, true) {
				h.mu.Lock()
				h.resumes = append(h.resumes, id) // after the drive that paused it ends
				h.mu.Unlock()
			}
		}
		runs, _ := store.Unfinished(h.ctx, h.store)
		for _, r := range runs {
			h.start(r.ID, false)
		}
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// start drives run id unless it is driven already (false).
func (h *harness) start(id string, resume bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.driving[id] || h.ctx.Err() != nil {
		return false
	}
	h.driving[id] = true
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if resume {
			_, _ = h.eng.Resume(h.ctx, id)
		} else {
			_, _ = h.eng.Drive(h.ctx, id)
		}
		h.mu.Lock()
		delete(h.driving, id)
		h.mu.Unlock()
	}()
	return true
}

// key makes an API key of tenant with scopes.
func (h *harness) key(tenant string, scopes ...string) string {
	h.t.Helper()
	k, _, err := h.keys.Create(context.Background(), tenant, "test", scopes, auth.FormatAirlock)
	if err != nil {
		h.t.Fatal(err)
	}
	return k
}

// response is one answer of the API.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
}

// errBody decodes the error shape, checking it is complete.
func (r response) errBody(t *testing.T) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	if e.Code == "" || e.Message == "" || e.RequestID == "" || e.RequestID != r.header.Get("X-Request-Id") {
		t.Fatalf("error body %+v (X-Request-Id %q) is incomplete", e, r.header.Get("X-Request-Id"))
	}
	if want, ok := api.Codes[e.Code]; !ok || want != r.status {
		t.Fatalf("code %q with status %d: not in the closed set, or the wrong status", e.Code, r.status)
	}
	return e
}

// do sends a request; body is JSON-encoded unless it is []byte or nil.
func (h *harness) do(method, path, key string, body any, headers ...string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.url+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("%s %s: read: %v", method, path, err)
	}
	h.seenMu.Lock()
	h.bodies.Write(b)
	h.seenMu.Unlock()
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// must sends a request and fails the test unless the status is want.
func (h *harness) must(want int, method, path, key string, body any) response {
	h.t.Helper()
	r := h.do(method, path, key, body)
	if r.status != want {
		h.t.Fatalf("%s %s = %d %s, want %d", method, path, r.status, r.body, want)
	}
	return r
}

// createRun creates a scripted run through the API and returns it.
func (h *harness) createRun(key string, req map[string]any) api.Run {
	h.t.Helper()
	var run api.Run
	h.must(http.StatusCreated, "POST", "/v1/runs", key, req).json(h.t, &run)
	return run
}

// waitStatus polls the run until its status is one of want.
func (h *harness) waitStatus(key, id string, want ...event.Status) api.Run {
	h.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var run api.Run
		h.must(http.StatusOK, "GET", "/v1/runs/"+id, key, nil).json(h.t, &run)
		for _, w := range want {
			if run.Status == w {
				return run
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("run %s is %s after 90s, want %v (%s)", id, run.Status, want, run.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sse is one server-sent event.
type sse struct {
	id    string
	event string
	data  string
}

// stream reads a run's event stream until it ends (or stop says so),
// with extra headers; it returns the events, the comments and the status.
// It may run in a goroutine of its own: it reports problems with Error.
func (h *harness) stream(key, path string, stop func(sse) bool, headers ...string) ([]sse, []string, int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", h.url+path, nil)
	if err != nil {
		h.t.Error(err)
		return nil, nil, 0
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Error(err)
		return nil, nil, 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		h.t.Errorf("Content-Type %q", ct)
		return nil, nil, resp.StatusCode
	}
	var evs []sse
	var comments []string
	var cur sse
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" || cur.data != "" {
				evs = append(evs, cur)
				if stop != nil && stop(cur) {
					return evs, comments, resp.StatusCode
				}
			}
			cur = sse{}
		case strings.HasPrefix(line, ":"):
			comments = append(comments, line)
			if stop != nil && stop(sse{event: "comment", data: line}) {
				return evs, comments, resp.StatusCode
			}
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "retry: "):
		default:
			h.t.Errorf("unexpected stream line %q", line)
			return evs, comments, resp.StatusCode
		}
	}
	return evs, comments, resp.StatusCode
}

// seqs checks that events are the run's log entries with consecutive
// seqs starting at from, ending with an "end" event when ended, and
// returns the seqs.
func seqs(t *testing.T, evs []sse, from int64, ended bool) []int64 {
	t.Helper()
	var out []int64
	for i, e := range evs {
		if e.event == "end" {
			if !ended || i != len(evs)-1 {
				t.Fatalf("end event at %d of %d", i, len(evs))
			}
			continue
		}
		n, err := strconv.ParseInt(e.id, 10, 64)
		if err != nil {
			t.Fatalf("event id %q", e.id)
		}
		var ev event.Event
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatalf("event data %q: %v", e.data, err)
		}
		if ev.Seq != n || string(ev.Type) != e.event {
			t.Fatalf("event %d: id %s, event %s, data seq %d type %s", i, e.id, e.event, ev.Seq, ev.Type)
		}
		if want := from + int64(len(out)); n != want {
			t.Fatalf("event seq %d, want %d (a gap or a duplicate): seqs so far %v", n, want, out)
		}
		out = append(out, n)
	}
	if ended && (len(evs) == 0 || evs[len(evs)-1].event != "end") {
		t.Fatalf("the stream did not end with an end event")
	}
	return out
}
