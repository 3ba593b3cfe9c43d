package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// userErrors are the conditions the packages below the command line
// report with sentinels that a command may return as they are: each with
// the command line's words for it and its exit status. Their own texts
// ("engine: no such approval") name the package, which means nothing to
// a user. userError is the one place that maps them, as the API's
// classify does for its clients.
var userErrors = []struct {
	err error
	// words replace err's own text; what the package added after it (an
	// id, a status, what was wrong with the input) stays. Empty words
	// drop the text when something follows it: the rest says it all.
	words string
	// code is the exit status, unless the command chose one (a
	// usageError or reportedError).
	code int
}{
	{engine.ErrNoApproval, "no such approval", 2},
	{engine.ErrDecided, "approval already decided", 1},
	{engine.ErrFinal, "run already ended", 1},
	{engine.ErrBusy, "the run is driven by another process", 1},
	{engine.ErrInvalid, "", 2},
	{engine.ErrNotAgentRun, "not an agent run", 2},
	{engine.ErrCancelled, "the run was cancelled", 1},
	{engine.ErrDrained, "this host is draining: the run is left to be resumed", 1},
	{store.ErrFinal, "run already ended", 1},
	{store.ErrNotFound, "not found", 2},
	{store.ErrExists, "already exists", 1},
	{store.ErrInvalid, "", 2},
	{store.ErrConflict, "the run changed meanwhile; try again", 1},
	{store.ErrLeased, "the run is driven by another process", 1},
	{store.ErrLeaseLost, "another process took the run over", 1},
	{store.ErrSchemaTooNew, "the run store was written by a newer airlock", 125},
	{store.ErrClosed, "the run store is closed", 125},
	{secret.ErrNotFound, "no such secret", 1},
	{secret.ErrInvalid, "invalid", 2},
	{secret.ErrWrongKey, "wrong key for this secret store", 125},
	{secret.ErrCorrupt, "the secret store is corrupt", 125},
	{blob.ErrNotFound, "a stored file (blob) is missing", 125},
	{blob.ErrCorrupt, "a stored file (blob) does not match its digest", 125},
	{blob.ErrTooLarge, "a file is too large to store", 2},
	{blob.ErrDigest, "malformed blob digest", 2},
	{client.ErrStream, "the server sent a malformed event stream", 125},
	{client.ErrCorrupt, "a download from the server does not match its digest", 125},
	{model.ErrContextOverflow, "the conversation exceeds the model's context window", 1},
	{model.ErrScriptEnded, "the model's script ended", 1},
}

// userError gives err, as a command returned it, the text and exit
// status the command line shows: the words of userErrors for their
// sentinels, a typed error's own rendering (userText), and the status the
// command chose or else the sentinel's, else 125. A command's exit status
// (exitCode) passes as it is.
//
// Other errors keep their text: they are airlock's own failures (exit
// 125), for whoever runs it, who needs every frame.
func userError(err error) error {
	var code exitCode
	if err == nil || errors.As(err, &code) {
		return err
	}
	text := errors.New(userText(err))
	var usage usageError
	var reported reportedError
	switch {
	case errors.As(err, &reported):
		return reportedError{Err: text, Code: reported.Code}
	case errors.As(err, &usage):
		return usageError{Err: text}
	}
	for _, u := range userErrors {
		if errors.Is(err, u.err) {
			switch u.code {
			case 2:
				return usageError{Err: text}
			case 125:
				return text
			}
			return reportedError{Err: text, Code: u.code}
		}
	}
	return text
}

// userText is err's text as the command line shows it (see userError).
func userText(err error) string {
	var verify *event.VerifyError
	if errors.As(err, &verify) {
		// Its text names the package and the run, which the command's
		// own words name already.
		s := fmt.Sprintf("seq %d: %s", verify.Seq, sentinelText(verify.Err))
		if errors.Is(verify.Err, event.ErrGap) || errors.Is(verify.Err, event.ErrOrder) {
			s += fmt.Sprintf(": found seq %d", verify.Got)
		}
		return s
	}
	return sentinelText(err)
}

// sentinelText is err's text with the text of each sentinel of
// userErrors that it wraps replaced by the sentinel's words.
func sentinelText(err error) string {
	s := err.Error()
	for _, u := range userErrors {
		if !errors.Is(err, u.err) {
			continue
		}
		own := u.err.Error()
		if u.words == "" {
			s = strings.ReplaceAll(s, own+": ", "")
			s = strings.ReplaceAll(s, own, "invalid input")
			continue
		}
		s = strings.ReplaceAll(s, own, u.words)
	}
	return s
}
