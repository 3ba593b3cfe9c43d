package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/store"
)

// Revocation. A request made with an API key is verified against the store
// every time, so a revoked key's next request fails. What outlives a
// request is a web UI session (session.go) and an event stream; both end
// once their key is revoked:
//   - at once on the server that revoked it (POST /v1/keys/{id}/revoke):
//     it drops the key's sessions and closes its streams itself;
//   - within Config.StreamPoll on every other server on the store (a
//     replica on the same PostgreSQL; any server, this one too, when the
//     key was revoked in the store directly, as airlock keys revoke does):
//     a session's key is looked up again when it is used and the last
//     look is a poll old, and each tenant with open streams has one poller
//     that lists its keys every poll and closes the streams of those
//     revoked or gone.
//
// A failed lookup ends nothing: the streams go on and the poller asks
// again at the next poll (a request of the session is refused as
// unavailable meanwhile). Revocation is for good: a key is never live
// again once revoked.

var errNoKey = publicf(api.CodeNotFound, "no such API key")

// revokeKey revokes one of the caller's tenant's API keys (the caller's
// own too), by its id: POST /v1/keys/{id}/revoke. Another tenant's key, or
// a malformed id, is not found. Revoking a revoked key succeeds.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	if store.ValidateAPIKeyID(id) != nil {
		return errNoKey
	}
	// The tenant is the store's argument: another tenant's key id is not
	// found, as through the tenant's view.
	err := s.o.Store.RevokeAPIKey(r.Context(), c.p.Tenant, id)
	if errors.Is(err, store.ErrNotFound) {
		return errNoKey
	}
	if err != nil {
		return err
	}
	s.sessions.dropKey(c.p.Tenant, id)
	s.watch.revoke(c.p.Tenant, id)
	c.log.Info("API key revoked", "revoked_key_id", id)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// keyWatch tells event streams that their key was revoked. It is safe for
// concurrent use.
type keyWatch struct {
	st   store.Keys
	poll time.Duration
	log  *slog.Logger

	mu sync.Mutex
	// tenants holds, by tenant, the keys streams hold and the tenant's
	// poller (guarded by mu).
	tenants map[string]*watchedTenant
}

// watchedTenant is one tenant's watched keys and their poller.
type watchedTenant struct {
	// keys are the keys held, by id (guarded by keyWatch.mu).
	keys map[string]*watchedKey
	// stop ends the poller, which closes done as it returns.
	stop context.CancelFunc
	done chan struct{}
}

// watchedKey is one key that streams hold.
type watchedKey struct {
	// revoked is closed once the key is known revoked (guarded by
	// keyWatch.mu, as are the others).
	revoked chan struct{}
	ended   bool
	holders int
}

func newKeyWatch(st store.Keys, poll time.Duration, log *slog.Logger) *keyWatch {
	return &keyWatch{st: st, poll: poll, log: log, tenants: map[string]*watchedTenant{}}
}

// hold watches p's key for one holder (a stream): revoked is closed once
// the key is revoked; release ends the hold, and must be called once. The
// first hold of a tenant starts its poller, the last release stops it
// and waits for it.
func (kw *keyWatch) hold(p auth.Principal) (revoked <-chan struct{}, release func()) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	wt := kw.tenants[p.Tenant]
	if wt == nil {
		ctx, cancel := context.WithCancel(context.Background())
		wt = &watchedTenant{keys: map[string]*watchedKey{}, stop: cancel, done: make(chan struct{})}
		kw.tenants[p.Tenant] = wt
		go kw.watch(ctx, p.Tenant, wt)
	}
	k := wt.keys[p.KeyID]
	if k == nil {
		k = &watchedKey{revoked: make(chan struct{})}
		wt.keys[p.KeyID] = k
	}
	k.holders++
	return k.revoked, func() { kw.release(p, wt, k) }
}

func (kw *keyWatch) release(p auth.Principal, wt *watchedTenant, k *watchedKey) {
	kw.mu.Lock()
	if k.holders--; k.holders == 0 {
		delete(wt.keys, p.KeyID)
	}
	last := len(wt.keys) == 0 && kw.tenants[p.Tenant] == wt
	if last {
		delete(kw.tenants, p.Tenant)
	}
	kw.mu.Unlock()
	if last {
		wt.stop()
		<-wt.done
	}
}

// revoke ends the streams of tenant's key id now.
func (kw *keyWatch) revoke(tenant, id string) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if wt := kw.tenants[tenant]; wt != nil {
		if k := wt.keys[id]; k != nil {
			k.end()
		}
	}
}

// end closes k.revoked once. Preconditions: keyWatch.mu held.
func (k *watchedKey) end() {
	if !k.ended {
		k.ended = true
		close(k.revoked)
	}
}

// watch lists tenant's keys every poll until ctx ends, and ends the keys
// wt holds that are revoked or gone (a tenant that is gone has none).
func (kw *keyWatch) watch(ctx context.Context, tenant string, wt *watchedTenant) {
	defer close(wt.done)
	t := time.NewTicker(kw.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keys, err := kw.st.ListAPIKeys(ctx, tenant)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			if ctx.Err() == nil {
				kw.log.Warn("cannot look up the keys of open event streams", "tenant", tenant, "err", err)
			}
			continue
		}
		live := map[string]bool{}
		for _, k := range keys {
			live[k.ID] = !k.Revoked()
		}
		kw.mu.Lock()
		for id, k := range wt.keys {
			if !live[id] {
				k.end()
			}
		}
		kw.mu.Unlock()
	}
}
