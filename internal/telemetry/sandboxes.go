package telemetry

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// The origins of live sandboxes: the values of airlock_sandboxes's origin
// label, a closed set.
const (
	// OriginRun sandboxes are the run engine's, for the runs it drives.
	OriginRun = "run"
	// OriginE2B sandboxes are the E2B API's, for its clients.
	OriginE2B = "e2b"
	// OriginMCP sandboxes are the MCP server's, for its clients'
	// sessions.
	OriginMCP = "mcp"
	// OriginPool sandboxes are made ahead by the pool and not handed out
	// yet (idle): once handed out, one counts under the origin it was
	// handed to.
	OriginPool = "pool"
)

var origins = []string{OriginRun, OriginE2B, OriginMCP, OriginPool}

// Sandboxes returns b, counting every sandbox it creates in
// airlock_sandboxes{origin=origin} until the sandbox is gone (its Done is
// closed: destroyed, past its TTL, or lost), whatever ends it. This is the
// one place sandboxes are counted: the host wraps each backend a component
// gets (the engine's with OriginRun, the E2B API's with OriginE2B, the
// backend under the pool with OriginPool) rather than each caller counting
// what it makes. A sandbox that comes through two counted backends (made
// by the pool's, handed out through the engine's) is counted once, under
// the origin it was last handed to. The sandboxes themselves are returned
// as the backend made them. An origin outside the closed set panics: it is
// the host's wiring, not input.
func (m *Metrics) Sandboxes(origin string, b sandbox.Backend) sandbox.Backend {
	if closed(origin, origins...) != origin {
		panic("telemetry: unknown sandbox origin " + origin)
	}
	return &countedBackend{b: b, origin: origin, live: m.sandboxes}
}

// countedBackend counts what its backend creates under its origin.
type countedBackend struct {
	b      sandbox.Backend
	origin string
	live   *liveSandboxes
}

// Create implements sandbox.Backend.
func (c *countedBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := c.b.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	c.live.add(sb, c.origin)
	return sb, nil
}

var _ sandbox.Backend = (*countedBackend)(nil)

// liveSandboxes are the sandboxes counted backends made, by id, and a
// collector of airlock_sandboxes that counts those not gone at each
// scrape. It is safe for concurrent use.
type liveSandboxes struct {
	desc *prometheus.Desc

	mu sync.Mutex
	// byID holds the sandboxes made and not seen gone at the last sweep,
	// with their origins (guarded by mu).
	byID map[string]countedSandbox
	// swept is how many byID held after the last sweep (guarded by mu).
	swept int
}

type countedSandbox struct {
	sb     sandbox.Sandbox
	origin string
}

func newLiveSandboxes() *liveSandboxes {
	return &liveSandboxes{byID: map[string]countedSandbox{}, desc: prometheus.NewDesc("airlock_sandboxes",
		"Live sandboxes of this process, by origin: run (the engine's), e2b (the E2B API's), pool (made ahead, idle).", []string{"origin"}, nil)}
}

// add counts sb under origin, in place of any origin it had.
func (l *liveSandboxes) add(sb sandbox.Sandbox, origin string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byID[sb.ID()] = countedSandbox{sb: sb, origin: origin}
	// With no scrapes, the sandboxes gone would be held forever: a
	// sweep whenever the map doubles keeps it within twice the live.
	if len(l.byID) > 2*l.swept+64 {
		l.sweep()
	}
}

// sweep forgets the sandboxes that are gone. Preconditions: l.mu held.
func (l *liveSandboxes) sweep() {
	for id, c := range l.byID {
		select {
		case <-c.sb.Done():
			delete(l.byID, id)
		default:
		}
	}
	l.swept = len(l.byID)
}

func (l *liveSandboxes) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l *liveSandboxes) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	l.sweep()
	n := map[string]int{}
	for _, c := range l.byID {
		n[c.origin]++
	}
	l.mu.Unlock()
	for _, o := range origins {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, float64(n[o]), o)
	}
}
