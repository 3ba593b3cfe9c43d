// Package clock is the one settable clock of airlock's tests. The host's
// components take their time as a func() time.Time (an Options.Now, nil
// meaning time.Now), so that a test can hand them Fake.Now and move time
// itself: expiry, leases, rate limits and retry waits are tested without
// sleeping (STYLE §8).
//
// It is a leaf (standard library only). Importers:
// internal/store/storetest, and tests.
package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a clock that stands still until moved. It is safe for concurrent
// use; its zero value reads the zero time.
type Fake struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

// NewFake returns a Fake reading t.
func NewFake(t time.Time) *Fake { return &Fake{t: t} }

// Now returns the clock's time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d (back when d is negative).
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Sleep advances the clock by d at once, as if the caller had slept, and
// returns ctx.Err().
func (c *Fake) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}
