package host

import (
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// Class is what kind of failure an error is, for whoever reports it: the
// command line's exit statuses follow it.
type Class int

// Classes of failure.
const (
	// ClassInternal is airlock's own failure: whoever runs it needs every
	// frame of the error.
	ClassInternal Class = iota
	// ClassInput is bad input: nothing was done.
	ClassInput
	// ClassRefused is a request the state does not allow: the run has
	// ended, the approval was decided, another process drives the run.
	ClassRefused
)

// Known is a condition the layers below report with a sentinel, with the
// words a person is told (its own text names its package, which means
// nothing to them: "engine: no such approval") and its class. Empty Words
// drop the sentinel's text where something follows it.
type Known struct {
	Err   error
	Words string
	Class Class
}

// KnownErrors are the conditions a host's method may return as the layer
// reported them, as the API's classify maps them for its clients.
var KnownErrors = []Known{
	{engine.ErrNoApproval, "no such approval", ClassInput},
	{ErrLive, "", ClassRefused},
	{engine.ErrDecided, "approval already decided", ClassRefused},
	{engine.ErrFinal, "run already ended", ClassRefused},
	{engine.ErrBusy, "the run is driven by another process", ClassRefused},
	{engine.ErrInvalid, "", ClassInput},
	{engine.ErrNotAgentRun, "not an agent run", ClassInput},
	{engine.ErrCancelled, "the run was cancelled", ClassRefused},
	{engine.ErrDrained, "this host is draining: the run is left to be resumed", ClassRefused},
	{store.ErrFinal, "run already ended", ClassRefused},
	{store.ErrNotFound, "not found", ClassInput},
	{store.ErrExists, "already exists", ClassRefused},
	{store.ErrInvalid, "", ClassInput},
	{store.ErrConflict, "the run changed meanwhile; try again", ClassRefused},
	{store.ErrLeased, "the run is driven by another process", ClassRefused},
	{store.ErrLeaseLost, "another process took the run over", ClassRefused},
	{store.ErrSchemaTooNew, "the run store was written by a newer airlock", ClassInternal},
	{store.ErrClosed, "the run store is closed", ClassInternal},
	{secret.ErrNotFound, "no such secret", ClassRefused},
	{secret.ErrInvalid, "invalid", ClassInput},
	{secret.ErrWrongKey, "wrong key for this secret store", ClassInternal},
	{secret.ErrCorrupt, "the secret store is corrupt", ClassInternal},
	{blob.ErrNotFound, "a stored file (blob) is missing", ClassInternal},
	{blob.ErrCorrupt, "a stored file (blob) does not match its digest", ClassInternal},
	{blob.ErrTooLarge, "a file is too large to store", ClassInput},
	{blob.ErrDigest, "malformed blob digest", ClassInput},
	{model.ErrContextOverflow, "the conversation exceeds the model's context window", ClassRefused},
	{model.ErrScriptEnded, "the model's script ended", ClassRefused},
}
