// Package host assembles airlock's host: the one package that knows every
// component and owns their lifetimes (STYLE §1). A Host holds exactly one
// of each: the run store and its blobs, the redactor every sink shares, the
// secret store, the run tokens and the LLM gateway they unlock, the engine,
// the sandbox backends (native, behind a pool and counted when serving),
// and the egress proxy of each sandbox it attaches. Commands build a Host
// from a Config and call it; airlock serve and airlock worker call Run.
//
// Parts are built on first use, so a command that only reads a policy file
// opens no store, and one that only runs a sandbox with egress opens no
// engine. Every part is closed by Close.
//
// Invariants:
//   - Secret values reach the redactor before anything could record them:
//     model keys when the Host is built, a credential before its proxy
//     starts, a run token before its sandbox does.
//   - A sandbox's proxy knows it from the socket it was started on, never
//     from anything the sandbox sends.
//
// Importers: internal/cli.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// Config is what a Host is built from. The command line fills it from its
// flags and environment; nothing in this package reads either.
type Config struct {
	// Home is $AIRLOCK_HOME: the SQLite store, blobs, secrets, sockets and
	// audit logs live under it.
	Home string
	// Store is the run store: "" or "sqlite" for Home/airlock.db,
	// sqlite:PATH, or a postgres:// URL.
	Store string
	// KeyFile is the secret store's key file; "" is Home/secrets/key.
	KeyFile string
	// Getenv reads the host's environment for model provider keys; nil
	// reads nothing.
	Getenv func(string) string
	// Sandboxes makes the native backend (the command line's
	// sandboxcli.Env); nil builds a host that creates no sandbox (the
	// commands that only inspect runs).
	Sandboxes Sandboxes
	// Logger receives the host's logs; nil discards them.
	Logger *slog.Logger
	// OnEvents sees every batch of events the engine appends; OnProgress
	// every progress report of a running call. Both may be nil.
	OnEvents   func([]event.Event)
	OnProgress func(Progress)
	// Version is airlock's, for telemetry.
	Version string
}

// Progress reports a running tool call, or a model call (CallID "model").
type Progress = engine.Progress

// Sandboxes makes the host's native sandbox backend, once, and removes
// what crashed processes left behind (sandboxcli.Env does both).
type Sandboxes interface {
	Backend() (*linux.Backend, error)
	GC()
}

// Host is airlock's host, assembled. Its methods are safe for concurrent
// use.
type Host struct {
	cfg Config
	log *slog.Logger
	red *secret.Redactor

	// wrapStore, pool and count are set by Serve before the run side is
	// built (serve's telemetry times each store call and counts
	// sandboxes, its pool keeps sandboxes ready).
	wrapStore func(store.Store) store.Store
	pool      *pool.Pool
	count     func(origin string, b sandbox.Backend) sandbox.Backend
	// cluster, set by Serve when its configuration names the kubernetes
	// backend, makes the sandboxes instead of the native backend.
	cluster sandbox.Backend
	// noRunSandboxes gives the engine no sandbox backend (a server with no
	// workers drives no run); out gets Serve's status lines.
	noRunSandboxes bool
	out            io.Writer

	mu sync.Mutex
	// runs is the run side once built (guarded by mu).
	runs *runSide
	// secrets is the secret store once opened (guarded by mu).
	secrets *secret.Store
	// policies caches parsed run policies by hash (guarded by mu).
	policies map[string]*policy.Document
	// images is the image store once opened (guarded by mu).
	images *image.Store
	// e2b is Serve's E2B server while it runs (guarded by mu): a tenant's
	// deletion drops its snapshots from its memory too.
	e2b *e2b.Server

	llm *llmHub
}

// runSide is the part of a host that runs need: the store, its blobs, the
// price table and the engine on them.
type runSide struct {
	store store.Store
	blobs *blob.Store
	// checkpoints keeps the run sandboxes' workspaces.
	checkpoints *checkpoint.Store
	// sharedChunks says the checkpoints' chunks are in the database, which
	// other hosts share.
	sharedChunks bool
	// holds, on a shared store, are the holds every host's E2B server
	// keeps of the checkpoints its paused sandboxes and snapshots name
	// (store.CheckpointHolds); nil on SQLite.
	holds store.CheckpointHolds
	// changes, on a shared store, reports what other processes commit
	// (store.Changes: the E2B server ends a sandbox whose record was
	// closed elsewhere at once); nil on SQLite.
	changes store.Changes
	// snapshots, on a shared store, are the E2B snapshots' records, which
	// every replica's E2B server sees (store.E2BSnapshots); nil on SQLite.
	snapshots store.E2BSnapshots

	prices price.Table
	// meter is the one credit meter of the engine, the gateway and the
	// E2B API: what each holds and owes counts in the others' checks.
	meter *credit.Meter
	eng   *engine.Engine
}

// New returns a host for cfg. It builds nothing yet but the redactor: each
// part is built by its first use.
func New(cfg Config) (*Host, error) {
	if cfg.Home == "" {
		return nil, errors.New("no airlock home directory")
	}
	h := &Host{cfg: cfg, log: cfg.Logger, red: secret.NewRedactor(), out: io.Discard}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	for _, k := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"} {
		if v := h.getenv(k); v != "" {
			h.red.Add(secret.NewValue([]byte(v)))
		}
	}
	h.llm = &llmHub{h: h}
	return h, nil
}

// Close waits for the gateway's pending records and closes the stores.
func (h *Host) Close() {
	h.llm.close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs != nil {
		h.runs.store.Close()
	}
}

// Redactor is the host's one redactor: every sink that may see a secret
// (the store, the log, telemetry) scrubs what it learns.
func (h *Host) Redactor() *secret.Redactor { return h.red }

func (h *Host) getenv(k string) string {
	if h.cfg.Getenv == nil || k == "" {
		return ""
	}
	return h.cfg.Getenv(k)
}

// run returns the run side, building it on first use.
func (h *Host) run() (*runSide, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs != nil {
		return h.runs, nil
	}
	r, err := h.openRuns()
	if err != nil {
		return nil, err
	}
	h.runs = r
	return r, nil
}

// Store is the run store (transitional: the command line's local backend
// reads it until its operations move here).
func (h *Host) Store() (store.Store, error) {
	r, err := h.run()
	if err != nil {
		return nil, err
	}
	return r.store, nil
}

// Engine is the run engine (transitional, as Store).
func (h *Host) Engine() (*engine.Engine, error) {
	r, err := h.run()
	if err != nil {
		return nil, err
	}
	return r.eng, nil
}

// Blobs is the blob store (transitional, as Store).
func (h *Host) Blobs() (*blob.Store, error) {
	r, err := h.run()
	if err != nil {
		return nil, err
	}
	return r.blobs, nil
}

// Preconditions: h.mu held.
func (h *Host) openRuns() (_ *runSide, err error) {
	if err := os.MkdirAll(h.cfg.Home, 0o700); err != nil {
		return nil, err
	}
	r := &runSide{}
	if r.store, err = OpenStore(context.Background(), h.cfg.Home, h.cfg.Store, h.red); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.store.Close()
		}
	}()
	// On PostgreSQL the blobs live in the database too, so that every
	// process on it (airlock serve replicas, workers) reads the uploads,
	// snapshots and artifacts any of them stored.
	// The workspaces' checkpoints keep their content as chunks: in
	// $AIRLOCK_HOME/chunks, or in the database beside the blobs.
	var bo blob.Options
	var chunks chunk.Backend
	if pg, ok := r.store.(*postgres.Store); ok {
		bo.Backend, chunks = pg.Blobs(), pg.Chunks()
		r.sharedChunks = true
		r.holds, r.changes, r.snapshots = pg, pg, pg
	} else if chunks, err = chunk.NewDir(filepath.Join(h.cfg.Home, "chunks")); err != nil {
		return nil, err
	}
	if h.wrapStore != nil {
		r.store = h.wrapStore(r.store)
	}
	if r.blobs, err = blob.New(filepath.Join(h.cfg.Home, "blobs"), bo); err != nil {
		return nil, err
	}
	cs, err := chunk.NewStore(chunks)
	if err != nil {
		return nil, err
	}
	if r.checkpoints, err = checkpoint.New(r.blobs, cs); err != nil {
		return nil, err
	}
	if r.prices, err = LoadPrices(h.cfg.Home); err != nil {
		return nil, err
	}
	r.meter = credit.New(r.store, r.prices)
	opts := engine.Options{
		Store: r.store, Blobs: r.blobs, Checkpoints: r.checkpoints, Prices: r.prices, Meter: r.meter, LockDir: filepath.Join(h.cfg.Home, "runs", "locks"),
		NewProvider: h.provider, Network: &runNetwork{h: h}, Policy: h.decideTool, Images: runImages{h},
		OnProgress: h.cfg.OnProgress, Redact: h.red.String,
	}
	if h.cfg.OnEvents != nil {
		opts.OnEvents = h.cfg.OnEvents
	}
	opts.Backend = noBackend{}
	if !h.noRunSandboxes {
		if opts.Backend, err = h.backend(telemetry.OriginRun); err != nil {
			return nil, err
		}
	}
	if r.eng, err = engine.New(opts); err != nil {
		return nil, err
	}
	return r, nil
}

// backend returns what creates the host's sandboxes for origin (one of
// telemetry's origins): the pool when serving with one, else the
// kubernetes backend when serving with it, else the native backend,
// counted when serving; a host with no Sandboxes refuses.
func (h *Host) backend(origin string) (sandbox.Backend, error) {
	var b sandbox.Backend = noBackend{}
	switch {
	case h.pool != nil:
		b = h.pool
	case h.cluster != nil:
		b = h.cluster
	case h.cfg.Sandboxes != nil:
		nb, err := h.cfg.Sandboxes.Backend()
		if err != nil {
			return nil, err
		}
		b = nb
	}
	if h.count != nil {
		b = h.count(origin, b)
	}
	return b, nil
}

// noBackend refuses to create sandboxes: a host that only inspects runs.
type noBackend struct{}

func (noBackend) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, errors.New("no sandbox backend in a read-only command")
}

// OpenStore opens a run store: the SQLite file under home ("" or
// "sqlite"), sqlite:PATH, or the PostgreSQL database of a postgres:// URL.
func OpenStore(ctx context.Context, home, u string, red store.Redactor) (store.Store, error) {
	switch {
	case u == "" || u == "sqlite":
		return sqlite.Open(ctx, filepath.Join(home, "airlock.db"), sqlite.Options{Redactor: red})
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return postgres.Open(ctx, u, postgres.Options{Redactor: red})
	case strings.HasPrefix(u, "sqlite:"):
		return sqlite.Open(ctx, strings.TrimPrefix(u, "sqlite:"), sqlite.Options{Redactor: red})
	}
	return nil, &InputError{Err: fmt.Errorf("--store %q: want sqlite, sqlite:PATH or a postgres:// URL", RedactURL(u))}
}

// RedactURL drops a URL's password for messages.
func RedactURL(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
			return p.String()
		}
	}
	return u
}

// InputError is bad input from whoever called the host: refused before
// anything was recorded or created.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// decideTool is the engine's policy hook: the run's policy document (the
// built-in strict default when it has none) decides each tool call.
func (h *Host) decideTool(_ context.Context, q engine.PolicyQuery) event.PolicyDecision {
	doc, err := h.RunPolicy(q.Run)
	if err != nil {
		return event.PolicyDecision{Decision: event.DecisionDeny, Rule: "policy", Reason: "the run's policy does not load: " + err.Error()}
	}
	return engine.DecideTool(doc, q)
}

// RunPolicy is a run's policy document, parsed once per policy.
func (h *Host) RunPolicy(r store.Run) (*policy.Document, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.policies == nil {
		h.policies = map[string]*policy.Document{}
	}
	if d, ok := h.policies[r.PolicyHash]; ok {
		return d, nil
	}
	d := policy.Default()
	if len(r.Policy) > 0 {
		var err error
		if d, err = policy.Parse(r.Policy); err != nil {
			return nil, err
		}
	}
	h.policies[r.PolicyHash] = d
	return d, nil
}

// providerKey names where a provider kind's key comes from: a host
// variable, else an entry of the local tenant's secrets.
func providerKey(kind string) (env, secretName string) {
	switch kind {
	case "anthropic":
		return "ANTHROPIC_API_KEY", "anthropic-api-key"
	case "openai", "openai-responses":
		return "OPENAI_API_KEY", "openai-api-key"
	case "openai-compatible":
		return "OPENAI_API_KEY", "openai-compatible-api-key"
	}
	return "", ""
}

// modelKey returns the key of a provider: the host variable env, else the
// local tenant's secret name; an empty Value when neither holds one. A key
// found in the secret store joins the redactor.
func (h *Host) modelKey(ctx context.Context, env, name string) (secret.Value, error) {
	if v := h.getenv(env); v != "" {
		return secret.NewValue([]byte(v)), nil
	}
	if name == "" {
		return secret.Value{}, nil
	}
	st, err := h.Secrets()
	if err != nil {
		return secret.Value{}, err
	}
	v, _, err := st.Get(ctx, event.LocalTenant, name)
	if err != nil {
		return secret.Value{}, err
	}
	h.red.Add(v)
	return v, nil
}

// provider builds a real model provider with its key from the environment
// or the secret store.
func (h *Host) provider(ps engine.ProviderSpec) (model.Provider, error) {
	kind, _, _ := strings.Cut(ps.Model, ":")
	keyVar, secretName := providerKey(kind)
	o := model.Options{BaseURL: ps.BaseURL, Retry: model.RetryPolicy{MaxAttempts: ps.Attempts}}
	if keyVar != "" {
		// A store that cannot be read is no key, which the provider
		// refuses below in words that say where to put one.
		o.Key, _ = h.modelKey(context.Background(), keyVar, secretName)
	}
	p, err := model.New(ps.Model, o)
	if err != nil && keyVar != "" && o.Key.Len() == 0 && kind != "openai-compatible" {
		return nil, fmt.Errorf("%w (set %s or `airlock secrets set %s`)", err, keyVar, secretName)
	}
	return p, err
}

// CheckModel builds the provider a run on model spec would get, so that an
// unknown spec, a bad base URL or a missing key is refused as bad input
// before the run is recorded, not recorded as a run that failed.
func (h *Host) CheckModel(spec, baseURL string) error {
	if _, err := h.provider(engine.ProviderSpec{Model: spec, BaseURL: baseURL}); err != nil {
		return &InputError{Err: err}
	}
	return nil
}

// Secrets is the host's secret store: sealed records in the run store
// (store.Secrets: every server on a shared database sees every secret),
// under the configured key file (default Home/secrets/key; every server
// on one database must be given the same). The first call moves the
// secrets an older airlock kept in Home/secrets/secrets.json into the
// store, and removes the file.
func (h *Host) Secrets() (*secret.Store, error) {
	// Opened before h.mu is taken: run takes it too.
	db, err := h.Store()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.secrets != nil {
		return h.secrets, nil
	}
	dir := filepath.Join(h.cfg.Home, "secrets")
	key := h.cfg.KeyFile
	if key == "" {
		key = filepath.Join(dir, "key")
		if strings.HasPrefix(h.cfg.Store, "postgres") {
			// Each server would seal under a key of its own home: the
			// first to set a secret decides, and the others fail.
			h.log.Warn("secrets: the store is shared and no secret key file is given: this server's key is its home's own; every server on the store needs the same (AIRLOCK_SECRET_KEY_FILE)", "key_file", key)
		}
	}
	st, err := secret.OpenShared(db, secret.KeyFile(key))
	if err != nil {
		return nil, err
	}
	moved, kept, err := st.MoveFile(context.Background(), dir)
	if err != nil {
		return nil, fmt.Errorf("move the secrets of %s into the store: %w", dir, err)
	}
	if moved+kept > 0 {
		h.log.Info("secrets moved into the store", "file", filepath.Join(dir, "secrets.json"), "moved", moved, "kept_the_stores", kept)
	}
	h.secrets = st
	return st, nil
}

// GC removes what crashed processes left behind (sandboxes, their state).
func (h *Host) GC() {
	if h.cfg.Sandboxes != nil {
		h.cfg.Sandboxes.GC()
	}
}

// ResolveRun finds a run id argument: a full id, or a unique suffix or
// prefix of one; none, or several, is an InputError.
func (h *Host) ResolveRun(ctx context.Context, id string) (store.Run, error) {
	st, err := h.Store()
	if err != nil {
		return store.Run{}, err
	}
	r, err := st.GetRun(ctx, id)
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return r, err
	}
	if len(id) < 4 {
		return r, &InputError{Err: fmt.Errorf("no run %q", id)}
	}
	var match []store.Run
	f := store.RunFilter{}
	for {
		page, err := st.ListRuns(ctx, f)
		if err != nil {
			return r, err
		}
		for _, x := range page {
			if strings.HasPrefix(x.ID, id) || strings.HasSuffix(x.ID, id) || strings.HasPrefix(x.ID, event.RunIDPrefix+id) {
				match = append(match, x)
			}
		}
		if len(page) < store.PageLimit(0) {
			break
		}
		f.After = page[len(page)-1].ID
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return r, &InputError{Err: fmt.Errorf("no run %q", id)}
	}
	return r, &InputError{Err: fmt.Errorf("%q names %d runs; give more of the id", id, len(match))}
}
