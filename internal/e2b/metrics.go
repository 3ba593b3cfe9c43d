package e2b

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/param"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Sandbox metrics: every MetricsInterval each running sandbox is sampled
// into a ring of its own, from its host's measure (sandbox.Measurer: the
// cgroup's CPU time and memory) and its writable layers' fill as its
// executor reads them (sandbox.DiskMeasurer: for display only, as these
// metrics are; metering uses the host's measure alone). GET
// /sandboxes/{id}/metrics returns the ring, envd's GET /metrics one fresh
// sample.

// metricRingSize bounds a sandbox's samples: an hour at the default
// interval.
const metricRingSize = 720

// sandboxMetric is the SandboxMetric schema.
type sandboxMetric struct {
	Timestamp     string  `json:"timestamp"` // RFC 3339; deprecated but what the JS SDK reads
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// envdMetrics is envd's Metrics schema (GET /metrics), snake_case.
type envdMetrics struct {
	TS          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    int64   `json:"mem_total"`
	MemUsed     int64   `json:"mem_used"`
	MemTotalMiB int64   `json:"mem_total_mib"`
	MemUsedMiB  int64   `json:"mem_used_mib"`
	MemCache    int64   `json:"mem_cache"`
	DiskTotal   int64   `json:"disk_total"`
	DiskUsed    int64   `json:"disk_used"`
}

// metricRing is one boot's samples, oldest first once full.
type metricRing struct {
	sb sandbox.Sandbox // the boot sampled; a new boot starts a new ring

	mu sync.Mutex
	// samples, next, added, lastAt and lastCPU are guarded by mu.
	samples []sandboxMetric
	next    int       // where the next sample goes once full
	added   time.Time // when the newest sample was taken
	lastAt  time.Time // when lastCPU was read; zero before the first
	lastCPU time.Duration
}

// add keeps m, taken at t.
func (r *metricRing) add(m sandboxMetric, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added = t
	if len(r.samples) < metricRingSize {
		r.samples = append(r.samples, m)
		return
	}
	r.samples[r.next] = m
	r.next = (r.next + 1) % metricRingSize
}

// between returns the samples taken from start to end (unix seconds,
// inclusive; a zero bound is open), oldest first.
func (r *metricRing) between(start, end int64) []sandboxMetric {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []sandboxMetric{}
	for i := range r.samples {
		m := r.samples[(r.next+i)%len(r.samples)]
		if (start == 0 || m.TimestampUnix >= start) && (end == 0 || m.TimestampUnix <= end) {
			out = append(out, m)
		}
	}
	return out
}

// stale reports whether the ring holds no sample taken in the interval
// before now.
func (r *metricRing) stale(now time.Time, interval time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples) == 0 || now.Sub(r.added) >= interval
}

// metricStore holds every running sandbox's ring, by sandbox id.
type metricStore struct {
	mu sync.Mutex
	// rings is guarded by mu.
	rings map[string]*metricRing
}

func newMetricStore() *metricStore { return &metricStore{rings: map[string]*metricRing{}} }

// ring returns the ring of id's boot sb, a new one if sb is a new boot.
func (m *metricStore) ring(id string, sb sandbox.Sandbox) *metricRing {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.rings[id]
	if r == nil || r.sb != sb {
		r = &metricRing{sb: sb}
		m.rings[id] = r
	}
	return r
}

// existing returns id's ring for boot sb, or nil.
func (m *metricStore) existing(id string, sb sandbox.Sandbox) *metricRing {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.rings[id]; r != nil && r.sb == sb {
		return r
	}
	return nil
}

// keep forgets the rings of every sandbox not in live.
func (m *metricStore) keep(live map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id := range m.rings {
		if !live[id] {
			delete(m.rings, id)
		}
	}
}

// runMetrics samples every running sandbox every MetricsInterval until ctx
// ends. Run runs it.
func (s *Server) runMetrics(ctx context.Context) {
	t := time.NewTicker(s.cfg.MetricsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sampleAll(ctx)
		}
	}
}

// sampleAll takes one sample of every running sandbox and forgets the
// rings, and the polling watchers, of those that are gone.
func (s *Server) sampleAll(ctx context.Context) {
	s.watchers.prune()
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	live := map[string]bool{}
	for _, b := range boxes {
		lv := b.current()
		if lv == nil {
			continue
		}
		live[b.id] = true
		r := s.metrics.ring(b.id, lv.sb)
		r.add(s.sample(ctx, b, lv, r), s.now())
	}
	s.metrics.keep(live)
}

// metricTimeout bounds a disk measure, which asks the sandbox.
const metricTimeout = 5 * time.Second

// sample measures lv now. Its CPU use is the CPU time since r's last
// sample over the wall time since then and the sandbox's CPUs (since the
// boot, for the first).
func (s *Server) sample(ctx context.Context, b *box, lv *live, r *metricRing) sandboxMetric {
	now := s.now()
	l := b.spec.Limits
	m := sandboxMetric{Timestamp: now.UTC().Format(time.RFC3339Nano), TimestampUnix: now.Unix(), MemTotal: l.MemoryBytes}
	cpus := l.CPUs
	if cpus <= 0 {
		cpus = float64(runtime.NumCPU())
	}
	m.CPUCount = max(1, int(math.Ceil(cpus)))
	if m.MemTotal <= 0 {
		m.MemTotal = hostMemory()
	}
	if ms, ok := lv.sb.(sandbox.Measurer); ok {
		if got, err := ms.Measure(); err == nil {
			m.MemUsed = got.Memory
			r.mu.Lock()
			from, cpu0 := r.lastAt, r.lastCPU
			if from.IsZero() {
				from, cpu0 = lv.sb.Info().Created, 0
			}
			if wall := now.Sub(from); wall > 0 && got.CPU >= cpu0 {
				pct := 100 * float64(got.CPU-cpu0) / float64(wall) / cpus
				m.CPUUsedPct = math.Round(min(pct, 100)*100) / 100
			}
			r.lastAt, r.lastCPU = now, got.CPU
			r.mu.Unlock()
		} else {
			s.log.Debug("e2b: measure a sandbox", "sandbox_id", b.id, "err", err)
		}
	}
	if dm, ok := lv.sb.(sandbox.DiskMeasurer); ok {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), metricTimeout)
		d, err := dm.MeasureDisk(dctx)
		cancel()
		if err == nil {
			m.DiskUsed, m.DiskTotal = d.Used, d.Total
		} else {
			s.log.Debug("e2b: measure a sandbox's disk", "sandbox_id", b.id, "err", err)
		}
	}
	return m
}

// hostMemory is the host's memory in bytes (/proc/meminfo's MemTotal): a
// sandbox without a memory limit may use that much. 0 when unknown.
func hostMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemTotal:"))
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte("kB")))), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// metricsTimeParams are the start and end query parameters of a metrics
// call: unix seconds, each optional; package param checks their bounds.
var metricsTimeParams = [2]param.Int{{Name: "start", Max: 1 << 40}, {Name: "end", Max: 1 << 40}}

// parseMetricsRange reads the start and end query parameters: unix
// seconds, each optional.
func parseMetricsRange(r *http.Request) (start, end int64, err error) {
	q := r.URL.Query()
	for i, dst := range []*int64{&start, &end} {
		p := metricsTimeParams[i]
		n, perr := p.Parse(q.Get(p.Name))
		if perr != nil {
			return 0, 0, &publicError{status: 400, msg: perr.Error()}
		}
		*dst = n
	}
	if start != 0 && end != 0 && start > end {
		return 0, 0, &publicError{status: 400, msg: "start is after end"}
	}
	return start, end, nil
}

// handleMetrics answers a sandbox's samples between start and end. A
// running sandbox not sampled in the last interval (just created, or the
// sampler fell behind) is sampled now; a paused one has none.
func (s *Server) handleMetrics(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	start, end, err := parseMetricsRange(r)
	if err != nil {
		return err
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	lv := b.current()
	if lv == nil {
		writeJSON(w, http.StatusOK, []sandboxMetric{})
		return nil
	}
	ring := s.metrics.ring(b.id, lv.sb)
	if now := s.now(); ring.stale(now, s.cfg.MetricsInterval) {
		ring.add(s.sample(ctx, b, lv, ring), now)
	}
	writeJSON(w, http.StatusOK, ring.between(start, end))
	return nil
}

// handleEnvdMetrics answers envd's GET /metrics: one sample taken now,
// whose CPU use is since the last sample of the ring (not stored in it).
func (s *Server) handleEnvdMetrics(w http.ResponseWriter, r *http.Request, c envdCall) {
	// A ring of its own, from the stored ring's baseline: this sample
	// must not move it.
	ring := &metricRing{sb: c.lv.sb}
	if src := s.metrics.existing(c.b.id, c.lv.sb); src != nil {
		src.mu.Lock()
		ring.lastAt, ring.lastCPU = src.lastAt, src.lastCPU
		src.mu.Unlock()
	}
	m := s.sample(r.Context(), c.b, c.lv, ring)
	writeJSON(w, http.StatusOK, envdMetrics{
		TS: m.TimestampUnix, CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemTotal: m.MemTotal, MemUsed: m.MemUsed, MemTotalMiB: m.MemTotal >> 20, MemUsedMiB: m.MemUsed >> 20,
		MemCache: m.MemCache, DiskTotal: m.DiskTotal, DiskUsed: m.DiskUsed,
	})
}
