// Package servertest starts the real API for the tests and benchmarks of
// other packages: airlock serve's server, engine, SQLite store and blob
// directory in a temporary directory, over loopback, with no sandbox
// backend (no run is driven).
package servertest

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// NoSandboxes refuses to make sandboxes: the backend of an engine that
// drives no run.
type NoSandboxes struct{}

// Create implements sandbox.Backend.
func (NoSandboxes) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, errors.New("servertest: this server makes no sandboxes")
}

// Options tune Start.
type Options struct {
	// Config is the server's; rate limits are lifted when it sets none.
	Config server.Config
	// Configure, when set, adjusts the server's options before it
	// starts: a secret store, say (this package holds no secret, STYLE
	// §1).
	Configure func(*server.Options)
	// Logger is the server's log (default: discarded).
	Logger *slog.Logger
	// Tenants are created before Start returns.
	Tenants []string
}

// Server is a started API; tb's cleanup stops it.
type Server struct {
	URL    string
	Store  *sqlite.Store
	Engine *engine.Engine
	Feed   *server.Feed
	Keys   *auth.Keys
}

// Start starts the API.
func Start(tb testing.TB, o Options) *Server {
	tb.Helper()
	dir := tb.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	feed := server.NewFeed()
	eng, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: NoSandboxes{}, LockDir: filepath.Join(dir, "locks"), OnEvents: feed.Publish})
	if err != nil {
		tb.Fatal(err)
	}
	keys := auth.NewKeys(st, nil)
	opts := server.Options{Store: st, Blobs: bl, Engine: eng, Auth: keys, Feed: feed, Config: o.Config, Logger: o.Logger}
	if opts.Config.Rate == 0 {
		opts.Config.Rate, opts.Config.Burst = 1e6, 1e6
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Configure != nil {
		o.Configure(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = srv.HTTPServer()
	ts.Start()
	tb.Cleanup(func() {
		srv.CloseStreams()
		ts.Close()
	})
	for _, tenant := range o.Tenants {
		if _, err := st.CreateTenant(ctx, tenant); err != nil {
			tb.Fatal(err)
		}
	}
	return &Server{URL: ts.URL, Store: st, Engine: eng, Feed: feed, Keys: keys}
}

// Key makes an API key of tenant with scopes.
func (s *Server) Key(tb testing.TB, tenant string, scopes ...string) string {
	tb.Helper()
	k, _, err := s.Keys.Create(context.Background(), tenant, "test", scopes, auth.FormatAirlock)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
