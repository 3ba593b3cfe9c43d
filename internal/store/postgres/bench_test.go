package postgres

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// benchPayload is shaped like a real tool.finished event (~400 bytes); the
// same as the SQLite store's benchmark, so the numbers compare.
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
// store that redacts (as the engine's will), on the test server (unix
// socket, fsync on, synchronous_commit on): every Append is one commit
// the server flushes to disk before it answers.
func benchAppend(b *testing.B, size int) {
	ctx := context.Background()
	s := newStore(b, redactor{})
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
	// CPU time of this process (the client) per event; the server's is
	// not counted.
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
// commit flush).
func BenchmarkAppendBatched(b *testing.B) { benchAppend(b, 100) }

// BenchmarkAppendOne: one event per Append, so one commit flush per event.
func BenchmarkAppendOne(b *testing.B) { benchAppend(b, 1) }
