package telemetry

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// httpTracer makes a server span of each request: named by the route
// pattern the mux matched ("GET /v1/runs/{id}"), with the method, path,
// route and status, continuing a W3C traceparent the client sent. Query
// strings, headers and bodies are not attributes. Handlers below it add
// their own attributes (tenant, request id) to the span in the request's
// context.
type httpTracer struct {
	next http.Handler
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

func (h *httpTracer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := h.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := h.t.Start(ctx, "HTTP "+clip(r.Method, 16), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", clip(r.Method, 16)), attribute.String("url.path", clip(r.URL.Path, 256)),
		attribute.String("network.protocol.version", strings.TrimPrefix(r.Proto, "HTTP/"))))
	rec := &statusWriter{ResponseWriter: w}
	r = r.WithContext(ctx)
	defer func() {
		// r.Pattern is set by the mux below on this very request.
		if r.Pattern != "" {
			span.SetName(r.Pattern)
			span.SetAttributes(attribute.String("http.route", r.Pattern))
		}
		code := rec.code
		if v := recover(); v != nil {
			span.SetStatus(codes.Error, "panic")
			span.End()
			panic(v)
		}
		if code == 0 {
			code = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
		span.End()
	}()
	h.next.ServeHTTP(rec, r)
}

// statusWriter remembers the status of a response. It passes flushes on
// (event streams) and unwraps for http.ResponseController (deadlines).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
