package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/ratelimit"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
)

// EnvdVersion is the envd version this server reports. The SDKs switch
// features on it, and every one up to it is served: the default user is
// chosen server-side (0.4.0), stdin may be off (0.3.0) and closed (0.5.2),
// uploads may be octet-stream (0.5.7), files carry metadata (0.6.2),
// watch events may carry entry info (0.6.3), and a watch may allow
// network mounts (0.6.4; a sandbox has none, so the flag changes
// nothing).
const EnvdVersion = "0.6.4"

// EnvdPort is the port the SDKs address envd on.
const EnvdPort = 49983

// Keys verifies control-plane API keys; *auth.Keys satisfies it.
type Keys interface {
	Verify(ctx context.Context, key string) (auth.Principal, error)
}

// Warmer keeps prepared sandboxes ready under a name (a *pool.Pool).
type Warmer interface {
	Warm(name string, spec sandbox.Spec, n int, prepare func(context.Context, sandbox.Sandbox) error) error
	Take(name string) (sandbox.Sandbox, bool)
}

// Options are what a Server is built from.
type Options struct {
	// Config tunes the API; zero fields take their defaults.
	Config Config
	// Backend creates the sandboxes (required).
	Backend sandbox.Backend
	// Warm, when not nil, keeps the sandboxes of stored templates with a
	// warm pool (their pool: N) made and prepared ahead of creates
	// (internal/sandbox/pool's Warm and Take).
	Warm Warmer
	// Keys verifies API keys (required).
	Keys Keys
	// Store holds the tenants' named policies, which templates name, the
	// sandboxes' records (runs of kind store.KindSandbox) and the credit
	// ledgers their usage is debited from (required).
	Store store.Store
	// Network attaches the egress proxy of a sandbox whose policy allows
	// any egress; nil gives every sandbox no network at all. Attachments
	// carry the sandbox's id as the run id ("e2b-" + id), its tenant,
	// and its template's policy document.
	Network sandbox.Network
	// Meter debits the sandboxes' usage; nil is a meter of Store of the
	// server's own (see engine.Options.Meter).
	Meter *credit.Meter
	// TrustTenantPolicies lets templates name host resources (see
	// policy.Document.HostResources); only for a server whose tenants are all trusted
	// with the host.
	TrustTenantPolicies bool
	// Checkpoints keeps the sandboxes' workspaces when they are paused
	// or snapshotted (package checkpoint); nil keeps a paused one as a
	// tar file in StateDir and takes no snapshots (501).
	Checkpoints *checkpoint.Store
	// Holds, on a store several hosts share, keeps a hold of each
	// checkpoint a paused sandbox or a snapshot of this server refers to
	// (store.CheckpointHolds), so that a collection run from any host
	// keeps them; nil on a store only this host uses (the collection
	// reads StateDir).
	Holds store.CheckpointHolds
	// Snapshots, on a store several hosts share, keeps the tenants'
	// snapshots' records, so that every replica of the service sees
	// every snapshot (snapshot.go); nil keeps them in StateDir.
	Snapshots store.E2BSnapshots
	// StateDir holds what paused sandboxes' resume needs, the index of
	// the tenants' snapshots, and this server's id (required). Keep it
	// across restarts: paused sandboxes are resumable from it and
	// snapshots listed.
	StateDir string
	// Audit receives one JSON line per operation, besides the sandbox's
	// record in Store; nil writes none.
	Audit io.Writer
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Images makes a sandbox's root of its template's image (the host's
	// image store, image.Store); nil refuses the tenants' templates
	// (package template), all of which have images.
	Images Images
	// Ports, when not nil, serves the data plane's requests for the
	// ports of sandboxes this server does not hold (those of airlock
	// serve's MCP sessions, internal/mcp): each such request is handed
	// to it, without the data plane's routing headers; it returns false
	// for an id it does not hold either.
	Ports PortServer
	// Peer is where the other replicas of this service (airlock serve
	// processes sharing Store) reach this one's listeners; zero for a
	// replica that advertises none (replicas.go). It needs SealKey.
	Peer Peer
	// SealKey is the secret the replicas of the service share (at least
	// 32 bytes, never kept in Store): each sandbox's secrets are sealed
	// under it in its record, and advertised addresses authenticated
	// with it. Nil: none are sealed, and no request is relayed.
	SealKey []byte
	// ReadOnlyRoot says the backend's sandboxes keep their image's root
	// read-only (the kubernetes backend's pods): E2B's default writable
	// root is then not asked for, and only a policy saying
	// sandbox.root: writable asks (and is refused by such a backend).
	ReadOnlyRoot bool
	// Attach, when not nil, reaches a running sandbox another replica
	// made, for a takeover when that replica dies; nil closes such a
	// sandbox's record as lost.
	Attach Attacher
	// Changes, when not nil, tells the Server as soon as another process
	// closes one of its sandboxes' records or moves a tenant's ledger
	// (Store's notifications: the PostgreSQL store), so a forced end
	// decided elsewhere takes effect within moments (changes.go); nil
	// leaves it to the meter tick.
	Changes store.Changes
}

// PortServer serves the ports of other services' sandboxes on the data
// plane (Options.Ports).
type PortServer interface {
	// ServePort serves r for port of sandbox id and returns true, or
	// returns false having written nothing when id is not its sandbox.
	ServePort(w http.ResponseWriter, r *http.Request, id string, port int) bool
}

// Images is the host's image store as templates' sandboxes use it.
type Images interface {
	// Apply makes spec's root the image ref names (by digest), its
	// config's environment under spec's, its working directory and user
	// where spec sets none.
	Apply(ctx context.Context, ref string, spec *sandbox.Spec) error
}

// Server serves the E2B control plane (APIHandler) and data plane
// (SandboxHandler). Run must be running: it takes back what an earlier
// life left in the store first (requests wait for that), keeps
// sandboxes' timeouts and meters them; its return destroys every running
// sandbox (paused ones stay, resumable by the next Server on the same
// StateDir).
type Server struct {
	o   Options
	cfg Config
	log *slog.Logger
	now func() time.Time
	// memInfo reads the host's available and total memory (nil:
	// /proc/meminfo), for the memory pause's pressure policy.
	memInfo func() (avail, total int64, err error)
	audit   *auditLog
	api     http.Handler
	envd    http.Handler

	// credits counts the tenants' credits (Store's ledger).
	credits *credit.Meter

	// serverID names this server across restarts (kept in StateDir);
	// owner, with a nonce of this life, leases the records of the
	// sandboxes it runs.
	serverID, owner string
	// apiLimit is the token bucket per API key, sbxLimit per sandbox.
	apiLimit, sbxLimit *ratelimit.Limiter
	// ready is closed once Run has taken back the store's records.
	ready     chan struct{}
	readyOnce sync.Once
	// flushWake tells the flusher that operations wait (capacity 1: a
	// wake is not lost, and many wakes are one).
	flushWake chan struct{}

	mu sync.Mutex
	// boxes is guarded by mu: every sandbox, running or paused, by id.
	boxes map[string]*box
	// closed is guarded by mu: set once Run ends; no sandbox is created
	// after.
	closed bool
	// creating is guarded by mu: sandboxes being created, per tenant,
	// counted against MaxSandboxes.
	creating map[string]int
	// opening is guarded by mu: records being created, not yet in boxes,
	// which the sweep leaves alone.
	opening map[string]bool
	// takeovers is guarded by mu: records this server is taking over
	// (takeOver), each closed when that ends. Its lease is this server's
	// before the sandbox is in boxes; a request for it meanwhile waits.
	takeovers map[string]chan struct{}
	// snaps is guarded by mu: every tenant's snapshots, by id (a copy of
	// StateDir's index).
	snaps map[string]*snapshot

	// work tracks goroutines the Server starts (process waiters, stdin
	// feeders); Run waits for them after destroying the sandboxes.
	work sync.WaitGroup

	// watchers are the polling watchers of the sandboxes (watch.go);
	// metrics their metric rings (metrics.go).
	watchers *watcherTable
	metrics  *metricStore

	// keys are derived from Options.SealKey (nil without one); index is
	// the store's live sandbox records, for requests for other replicas'
	// sandboxes, which relayTransport relays (replicas.go).
	keys           *replicaKeys
	index          recordIndex
	relayTransport *http.Transport

	// changes queues what Options.Changes reported for Run (changes.go).
	changes *changeQueue
}

// New checks o and builds a Server.
func New(o Options) (*Server, error) {
	var errs []error
	if o.Backend == nil {
		errs = append(errs, errors.New("e2b: no sandbox backend"))
	}
	if o.Keys == nil {
		errs = append(errs, errors.New("e2b: no API keys"))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("e2b: no store"))
	}
	if o.StateDir == "" {
		errs = append(errs, errors.New("e2b: no state directory"))
	}
	cfg := o.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	keys, err := newReplicaKeys(o.SealKey)
	if err != nil {
		errs = append(errs, err)
	}
	if !o.Peer.zero() && keys == nil {
		errs = append(errs, errors.New("e2b: an advertised address (advertise_host) needs the replicas' seal key (seal_key_file): the others relay only to addresses authenticated with it"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return nil, err
	}
	id, err := readServerID(o.StateDir)
	if err != nil {
		return nil, err
	}
	if o.Meter == nil {
		o.Meter = credit.New(o.Store, nil)
	}
	s := &Server{
		o: o, cfg: cfg, credits: o.Meter, log: o.Logger, now: o.Now, boxes: map[string]*box{}, creating: map[string]int{}, opening: map[string]bool{},
		watchers: newWatcherTable(), metrics: newMetricStore(),
		serverID: id, owner: ownerName(id, randomHex(4), o.Peer, keys), ready: make(chan struct{}), flushWake: make(chan struct{}, 1),
		keys: keys, relayTransport: newRelayTransport(), changes: newChangeQueue(),
	}
	if len(s.owner) > store.MaxNameLen {
		return nil, fmt.Errorf("e2b: the advertised addresses make a lease owner name of %d bytes, over %d: shorten advertise_host", len(s.owner), store.MaxNameLen)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.snaps, err = loadSnapshots(s.snapshotDir(), s.log); err != nil {
		return nil, err
	}
	s.apiLimit = ratelimit.New(cfg.APIRate, cfg.APIBurst, s.now)
	s.sbxLimit = ratelimit.New(cfg.SandboxRate, cfg.SandboxBurst, s.now)
	s.audit = &auditLog{now: s.now, w: o.Audit, journal: s.journal}
	s.api = s.gate(s.apiRoutes())
	s.envd = s.gate(s.limitEnvd(http.HandlerFunc(s.serveEnvd)))
	return s, nil
}

// APIHandler serves the control plane (E2B_API_URL).
func (s *Server) APIHandler() http.Handler { return s.api }

// SandboxHandler serves the data plane (E2B_SANDBOX_URL, or Host
// <port>-<id>.<domain>).
func (s *Server) SandboxHandler() http.Handler { return s.envd }

// reapEvery is how often Run looks for sandboxes past their timeout or
// gone.
const reapEvery = time.Second

// Run takes back what the store holds of an earlier life of this server
// (see restore.go), then keeps sandboxes' timeouts and meters them until
// ctx ends; then it destroys every running sandbox, keeps the paused ones
// for the next Server, and returns once all the Server's goroutines are
// done.
func (s *Server) Run(ctx context.Context) error {
	defer s.readyOnce.Do(func() { close(s.ready) })
	for {
		err := s.restore(ctx)
		if err == nil {
			break
		}
		s.log.Error("e2b: take back the sandboxes' records", "err", err)
		select {
		case <-ctx.Done():
			s.shutdown(context.WithoutCancel(ctx))
			return fmt.Errorf("e2b: restore: %w", err)
		case <-time.After(restoreWait):
		}
	}
	s.readyOnce.Do(func() { close(s.ready) })
	fctx, stopFlusher := context.WithCancel(ctx)
	var flusher sync.WaitGroup
	flusher.Add(2)
	go func() {
		defer flusher.Done()
		s.runFlusher(fctx)
	}()
	if s.o.Changes != nil {
		flusher.Add(1)
		go func() {
			defer flusher.Done()
			s.watchChanges(fctx)
		}()
	}
	go func() {
		defer flusher.Done()
		s.runMetrics(fctx) // metrics.go: the samples GET /sandboxes/{id}/metrics answers
	}()
	reap := time.NewTicker(reapEvery)
	defer reap.Stop()
	meter := time.NewTicker(s.cfg.MeterInterval)
	defer meter.Stop()
	for {
		select {
		case <-ctx.Done():
			stopFlusher()
			flusher.Wait()
			s.shutdown(context.WithoutCancel(ctx))
			return nil
		case <-reap.C:
			s.reap(ctx)
		case <-meter.C:
			s.meter(ctx)
		case <-s.changes.wake:
			s.applyChanges(ctx)
		}
	}
}

// reap ends sandboxes past their end and those that died.
func (s *Server) reap(ctx context.Context) {
	now := s.now()
	all := s.all()
	s.reapFrozen(ctx, all)
	for _, b := range all {
		b.mu.Lock()
		expired := b.state == stateRunning && !now.Before(b.endAt)
		dead := b.state == stateRunning && b.live != nil && isDone(b.live.sb.Done())
		b.mu.Unlock()
		switch {
		case expired && b.autoPause && !dead:
			s.autoPause(ctx, b)
		case expired:
			s.end(ctx, b, endTimeout, "")
		case dead:
			s.end(ctx, b, endLost, "")
		}
	}
}

// autoPause pauses b, whose timeout passed, as its lifecycle asks; a
// sandbox that cannot be paused (its workspace over the bound a pause
// keeps, the store down) ends as a timeout does, and the log says why.
func (s *Server) autoPause(ctx context.Context, b *box) {
	err := s.pause(ctx, b, "timeout", !b.autoPauseFiles)
	if err == nil || errors.Is(err, errAlreadyPaused) {
		s.audit.line(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.pause", Outcome: "ok", Detail: "timeout (lifecycle onTimeout: pause)"})
		return
	}
	if !errors.Is(err, errNoSandbox) {
		s.log.Warn("e2b: auto-pause at timeout; ending the sandbox instead", "sandbox_id", b.id, "err", err)
	}
	s.end(ctx, b, endTimeout, "")
}

// shutdown destroys every running sandbox another replica cannot take
// over (leaveRunning leaves it running for one that can), writes what paused
// ones have queued, and waits for the Server's goroutines.
func (s *Server) shutdown(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, b := range s.all() {
		b.mu.Lock()
		paused, frozen := b.state == statePaused, b.frozen != nil
		b.mu.Unlock()
		switch {
		case !paused:
			if !s.leaveRunning(ctx, b) {
				s.end(ctx, b, endShutdown, "")
			}
		case frozen:
			// Its processes end with the server; its checkpoint stays
			// for the next one to resume from.
			s.degrade(ctx, b, "the server shut down")
		}
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.flushAll(fctx)
	s.work.Wait()
}

// gate holds requests until Run has taken back the store's records.
func (s *Server) gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.ready:
		case <-r.Context().Done():
			return
		}
		h.ServeHTTP(w, r)
	})
}

// limitEnvd keeps each sandbox's data-plane requests within its token
// bucket. Only requests that carry the sandbox's token are counted, so no
// one else can spend a sandbox's bucket.
func (s *Server) limitEnvd(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, ok := s.route(r)
		var b *box
		if ok {
			s.mu.Lock()
			b = s.boxes[id]
			s.mu.Unlock()
		}
		if b == nil || !s.envdAuthorized(r, b) {
			h.ServeHTTP(w, r)
			return
		}
		if ok, wait := s.sbxLimit.Allow(b.id); !ok {
			s.audit.record(Record{Tenant: b.tenant, Sandbox: b.id, Op: "envd", Outcome: "limited", Detail: clip(r.URL.Path)})
			w.Header().Set("Retry-After", retryAfter(wait))
			msg := fmt.Sprintf("rate limit: this sandbox takes %g requests a second (%d at once); retry later", s.cfg.SandboxRate, s.cfg.SandboxBurst)
			if isConnectPath(r.URL.Path) {
				writeUnaryError(w, http.StatusTooManyRequests, rpcErrorf(codeResourceExhaust, "%s", msg))
			} else {
				writeEnvdError(w, http.StatusTooManyRequests, msg)
			}
			return
		}
		h.ServeHTTP(w, r)
	})
}

// journal appends an audit record about one of the Server's sandboxes to
// that sandbox's log, its detail scrubbed of the sandbox's environment
// values (a command line may spell one out), and returns it scrubbed. A
// record naming no sandbox, or one its tenant may not see, goes into no
// log (it would otherwise land in another tenant's).
func (s *Server) journal(r Record) Record {
	if r.Tenant == "" || r.Sandbox == "" {
		return r
	}
	if b := s.lookup(r.Tenant, r.Sandbox); b != nil {
		r.Detail = b.scrub(r.Detail)
		if r.Run == "" {
			r.Run = b.rec.runID
		}
		b.rec.add(event.SandboxOp{Op: r.Op, Outcome: r.Outcome, KeyID: r.KeyID, Detail: r.Detail}, r.Time)
	}
	return r
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
