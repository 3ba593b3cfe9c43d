package event

import (
	"errors"
	"fmt"
	"slices"
)

// Status is where a run is in its life.
type Status string

// The run statuses.
const (
	// StatusQueued: created, waiting for a host process to drive it.
	StatusQueued Status = "queued"
	// StatusRunning: a host process drives it.
	StatusRunning Status = "running"
	// StatusAwaitingApproval: held until a person decides on an action.
	StatusAwaitingApproval Status = "awaiting_approval"
	// StatusPaused: paused on purpose; no sandbox exists, nothing runs.
	StatusPaused Status = "paused"
	// StatusCompleted: finished and every completion check passed. Final.
	StatusCompleted Status = "completed"
	// StatusFailedVerification: finished, but a completion check failed. Final.
	StatusFailedVerification Status = "failed_verification"
	// StatusFailed: ended by an error or an exhausted budget. Final.
	StatusFailed Status = "failed"
	// StatusCancelled: cancelled on request. Final.
	StatusCancelled Status = "cancelled"
)

// transitions lists, for each status, the statuses a run may move to. A
// final status has none. It is never modified.
var transitions = map[Status][]Status{
	StatusQueued:             {StatusRunning, StatusPaused, StatusFailed, StatusCancelled},
	StatusRunning:            {StatusAwaitingApproval, StatusPaused, StatusCompleted, StatusFailedVerification, StatusFailed, StatusCancelled},
	StatusAwaitingApproval:   {StatusRunning, StatusPaused, StatusFailed, StatusCancelled},
	StatusPaused:             {StatusQueued, StatusRunning, StatusFailed, StatusCancelled},
	StatusCompleted:          nil,
	StatusFailedVerification: nil,
	StatusFailed:             nil,
	StatusCancelled:          nil,
}

// Statuses returns every status, in the order of the constants above.
func Statuses() []Status {
	return []Status{
		StatusQueued, StatusRunning, StatusAwaitingApproval, StatusPaused,
		StatusCompleted, StatusFailedVerification, StatusFailed, StatusCancelled,
	}
}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// Final reports whether s is a final status: completed, failed_verification,
// failed or cancelled. A run in a final status never changes again.
func (s Status) Final() bool {
	return s.Valid() && len(transitions[s]) == 0
}

// Unfinished reports whether a run in status s still needs a host process
// to drive it: queued, running or awaiting_approval. (A paused run is not
// final either, but it waits for an explicit resume.) Recovery picks up
// exactly these runs.
func (s Status) Unfinished() bool {
	return s == StatusQueued || s == StatusRunning || s == StatusAwaitingApproval
}

// Next returns the statuses a run in status s may move to.
func (s Status) Next() []Status {
	return slices.Clone(transitions[s])
}

// ErrTransition is wrapped by CheckTransition's errors.
var ErrTransition = errors.New("illegal status transition")

// TransitionError reports a status change that the table does not allow.
type TransitionError struct {
	From, To Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("event: %v from %q to %q", ErrTransition, truncate(string(e.From)), truncate(string(e.To)))
}

// Unwrap returns ErrTransition.
func (e *TransitionError) Unwrap() error { return ErrTransition }

// CheckTransition returns nil if a run may move from status from to status
// to, and a *TransitionError otherwise (also for unknown statuses and for
// from == to).
func CheckTransition(from, to Status) error {
	if !slices.Contains(transitions[from], to) {
		return &TransitionError{From: from, To: to}
	}
	return nil
}
