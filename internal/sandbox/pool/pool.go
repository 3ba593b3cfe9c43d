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
// A pooled sandbox is fresh: nothing has run in it but its executor and
// the pool's warm-up (Options.WarmUp: on gvisor, a wait until gVisor's clock
// is calibrated and one `/bin/sh -c :`, which leaves nothing behind), and it
// is handed out once, never returned. Idle sandboxes of a spec nobody has
// asked for in Options.Idle are destroyed.
package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// WarmUp says, by runtime (sandbox.RuntimeNative for an empty
	// Spec.Runtime), what the pool does to an idle sandbox it made before
	// it counts as warm; a runtime not in it is warm as made. Nil takes
	// DefaultWarmUp; an empty map warms none (the pool as it was before
	// warm-ups, which benchmarks compare with).
	WarmUp map[string]WarmUp
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// WarmUp readies an idle sandbox for its first command: the pool waits
// Settle after the sandbox is made, then runs Argv in it (nothing when
// empty) and waits for its end. The command must leave nothing behind: no
// file, no process; its output is discarded, and its failure only logged
// (the sandbox is handed out all the same).
type WarmUp struct {
	Settle time.Duration
	Argv   []string
}

// DefaultWarmUp returns what a pool does when Options.WarmUp is nil. On
// gvisor a sandbox's first command is slow twice over (docs/gvisor.md,
// "The pool's first output"): gVisor's clock is calibrated only about a
// second after the sentry's start (two samples of the host's clock against
// the TSC, ApproxUpdateInterval apart), and until then every clock read
// inside is a trapped system call; and the loader, libc and the shell come
// through the gofer into the sentry's page cache at their first use. So the
// pool waits 1.2 s after Ready, which comes after the sentry's start
// (runsc's debug log showed the calibration 0.82-0.91 s after it), and
// runs `/bin/sh -c :`, which maps all three. Natively neither applies (the
// host's clock, the host's page cache), and a warm-up measured no gain in
// first output there (docs/benchmarks.md, "gvpool25").
func DefaultWarmUp() map[string]WarmUp {
	return map[string]WarmUp{
		sandbox.RuntimeGVisor: {Settle: 1200 * time.Millisecond, Argv: []string{"/bin/sh", "-c", ":"}},
	}
}

// WarmUpTimeout bounds one warm-up command.
const WarmUpTimeout = 10 * time.Second

// Stats count what a Pool did.
type Stats struct {
	// Hits are creates served from an idle sandbox, Misses poolable
	// creates that found none, Bypassed creates of specs the pool cannot
	// hold.
	Hits, Misses, Bypassed int64
	// Cold counts the Hits that handed out a sandbox whose warm-up
	// (Options.WarmUp) had not run yet: none of its spec was warm, and
	// the caller got the one made first rather than wait for its warm-up
	// or for a new sandbox.
	Cold int64
	// Idle is the number of idle sandboxes now; Warm how many of those
	// kept for Create (not those Warm prepared) are warm: warmed up, or
	// of a runtime Options.WarmUp does not warm; Prepared how many Warm
	// made and prepared.
	Idle, Warm, Prepared int
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
	ready    []*held // oldest first
}

// held is an idle sandbox of a spec in demand. Its fields are guarded by
// Pool.mu.
type held struct {
	sb sandbox.Sandbox
	// due is when its warm-up may run; zero once it is warm.
	due time.Time
	// warming is closed when the warm-up running now ends; nil while none
	// runs.
	warming chan struct{}
}

// warm reports whether h is warm. Preconditions: Pool.mu held.
func (h *held) warm() bool { return h.due.IsZero() && h.warming == nil }

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
	if o.WarmUp == nil {
		o.WarmUp = DefaultWarmUp()
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
	// Idle sandboxes that died (their executor killed) are never handed
	// out.
	live := e.ready[:0]
	for _, h := range e.ready {
		select {
		case <-h.sb.Done():
			stale = append(stale, h.sb)
			p.idle--
		default:
			live = append(live, h)
		}
	}
	e.ready = live
	if h := pick(e.ready); h != nil {
		e.ready = slices.DeleteFunc(e.ready, func(o *held) bool { return o == h })
		p.idle--
		p.stats.Hits++
		warming := h.warming
		if warming == nil && !h.due.IsZero() {
			p.stats.Cold++
		}
		p.mu.Unlock()
		if warming != nil {
			// Its warm-up runs now, after gVisor's calibration: what
			// is left of it is less than what the caller's first
			// command would pay in its place, and far less than a
			// new sandbox.
			select {
			case <-warming:
			case <-ctx.Done():
				p.destroy(h.sb)
				p.kick()
				return nil, ctx.Err()
			}
		}
		p.foreground(h.sb)
		p.kick()
		return h.sb, nil
	}
	p.stats.Misses++
	p.mu.Unlock()
	p.kick()
	return p.b.Create(ctx, spec)
}

// pick chooses the idle sandbox a create hands out: a warm one if any,
// else the one being warmed, else the oldest not yet warmed (handed out
// cold at once: its first command pays what every first command paid
// before warm-ups, and a new sandbox would cost far more). Nil when there
// is none. Preconditions: Pool.mu held.
func pick(ready []*held) *held {
	for _, h := range ready {
		if h.warm() {
			return h
		}
	}
	for _, h := range ready {
		if h.warming != nil {
			return h
		}
	}
	if len(ready) > 0 {
		return ready[0]
	}
	return nil
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
	for _, e := range p.specs {
		for _, h := range e.ready {
			if h.warm() {
				s.Warm++
			}
		}
	}
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
		for _, h := range e.ready {
			all = append(all, h.sb)
		}
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
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		due.Reset(p.nextDue())
		select {
		case <-p.stop:
			return
		case <-due.C:
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
		if !p.warmUp() {
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
// is gone; its warm-up is due after its runtime's Settle.
func (p *Pool) keep(k string, sb sandbox.Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.specs[k]
	if p.closed || e == nil || p.idle >= p.o.Max {
		return false
	}
	h := &held{sb: sb}
	if w, ok := p.o.WarmUp[runtimeOf(e.spec)]; ok {
		// Never zero: zero means warm.
		h.due = time.Now().Add(max(w.Settle, time.Nanosecond))
	}
	e.ready = append(e.ready, h)
	p.idle++
	return true
}

// runtimeOf names spec's runtime as Options.WarmUp does.
func runtimeOf(spec sandbox.Spec) string {
	if spec.Runtime == "" {
		return sandbox.RuntimeNative
	}
	return spec.Runtime
}

// nextDue returns how long until the next warm-up is due (an hour when
// none waits).
func (p *Pool) nextDue() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := time.Hour
	for _, e := range p.specs {
		for _, h := range e.ready {
			if !h.due.IsZero() && h.warming == nil {
				d = min(d, max(time.Until(h.due), 0))
			}
		}
	}
	return d
}

// warmUp runs every warm-up that is due, one at a time; false when the
// pool stopped.
func (p *Pool) warmUp() bool {
	for {
		select {
		case <-p.stop:
			return false
		default:
		}
		h, w, ok := p.dueWarmUp()
		if !ok {
			return true
		}
		if len(w.Argv) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), WarmUpTimeout+5*time.Second)
			res, err := sandbox.Run(ctx, h.sb, sandbox.Command{Argv: w.Argv, Timeout: WarmUpTimeout})
			cancel()
			if err != nil || res.ExitCode != 0 {
				// A sandbox lost meanwhile is seen as such at its
				// hand-out; one without the command is served
				// unwarmed, as before warm-ups.
				p.log.Debug("pool: warm up an idle sandbox", "sandbox_id", h.sb.ID(), "result", res, "err", err)
			}
		}
		p.mu.Lock()
		close(h.warming)
		h.warming = nil
		p.mu.Unlock()
	}
}

// dueWarmUp marks the first idle sandbox whose warm-up is due as warming
// and returns it with its warm-up.
func (p *Pool) dueWarmUp() (*held, WarmUp, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, WarmUp{}, false
	}
	now := time.Now()
	for _, e := range p.specs {
		for _, h := range e.ready {
			if !h.due.IsZero() && h.warming == nil && !now.Before(h.due) {
				h.due = time.Time{}
				h.warming = make(chan struct{})
				return h, p.o.WarmUp[runtimeOf(e.spec)], true
			}
		}
	}
	return nil, WarmUp{}, false
}

// expire ends the demand of specs not asked for in Options.Idle (but for
// primed ones) and destroys their idle sandboxes.
func (p *Pool) expire() {
	var gone []sandbox.Sandbox
	p.mu.Lock()
	for k, e := range p.specs {
		if !e.primed && time.Since(e.lastUsed) > p.o.Idle {
			for _, h := range e.ready {
				gone = append(gone, h.sb)
			}
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
