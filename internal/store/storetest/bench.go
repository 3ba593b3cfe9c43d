package storetest

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Bench runs the store benchmarks on stores f.New makes, so every
// implementation is measured on the same cases and the numbers compare:
//
//	func BenchmarkStore(b *testing.B) { storetest.Bench(b, factory) }
//
// The stores redact (as the engine's do), and every write is durable when
// it returns, so a case's ns/op includes the commit's flush to disk.
func Bench(b *testing.B, f Factory) {
	for _, c := range []struct {
		name string
		fn   func(b *testing.B, s store.Store)
	}{
		// 100 events per Append: one transaction, one flush.
		{"AppendBatched", func(b *testing.B, s store.Store) { benchAppend(b, s, 100) }},
		// One event per Append, so one flush per event.
		{"AppendOne", func(b *testing.B, s store.Store) { benchAppend(b, s, 1) }},
		{"CreateRunWith", benchCreateRunWith},
		{"GetRun", benchGetRun},
		{"Events", benchEvents},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := f.New(b, redactor{secret: Secret})
			defer s.Close()
			c.fn(b, s)
		})
	}
}

// benchPayload is shaped like a real tool.finished event (~400 bytes).
func benchPayload(b *testing.B, i int) json.RawMessage {
	exit := 1
	d, err := event.New(event.ToolFinished{
		Step: i, CallID: "toolu_01A09q90qw90lq917835lq9", Tool: "run_command", Sandbox: "main",
		Outcome: "exited", ExitCode: &exit, DurationMS: 1234, WallMS: 1200,
		Output:    "--- FAIL: TestAdd (0.00s)\n    calc_test.go:9: Add(2, 3) = -1, want 5\nFAIL\nexit status 1\nFAIL\texample.com/calc\t0.002s\n",
		Resources: event.Resources{UserMS: 800, SystemMS: 120, MaxRSSKB: 54321},
	})
	if err != nil {
		b.Fatal(err)
	}
	return d.Payload
}

// benchRun creates a running run with n events of benchPayload.
func benchRun(b *testing.B, s store.Store, n int) string {
	ctx := context.Background()
	id := event.NewRunID(time.Now())
	if _, err := s.CreateRun(ctx, store.Run{ID: id, Tenant: "acme", Status: event.StatusRunning}); err != nil {
		b.Fatal(err)
	}
	for next := 1; next <= n; next += store.MaxBatch {
		drafts := make([]event.Event, min(store.MaxBatch, n-next+1))
		for i := range drafts {
			drafts[i] = event.Event{Type: event.TypeToolFinished, Payload: benchPayload(b, next+i)}
		}
		if _, err := s.Append(ctx, id, int64(next), drafts); err != nil {
			b.Fatal(err)
		}
	}
	return id
}

// benchAppend appends b.N events in batches of size to one run.
func benchAppend(b *testing.B, s store.Store, size int) {
	ctx := context.Background()
	id := benchRun(b, s, 0)
	drafts := make([]event.Event, size)
	for i := range drafts {
		drafts[i] = event.Event{Type: event.TypeToolFinished, Payload: benchPayload(b, i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	next := int64(1)
	start := time.Now()
	cpu0 := cpuTime(b)
	for n := 0; n < b.N; n += size {
		batch := drafts
		if left := b.N - n; left < size {
			batch = drafts[:left]
		}
		evs, err := s.Append(ctx, id, next, batch)
		if err != nil {
			b.Fatal(err)
		}
		next += int64(len(evs))
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
	// CPU time of this process (user + system, all threads) per event:
	// unlike events/s it hardly moves when other processes compete for
	// the CPU, and with the flush latency (AppendOne's ns/op) it predicts
	// events/s on an idle machine. A database server's own CPU time is
	// not counted.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/event")
}

// benchCreateRunWith creates a run with its first two events per op, as
// the engine creates every run (run.created, policy.resolved).
func benchCreateRunWith(b *testing.B, s store.Store) {
	ctx := context.Background()
	hash := store.DocumentHash(nil)
	created, err := event.New(event.RunCreated{
		Tenant: "acme", Task: "fix the failing test", Model: "scripted",
		PolicyHash: hash, Metadata: map[string]string{"team": "infra"},
	})
	if err != nil {
		b.Fatal(err)
	}
	resolved, err := event.New(event.PolicyResolved{PolicyHash: hash, Source: "default (deny all egress)"})
	if err != nil {
		b.Fatal(err)
	}
	first := []event.Event{created, resolved}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := store.Run{
			ID: event.NewRunID(now.Add(time.Duration(i) * time.Millisecond)), Tenant: "acme",
			Task: "fix the failing test", Model: "scripted", PolicyHash: hash, Status: event.StatusQueued,
		}
		if _, _, err := s.CreateRunWith(ctx, r, first); err != nil {
			b.Fatal(err)
		}
	}
}

// benchGetRun reads one run per op, as every API request does.
func benchGetRun(b *testing.B, s store.Store) {
	ctx := context.Background()
	id := benchRun(b, s, 1)
	if _, err := s.AcquireLease(ctx, id, "bench", time.Hour); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetRun(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// benchEvents reads a page of 100 events per op, as a stream catching up
// does.
func benchEvents(b *testing.B, s store.Store) {
	ctx := context.Background()
	id := benchRun(b, s, 100)
	b.ReportAllocs()
	for b.Loop() {
		evs, err := s.Events(ctx, id, 1, 100)
		if err != nil || len(evs) != 100 {
			b.Fatalf("Events() = %d events, %v", len(evs), err)
		}
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
