package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Histogram buckets, in seconds.
var (
	bucketsStep     = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	bucketsModel    = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}
	bucketsSandbox  = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	bucketsEgress   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120}
	bucketsApproval = []float64{1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600, 4 * 3600}
	bucketsRun      = []float64{1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600}
	bucketsStore    = []float64{0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
)

// maxLabelValues bounds the distinct values of a label a tenant or a model
// can choose (tool and model names); later ones are counted as "other".
const maxLabelValues = 64

// Metrics are airlock's Prometheus metrics: the runs' (from their events),
// the store's (from a timing decorator, Store), the live sandboxes' (from
// a counting decorator of the sandbox backends, Sandboxes), and the Go
// runtime's and the process's. No label names a tenant, a run or a request.
type Metrics struct {
	reg *prometheus.Registry
	red Redactor
	now func() time.Time

	runsCreated     prometheus.Counter
	runsFinished    *prometheus.CounterVec
	runDuration     *prometheus.HistogramVec
	stepDuration    prometheus.Histogram
	modelDuration   *prometheus.HistogramVec
	modelTokens     *prometheus.CounterVec
	toolDuration    *prometheus.HistogramVec
	toolCalls       *prometheus.CounterVec
	sandboxCreate   prometheus.Histogram
	sandboxLost     prometheus.Counter
	execDuration    *prometheus.HistogramVec
	egressDecisions *prometheus.CounterVec
	egressBytes     *prometheus.CounterVec
	egressDuration  *prometheus.HistogramVec
	approvals       prometheus.Counter
	approvalWait    *prometheus.HistogramVec
	credits         *prometheus.CounterVec
	llmCalls        *prometheus.CounterVec
	llmTokens       *prometheus.CounterVec
	llmDuration     *prometheus.HistogramVec
	budgets         *prometheus.CounterVec
	retries         *prometheus.CounterVec
	verifications   *prometheus.CounterVec
	storeDuration   *prometheus.HistogramVec
	// sandboxes are the live sandboxes of counted backends
	// (Metrics.Sandboxes), airlock_sandboxes.
	sandboxes *liveSandboxes

	mu sync.Mutex
	// steps are the open steps of runs, by run id (guarded by mu).
	steps map[string]*stepTimes
	// pending are the approvals requested and not yet decided, by
	// approval id (guarded by mu).
	pending map[string]pendingApproval
	// values are the label values seen per bounded label (guarded by mu).
	values map[string]map[string]struct{}
}

type stepTimes struct {
	n           int
	start, last time.Time
}

type pendingApproval struct {
	runID       string
	at, expires time.Time
}

// NewMetrics returns the metrics on a new registry, with the Go runtime
// and process collectors. red, when not nil, scrubs label values a model
// or tenant chose; now, when nil, is time.Now (it ages pending approvals).
func NewMetrics(red Redactor, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(), red: red, now: now, steps: map[string]*stepTimes{}, sandboxes: newLiveSandboxes(),
		pending: map[string]pendingApproval{}, values: map[string]map[string]struct{}{},
	}
	f := factory{reg: m.reg}
	m.runsCreated = f.counter("airlock_runs_created_total", "Runs created (run.created events this process appended).")
	m.runsFinished = f.counterVec("airlock_runs_finished_total", "Runs that reached a final status, by status.", "status")
	m.runDuration = f.histogramVec("airlock_run_duration_seconds", "Time from a run's creation to its final status, by status.", bucketsRun, "status")
	m.stepDuration = f.histogram("airlock_step_duration_seconds", "Time of a step: from its model request to its last tool result.", bucketsStep)
	m.modelDuration = f.histogramVec("airlock_model_call_duration_seconds", "Latency of a run's model calls, by provider and model.", bucketsModel, "provider", "model")
	m.modelTokens = f.counterVec("airlock_model_tokens_total", "Tokens of a run's model calls, by provider, model and kind (input, output, cache_read, cache_write).", "provider", "model", "kind")
	m.toolDuration = f.histogramVec("airlock_tool_duration_seconds", "Wall time of tool calls as the run loop saw it, by tool.", bucketsStep, "tool")
	m.toolCalls = f.counterVec("airlock_tool_calls_total", "Tool calls by tool and outcome.", "tool", "outcome")
	f.must(m.sandboxes)
	m.sandboxCreate = f.histogram("airlock_sandbox_create_duration_seconds", "Time to provision a sandbox (and restore its workspace).", bucketsSandbox)
	m.sandboxLost = f.counter("airlock_sandboxes_lost_total", "Sandboxes that died without being asked to.")
	m.execDuration = f.histogramVec("airlock_sandbox_exec_duration_seconds", "Wall time of commands in sandboxes, by tool.", bucketsStep, "tool")
	m.egressDecisions = f.counterVec("airlock_egress_decisions_total", "Egress proxy decisions, by decision (allowed, denied, asked).", "decision")
	m.egressBytes = f.counterVec("airlock_egress_bytes_total", "Bytes through the egress proxy, by direction (in: to the sandbox, out: from it).", "direction")
	m.egressDuration = f.histogramVec("airlock_egress_request_duration_seconds", "Duration of egress proxy requests and tunnels, by decision.", bucketsEgress, "decision")
	m.approvals = f.counter("airlock_approvals_requested_total", "Approvals requested.")
	f.gaugeFunc("airlock_approvals_pending", "Approvals requested and neither decided nor expired.", m.pendingApprovals)
	m.approvalWait = f.histogramVec("airlock_approval_wait_seconds", "Time from an approval's request to its decision, by decision.", bucketsApproval, "decision")
	m.credits = f.counterVec("airlock_credits_spent_total", "Credits spent, by source (model: the run loop's model calls; llm_gateway: calls sandboxes made).", "source")
	m.llmCalls = f.counterVec("airlock_llm_gateway_calls_total", "Calls sandboxes made through the LLM gateway, by API and outcome.", "api", "outcome")
	m.llmTokens = f.counterVec("airlock_llm_gateway_tokens_total", "Tokens of LLM gateway calls, by kind (input, output).", "kind")
	m.llmDuration = f.histogramVec("airlock_llm_gateway_call_duration_seconds", "Latency of LLM gateway calls, by outcome.", bucketsModel, "outcome")
	m.budgets = f.counterVec("airlock_budgets_exhausted_total", "Budgets that stopped a run or a gateway call, by budget.", "budget")
	m.retries = f.counterVec("airlock_retries_total", "Operations tried again, by what (model, tool, sandbox).", "what")
	m.verifications = f.counterVec("airlock_verifications_total", "Completion checks of runs, by result (passed, failed).", "result")
	m.storeDuration = f.histogramVec("airlock_store_operation_duration_seconds", "Latency of run store calls, by operation (the store.Store method) and outcome (ok, not_found, exists, conflict, invalid, leased, lease_lost, final, closed, canceled, error).", bucketsStore, "op", "outcome")
	f.must(collectors.NewGoCollector())
	f.must(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry the metrics are on; serve more on it with
// Register, and all of them with promhttp.HandlerFor.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// factory makes metrics and registers them; a name registered twice is a
// programming error and panics.
type factory struct{ reg *prometheus.Registry }

func (f factory) must(c prometheus.Collector) { f.reg.MustRegister(c) }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.must(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.must(c)
	return c
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.must(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.must(h)
	return h
}

func (f factory) gaugeFunc(name, help string, fn func() float64) {
	f.must(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

func seconds(ms int64) float64 { return float64(max(ms, 0)) / 1000 }

// label returns v as a value of the bounded label key: scrubbed, valid
// UTF-8, at most 64 bytes, and "other" once the label has
// maxLabelValues other values.
func (m *Metrics) label(key, v string) string {
	if m.red != nil {
		v = m.red.String(v)
	}
	v = clip(v, 64)
	if v == "" {
		v = "none"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := m.values[key]
	if seen == nil {
		seen = map[string]struct{}{}
		m.values[key] = seen
	}
	if _, ok := seen[v]; ok {
		return v
	}
	if len(seen) >= maxLabelValues {
		return "other"
	}
	seen[v] = struct{}{}
	return v
}

// closed returns v when it is one of the values of a closed set, else
// "other": labels whose values the engine writes from a fixed list.
func closed(v string, set ...string) string {
	for _, s := range set {
		if v == s {
			return v
		}
	}
	return "other"
}

func (m *Metrics) pendingApprovals() float64 {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, a := range m.pending {
		if a.expires.IsZero() || now.Before(a.expires) {
			n++
		}
	}
	return float64(n)
}

// event adds what ev (with payload p) tells to the metrics.
func (m *Metrics) event(ev event.Event, p event.Payload) {
	switch p := p.(type) {
	case *event.RunCreated:
		m.runsCreated.Inc()
	case *event.ModelRequest:
		m.step(ev.RunID, p.Step, ev.Time, ev.Time)
	case *event.ModelResponse:
		m.step(ev.RunID, p.Step, ev.Time.Add(-ms(p.DurationMS)), ev.Time)
		provider, model := m.label("provider", p.Provider), m.label("model", p.Model)
		m.modelDuration.WithLabelValues(provider, model).Observe(seconds(p.DurationMS))
		for kind, n := range map[string]int64{
			"input": p.Usage.InputTokens, "output": p.Usage.OutputTokens,
			"cache_read": p.Usage.CacheReadTokens, "cache_write": p.Usage.CacheWriteTokens,
		} {
			if n > 0 {
				m.modelTokens.WithLabelValues(provider, model, kind).Add(float64(n))
			}
		}
		if p.Usage.CostMicroUSD > 0 {
			m.credits.WithLabelValues("model").Add(float64(p.Usage.CostMicroUSD) / 1e6)
		}
	case *event.ToolStarted:
		m.step(ev.RunID, p.Step, ev.Time, ev.Time)
	case *event.ToolFinished:
		m.step(ev.RunID, p.Step, ev.Time.Add(-ms(p.DurationMS)), ev.Time)
		tool := m.label("tool", p.Tool)
		m.toolDuration.WithLabelValues(tool).Observe(seconds(p.DurationMS))
		m.toolCalls.WithLabelValues(tool, m.label("outcome", p.Outcome)).Inc()
		if p.WallMS > 0 {
			m.execDuration.WithLabelValues(tool).Observe(seconds(p.WallMS))
		}
	case *event.SandboxProvisioned:
		m.sandboxCreate.Observe(seconds(p.DurationMS))
	case *event.SandboxLost:
		m.sandboxLost.Inc()
	case *event.EgressDecision:
		d := closed(p.Decision, "allowed", "denied", "asked")
		m.egressDecisions.WithLabelValues(d).Inc()
		m.egressDuration.WithLabelValues(d).Observe(seconds(p.DurationMS))
		if p.BytesIn > 0 {
			m.egressBytes.WithLabelValues("in").Add(float64(p.BytesIn))
		}
		if p.BytesOut > 0 {
			m.egressBytes.WithLabelValues("out").Add(float64(p.BytesOut))
		}
	case *event.ApprovalRequested:
		m.approvals.Inc()
		m.mu.Lock()
		m.pending[p.ApprovalID] = pendingApproval{runID: ev.RunID, at: ev.Time, expires: p.Expires}
		m.mu.Unlock()
	case *event.ApprovalDecided:
		m.mu.Lock()
		a, ok := m.pending[p.ApprovalID]
		delete(m.pending, p.ApprovalID)
		m.mu.Unlock()
		if ok {
			m.approvalWait.WithLabelValues(closed(p.Decision, "approved", "denied", "expired", "withdrawn")).Observe(max(ev.Time.Sub(a.at).Seconds(), 0))
		}
	case *event.LLMCall:
		outcome := closed(p.Outcome, event.LLMOutcomeOK, event.LLMOutcomeUpstreamError, event.LLMOutcomeRefused,
			event.LLMOutcomeBudgetExhausted, event.LLMOutcomeCancelled)
		m.llmCalls.WithLabelValues(m.label("api", p.API), outcome).Inc()
		m.llmDuration.WithLabelValues(outcome).Observe(seconds(p.LatencyMS))
		if p.Usage.InputTokens > 0 {
			m.llmTokens.WithLabelValues("input").Add(float64(p.Usage.InputTokens))
		}
		if p.Usage.OutputTokens > 0 {
			m.llmTokens.WithLabelValues("output").Add(float64(p.Usage.OutputTokens))
		}
		if p.CostMicroCredits > 0 {
			m.credits.WithLabelValues("llm_gateway").Add(float64(p.CostMicroCredits) / 1e6)
		}
		if p.Budget != "" {
			m.budgets.WithLabelValues(m.label("budget", p.Budget)).Inc()
		}
	case *event.BudgetExhausted:
		m.budgets.WithLabelValues(m.label("budget", p.Budget)).Inc()
	case *event.Retry:
		m.retries.WithLabelValues(closed(p.What, "model", "tool", "sandbox")).Inc()
	case *event.VerificationResult:
		m.closeStep(ev.RunID)
		result := "failed"
		if p.Passed {
			result = "passed"
		}
		m.verifications.WithLabelValues(result).Inc()
	case *event.RunStarted, *event.RunPaused:
		m.closeStep(ev.RunID)
	case *event.RunResumed:
		if newDrive(p) {
			m.closeStep(ev.RunID)
		}
	case *event.RunCompleted:
		m.endRun(ev, event.StatusCompleted)
	case *event.RunFailed:
		status := p.Status
		if status == "" {
			status = event.StatusFailed
		}
		m.endRun(ev, status)
	case *event.RunCancelled:
		m.endRun(ev, event.StatusCancelled)
	}
}

// step notes that run runID's step n had work from start until last,
// closing the run's older step first.
func (m *Metrics) step(runID string, n int, start, last time.Time) {
	m.mu.Lock()
	s := m.steps[runID]
	var done *stepTimes
	if s == nil || s.n != n {
		done = s
		s = &stepTimes{n: n, start: start, last: start}
		m.steps[runID] = s
	}
	if last.After(s.last) {
		s.last = last
	}
	m.mu.Unlock()
	if done != nil {
		m.stepDuration.Observe(max(done.last.Sub(done.start).Seconds(), 0))
	}
}

// closeStep observes the duration of run runID's open step, if any.
func (m *Metrics) closeStep(runID string) {
	m.mu.Lock()
	s := m.steps[runID]
	delete(m.steps, runID)
	m.mu.Unlock()
	if s != nil {
		m.stepDuration.Observe(max(s.last.Sub(s.start).Seconds(), 0))
	}
}

// endRun counts a run's end and forgets what was open of it.
func (m *Metrics) endRun(ev event.Event, status event.Status) {
	m.closeStep(ev.RunID)
	st := closed(string(status), string(event.StatusCompleted), string(event.StatusFailedVerification),
		string(event.StatusFailed), string(event.StatusCancelled))
	m.runsFinished.WithLabelValues(st).Inc()
	if created, err := event.RunIDTime(ev.RunID); err == nil {
		m.runDuration.WithLabelValues(st).Observe(max(ev.Time.Sub(created).Seconds(), 0))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, a := range m.pending {
		if a.runID == ev.RunID {
			delete(m.pending, id)
		}
	}
}

// maxCounted bounds the runs counted per status at a scrape.
const maxCounted = 10 * store.MaxPage

// CountRuns makes the airlock_runs gauge: at each scrape, the runs of st
// in each unfinished status (queued, running, awaiting_approval, paused),
// of every tenant, counted up to 10000 per status. Every process on one
// store reports the same numbers.
func (m *Metrics) CountRuns(st store.Runs) error {
	return m.reg.Register(&runsCollector{
		st: st, desc: prometheus.NewDesc("airlock_runs",
			"Runs in the store by unfinished status (queued, running, awaiting_approval, paused), up to 10000 each.", []string{"status"}, nil),
		failed: prometheus.NewDesc("airlock_runs_count_errors_total", "Scrapes whose count of runs the store did not answer.", nil, nil),
	})
}

// runsCollector counts runs by status at each scrape.
type runsCollector struct {
	st           store.Runs
	desc, failed *prometheus.Desc

	mu sync.Mutex
	// errors counts the scrapes the store failed (guarded by mu).
	errors float64
}

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.failed
}

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	// A scrape has no context (prometheus.Collector's contract): bound
	// the store's answer instead.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, status := range []event.Status{event.StatusQueued, event.StatusRunning, event.StatusAwaitingApproval, event.StatusPaused} {
		n, err := c.count(ctx, status)
		if err != nil {
			c.mu.Lock()
			c.errors++
			c.mu.Unlock()
			break
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(status))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, c.errors)
}

func (c *runsCollector) count(ctx context.Context, status event.Status) (int, error) {
	n := 0
	f := store.RunFilter{Statuses: []event.Status{status}}
	for n < maxCounted {
		page, err := c.st.ListRuns(ctx, f)
		if err != nil {
			return 0, err
		}
		n += len(page)
		if len(page) < store.PageLimit(0) {
			break
		}
		f.After = page[len(page)-1].ID
	}
	return min(n, maxCounted), nil
}
