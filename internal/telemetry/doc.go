// Package telemetry is what airlock serve tells its operators: OpenTelemetry
// traces of runs and API requests, Prometheus metrics, and a slog handler
// that scrubs secrets from every log record.
//
// Everything about runs is derived from the events the run engine appends
// (Telemetry.Event is the engine's OnEvent hook) and from the API's HTTP
// middleware; the package never reaches into the engine. Live sandboxes
// are counted by a decorator of the sandbox backends (Metrics.Sandboxes),
// which the host puts on the backend of each component that makes them.
//
// Invariants it keeps:
//   - No secret value, tool argument, tool output, model text or prompt
//     body, run task or approval action becomes a span attribute, a metric
//     label or a log value: spans carry ids, names, outcomes, counts,
//     durations and token usage only, whatever a policy's log_bodies says
//     (the event log keeps what the policy allows; telemetry leaves the
//     host for other systems). Free text that does go out (a sandbox's
//     loss reason, a metric label a model could choose) is clipped and
//     passed through the host's redactor first.
//   - Metric labels have bounded cardinality: no tenant, run or request
//     id is a label, and label values a tenant or a model can choose (tool
//     and model names) are capped per label, the rest counted as "other".
//   - When no OTLP endpoint is configured, nothing is exported: there is
//     no tracer provider, no exporter and no goroutine, and the HTTP
//     middleware is the handler itself.
//   - A run's trace id and its root span's id are derived from the run id,
//     so every host process that touches a run (the API process that
//     created it, the worker that drives it, the one that resumes it after
//     a restart) adds its spans to one trace, and the run span, written by
//     whichever process records the run's end, is their parent.
//
// Importers: host wiring (internal/host) only.
package telemetry
