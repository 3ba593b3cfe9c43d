package e2b

import (
	"testing"
	"time"
)

// TestFlushWait: the first operation after a quiet spell is flushed
// flushDelay later; while operations keep coming, flushes begin
// flushEvery apart (one commit per flushEvery, not per flushDelay).
func TestFlushWait(t *testing.T) {
	for _, c := range []struct {
		since, want time.Duration
	}{
		{time.Hour, flushDelay},                     // quiet: no flush for long
		{flushEvery, flushDelay},                    // the last flush flushEvery ago
		{flushEvery - flushDelay, flushDelay},       // just far enough
		{flushDelay, flushEvery - flushDelay},       // busy: one flushDelay after the last
		{0, flushEvery},                             // an operation the moment a flush began
		{flushEvery - time.Millisecond, flushDelay}, // never less than flushDelay
	} {
		if got := flushWait(c.since); got != c.want {
			t.Errorf("flushWait(%v) = %v, want %v", c.since, got, c.want)
		}
	}
}
