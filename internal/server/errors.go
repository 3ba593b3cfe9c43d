package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// apiError is an error with a message written for the client. Only an
// apiError's text reaches a response; any other error is logged and
// answered with "internal error".
type apiError struct {
	code string
	msg  string
	// retryAfter, when > 0, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

// publicf builds an apiError; the text must be fit for the client.
func publicf(code, format string, args ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *apiError {
	return publicf(api.CodeBadRequest, format, args...)
}

var (
	errNoRun      = publicf(api.CodeNotFound, "no such run")
	errNoArtifact = publicf(api.CodeNotFound, "no such artifact")
	errNoUpload   = publicf(api.CodeNotFound, "no such upload")
	errNoPolicy   = publicf(api.CodeNotFound, "no such policy or version")
	errNoTemplate = publicf(api.CodeNotFound, "no such template or version")
	errNoApproval = publicf(api.CodeNotFound, "no such approval")
	errNoRoute    = publicf(api.CodeNotFound, "no such endpoint")
)

// maxMessage bounds an error message, which may quote the client's own
// input (a policy's problems).
const maxMessage = 2000

// clientText makes a validation message of the client's own input fit for
// a response: valid UTF-8, one bounded string. Callers pass only errors
// about the request (engine.ErrInvalid, policy problems), never internal
// ones.
func clientText(err error) string {
	s := err.Error()
	for _, p := range []string{"engine: invalid request: ", "engine: ", "store: invalid request: ", "store: ", "event: ", "policy: "} {
		s = strings.TrimPrefix(s, p)
	}
	s = strings.ToValidUTF8(s, "?")
	if len(s) > maxMessage {
		s = s[:maxMessage]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// classify maps the errors of the engine and the store that a client may
// cause to API errors; nil means internal.
func classify(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, store.ErrNotFound):
		return errNoRun
	case errors.Is(err, engine.ErrNoApproval):
		return errNoApproval
	case errors.Is(err, engine.ErrDecided):
		return publicf(api.CodeConflict, "the approval was decided already")
	case errors.Is(err, engine.ErrFinal), errors.Is(err, store.ErrFinal):
		return publicf(api.CodeConflict, "the run has ended")
	case errors.Is(err, event.ErrTransition):
		return publicf(api.CodeConflict, "the run's status does not allow that")
	case errors.Is(err, engine.ErrBusy):
		return publicf(api.CodeConflict, "the run is being driven")
	case errors.Is(err, store.ErrConflict):
		return publicf(api.CodeConflict, "the run changed meanwhile; try again")
	case errors.Is(err, engine.ErrInvalid), errors.Is(err, store.ErrInvalid):
		return badRequest("%s", clientText(err))
	}
	var gone *engine.PayloadsDeletedError
	if errors.As(err, &gone) {
		return publicf(api.CodeConflict, "%d of the run's payloads were deleted by retention on %s: it cannot be resumed or forked",
			gone.N, gone.At.UTC().Format(time.DateOnly))
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return publicf(api.CodeTooLarge, "the request body is over %d bytes", tooLarge.Limit)
	}
	return nil
}

// writeError answers err in the API's one error shape. An error that is
// not a client's is logged with the request id and answered as internal.
func (s *Server) writeError(w http.ResponseWriter, c *call, err error) {
	ae := classify(err)
	if ae == nil {
		c.log.Error("request failed", "err", err)
		ae = publicf(api.CodeInternal, "internal error (request %s)", c.id)
	}
	status, ok := api.Codes[ae.code]
	if !ok {
		status = http.StatusInternalServerError
	}
	s.metrics.errors.add(ae.code)
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(ae.retryAfter))
	}
	if ae.code == api.CodeUnauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	writeJSON(w, status, api.ErrorBody{Code: ae.code, Message: ae.msg, RequestID: c.id})
}

// writeJSON writes v as the response body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"code":"internal","message":"internal error","request_id":""}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
