// Package ratelimit is a token bucket per key, in memory: each key (an API
// key's id, a remote address, a sandbox's id) may make burst requests at
// once and rate a second after that. The API server and the E2B API both
// use it.
package ratelimit

import (
	"math"
	"sync"
	"time"
)

// Limiter holds the buckets of the keys seen lately.
type Limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu sync.Mutex
	// buckets is guarded by mu. A bucket that has filled up again is the
	// same as none, so a sweep drops those.
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

// New returns a limiter of rate tokens a second and burst at most; now is
// its clock (time.Now when nil).
func New(rate float64, burst int, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{rate: rate, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// Allow takes a token of key's bucket. When none is left it returns false
// and how long until one is.
func (l *Limiter) Allow(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.fill(key, l.now())
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, l.wait(b.tokens)
}

// Blocked reports whether key's bucket is empty, without taking a token,
// and how long until it is not.
func (l *Limiter) Blocked(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		return false, 0
	}
	tokens := math.Min(l.burst, b.tokens+l.now().Sub(b.last).Seconds()*l.rate)
	if tokens >= 1 {
		return false, 0
	}
	return true, l.wait(tokens)
}

// Forget drops key's bucket (a sandbox that is gone).
func (l *Limiter) Forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.buckets, key)
}

// RetryAfter rounds a wait up to whole seconds, at least 1, for a
// Retry-After header (clients retry on an integer).
func RetryAfter(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

func (l *Limiter) wait(tokens float64) time.Duration {
	return time.Duration(math.Ceil((1 - tokens) / l.rate * float64(time.Second)))
}

// fill returns key's bucket refilled up to now. Preconditions: l.mu held.
func (l *Limiter) fill(key string, now time.Time) *bucket {
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
func (l *Limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= maxBuckets {
		clear(l.buckets)
	}
}
