package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Options configure New.
type Options struct {
	// Config says where traces go; an empty OTLPEndpoint makes none.
	Config Config
	// SpanExporter, when not nil, receives the spans instead of an OTLP
	// endpoint, each as it ends (a synchronous processor: tests use
	// tracetest's in-memory exporter).
	SpanExporter sdktrace.SpanExporter
	// Redactor scrubs the free text that becomes a span attribute or a
	// metric label; nil scrubs nothing.
	Redactor Redactor
	// Version is the service.version of spans.
	Version string
	// Now is the clock that ages pending approvals; nil means time.Now.
	Now func() time.Time
}

// Telemetry is airlock serve's traces and metrics. Its methods are safe
// for concurrent use.
type Telemetry struct {
	metrics *Metrics
	// provider, tracer and httpTracer are nil when traces are off.
	provider *sdktrace.TracerProvider
	tracer   *tracer
	http     trace.Tracer
}

// New returns the telemetry o asks for. Without an OTLP endpoint or a
// span exporter there are no traces: no provider, no exporter, no
// goroutine. With an endpoint, spans are batched and posted by one
// goroutine of the SDK's, which Shutdown stops.
func New(o Options) (*Telemetry, error) {
	cfg := o.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Telemetry{metrics: NewMetrics(o.Redactor, o.Now)}
	var sp sdktrace.SpanProcessor
	switch {
	case o.SpanExporter != nil:
		sp = sdktrace.NewSimpleSpanProcessor(o.SpanExporter)
	case cfg.OTLPEndpoint != "":
		u, err := cfg.TracesURL()
		if err != nil {
			return nil, err
		}
		// New only builds the client: nothing is dialled until a batch
		// is exported.
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u), otlptracehttp.WithTimeout(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
		}
		sp = sdktrace.NewBatchSpanProcessor(exp)
	default:
		return t, nil
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if o.Version != "" {
		attrs = append(attrs, attribute.String("service.version", o.Version))
	}
	t.provider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)))
	const scope = "github.com/airlockrun/airlock/internal/telemetry"
	t.tracer = newTracer(t.provider.Tracer(scope), o.Redactor, nil)
	t.http = t.provider.Tracer(scope + "/http")
	return t, nil
}

// Tracing reports whether spans are made.
func (t *Telemetry) Tracing() bool { return t.provider != nil }

// Metrics returns the metrics.
func (t *Telemetry) Metrics() *Metrics { return t.metrics }

// Registry is the metrics' registry, for /metrics.
func (t *Telemetry) Registry() *prometheus.Registry { return t.metrics.reg }

// WrapStore returns s timed into the store latency metric.
func (t *Telemetry) WrapStore(s store.Store) store.Store { return t.metrics.WrapStore(s) }

// UseStore gives the telemetry read access to the run store: the
// airlock_runs gauge counts its runs at each scrape, and spans of a run
// whose creation this process did not see (created by another process,
// or before a restart) read the run's tenant and model from it once. Call
// it once, before the first event.
func (t *Telemetry) UseStore(s store.Runs) error {
	if t.tracer != nil {
		t.tracer.lookup = func(runID string) (RunInfo, bool) {
			// The engine's OnEvent hook carries no context: bound the
			// read instead.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r, err := s.GetRun(ctx, runID)
			if err != nil {
				return RunInfo{}, false
			}
			return RunInfo{Tenant: r.Tenant, Model: r.Model}, true
		}
	}
	if err := t.metrics.CountRuns(s); err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	return nil
}

// Event takes one event the engine appended (the engine's OnEvent hook):
// it feeds the metrics and, when traces are on, the run's spans. Events
// of types this build does not know are ignored.
func (t *Telemetry) Event(ev event.Event) {
	p, err := ev.Unpack()
	if err != nil {
		return
	}
	t.metrics.event(ev, p)
	if t.tracer != nil {
		t.tracer.event(ev, p)
	}
}

// HTTP returns next with a server span for each request when traces are
// on, and next itself when they are off.
func (t *Telemetry) HTTP(next http.Handler) http.Handler {
	if t.http == nil {
		return next
	}
	return &httpTracer{next: next, t: t.http, prop: propagation.TraceContext{}}
}

// Shutdown exports the spans still buffered and stops the exporter; ctx
// bounds the wait. Without traces it does nothing.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("telemetry: shutdown: %w", err)
	}
	return nil
}
