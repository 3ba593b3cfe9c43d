package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/server/servertest"
)

// newBenchServer starts the API as airlock serve runs it, with its request
// log (JSON) discarded, and returns it with an API key of tenant alpha
// with scopes.
func newBenchServer(b *testing.B, cfg server.Config, scopes ...string) (*servertest.Server, string) {
	b.Helper()
	//nolint:sloglint // not slog.DiscardHandler: the benchmark pays for encoding the request log, as airlock serve does
	s := servertest.Start(b, servertest.Options{Config: cfg, Tenants: []string{"alpha"}, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	return s, s.Key(b, "alpha", scopes...)
}

// benchClient is a client of url with key that keeps its connections.
func benchClient(b *testing.B, url, key string) *client.Client {
	c, err := client.New(url, key, client.Options{
		Timeout: time.Minute, Insecure: true,
		HTTPClient: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

const benchScript = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo hello > out.txt\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"

// BenchmarkCreateRun: runs created through the API, as many at once as
// -cpu times GOMAXPROCS clients (b.RunParallel), over kept-alive loopback
// connections; no worker takes them up. The cost per op is the server's
// and its client's (one process): authentication, the script's check, the
// durable write (group commits), the JSON both ways, the request log.
func BenchmarkCreateRun(b *testing.B) {
	s, key := newBenchServer(b, server.Config{}, auth.ScopeRunsWrite)
	c := benchClient(b, s.URL, key)
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.CreateRun(ctx, api.CreateRunRequest{Task: fmt.Sprintf("bench %d", n.Add(1)), Script: benchScript}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkStreamFanout: one event appended to a run and published, as the
// engine does, to the event streams of 1,000 subscribers of the run, each
// reading over its own loopback connection; an op ends when every
// subscriber has read the event. ns/delivery is the op's time over the
// subscribers: what one subscriber costs the machine, server and reader.
func BenchmarkStreamFanout(b *testing.B) {
	const subs = 1000
	s, key := newBenchServer(b, server.Config{MaxStreams: subs}, auth.ScopeRunsWrite, auth.ScopeRunsRead)
	ctx := context.Background()
	r, err := s.Engine.Create(ctx, engine.Request{Tenant: "alpha", Task: "streamed", Config: engine.Config{Model: "script:"}, Script: []byte(benchScript)})
	if err != nil {
		b.Fatal(err)
	}
	// The payload of a typical event (a tool call's: a few hundred bytes).
	draft, err := event.New(event.RunStarted{Host: strings.Repeat("h", 300)})
	if err != nil {
		b.Fatal(err)
	}
	readers := startReaders(b, subs, s.URL+"/v1/runs/"+r.ID+"/events/stream", key)
	next := r.LastSeq + 1
	b.ResetTimer()
	for i := range b.N {
		readers.expect(int64(subs) * int64(i+1))
		evs, err := s.Store.Append(ctx, r.ID, next, []event.Event{draft})
		if err != nil {
			b.Fatal(err)
		}
		next++
		s.Feed.Publish(evs)
		readers.wait(b)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*subs), "ns/delivery")
}

// BenchmarkStreamFanoutFloor is BenchmarkStreamFanout's floor on this
// machine: the same 1,000 readers and the same frame, served by a bare
// net/http handler per subscriber that writes and flushes what a channel
// hands it (no store, no feed, no authentication). The ratio of the two is
// what airlock's stream adds to what the HTTP server and the kernel cost.
func BenchmarkStreamFanoutFloor(b *testing.B) {
	const subs = 1000
	frame := fmt.Appendf(nil, "id: 1\nevent: run.started\ndata: {\"host\":%q}\n\n", strings.Repeat("h", 300))
	var mu sync.Mutex
	var wakes []chan struct{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wake := make(chan struct{}, 1)
		mu.Lock()
		wakes = append(wakes, wake)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-wake:
				w.Write(frame)
				w.(http.Flusher).Flush()
			}
		}
	}))
	b.Cleanup(ts.Close) // after the readers' cleanup, which ends their requests
	readers := startReaders(b, subs, ts.URL, "")
	b.ResetTimer()
	for i := range b.N {
		readers.expect(int64(subs) * int64(i+1))
		mu.Lock()
		for _, w := range wakes {
			select {
			case w <- struct{}{}:
			default:
			}
		}
		mu.Unlock()
		readers.wait(b)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*subs), "ns/delivery")
}

// readers are the subscribers of the fan-out benchmarks: n event streams
// read over loopback connections of their own, counting the run.started
// events they read.
type readers struct {
	got, want atomic.Int64
	all       chan struct{}
}

// startReaders opens n streams of url (with API key key, if any) and
// returns once all are open and past their first read; b's cleanup closes
// them.
func startReaders(b *testing.B, n int, url, key string) *readers {
	rs := &readers{all: make(chan struct{}, 1)}
	tr := &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}
	var wg, joined sync.WaitGroup
	streams, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		joined.Add(1)
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(streams, "GET", url, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := tr.RoundTrip(req)
			joined.Done()
			if err != nil {
				b.Error(err)
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					return
				}
				if bytes.HasPrefix(line, []byte("event: run.started")) && rs.got.Add(1) == rs.want.Load() {
					rs.all <- struct{}{}
				}
			}
		})
	}
	joined.Wait()
	time.Sleep(200 * time.Millisecond) // every stream past its first read
	return rs
}

// expect sets how many events the readers will have read in all once the
// next op is delivered.
func (rs *readers) expect(total int64) { rs.want.Store(total) }

// wait waits until they have.
func (rs *readers) wait(b *testing.B) {
	select {
	case <-rs.all:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d deliveries", rs.got.Load(), rs.want.Load())
	}
}
