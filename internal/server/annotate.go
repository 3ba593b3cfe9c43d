package server

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockrun/airlock/internal/event"
)

// annotate adds to a request's log lines and to its trace span (the one
// the host's tracing middleware put in the request's context; a no-op span
// when tracing is off) the request id, the trace id, and the run the path
// names, if any.
func annotate(r *http.Request, rt route, c *call) {
	span := trace.SpanFromContext(r.Context())
	span.SetAttributes(attribute.String("airlock.request_id", c.id))
	if sc := span.SpanContext(); sc.IsValid() {
		c.log = c.log.With("trace_id", sc.TraceID().String())
	}
	if id := pathRunID(r, rt); id != "" {
		c.log = c.log.With("run_id", id)
		span.SetAttributes(attribute.String("airlock.run.id", id))
	}
}

// annotateTenant adds the caller's tenant to the request's span (the log
// has it already).
func annotateTenant(r *http.Request, c *call) {
	trace.SpanFromContext(r.Context()).SetAttributes(attribute.String("airlock.tenant", c.p.Tenant))
}

// pathRunID returns the run a request's path names: the {id} of a run's
// route, or the run of an approval's id (RUN.CALL). Only a well-formed run
// id is returned: the path is the client's input, and the log is not the
// place to repeat whatever it sent.
func pathRunID(r *http.Request, rt route) string {
	id := r.PathValue("id")
	switch {
	case id == "":
		return ""
	case strings.HasPrefix(rt.pattern, "/v1/runs/"):
	case strings.HasPrefix(rt.pattern, "/v1/approvals/"):
		id, _, _ = strings.Cut(id, ".")
	default:
		return ""
	}
	if event.ValidRunID(id) != nil {
		return ""
	}
	return id
}
