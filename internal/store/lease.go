package store

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// Lease is the right to drive one run, held by one worker (Owner) until
// Expires unless renewed. Token is the run's fencing token for this
// acquisition: every write made under the lease carries it (WithFence), and
// the store refuses those writes once a later acquisition has raised the
// run's token, so a worker that stalled past its expiry cannot write after
// another took over.
type Lease struct {
	RunID string
	Owner string
	// Token starts at 1 for a run's first acquisition and grows by one at
	// each later one; a renewal keeps it.
	Token   int64
	Expires time.Time
}

// LeasedError reports that another owner holds an unexpired lease on the
// run. It matches ErrLeased.
type LeasedError struct {
	RunID string
	// Owner and Expires describe the lease that is in the way.
	Owner   string
	Expires time.Time
}

func (e *LeasedError) Error() string {
	return fmt.Sprintf("store: run %s: leased by %q until %s", e.RunID, e.Owner, e.Expires.Format(time.RFC3339Nano))
}

// Is matches ErrLeased.
func (e *LeasedError) Is(target error) bool { return target == ErrLeased }

// MaxLeaseTTL is the longest lease one AcquireLease or RenewLease grants.
const MaxLeaseTTL = 24 * time.Hour

type fenceKey struct{}

// WithFence returns a context whose writes (Append, AppendStatus,
// UpdateRunStatus) are made under the lease with fencing token token: the
// store refuses them, with an error wrapping ErrLeaseLost, unless token is
// still the run's current lease token. A context without a fence is not
// checked; that is for writers that deliberately act outside any lease
// (the CLI's cancel, pause and approval decisions).
func WithFence(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, token)
}

// FenceFrom returns the fencing token WithFence put in ctx, if any.
func FenceFrom(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(fenceKey{}).(int64)
	return t, ok
}

// CheckFence is for implementations of Store: called inside a write
// transaction with the run's current lease token (read under the run's
// lock), it returns nil when ctx carries no fence or carries current, and
// an error wrapping ErrLeaseLost otherwise. Expiry is deliberately not
// checked: only a newer acquisition fences a holder out, so a holder whose
// lease lapsed while no one else took the run loses nothing by writing.
func CheckFence(ctx context.Context, runID string, current int64) error {
	t, ok := FenceFrom(ctx)
	if !ok || t == current {
		return nil
	}
	return fmt.Errorf("%w: run %s: fencing token %d is not the current %d", ErrLeaseLost, runID, t, current)
}

// ValidateLease checks the arguments of AcquireLease, RenewLease and
// ReleaseLease (pass ttl 1 and token 1 where the call has none). Errors wrap
// ErrInvalid.
func ValidateLease(runID, owner string, token int64, ttl time.Duration) error {
	if err := event.ValidRunID(runID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case owner == "" || len(owner) > MaxNameLen || !printable(owner):
		return fmt.Errorf("%w: run %s: lease owner must be 1 to %d printable bytes", ErrInvalid, runID, MaxNameLen)
	case token < 1:
		return fmt.Errorf("%w: run %s: fencing token %d is below 1", ErrInvalid, runID, token)
	case ttl <= 0 || ttl > MaxLeaseTTL:
		return fmt.Errorf("%w: run %s: lease ttl %s is not in (0, %s]", ErrInvalid, runID, ttl, MaxLeaseTTL)
	}
	return nil
}

// LeaseState is a run's lease columns as an implementation reads them
// inside its transaction, with the run's status.
type LeaseState struct {
	Status event.Status
	Owner  string // "" when no one holds it
	Token  int64
	// ExpiresNS is the expiry in nanoseconds since 1970; 0 when none.
	ExpiresNS int64
}

// DecideAcquire is for implementations of Store: given run runID's lease
// state st (read under the run's lock) and the store's clock now, it returns
// the lease AcquireLease must write, or the error it must return (wrapping
// ErrFinal or ErrLeased). The same owner with an unexpired lease renews it
// and keeps the token; anyone else, or the same owner after expiry, takes a
// new token.
func DecideAcquire(st LeaseState, runID, owner string, ttl time.Duration, now time.Time) (Lease, error) {
	if st.Status.Final() {
		return Lease{}, fmt.Errorf("%w: run %s is %s", ErrFinal, runID, st.Status)
	}
	nowNS := now.UnixNano()
	held := st.Owner != "" && st.ExpiresNS > nowNS
	l := Lease{RunID: runID, Owner: owner, Token: st.Token + 1, Expires: time.Unix(0, nowNS+int64(ttl)).UTC()}
	switch {
	case held && st.Owner == owner:
		l.Token = st.Token
	case held:
		return Lease{}, &LeasedError{RunID: runID, Owner: st.Owner, Expires: time.Unix(0, st.ExpiresNS).UTC()}
	}
	return l, nil
}

// DecideRenew is for implementations of Store: given run runID's lease
// state st (read under the run's lock), it returns the lease RenewLease must
// write, or the error it must return (wrapping ErrLeaseLost or ErrFinal).
// (owner, token) must still be the run's lease; a lease that lapsed while
// no one else acquired it is still theirs and can be renewed.
func DecideRenew(st LeaseState, runID, owner string, token int64, ttl time.Duration, now time.Time) (Lease, error) {
	if st.Owner != owner || st.Token != token {
		return Lease{}, fmt.Errorf("%w: run %s: lease %d of %q is not the current one", ErrLeaseLost, runID, token, owner)
	}
	if st.Status.Final() {
		return Lease{}, fmt.Errorf("%w: run %s is %s", ErrFinal, runID, st.Status)
	}
	return Lease{RunID: runID, Owner: owner, Token: token, Expires: time.Unix(0, now.UnixNano()+int64(ttl)).UTC()}, nil
}
