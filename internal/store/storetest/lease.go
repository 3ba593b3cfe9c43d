package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Clock is a fake clock for a store's Options.Now: it stands still until
// Advance moves it. It is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d (back when d is negative).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newClocked returns a store on a fake clock, or skips the test when the
// factory cannot make one.
func newClocked(t *testing.T, f Factory) (store.Store, *Clock) {
	t.Helper()
	if f.NewAt == nil {
		t.Skip("the factory has no NewAt")
	}
	c := NewClock(base.Add(time.Hour))
	s := f.NewAt(t, c.Now)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return s, c
}

func acquire(t *testing.T, s store.Store, id, owner string, ttl time.Duration) store.Lease {
	t.Helper()
	l, err := s.AcquireLease(context.Background(), id, owner, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%s, %s) = %v", id, owner, err)
	}
	return l
}

func wantLease(t *testing.T, s store.Store, id, owner string, token int64, expires time.Time) {
	t.Helper()
	r, err := s.GetRun(context.Background(), id)
	if err != nil || r.LeaseOwner != owner || r.LeaseToken != token || !r.LeaseExpires.Equal(expires) {
		t.Fatalf("GetRun(%s) lease = %q, %d, %v, %v; want %q, %d, %v",
			id, r.LeaseOwner, r.LeaseToken, r.LeaseExpires, err, owner, token, expires)
	}
	runs, err := s.ListRuns(context.Background(), store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, lr := range runs {
		if lr.ID == id && !sameRun(lr, r) {
			t.Fatalf("ListRuns() has %+v, GetRun() %+v", lr, r)
		}
	}
}

// testLease: acquire, renew, release on the store's real clock.
func testLease(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	if r.LeaseOwner != "" || r.LeaseToken != 0 || !r.LeaseExpires.IsZero() {
		t.Fatalf("CreateRun() lease = %q, %d, %v; want none", r.LeaseOwner, r.LeaseToken, r.LeaseExpires)
	}
	wantLease(t, s, r.ID, "", 0, time.Time{})

	l := acquire(t, s, r.ID, "w1", time.Hour)
	if l.RunID != r.ID || l.Owner != "w1" || l.Token != 1 || l.Expires.Before(time.Now().Add(30*time.Minute)) {
		t.Fatalf("AcquireLease() = %+v, want w1's lease 1 for an hour", l)
	}
	wantLease(t, s, r.ID, "w1", 1, l.Expires)

	// The holder acquiring again renews and keeps the token.
	if l2 := acquire(t, s, r.ID, "w1", 2*time.Hour); l2.Token != 1 || !l2.Expires.After(l.Expires) {
		t.Fatalf("AcquireLease(holder again) = %+v, want token 1 and a later expiry than %v", l2, l.Expires)
	}
	l3, err := s.RenewLease(ctx, r.ID, "w1", 1, 3*time.Hour)
	if err != nil || l3.Token != 1 || l3.Owner != "w1" {
		t.Fatalf("RenewLease() = %+v, %v", l3, err)
	}
	wantLease(t, s, r.ID, "w1", 1, l3.Expires)
	_, err = s.RenewLease(ctx, r.ID, "w2", 1, time.Hour)
	wantErr(t, "RenewLease(another owner)", err, store.ErrLeaseLost)
	_, err = s.RenewLease(ctx, r.ID, "w1", 2, time.Hour)
	wantErr(t, "RenewLease(another token)", err, store.ErrLeaseLost)

	// Release by someone else does nothing; by the holder drops it, twice.
	if err := s.ReleaseLease(ctx, r.ID, "w2", 1); err != nil {
		t.Fatalf("ReleaseLease(not the holder) = %v", err)
	}
	wantLease(t, s, r.ID, "w1", 1, l3.Expires)
	for range 2 {
		if err := s.ReleaseLease(ctx, r.ID, "w1", 1); err != nil {
			t.Fatalf("ReleaseLease() = %v", err)
		}
	}
	wantLease(t, s, r.ID, "", 1, time.Time{})
	_, err = s.RenewLease(ctx, r.ID, "w1", 1, time.Hour)
	wantErr(t, "RenewLease(released)", err, store.ErrLeaseLost)

	// After a release anyone takes it at once, with the next token.
	if l := acquire(t, s, r.ID, "w2", time.Hour); l.Token != 2 {
		t.Fatalf("AcquireLease(after release) = %+v, want token 2", l)
	}
	_, err = s.AcquireLease(ctx, r.ID, "w1", time.Hour)
	var le *store.LeasedError
	if !errors.As(err, &le) || !errors.Is(err, store.ErrLeased) || le.Owner != "w2" || !strings.Contains(err.Error(), `"w2"`) {
		t.Fatalf("AcquireLease(held by w2) = %v, want a LeasedError naming w2", err)
	}

	// A final run cannot be leased.
	done := createRun(t, s, store.Run{ID: runID(2)})
	moveTo(t, s, done.ID, event.StatusCancelled)
	_, err = s.AcquireLease(ctx, done.ID, "w1", time.Hour)
	wantErr(t, "AcquireLease(final run)", err, store.ErrFinal)
}

// testLeaseTakeover: a second owner is refused while the lease is valid,
// takes over after it expires, and from then on the first owner's fenced
// writes are refused and write nothing, while the new owner's and unfenced
// ones go through.
func testLeaseTakeover(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	moveTo(t, s, r.ID, event.StatusRunning)

	a := acquire(t, s, r.ID, "a", 10*time.Second)
	if want := clock.Now().Add(10 * time.Second); a.Token != 1 || !a.Expires.Equal(want) {
		t.Fatalf("AcquireLease(a) = %+v, want token 1 until %v", a, want)
	}
	fenceA := store.WithFence(ctx, a.Token)
	if _, err := s.Append(fenceA, r.ID, 1, drafts(t, 1, 1, 2)); err != nil {
		t.Fatalf("Append(a's fence) = %v", err)
	}

	clock.Advance(9 * time.Second)
	_, err := s.AcquireLease(ctx, r.ID, "b", 10*time.Second)
	var le *store.LeasedError
	if !errors.As(err, &le) || le.Owner != "a" || !le.Expires.Equal(a.Expires) || le.RunID != r.ID {
		t.Fatalf("AcquireLease(b, a's lease valid) = %v, want a LeasedError naming a until %v", err, a.Expires)
	}

	clock.Advance(time.Second) // a's lease expires now
	b := acquire(t, s, r.ID, "b", 10*time.Second)
	if b.Token != a.Token+1 || b.Owner != "b" {
		t.Fatalf("AcquireLease(b, a's lease expired) = %+v, want token %d", b, a.Token+1)
	}
	wantLease(t, s, r.ID, "b", 2, b.Expires)
	fenceB := store.WithFence(ctx, b.Token)

	// a wakes up: every fenced write is refused and changes nothing.
	before, err := s.GetRun(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(fenceA, r.ID, 3, drafts(t, 1, 3, 1))
	wantErr(t, "Append(a's stale fence)", err, store.ErrLeaseLost)
	done, _ := event.New(event.RunCompleted{Summary: "a", Steps: 1})
	_, _, err = s.AppendStatus(fenceA, r.ID, 3, event.StatusRunning, event.StatusCompleted, []event.Event{done})
	wantErr(t, "AppendStatus(a's stale fence)", err, store.ErrLeaseLost)
	_, err = s.UpdateRunStatus(fenceA, r.ID, event.StatusRunning, event.StatusPaused)
	wantErr(t, "UpdateRunStatus(a's stale fence)", err, store.ErrLeaseLost)
	_, err = s.RenewLease(ctx, r.ID, "a", a.Token, 10*time.Second)
	wantErr(t, "RenewLease(a after takeover)", err, store.ErrLeaseLost)
	if err := s.ReleaseLease(ctx, r.ID, "a", a.Token); err != nil {
		t.Fatalf("ReleaseLease(a after takeover) = %v", err)
	}
	after, err := s.GetRun(ctx, r.ID)
	if err != nil || !sameRun(after, before) {
		t.Fatalf("after a's refused writes GetRun() = %+v, %v; want unchanged %+v", after, err, before)
	}
	verify(t, s, r.ID, 2)

	// b writes under its fence; an unfenced writer (the CLI) still can.
	if _, err := s.Append(fenceB, r.ID, 3, drafts(t, 2, 3, 1)); err != nil {
		t.Fatalf("Append(b's fence) = %v", err)
	}
	if _, err := s.Append(ctx, r.ID, 4, drafts(t, 0, 4, 1)); err != nil {
		t.Fatalf("Append(no fence) = %v", err)
	}
	// The fence comes before the seq: a stale holder with a stale seq
	// learns it lost the lease, not that it should retry.
	_, err = s.Append(fenceA, r.ID, 4, drafts(t, 1, 4, 1))
	wantErr(t, "Append(a's stale fence, stale seq)", err, store.ErrLeaseLost)
	run, evs, err := s.AppendStatus(fenceB, r.ID, 5, event.StatusRunning, event.StatusCompleted, []event.Event{done})
	if err != nil || run.Status != event.StatusCompleted || len(evs) != 1 || run.LeaseToken != b.Token {
		t.Fatalf("AppendStatus(b's fence) = %+v, %v, %v", run, evs, err)
	}
	verify(t, s, r.ID, 5)
	_, err = s.RenewLease(ctx, r.ID, "b", b.Token, time.Second)
	wantErr(t, "RenewLease(final run)", err, store.ErrFinal)
}

// testLeaseLapsed: a lease that expired while no one else took the run is
// still its holder's: its fence still writes, renewal works, and acquiring
// again after the lapse starts a new token.
func testLeaseLapsed(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	a := acquire(t, s, r.ID, "a", time.Second)
	clock.Advance(time.Minute)
	if _, err := s.Append(store.WithFence(ctx, a.Token), r.ID, 1, drafts(t, 1, 1, 1)); err != nil {
		t.Fatalf("Append(lapsed lease, no takeover) = %v", err)
	}
	l, err := s.RenewLease(ctx, r.ID, "a", a.Token, time.Second)
	if want := clock.Now().Add(time.Second); err != nil || l.Token != a.Token || !l.Expires.Equal(want) {
		t.Fatalf("RenewLease(lapsed) = %+v, %v; want token %d until %v", l, err, a.Token, want)
	}
	clock.Advance(time.Minute)
	if l := acquire(t, s, r.ID, "a", time.Second); l.Token != a.Token+1 {
		t.Fatalf("AcquireLease(same owner after expiry) = %+v, want a new token %d", l, a.Token+1)
	}
	_, err = s.Append(store.WithFence(ctx, a.Token), r.ID, 2, drafts(t, 1, 2, 1))
	wantErr(t, "Append(old token of the same owner)", err, store.ErrLeaseLost)
}

func testLeaseInvalid(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	r := createRun(t, s, store.Run{ID: runID(1)})
	tests := []struct {
		name   string
		id     string
		owner  string
		token  int64
		ttl    time.Duration
		target error
	}{
		{"bad id", "run_1", "w", 1, time.Second, store.ErrInvalid},
		{"no owner", r.ID, "", 1, time.Second, store.ErrInvalid},
		{"owner control char", r.ID, "w\n", 1, time.Second, store.ErrInvalid},
		{"long owner", r.ID, strings.Repeat("w", store.MaxNameLen+1), 1, time.Second, store.ErrInvalid},
		{"zero ttl", r.ID, "w", 1, 0, store.ErrInvalid},
		{"ttl too long", r.ID, "w", 1, store.MaxLeaseTTL + 1, store.ErrInvalid},
		{"zero token", r.ID, "w", 0, time.Second, store.ErrInvalid},
		{"missing run", runID(2), "w", 1, time.Second, store.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.token > 0 {
				_, err := s.AcquireLease(ctx, tt.id, tt.owner, tt.ttl)
				wantErr(t, "AcquireLease()", err, tt.target)
			}
			_, err := s.RenewLease(ctx, tt.id, tt.owner, tt.token, tt.ttl)
			wantErr(t, "RenewLease()", err, tt.target)
			if tt.ttl > 0 && tt.ttl <= store.MaxLeaseTTL {
				wantErr(t, "ReleaseLease()", s.ReleaseLease(ctx, tt.id, tt.owner, tt.token), tt.target)
			}
		})
	}
	wantLease(t, s, r.ID, "", 0, time.Time{})
	_, err := s.Append(store.WithFence(ctx, 1), runID(2), 1, drafts(t, 0, 1, 1))
	wantErr(t, "Append(fenced, missing run)", err, store.ErrNotFound)
}

// testLeaseRace: owners race for one run; exactly one gets it, the others
// are told who did.
func testLeaseRace(t *testing.T, f Factory) {
	s := newStore(t, f)
	r := createRun(t, s, store.Run{ID: runID(1)})
	const n = 8
	var (
		wg     sync.WaitGroup
		leases = make([]store.Lease, n)
		errs   = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			leases[i], errs[i] = s.AcquireLease(context.Background(), r.ID, fmt.Sprintf("w%d", i), time.Hour)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("both w%d and w%d acquired the lease", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrLeased):
			t.Fatalf("AcquireLease(w%d) = %v, want ErrLeased", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no owner acquired the lease")
	}
	if leases[winner].Token != 1 {
		t.Fatalf("winner's lease = %+v, want token 1", leases[winner])
	}
	for i, err := range errs {
		var le *store.LeasedError
		if i != winner && (!errors.As(err, &le) || le.Owner != fmt.Sprintf("w%d", winner)) {
			t.Fatalf("AcquireLease(w%d) = %v, want a LeasedError naming w%d", i, err, winner)
		}
	}
	wantLease(t, s, r.ID, leases[winner].Owner, 1, leases[winner].Expires)
}
