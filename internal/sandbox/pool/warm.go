package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// MaxWarm bounds the sandboxes Warm keeps ready under one name.
const MaxWarm = 32

// PrepareTimeout bounds one prepare of a warm sandbox.
const PrepareTimeout = 5 * time.Minute

// warm is a spec whose sandboxes are kept ready and prepared, under a
// name (Warm, Take).
type warm struct {
	spec     sandbox.Spec
	key      string // the spec's key: a changed spec empties ready
	n        int
	prepare  func(context.Context, sandbox.Sandbox) error
	lastUsed time.Time
	ready    []sandbox.Sandbox // oldest first
}

// Warm keeps n sandboxes of spec ready under name, each made and then
// prepared by prepare (a template's start command and readiness check)
// before Take may hand it out; one that prepare fails is destroyed. The
// name tells apart specs whose preparation differs (a template's name and
// version, and its tenant): Take hands out only what was prepared under
// it. Calling Warm again updates the spec, n and prepare (sandboxes made
// of another spec are destroyed) and keeps the name in demand; a name
// neither Warm nor Take used for Options.Idle is dropped, its sandboxes
// destroyed. The spec must be Poolable.
func (p *Pool) Warm(name string, spec sandbox.Spec, n int, prepare func(context.Context, sandbox.Sandbox) error) error {
	if !Poolable(spec) {
		return errors.New("warm a pool: the spec is chosen for one user (see Poolable)")
	}
	if n < 1 || n > MaxWarm || prepare == nil {
		return fmt.Errorf("warm a pool: %d sandboxes, want 1 to %d, and a prepare", n, MaxWarm)
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("warm a pool: %w", err)
	}
	k, err := key(spec)
	if err != nil {
		return fmt.Errorf("warm a pool: %w", err)
	}
	var gone []sandbox.Sandbox
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("warm a pool: the pool is closed")
	}
	w := p.warms[name]
	if w == nil {
		w = &warm{}
		p.warms[name] = w
	}
	if w.key != k {
		gone = w.ready
		p.idle -= len(w.ready)
		w.ready = nil
	}
	for len(w.ready) > n {
		gone = append(gone, w.ready[len(w.ready)-1])
		w.ready = w.ready[:len(w.ready)-1]
		p.idle--
	}
	w.spec, w.key, w.n, w.prepare, w.lastUsed = spec, k, n, prepare, time.Now()
	p.mu.Unlock()
	for _, sb := range gone {
		p.destroy(sb)
	}
	p.kick()
	return nil
}

// Take hands out a sandbox Warm prepared under name, if one is ready, and
// has the pool make another; false when none is (the caller makes and
// prepares its own). A sandbox is handed out once, never returned.
func (p *Pool) Take(name string) (sandbox.Sandbox, bool) {
	p.mu.Lock()
	w := p.warms[name]
	if p.closed || w == nil || len(w.ready) == 0 {
		p.stats.Misses++
		p.mu.Unlock()
		return nil, false
	}
	sb := w.ready[0]
	w.ready = w.ready[1:]
	w.lastUsed = time.Now()
	p.idle--
	p.stats.Hits++
	p.mu.Unlock()
	p.foreground(sb)
	p.kick()
	return sb, true
}

// fillWarm makes and prepares warm sandboxes while one is short and the
// pool has room; false when the pool stopped.
func (p *Pool) fillWarm() bool {
	for {
		name, w, ok := p.wantedWarm()
		if !ok {
			return true
		}
		// Made and prepared as fill's are.
		ctx, cancel := context.WithTimeout(p.refillContext(), PrepareTimeout)
		sb, err := p.b.Create(ctx, w.spec)
		if err == nil {
			if err = w.prepare(ctx, sb); err != nil {
				p.destroy(sb)
			} else {
				firstUse(sb)
			}
		}
		cancel()
		if err != nil {
			// Take's misses make their own; the next kick tries again.
			p.log.Warn("pool: make a warm sandbox", "name", name, "err", err)
			return true
		}
		if !p.keepWarm(name, w.key, sb) {
			p.destroy(sb)
		}
		select {
		case <-p.stop:
			return false
		default:
		}
	}
}

// wantedWarm returns the name most short of prepared sandboxes, and a copy
// of its entry, if any is and the pool has room.
func (p *Pool) wantedWarm() (string, warm, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.idle >= p.o.Max {
		return "", warm{}, false
	}
	var best *warm
	var bestName string
	for name, w := range p.warms {
		if len(w.ready) < w.n && (best == nil || len(w.ready) < len(best.ready)) {
			best, bestName = w, name
		}
	}
	if best == nil {
		return "", warm{}, false
	}
	return bestName, *best, true
}

// keepWarm adds sb to name's ready sandboxes, unless the pool, the name or
// its spec changed meanwhile, or it is full.
func (p *Pool) keepWarm(name, k string, sb sandbox.Sandbox) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.warms[name]
	if p.closed || w == nil || w.key != k || len(w.ready) >= w.n || p.idle >= p.o.Max {
		return false
	}
	w.ready = append(w.ready, sb)
	p.idle++
	return true
}

// expireWarm drops names not used for Options.Idle; it returns their
// sandboxes, for the caller to destroy. Preconditions: p.mu held.
func (p *Pool) expireWarm() []sandbox.Sandbox {
	var gone []sandbox.Sandbox
	for name, w := range p.warms {
		if time.Since(w.lastUsed) > p.o.Idle {
			gone = append(gone, w.ready...)
			p.idle -= len(w.ready)
			delete(p.warms, name)
		}
	}
	return gone
}
