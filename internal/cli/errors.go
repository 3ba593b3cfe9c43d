package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
)

// userErrors are the conditions the layers below report with sentinels
// that a command may return as they are, each with the command line's
// words for it (host.KnownErrors) and its exit status, and the client's.
var userErrors = func() []userErr {
	codes := map[host.Class]int{host.ClassInput: 2, host.ClassRefused: 1, host.ClassInternal: 125}
	var out []userErr
	for _, k := range host.KnownErrors {
		out = append(out, userErr{k.Err, k.Words, codes[k.Class]})
	}
	return append(out,
		userErr{client.ErrStream, "the server sent a malformed event stream", 125},
		userErr{client.ErrCorrupt, "a download from the server does not match its digest", 125})
}()

// userErr is one condition of userErrors.
type userErr struct {
	err error
	// words replace err's own text; what the package added after it (an
	// id, a status, what was wrong with the input) stays. Empty words
	// drop the text when something follows it: the rest says it all.
	words string
	// code is the exit status, unless the command chose one (a
	// usageError or reportedError).
	code int
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
