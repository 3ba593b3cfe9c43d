package ratelimit_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/ratelimit"
)

// TestLimiter: a bucket of burst tokens, refilled at rate a second, per
// key; Blocked looks without taking; Forget starts a key afresh; many
// distinct keys do not grow the map without bound.
func TestLimiter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := ratelimit.New(2, 3, func() time.Time { return now })
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("Allow(a) #%d = false, want the burst", i+1)
		}
	}
	if ok, wait := l.Allow("a"); ok || wait != 500*time.Millisecond || ratelimit.RetryAfter(wait) != 1 {
		t.Errorf("Allow(a) past the burst = %v, %s, want false, 500ms (Retry-After 1)", ok, wait)
	}
	if blocked, wait := l.Blocked("a"); !blocked || wait != 500*time.Millisecond {
		t.Errorf("Blocked(a) = %v, %s", blocked, wait)
	}
	if blocked, _ := l.Blocked("never"); blocked {
		t.Error("Blocked(never) = true for a key never seen")
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Error("Allow(b) = false: another key's bucket is its own")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.Allow("a"); !ok {
		t.Error("Allow(a) after a token's time = false")
	}
	now = now.Add(time.Hour)
	for i := range 3 {
		if ok, _ := l.Allow("a"); !ok {
			t.Fatalf("Allow(a) #%d after an hour = false: a bucket fills up to its burst", i+1)
		}
	}
	if ok, _ := l.Allow("a"); ok {
		t.Error("a bucket filled past its burst")
	}
	l.Forget("a")
	if ok, _ := l.Allow("a"); !ok {
		t.Error("Allow(a) after Forget = false")
	}
	if got := ratelimit.RetryAfter(2100 * time.Millisecond); got != 3 {
		t.Errorf("RetryAfter(2.1s) = %d, want 3", got)
	}
	// A flood of distinct keys: each new key still gets its burst.
	for i := range 30000 {
		if ok, _ := l.Allow("flood-" + strconv.Itoa(i)); !ok {
			t.Fatalf("Allow(flood-%d) = false", i)
		}
	}
}
