package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// BenchmarkCreateRun: runs created through the API, as many at once as
// -cpu times GOMAXPROCS clients (b.RunParallel), over kept-alive loopback
// connections, on a real SQLite store and blob directory; no worker takes
// them up. The cost per op is the server's and its client's (one process):
// authentication, the script's check, the durable write (group commits),
// the JSON both ways, and the request log (JSON, discarded).
func BenchmarkCreateRun(b *testing.B) {
	dir := b.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		b.Fatal(err)
	}
	feed := server.NewFeed()
	eng, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: noSandboxes{}, LockDir: filepath.Join(dir, "locks"), OnEvents: feed.Publish})
	if err != nil {
		b.Fatal(err)
	}
	keys := auth.NewKeys(st, nil)
	srv, err := server.New(server.Options{Store: st, Blobs: bl, Engine: eng, Auth: keys, Feed: feed,
		Config: server.Config{Rate: 1e6, Burst: 1e6}, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = srv.HTTPServer()
	ts.Start()
	b.Cleanup(func() { srv.CloseStreams(); ts.Close() })
	if _, err := st.CreateTenant(ctx, "alpha"); err != nil {
		b.Fatal(err)
	}
	key, _, err := keys.Create(ctx, "alpha", "bench", []string{auth.ScopeRunsWrite}, auth.FormatAirlock)
	if err != nil {
		b.Fatal(err)
	}
	c, err := client.New(ts.URL, key, client.Options{Timeout: time.Minute, Insecure: true,
		HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}})
	if err != nil {
		b.Fatal(err)
	}
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo hello > out.txt\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.CreateRun(ctx, api.CreateRunRequest{Task: fmt.Sprintf("bench %d", n.Add(1)), Script: script}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
