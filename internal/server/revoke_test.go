package server_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/server/servertest"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// openStream opens a run's event stream with client (a key in header, or
// a browser's cookie jar) and returns once the stream's first event came;
// the channel is closed when the server ends the stream. The stream is
// read in a goroutine that the test's end stops.
func openStream(t *testing.T, client *http.Client, url string, header ...string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		cancel()
		t.Fatalf("GET %s = %d, want a stream", url, res.StatusCode)
	}
	first, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		seen := false
		for sc.Scan() {
			if !seen && strings.HasPrefix(sc.Text(), "id: ") {
				seen = true
				close(first)
			}
		}
		if !seen {
			close(first)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-ended
	})
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatalf("GET %s: no event in 30s", url)
	}
	select {
	case <-ended:
		t.Fatalf("GET %s: the stream ended after its first event", url)
	default:
	}
	return ended
}

// waitEnded waits for a stream to end; generously: the test is that it
// ends, not how fast.
func waitEnded(t *testing.T, ended <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is still open 30s after its key was revoked", what)
	}
}

// bearer is the header of key.
func bearer(key string) []string { return []string{"Authorization", "Bearer " + key} }

// TestRevokeKey: revoking a key through the API (POST
// /v1/keys/{id}/revoke) ends its web UI sessions and its event streams on
// this server at once, those opened with the key and those of its
// session alike, and nothing of any other key. The server's clock is a
// fake that does not move and its stream poll is a minute, longer than
// the test waits: neither a session's recheck nor a poll can be what ends
// them, only the revocation itself.
func TestRevokeKey(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	h := newHarness(t, harnessOptions{clock: clk, config: server.Config{StreamPoll: time.Minute, Keepalive: 10 * time.Minute}})
	admin := h.key("alpha", "admin")
	other := h.key("alpha", "runs:read")
	victim, meta, err := h.keys.Create(context.Background(), "alpha", "leaked", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	if err != nil {
		t.Fatal(err)
	}
	run := h.createRun(admin, map[string]any{"task": "stays queued", "script": finishScript})
	stream := h.url + "/v1/runs/" + run.ID + "/events/stream"

	b := newBrowser(t, h.url, nil)
	b.login(victim)
	byKey := openStream(t, http.DefaultClient, stream, bearer(victim)...)
	bySession := openStream(t, b.client, stream)
	byOther := openStream(t, http.DefaultClient, stream, bearer(other)...)
	if st := b.do("GET", "/v1/runs", nil).status; st != http.StatusOK {
		t.Fatalf("the session before the revocation = %d", st)
	}

	// Only the tenant's own admin may revoke, only its own keys, by id.
	for _, tt := range []struct {
		name, key, id string
		code          string
	}{
		{"another tenant's admin", h.key("beta", "admin"), meta.ID, api.CodeNotFound},
		{"a key without admin", other, meta.ID, api.CodeForbidden},
		{"an unknown id", admin, "key_0000000000000000", api.CodeNotFound},
		{"a malformed id", admin, "key_XYZ", api.CodeNotFound},
		{"the key itself, not its id", admin, victim, api.CodeNotFound},
	} {
		r := h.do("POST", "/v1/keys/"+tt.id+"/revoke", tt.key, nil)
		if r.status == http.StatusNoContent || r.errBody(t).Code != tt.code {
			t.Errorf("revoke by %s = %d %s, want %s", tt.name, r.status, r.body, tt.code)
		}
	}
	if st := b.do("GET", "/v1/runs", nil).status; st != http.StatusOK {
		t.Fatalf("the session after refused revocations = %d", st)
	}

	h.must(http.StatusNoContent, "POST", "/v1/keys/"+meta.ID+"/revoke", admin, nil)
	waitEnded(t, byKey, "a stream opened with the key")
	waitEnded(t, bySession, "a stream of the key's session")
	if r := b.do("GET", "/v1/runs", nil); r.status != http.StatusUnauthorized {
		t.Errorf("the session's first request after the revocation = %d %s, want 401", r.status, r.body)
	}
	if st := h.do("GET", "/v1/runs", victim, nil).status; st != http.StatusUnauthorized {
		t.Errorf("the key after its revocation = %d, want 401", st)
	}
	select {
	case <-byOther:
		t.Error("another key's stream ended with the revoked key's")
	default:
	}
	// Revoking again succeeds and changes nothing.
	h.must(http.StatusNoContent, "POST", "/v1/keys/"+meta.ID+"/revoke", admin, nil)
	if st := h.do("GET", "/v1/runs", other, nil).status; st != http.StatusOK {
		t.Errorf("another key after the revocation = %d", st)
	}
}

// TestRevokeKeyInStore: a key revoked in the store directly (airlock keys
// revoke, from another process) ends the key's streams within the
// server's stream poll, and its session at its first use a poll after
// its key was last found live (the server's clock, which sessions go by,
// is a fake that the test moves by one poll).
func TestRevokeKeyInStore(t *testing.T) {
	t.Parallel()
	const poll = 20 * time.Millisecond
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	h := newHarness(t, harnessOptions{clock: clk, config: server.Config{StreamPoll: poll, Keepalive: 10 * time.Minute}})
	admin := h.key("alpha", "admin")
	victim, meta, err := h.keys.Create(context.Background(), "alpha", "leaked", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	if err != nil {
		t.Fatal(err)
	}
	run := h.createRun(admin, map[string]any{"task": "stays queued", "script": finishScript})
	b := newBrowser(t, h.url, nil)
	b.login(victim)
	ended := openStream(t, b.client, h.url+"/v1/runs/"+run.ID+"/events/stream")
	if err := h.store.RevokeAPIKey(context.Background(), "alpha", meta.ID); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, ended, "a stream of the key's session")
	clk.Advance(poll)
	if r := b.do("GET", "/v1/runs", nil); r.status != http.StatusUnauthorized {
		t.Errorf("the session a poll after its key was revoked = %d %s, want 401", r.status, r.body)
	}
}

// replica starts an API server on st, as another airlock serve process
// on the same database would be: an engine, feed and blob directory of
// its own, on the shared store.
func replica(t *testing.T, st store.Store, cfg server.Config, now func() time.Time) string {
	t.Helper()
	dir := t.TempDir()
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	feed := server.NewFeed()
	eng, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: servertest.NoSandboxes{}, LockDir: filepath.Join(dir, "locks"), OnEvents: feed.Publish})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Rate, cfg.Burst = 1e6, 1e6
	srv, err := server.New(server.Options{
		Store: st, Blobs: bl, Engine: eng, Auth: auth.NewKeys(st, nil), Feed: feed, Config: cfg, Now: now,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = srv.HTTPServer()
	ts.Start()
	t.Cleanup(func() {
		srv.CloseStreams()
		ts.Close()
	})
	return ts.URL
}

// TestRevokeKeyReplicas: two servers on one PostgreSQL database; a key
// revoked through one ends its stream on the other within that one's
// stream poll, and its session there at its first use a poll after its
// key was last found live (that server's clock is a fake the test moves).
func TestRevokeKeyReplicas(t *testing.T) {
	t.Parallel()
	pg, err := pgtest.Start(context.Background())
	pgtest.ForTest(t, pg, err)
	st, err := postgres.Open(context.Background(), pg.NewDatabase(t), postgres.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.CreateTenant(context.Background(), "alpha"); err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeys(st, nil)
	admin, _, err := keys.Create(context.Background(), "alpha", "ops", []string{auth.ScopeAdmin}, auth.FormatAirlock)
	if err != nil {
		t.Fatal(err)
	}
	victim, meta, err := keys.Create(context.Background(), "alpha", "leaked", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	if err != nil {
		t.Fatal(err)
	}
	const poll = 50 * time.Millisecond
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	revoker := replica(t, st, server.Config{}, nil)
	holder := replica(t, st, server.Config{StreamPoll: poll, Keepalive: 10 * time.Minute}, clk.Now)
	h := &harness{t: t, url: revoker}
	run := h.createRun(admin, map[string]any{"task": "stays queued", "script": finishScript})

	b := newBrowser(t, holder, nil)
	b.login(victim)
	stream := holder + "/v1/runs/" + run.ID + "/events/stream"
	byKey := openStream(t, http.DefaultClient, stream, bearer(victim)...)
	bySession := openStream(t, b.client, stream)

	h.must(http.StatusNoContent, "POST", "/v1/keys/"+meta.ID+"/revoke", admin, nil)
	waitEnded(t, byKey, "the other server's stream opened with the key")
	waitEnded(t, bySession, "the other server's stream of the key's session")
	clk.Advance(poll)
	if r := b.do("GET", "/v1/runs", nil); r.status != http.StatusUnauthorized {
		t.Errorf("the other server's session a poll after its key was revoked = %d %s, want 401", r.status, r.body)
	}
}
