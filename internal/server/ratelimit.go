package server

import (
	"math"
	"sync"
	"time"
)

// limiter is a token bucket per key, in memory: each key may make burst
// requests at once and rate per second after that.
type limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu sync.Mutex
	// buckets holds the keys seen lately (guarded by mu); a bucket that
	// has filled up again is the same as none, so sweep drops those.
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets is the size at which the map is swept of full buckets, so
// that a flood of distinct keys (say, remote addresses) cannot grow it
// without bound.
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
	b := l.fill(key, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration(math.Ceil((1 - b.tokens) / l.rate * float64(time.Second)))
	return false, wait
}

// blocked reports whether key's bucket is empty, without taking a token.
func (l *limiter) blocked(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		return false, 0
	}
	now := l.now()
	tokens := math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	if tokens >= 1 {
		return false, 0
	}
	return true, time.Duration(math.Ceil((1 - tokens) / l.rate * float64(time.Second)))
}

// fill returns key's bucket refilled up to now. Preconditions: l.mu held.
func (l *limiter) fill(key string, now time.Time) *bucket {
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
		return b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+el*l.rate)
		b.last = now
	}
	return b
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

// retrySeconds rounds a wait up to whole seconds for Retry-After.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
