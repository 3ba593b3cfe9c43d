package sqlite_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

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

// benchAppend appends b.N events in batches of size to one run, through a
// store that redacts (as the engine's will), on a file in the test's temp
// directory with synchronous=FULL: every Append is one fsync'd commit.
func benchAppend(b *testing.B, size int) {
	ctx := context.Background()
	s := openAt(b, filepath.Join(b.TempDir(), "bench.db"), redactor{})
	defer s.Close()
	id := event.NewRunID(time.Now())
	if _, err := s.CreateRun(ctx, store.Run{ID: id, Tenant: "a", Status: event.StatusRunning}); err != nil {
		b.Fatal(err)
	}
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
	// CPU time (user + system, all threads) per event: unlike events/s it
	// hardly moves when other processes compete for the CPU, and with the
	// fsync latency (BenchmarkAppendOne's ns/op) it predicts events/s on an
	// idle machine.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/event")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendBatched: 100 events per Append (one transaction, one
// fsync). The target is 20,000 events/s.
func BenchmarkAppendBatched(b *testing.B) { benchAppend(b, 100) }

// BenchmarkAppendOne: one event per Append, so one fsync per event.
func BenchmarkAppendOne(b *testing.B) { benchAppend(b, 1) }
