package server

import (
	"context"
	"crypto/sha256"
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
// every time, so a revoked key's next request fails; so is a request made
// with a web UI session (session.go), whose lookup checks its key. What
// outlives a request is an event stream; it ends once its key is revoked,
// or, made with a UI session, once that session ends (logout, expiry):
//   - at once on the server that revoked the key (POST /v1/keys/{id}/revoke)
//     or ended the session (POST /ui/logout): it closes the streams itself;
//   - within Config.StreamPoll on every other server on the store (a
//     replica on the same PostgreSQL; any server, this one too, when the
//     key was revoked in the store directly, as airlock keys revoke does):
//     each tenant with open streams has one poller that lists its keys
//     and looks up the sessions its streams were made with every poll,
//     and closes the streams of those revoked, gone or ended.
//
// A failed lookup ends nothing: the streams go on and the poller asks
// again at the next poll. Revocation is for good: a key is never live
// again once revoked, nor a session once ended.

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
	s.watch.revoke(c.p.Tenant, id)
	c.log.Info("API key revoked", "revoked_key_id", id)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// keyWatch tells event streams that their key was revoked or their UI
// session ended. It is safe for concurrent use.
type keyWatch struct {
	st   keyWatchStore
	now  func() time.Time
	poll time.Duration
	log  *slog.Logger

	mu sync.Mutex
	// tenants holds, by tenant, the keys and sessions streams hold and
	// the tenant's poller (guarded by mu).
	tenants map[string]*watchedTenant
}

// keyWatchStore is what the watch looks up: keys and UI sessions.
type keyWatchStore interface {
	store.Keys
	store.UISessions
}

// watchedTenant is one tenant's watched keys and sessions and their
// poller.
type watchedTenant struct {
	// keys are the keys held, by id; sessions the UI sessions held, by
	// the SHA-256 of their ids (guarded by keyWatch.mu).
	keys     map[string]*watchedKey
	sessions map[[sha256.Size]byte]*watchedKey
	// stop ends the poller, which closes done as it returns.
	stop context.CancelFunc
	done chan struct{}
}

// watchedKey is one key (or UI session) that streams hold.
type watchedKey struct {
	// revoked is closed once the key is known revoked, or the session
	// ended (guarded by keyWatch.mu, as are the others).
	revoked chan struct{}
	ended   bool
	holders int
}

func newKeyWatch(st keyWatchStore, now func() time.Time, poll time.Duration, log *slog.Logger) *keyWatch {
	return &keyWatch{st: st, now: now, poll: poll, log: log, tenants: map[string]*watchedTenant{}}
}

// hold watches p's key, and the UI session whose id hashes to *session
// when not nil, for one holder (a stream): revoked is closed once the
// key is revoked, session (nil without one) once the session ended;
// release ends the hold, and must be called once. The first hold of a
// tenant starts its poller, the last release stops it and waits for it.
func (kw *keyWatch) hold(p auth.Principal, sess *[sha256.Size]byte) (revoked, session <-chan struct{}, release func()) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	wt := kw.tenants[p.Tenant]
	if wt == nil {
		ctx, cancel := context.WithCancel(context.Background())
		wt = &watchedTenant{
			keys: map[string]*watchedKey{}, sessions: map[[sha256.Size]byte]*watchedKey{},
			stop: cancel, done: make(chan struct{}),
		}
		kw.tenants[p.Tenant] = wt
		go kw.watch(ctx, p.Tenant, wt)
	}
	k := wt.keys[p.KeyID]
	if k == nil {
		k = &watchedKey{revoked: make(chan struct{})}
		wt.keys[p.KeyID] = k
	}
	k.holders++
	var sk *watchedKey
	if sess != nil {
		if sk = wt.sessions[*sess]; sk == nil {
			sk = &watchedKey{revoked: make(chan struct{})}
			wt.sessions[*sess] = sk
		}
		sk.holders++
		session = sk.revoked
	}
	return k.revoked, session, func() { kw.release(p, sess, wt, k, sk) }
}

func (kw *keyWatch) release(p auth.Principal, sess *[sha256.Size]byte, wt *watchedTenant, k, sk *watchedKey) {
	kw.mu.Lock()
	if k.holders--; k.holders == 0 {
		delete(wt.keys, p.KeyID)
	}
	if sk != nil {
		if sk.holders--; sk.holders == 0 {
			delete(wt.sessions, *sess)
		}
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

// endSession ends the streams of tenant's UI session whose id hashes to
// hash now.
func (kw *keyWatch) endSession(tenant string, hash [sha256.Size]byte) {
	kw.mu.Lock()
	defer kw.mu.Unlock()
	if wt := kw.tenants[tenant]; wt != nil {
		if k := wt.sessions[hash]; k != nil {
			k.end()
		}
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

// watch lists tenant's keys, and looks up the UI sessions wt holds,
// every poll until ctx ends, and ends the keys wt holds that are revoked
// or gone (a tenant that is gone has none) and the sessions that ended.
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
		var sessions [][sha256.Size]byte
		for h, k := range wt.sessions {
			if !k.ended {
				sessions = append(sessions, h)
			}
		}
		kw.mu.Unlock()
		kw.checkSessions(ctx, tenant, wt, sessions)
	}
}

// checkSessions ends the sessions among hashes that the store no longer
// has live.
func (kw *keyWatch) checkSessions(ctx context.Context, tenant string, wt *watchedTenant, hashes [][sha256.Size]byte) {
	for _, h := range hashes {
		_, err := kw.st.UISession(ctx, h[:], kw.now())
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			if ctx.Err() == nil {
				kw.log.Warn("cannot look up the ui sessions of open event streams", "tenant", tenant, "err", err)
			}
			return
		}
		if err != nil {
			kw.mu.Lock()
			if k := wt.sessions[h]; k != nil {
				k.end()
			}
			kw.mu.Unlock()
		}
	}
}
