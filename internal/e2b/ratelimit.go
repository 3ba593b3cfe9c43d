package e2b

import (
	"math"
	"strconv"
	"sync"
	"time"
)

// limiter is a token bucket per key (an API key's id, a sandbox's id), in
// memory: each key may make burst requests at once and rate a second
// after that.
type limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu sync.Mutex
	// buckets is guarded by mu: the keys seen lately. A bucket that has
	// filled up again is the same as none, so a sweep drops those.
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets is the size at which the map is swept of full buckets, so
// that many distinct keys cannot grow it without bound.
const maxBuckets = 10000

func newLimiter(rate float64, burst int, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// allow takes a token of key's bucket. When none is left it returns false
// and how long until one is.
func (l *limiter) allow(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[key]
	switch {
	case !ok:
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	case now.After(b.last):
		b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1 - b.tokens) / l.rate * float64(time.Second)))
}

// forget drops key's bucket (a sandbox that is gone).
func (l *limiter) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.buckets, key)
}

// sweep drops the buckets that are full again, and, should every bucket
// be in use, the whole map (a flood resets rather than exhausts memory).
// Preconditions: l.mu held.
func (l *limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= maxBuckets {
		clear(l.buckets)
	}
}

// retryAfter is a wait as Retry-After's whole seconds, at least 1: the
// SDK retries a 429 whose Retry-After is an integer.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
