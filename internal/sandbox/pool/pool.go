// Package pool keeps sandboxes created ahead of demand, so that a host
// that makes many alike (the E2B API, a run engine's first sandbox) hands
// one out in the time a map lookup takes instead of the time a sandbox
// takes to start.
//
// A Pool is a sandbox.Backend. A spec it can hold — no fixed id, no
// network, no host workspace directory, no TTL, no extra CAs: nothing that
// binds the sandbox to one user before it is asked for — is served from the
// idle sandboxes made earlier from an equal spec when there is one, and
// then the pool makes another in the background while the spec stays in
// demand: asked for twice or more, the last time within Options.Idle (a
// spec asked for once, say one with a run's own token in its environment,
// is never made ahead). Any other spec goes straight to the backend.
//
// A pooled sandbox is fresh: nothing has run in it but its executor, and it
// is handed out once, never returned. Idle sandboxes of a spec nobody has
// asked for in Options.Idle are destroyed.
package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Options tune a Pool; zero fields take their defaults.
type Options struct {
	// PerSpec is how many idle sandboxes the pool keeps ready for each
	// spec in demand (default 2).
	PerSpec int
	// Max bounds the idle sandboxes over all specs (default 16).
	Max int
	// Idle is how long a spec stays in demand after it was last asked for
	// (default 10 minutes); its idle sandboxes are destroyed after that.
	Idle time.Duration
	// RefillDelay is how long after a create the pool waits before it
	// makes more (default 25 ms), so that the sandbox just handed out runs
	// its first command without the refill beside it.
	RefillDelay time.Duration
	// Background makes idle sandboxes (and prepares warm ones) in the
	// background (sandbox.Background: on the native runtime a cgroup CPU
	// weight of 1 against the 100 of sandboxes in use), raising each as it
	// is handed out. Off by default: on a saturated 2-core machine it made
	// the refill slower than the demand and the pool ran dry, so creates
	// got slower and first output no faster (docs/benchmarks.md).
	Background bool
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Stats count what a Pool did.
type Stats struct {
	// Hits are creates served from an idle sandbox, Misses poolable
	// creates that found none, Bypassed creates of specs the pool cannot
	// hold.
	Hits, Misses, Bypassed int64
	// Idle is the number of idle sandboxes now; Prepared how many of them
	// Warm made and prepared.
	Idle, Prepared int
}

// Pool is a sandbox.Backend that keeps sandboxes ready. Close destroys the
// idle ones.
type Pool struct {
	b   sandbox.Backend
	o   Options
	log *slog.Logger

	mu sync.Mutex
	// specs is guarded by mu: every spec in demand, by its key.
	specs map[string]*entry
	// warms is guarded by mu: the prepared specs, by name (Warm).
	warms map[string]*warm
	// idle is guarded by mu: the number of idle sandboxes over all specs.
	idle   int
	stats  Stats
	closed bool

	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// entry is one spec in demand.
type entry struct {
	spec     sandbox.Spec
	asked    int
	primed   bool // in demand until Close, whatever lastUsed says
	lastUsed time.Time
	ready    []sandbox.Sandbox // oldest first
}

// New starts a Pool over b.
func New(b sandbox.Backend, o Options) *Pool {
	if o.PerSpec <= 0 {
		o.PerSpec = 2
	}
	if o.Max <= 0 {
		o.Max = 16
	}
	if o.Idle <= 0 {
		o.Idle = 10 * time.Minute
	}
	if o.RefillDelay <= 0 {
		o.RefillDelay = 25 * time.Millisecond
	}
	p := &Pool{
		b: b, o: o, log: o.Logger, specs: map[string]*entry{}, warms: map[string]*warm{}, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	go p.fill()
	return p
}

// Poolable reports whether a Pool can hold sandboxes of spec: nothing in
// it is chosen for one user (see the package comment).
func Poolable(spec sandbox.Spec) bool {
	return spec.ID == "" && spec.Network != sandbox.NetworkProxy && spec.ProxySocket == "" && spec.Workspace == "" &&
		spec.TTL == 0 && len(spec.TrustedCAs) == 0
}

// key names spec's class of equal specs.
func key(spec sandbox.Spec) (string, error) {
	b, err := json.Marshal(spec)
	return string(b), err
}

// Create returns a sandbox of spec: an idle one when the pool has one,
// otherwise a new one from the backend.
func (p *Pool) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if !Poolable(spec) {
		p.mu.Lock()
		p.stats.Bypassed++
		p.mu.Unlock()
		return p.b.Create(ctx, spec)
	}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	k, err := key(spec)
	if err != nil {
		return nil, err
	}
	var stale []sandbox.Sandbox
	defer func() {
		for _, sb := range stale {
			p.destroy(sb)
		}
	}()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return p.b.Create(ctx, spec)
	}
	e := p.specs[k]
	if e == nil {
		e = &entry{spec: spec}
		p.specs[k] = e
	}
	e.lastUsed = time.Now()
	e.asked++
	for len(e.ready) > 0 {
		sb := e.ready[0]
		e.ready = e.ready[1:]
		p.idle--
		select {
		case <-sb.Done():
			// Died while idle (its executor killed): never handed out.
			stale = append(stale, sb)
			continue
		default:
		}
		p.stats.Hits++
		p.mu.Unlock()
		p.foreground(sb)
		p.kick()
		return sb, nil
	}
	p.stats.Misses++
	p.mu.Unlock()
	p.kick()
	return p.b.Create(ctx, spec)
}

// Prime puts spec in demand as if it had been asked for twice, so that
// the pool makes its idle sandboxes before the first create asks, and
// keeps it in demand until Close however long no create asks: what a host
// that knows its callers' usual spec does at its start.
func (p *Pool) Prime(spec sandbox.Spec) error {
	if !Poolable(spec) {
		return errors.New("prime a pool: the spec is chosen for one user (see Poolable)")
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("prime a pool: %w", err)
	}
	k, err := key(spec)
	if err != nil {
		return fmt.Errorf("prime a pool: %w", err)
	}
	p.mu.Lock()
	if e := p.specs[k]; e == nil {
		p.specs[k] = &entry{spec: spec, asked: 2, primed: true, lastUsed: time.Now()}
	} else {
		e.asked = max(e.asked, 2)
		e.primed = true
		e.lastUsed = time.Now()
	}
	p.mu.Unlock()
	p.kick()
	return nil
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Idle = p.idle
	for _, w := range p.warms {
		s.Prepared += len(w.ready)
	}
	return s
}

// Close stops refilling and destroys every idle sandbox. Sandboxes handed
// out are the caller's; later creates go straight to the backend.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	p.mu.Lock()
	var all []sandbox.Sandbox
	for k, e := range p.specs {
		all = append(all, e.ready...)
		delete(p.specs, k)
	}
	for name, w := range p.warms {
		all = append(all, w.ready...)
		delete(p.warms, name)
	}
	p.idle = 0
	p.mu.Unlock()
	var errs []error
	for _, sb := range all {
		errs = append(errs, sb.Destroy(ctx))
	}
	return errors.Join(errs...)
}

// preopener is a sandbox that can open now what its first command would
// otherwise open (the native backend's cgroup counters).
type preopener interface{ Preopen() }

// firstUse readies what sb's first command needs, so that the caller it
// is handed to does not wait for it: an idle sandbox's first command is
// the caller's, and the only one a `sandbox run` handed to a daemon has.
func firstUse(sb sandbox.Sandbox) {
	if o, ok := sb.(preopener); ok {
		o.Preopen()
	}
}

func (p *Pool) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill makes idle sandboxes, one at a time so refilling never takes more
// than one core from the work the sandboxes are for (with
// Options.Background, below the CPU priority of every sandbox in use,
// until handed out), and ends demand that lapsed.
func (p *Pool) fill() {
	defer close(p.done)
	t := time.NewTicker(max(p.o.Idle/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
			// A sandbox was just handed out, and its first command is
			// about to run: making the next one at once would take the
			// CPU it needs. The refill waits a moment.
			select {
			case <-p.stop:
				return
			case <-time.After(p.o.RefillDelay):
			}
		case <-t.C:
		}
		p.expire()
		for {
			spec, k, ok := p.wanted()
			if !ok {
				break
			}
			ctx, cancel := context.WithTimeout(p.refillContext(), time.Minute)
			sb, err := p.b.Create(ctx, spec)
			cancel()
			if err != nil {
				// The next create of the spec tries again; a backend that
				// cannot make this spec is not asked in a loop.
				p.log.Warn("pool: create an idle sandbox", "err", err)
				break
			}
			firstUse(sb)
			if !p.keep(k, sb) {
				p.destroy(sb)
			}
			select {
			case <-p.stop:
				return
			default:
			}
		}
		if !p.fillWarm() {
			return
		}
	}
}

// wanted returns the spec most short of idle sandboxes, if any is and the
// pool has room.
func (p *Pool) wanted() (sandbox.Spec, string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.idle >= p.o.Max {
		return sandbox.Spec{}, "", false
	}
	var best *entry
	var bestKey string
	for k, e := range p.specs {
		if e.asked >= 2 && len(e.ready) < p.o.PerSpec && (best == nil || len(e.ready) < len(best.ready)) {
			best, bestKey = e, k
		}
	}
	if best == nil {
		return sandbox.Spec{}, "", false
	}
	return best.spec, bestKey, true
}

// keep adds sb to spec k's idle sandboxes, unless the pool or the demand
// is gone.
func (p *Pool) keep(k string, sb sandbox.Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.specs[k]
	if p.closed || e == nil || p.idle >= p.o.Max {
		return false
	}
	e.ready = append(e.ready, sb)
	p.idle++
	return true
}

// expire ends the demand of specs not asked for in Options.Idle (but for
// primed ones) and destroys their idle sandboxes.
func (p *Pool) expire() {
	var gone []sandbox.Sandbox
	p.mu.Lock()
	for k, e := range p.specs {
		if !e.primed && time.Since(e.lastUsed) > p.o.Idle {
			gone = append(gone, e.ready...)
			p.idle -= len(e.ready)
			delete(p.specs, k)
		}
	}
	gone = append(gone, p.expireWarm()...)
	p.mu.Unlock()
	for _, sb := range gone {
		p.destroy(sb)
	}
}

// refillContext is the context a refill makes a sandbox under.
func (p *Pool) refillContext() context.Context {
	if p.o.Background {
		return sandbox.Background(context.Background())
	}
	return context.Background()
}

// foreground raises sb, made in the background, to the CPU priority of
// the sandboxes in use, as it is handed out. One left low still works,
// only slower while others want the CPU: it is handed out all the same.
func (p *Pool) foreground(sb sandbox.Sandbox) {
	if pr, ok := sb.(sandbox.Prioritizer); ok {
		if err := pr.Foreground(); err != nil {
			p.log.Warn("pool: raise a sandbox handed out to the CPU priority of those in use", "sandbox_id", sb.ID(), "err", err)
		}
	}
}

func (p *Pool) destroy(sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		p.log.Warn("pool: destroy an idle sandbox", "sandbox_id", sb.ID(), "err", err)
	}
}
