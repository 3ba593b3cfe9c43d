package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the API's own Prometheus metrics: requests by route and
// status (a count and a latency histogram), errors by code, runs created,
// event streams open, events streamed and their delivery time. None has a tenant label:
// /metrics shows no tenant's business. They are registered on
// Options.Metrics, with whatever else the host put there (the runs', the
// store's, the Go runtime's: package telemetry).
type metrics struct {
	handler  http.Handler
	requests *prometheus.CounterVec   // route, code
	duration *prometheus.HistogramVec // route, code
	errors   labeled                  // code
	created  prometheus.Counter
	streams  prometheus.Gauge
	streamed prometheus.Counter
	delivery prometheus.Histogram
}

// DeliveryBuckets are the bounds of airlock_api_event_delivery_seconds, in
// seconds; bench/ssefloor measures its floor with the same.
var DeliveryBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5}

// newMetrics registers the API's metrics on reg (a registry of their own
// when nil).
func newMetrics(reg *prometheus.Registry) (metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_http_requests_total",
			Help: "API requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_http_request_duration_seconds",
			Help:    "API request latency (until the handler returned; an event stream's whole life) by route pattern and status code.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"route", "code"}),
		errors: labeled{prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_api_errors_total",
			Help: "API error responses by error code.",
		}, []string{"code"})},
		created:  prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_api_runs_created_total", Help: "Runs created through the API."}),
		streams:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "airlock_api_event_streams", Help: "Event streams open now."}),
		streamed: prometheus.NewCounter(prometheus.CounterOpts{Name: "airlock_api_events_streamed_total", Help: "Events sent on event streams."}),
		delivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "airlock_api_event_delivery_seconds",
			Help: "Time from a committed event reaching this process's feed (from the engine as it commits, or from the poller) " +
				"to its write on an event stream open at the time. Events a stream catches up on are not counted.",
			Buckets: DeliveryBuckets,
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.errors.v, m.created, m.streams, m.streamed, m.delivery} {
		if err := reg.Register(c); err != nil {
			return metrics{}, err
		}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m, nil
}

// request counts one answered request of route (method and pattern) with
// status code, which took d.
func (m *metrics) request(route, code string, d time.Duration) {
	m.requests.WithLabelValues(route, code).Inc()
	m.duration.WithLabelValues(route, code).Observe(d.Seconds())
}

// labeled is a counter family with one label.
type labeled struct{ v *prometheus.CounterVec }

func (l labeled) add(value string) { l.v.WithLabelValues(value).Inc() }
