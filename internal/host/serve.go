package host

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/mcp"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// ServeConfig is airlock serve's configuration: the file's schema (and
// --check-config's output), with the environment and flags laid over it
// by the command line.
//
//	listen: 127.0.0.1:8080      # host:port
//	tls: {cert: FILE, key: FILE} # both or neither
//	store: sqlite               # or sqlite:PATH, postgres://... (servers on one database share runs, leases and blobs)
//	workers: 2                  # runs driven at once; 0: none
//	worker_poll: 1s             # how often workers look for runs
//	shutdown_timeout: 30s       # SIGTERM: how long steps in flight may finish before their runs are handed back
//	log_level: info
//	sandbox_pool:               # sandboxes made ahead for specs asked for again (no network, no host workspace)
//	  per_spec: 2               # kept ready per spec; 0: no pool
//	  max: 16                   # idle ones over all specs
//	  idle: 10m                 # a spec not asked for this long has its idle ones destroyed
//	api:                        # server.Config
//	  max_body: 2M
//	  max_upload: 256M
//	  max_header: 64K
//	  rate: 20                  # requests per second per API key
//	  burst: 40
//	  max_streams: 32           # event streams per API key
//	  stream_poll: 1s
//	  keepalive: 15s
//	  write_timeout: 30s
//	  request_timeout: 2m
//	  trust_tenant_policies: false
//	e2b:                        # e2b.Config: the E2B-compatible API; off unless both addresses are set
//	  api_addr: 127.0.0.1:3000  # E2B_API_URL
//	  sandbox_addr: 127.0.0.1:49983 # E2B_SANDBOX_URL
//	  domain: ""                # Host routing <port>-<id>.<domain>, returned to clients
//	checkpoint_gc:              # removes checkpoint chunks and blobs nothing refers to (airlock gc)
//	  every: 6h                 # 0: never
//	  grace: 1h                 # chunks used this recently stay (at least 10m)
//	retention:                  # RetentionRules: how long finished runs' content is kept (docs/retention.md)
//	  every: 0                  # how often to sweep; 0: never
//	  default:
//	    events: 0               # then payloads become tombstones (the chain still verifies); 0: kept
//	    runs: 0                 # then the run is purged with its artifacts; 0: kept
//	    checkpoints: 0          # then its workspace checkpoints go (the run stays); 0: kept
//	    artifacts: 0            # then its artifacts go (the run stays); 0: kept
//	    uploads: 0              # then an uploaded workspace is deleted; 0: kept
//	    upload_bytes: 0         # uploads kept at once, past it one is refused; 0: no budget
//	    audit: 0                # then audit lines and deletion records go; 0: lines follow events/runs
//	  tenants:                  # per tenant, in place of default
//	    acme: {events: 720h, runs: 2160h}
//	telemetry:                  # telemetry.Config
//	  otlp_endpoint: ""         # traces over OTLP/HTTP, e.g. http://collector:4318; empty: none
//	  service_name: airlock
type ServeConfig struct {
	Listen          string        `yaml:"listen"`
	TLS             ServeTLS      `yaml:"tls"`
	Store           string        `yaml:"store"`
	Workers         *int          `yaml:"workers"`
	WorkerPoll      time.Duration `yaml:"worker_poll"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	LogLevel        string        `yaml:"log_level"`
	Pool            ServePool     `yaml:"sandbox_pool"`
	// Sandboxes says what makes the sandboxes: this machine's native
	// backend, or a Kubernetes cluster's pods.
	Sandboxes    ServeSandboxes `yaml:"sandboxes"`
	API          server.Config  `yaml:"api"`
	E2B          e2b.Config     `yaml:"e2b"`
	CheckpointGC ServeGC        `yaml:"checkpoint_gc"`
	// Retention is how long finished runs' content is kept, per tenant
	// (RetentionRules); none is deleted unless it says so.
	Retention RetentionRules `yaml:"retention"`
	// Telemetry says where traces go. OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// (a full URL) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, to which
	// /v1/traces is added) and OTEL_SERVICE_NAME override the file.
	Telemetry telemetry.Config `yaml:"telemetry"`
}

// ServePool configures the pool of ready sandboxes (package pool).
type ServePool struct {
	PerSpec *int          `yaml:"per_spec"`
	Max     int           `yaml:"max"`
	Idle    time.Duration `yaml:"idle"`
}

// ServeGC says how often Serve collects checkpoint chunks and then blobs
// nothing refers to (Host.CollectCheckpoints and Host.CollectBlobs, what
// airlock gc does): Every 0 is never, nil the default. On a PostgreSQL
// store any host may collect, and several at once.
type ServeGC struct {
	Every *time.Duration `yaml:"every"`
	Grace time.Duration  `yaml:"grace"`
}

// ServeTLS names the certificate and key the API is served with.
type ServeTLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Defaults of ServeConfig.
const (
	defaultListen          = "127.0.0.1:8080"
	defaultWorkers         = 2
	defaultWorkerPoll      = time.Second
	defaultShutdownTimeout = 30 * time.Second
	defaultPoolPerSpec     = 2
	defaultPoolMax         = 16
	defaultPoolIdle        = 10 * time.Minute
	defaultGCEvery         = 6 * time.Hour
	defaultGCGrace         = time.Hour
)

// WithDefaults fills what cfg leaves unset with the defaults, and lays the
// OpenTelemetry variables getenv reads over the file's telemetry.
func (cfg ServeConfig) WithDefaults(getenv func(string) string) ServeConfig {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if cfg.Listen == "" {
		cfg.Listen = defaultListen
	}
	if cfg.Store == "" {
		cfg.Store = "sqlite"
	}
	if cfg.Workers == nil {
		w := defaultWorkers
		cfg.Workers = &w
	}
	if cfg.WorkerPoll == 0 {
		cfg.WorkerPoll = defaultWorkerPoll
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = defaultShutdownTimeout
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "info"
	}
	if cfg.Pool.PerSpec == nil {
		n := defaultPoolPerSpec
		cfg.Pool.PerSpec = &n
	}
	if cfg.Pool.Max == 0 {
		cfg.Pool.Max = defaultPoolMax
	}
	if cfg.Pool.Idle == 0 {
		cfg.Pool.Idle = defaultPoolIdle
	}
	if cfg.CheckpointGC.Every == nil {
		d := defaultGCEvery
		cfg.CheckpointGC.Every = &d
	}
	if cfg.CheckpointGC.Grace == 0 {
		cfg.CheckpointGC.Grace = defaultGCGrace
	}
	cfg.Sandboxes = cfg.Sandboxes.WithDefaults()
	cfg.API = cfg.API.WithDefaults()
	cfg.E2B = cfg.E2B.WithDefaults()
	if v := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		cfg.Telemetry.OTLPEndpoint = v
	} else if v := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		cfg.Telemetry.OTLPEndpoint = strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	if v := getenv("OTEL_SERVICE_NAME"); v != "" {
		cfg.Telemetry.ServiceName = v
	}
	cfg.Telemetry = cfg.Telemetry.WithDefaults()
	return cfg
}

// Validate reports every problem of a resolved configuration.
func (cfg ServeConfig) Validate() error {
	var errs []error
	if host, port, err := net.SplitHostPort(cfg.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen %q: want HOST:PORT", cfg.Listen))
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("listen %q: port %q is not 0 to 65535", cfg.Listen, port))
	} else if host == "" {
		errs = append(errs, fmt.Errorf("listen %q: give the address to listen on (0.0.0.0 for every interface)", cfg.Listen))
	}
	switch {
	case (cfg.TLS.Cert == "") != (cfg.TLS.Key == ""):
		errs = append(errs, errors.New("tls: give both cert and key, or neither"))
	case cfg.TLS.Cert != "":
		if _, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key); err != nil {
			errs = append(errs, fmt.Errorf("tls: %w", err))
		}
	}
	switch s := cfg.Store; {
	case s == "sqlite", strings.HasPrefix(s, "sqlite:"), strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"):
	default:
		errs = append(errs, fmt.Errorf("store %q: want sqlite, sqlite:PATH or a postgres:// URL", RedactURL(s)))
	}
	if w := *cfg.Workers; w < 0 || w > 1000 {
		errs = append(errs, fmt.Errorf("workers %d: want 0 to 1000", w))
	}
	if cfg.WorkerPoll < 10*time.Millisecond || cfg.WorkerPoll > time.Hour {
		errs = append(errs, fmt.Errorf("worker_poll %s: want 10ms to 1h", cfg.WorkerPoll))
	}
	if cfg.ShutdownTimeout < 0 || cfg.ShutdownTimeout > time.Hour {
		errs = append(errs, fmt.Errorf("shutdown_timeout %s: want 0 to 1h", cfg.ShutdownTimeout))
	}
	if p := cfg.Pool; *p.PerSpec < 0 || *p.PerSpec > 64 || p.Max < 1 || p.Max > 1000 || p.Idle < time.Second || p.Idle > 24*time.Hour {
		errs = append(errs, fmt.Errorf("sandbox_pool: per_spec %d, max %d, idle %s: want per_spec 0 to 64, max 1 to 1000, idle 1s to 24h",
			*p.PerSpec, p.Max, p.Idle))
	}
	if g := cfg.CheckpointGC; (*g.Every != 0 && (*g.Every < time.Minute || *g.Every > 7*24*time.Hour)) || g.Grace < MinCheckpointGrace || g.Grace > 30*24*time.Hour {
		errs = append(errs, fmt.Errorf("checkpoint_gc: every %s, grace %s: want every 0 (never) or 1m to 168h, grace %s to 720h",
			*g.Every, g.Grace, MinCheckpointGrace))
	}
	if err := cfg.Sandboxes.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.Retention.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := LogLevel(cfg.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.API.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.E2B.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.Telemetry.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// LogLevel reads a log_level.
func LogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("log_level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// ServeOptions are where Serve writes: Out gets its one-line status
// reports (where it listens), Log its JSON log.
type ServeOptions struct {
	Out, Log io.Writer
}

// service is what Serve runs: the API, the E2B API when configured, the
// workers when configured, and telemetry around them.
type service struct {
	h    *Host
	cfg  ServeConfig
	log  *slog.Logger
	tel  *telemetry.Telemetry
	srv  *server.Server
	hs   *http.Server
	gate *drainGate
	ln   net.Listener
	e2b  *e2bService
	// sandboxes shows e2b's live sandboxes in the native API, and is the
	// data plane MCP's exposed ports are on.
	sandboxes e2bSandboxes
	// mcp serves /mcp; the data plane hands it its sandboxes' ports.
	mcp     *mcp.Server
	workers *workers
	// handoffLn, when not nil, is where this user's sandbox run hands its
	// commands to the pool (package handoff).
	handoffLn *net.UnixListener
	// closers run in reverse order when the service ends.
	closers []func()
}

// Serve serves the JSON API for tenants' API keys (and the E2B API when
// cfg enables it) and drives the runs it creates and every other queued or
// unfinished run of the store with cfg.Workers in-process workers, until
// ctx ends. Then it shuts down gracefully and returns nil:
//
//  1. It drains: /readyz answers 503 at once, and so do the requests that
//     would start new work (creating or forking a run, uploading a
//     workspace), so that a load balancer sends them to another server;
//     everything else is still served.
//  2. Its workers take no more runs; each step in flight finishes and is
//     recorded, up to shutdown_timeout or until cut is closed, after which
//     the drives still in a step are cut. Every run it drove is handed back
//     with its lease released: another server resumes it at once, not
//     after the lease expires.
//  3. It ends the event streams (clients reconnect elsewhere with
//     Last-Event-ID), stops listening, and lets the last requests finish.
//
// cfg must be resolved (WithDefaults) and valid. Serve is called once, on
// a fresh Host, before anything else uses it.
func (h *Host) Serve(ctx context.Context, cfg ServeConfig, o ServeOptions, cut <-chan struct{}) error {
	s, err := h.newService(ctx, cfg, o)
	if s != nil {
		defer s.close()
	}
	if err != nil {
		return err
	}
	return s.run(ctx, o.Out, cut)
}

// newService builds what Serve runs, in order: the log and telemetry,
// the host's parts on them, the workers, the API, the E2B API.
func (h *Host) newService(ctx context.Context, cfg ServeConfig, o ServeOptions) (*service, error) {
	s := &service{h: h, cfg: cfg}
	level, _ := LogLevel(cfg.LogLevel)
	// One redactor for the host and every sink: the store's events, the
	// log and the telemetry all scrub every value it learns.
	s.log = slog.New(telemetry.NewRedactingHandler(slog.NewJSONHandler(o.Log, &slog.HandlerOptions{Level: level}), h.red))
	h.log, h.out = s.log, o.Out
	var err error
	if s.tel, err = telemetry.New(telemetry.Options{Config: cfg.Telemetry, Redactor: h.red, Version: h.cfg.Version}); err != nil {
		return nil, err
	}
	if s.tel.Tracing() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { s.log.Warn("telemetry: exporting spans failed", "err", err) }))
	}
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := s.tel.Shutdown(ctx); err != nil {
			s.log.Warn("telemetry: spans still buffered were dropped", "err", err)
		}
	})
	if err := s.assemble(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// assemble builds the host's parts under the service's telemetry, then the
// workers, the API and the E2B API.
func (s *service) assemble(ctx context.Context) error {
	h, cfg := s.h, s.cfg
	feed := server.NewFeed()
	// Every sandbox this process makes is counted where it is made, by
	// the component it is for (airlock_sandboxes{origin}).
	h.count = s.tel.Metrics().Sandboxes
	h.wrapStore = s.tel.WrapStore
	onEvents := h.cfg.OnEvents
	h.cfg.OnEvents = func(evs []event.Event) {
		if onEvents != nil {
			onEvents(evs)
		}
		feed.Publish(evs)
		for _, ev := range evs {
			s.tel.Event(ev)
		}
	}
	nWorkers := *cfg.Workers
	// With no workers this process drives no run: its engine gets no
	// sandbox backend (the E2B API still does).
	h.noRunSandboxes = nWorkers == 0
	if cfg.Sandboxes.Backend == BackendKubernetes && h.cfg.Sandboxes != nil {
		if err := s.startKube(ctx); err != nil {
			return err
		}
	}
	if n := *cfg.Pool.PerSpec; n > 0 && h.cfg.Sandboxes != nil {
		if err := s.startPool(pool.Options{PerSpec: n, Max: cfg.Pool.Max, Idle: cfg.Pool.Idle, Logger: s.log.With("component", "pool")}); err != nil {
			return err
		}
	}
	if h.pool != nil {
		s.listenHandoff()
	}
	rs, err := h.run()
	if err != nil {
		return err
	}
	s.closers = append(s.closers, h.Close)
	if err := s.tel.UseStore(rs.store); err != nil {
		return err
	}
	secrets, err := h.Secrets()
	if err != nil {
		return err
	}
	if nWorkers > 0 {
		h.GC()
		s.workers = newWorkers(rs.eng, rs.store, nWorkers, cfg.WorkerPoll)
	}
	s.sandboxes.stored = rs.store
	so := server.Options{
		Store: rs.store, Blobs: rs.blobs, Engine: rs.eng, Auth: auth.NewKeys(rs.store, nil), Feed: feed,
		Logger: s.log, Config: cfg.API, Metrics: s.tel.Registry(), Secrets: secrets, Redactor: h.red,
		ResolveImage: h.ResolveImage, Sandboxes: &s.sandboxes, Deleter: h,
		UploadBudget: func(tenant string) int64 { return int64(cfg.Retention.For(tenant).UploadBytes) },
	}
	// A resume is queued in the store, for any server's workers: one of
	// this process's, or of another on the same database.
	so.Resume = func(ctx context.Context, id string) error {
		if _, err := rs.eng.QueueResume(ctx, id); err != nil {
			return err
		}
		if s.workers != nil {
			s.workers.queued()
		}
		return nil
	}
	if s.srv, err = server.New(so); err != nil {
		return err
	}
	s.hs = s.srv.HTTPServer()
	api, err := s.startMCP(ctx, rs)
	if err != nil {
		return err
	}
	s.gate = &drainGate{next: api}
	s.hs.Handler = s.tel.HTTP(s.gate)
	if s.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	s.closers = append(s.closers, func() { s.ln.Close() })
	if cfg.E2B.Enabled() {
		if s.e2b, err = h.startE2B(ctx, rs, cfg.E2B, cfg.API.TrustTenantPolicies, s.mcp, s.log); err != nil {
			return err
		}
		s.sandboxes.srv.Store(s.e2b.srv)
	}
	if cfg.TLS.Cert != "" {
		s.hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	} else if ip := net.ParseIP(strings.Trim(hostOf(cfg.Listen), "[]")); ip == nil || !ip.IsLoopback() {
		s.log.Warn("serving plain HTTP beyond loopback: API keys cross the network in clear text; give --tls-cert and --tls-key")
	}
	return nil
}

// startPool puts a pool of ready sandboxes (see package pool) in front of
// the sandbox backend (the cluster's when serving with the kubernetes one,
// else the native) for the engine and the E2B API alike; the service's
// end destroys the idle ones.
func (s *service) startPool(o pool.Options) error {
	nb := s.h.cluster
	if nb == nil {
		b, err := s.h.cfg.Sandboxes.Backend()
		if err != nil {
			return err
		}
		nb = b
	}
	p := pool.New(s.h.count(telemetry.OriginPool, nb), o)
	s.h.pool = p
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return nil
}

// listenHandoff makes the pool serve this user's `airlock sandbox run`
// too, as `airlock sandbox daemon` does, on $AIRLOCK_HOME's handoff
// socket; where another host listens there already, sandbox run keeps
// using that one.
func (s *service) listenHandoff() {
	path := handoff.SocketPath(s.h.cfg.Home)
	ln, err := handoff.Listen(path)
	if err != nil {
		s.log.Info("sandbox handoff: not listening", "err", err)
		return
	}
	s.handoffLn = ln
	s.closers = append(s.closers, func() { ln.Close() })
}

// close releases what newService built, the last built first.
func (s *service) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// run serves until ctx ends (or the listener fails), then shuts down as
// Serve says.
func (s *service) run(ctx context.Context, out io.Writer, cut <-chan struct{}) error {
	cfg := s.cfg
	served := make(chan error, 1)
	go func() {
		var err error
		if cfg.TLS.Cert != "" {
			err = s.hs.ServeTLS(s.ln, cfg.TLS.Cert, cfg.TLS.Key)
		} else {
			err = s.hs.Serve(s.ln)
		}
		served <- err
	}()
	// The workers drain when work's context ends: at ctx's end, or when
	// the listener fails.
	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	// Handed-off sandbox runs end with the work: their commands are
	// killed when the drain begins.
	handedOff := make(chan struct{})
	go func() {
		defer close(handedOff)
		if s.handoffLn != nil {
			hs := &handoff.Server{Backend: s.h.pool, UID: os.Geteuid(), Logger: s.log.With("component", "handoff"), Prepare: PrepareHandoff}
			_ = hs.Serve(wctx, s.handoffLn)
		}
	}()
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		s.collectCheckpoints(wctx, *cfg.CheckpointGC.Every, cfg.CheckpointGC.Grace)
	}()
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		s.sweep(wctx, cfg.Retention)
	}()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if s.workers == nil {
			<-wctx.Done()
			return
		}
		_ = s.h.work(wctx, s.workers, WorkOptions{
			ShutdownTimeout: cfg.ShutdownTimeout, Ended: s.ended,
			Failed: func(err error) { s.log.Error("workers: cannot list runs", "err", err) },
		}, cut)
	}()
	scheme := "http"
	if cfg.TLS.Cert != "" {
		scheme = "https"
	}
	fmt.Fprintf(out, "airlock serve: listening on %s://%s (%d workers)\n", scheme, s.ln.Addr(), *cfg.Workers)
	s.log.Info("serving", "addr", s.ln.Addr().String(), "tls", cfg.TLS.Cert != "", "workers", *cfg.Workers)
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: draining", "timeout", cfg.ShutdownTimeout.String())
	case err := <-served:
		s.log.Error("the listener failed; shutting down", "err", err)
		served <- err
	}
	begun := time.Now()
	s.gate.drain()
	stopWork()
	<-drained
	<-handedOff
	<-collected
	<-swept
	return s.stop(ctx, served, begun)
}

// collectCheckpoints removes the checkpoint chunks nothing refers to every
// every (never when 0), the first time one every after the start, until
// ctx ends; each pass is logged. On a PostgreSQL store every replica may
// collect: the roots are in the database (CollectCheckpoints).
func (s *service) collectCheckpoints(ctx context.Context, every, grace time.Duration) {
	if every == 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		begun := time.Now()
		st, err := s.h.CollectCheckpoints(ctx, grace)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("checkpoint gc failed", "err", err)
			}
			continue
		}
		s.log.Info("checkpoint gc", "roots", st.Roots, "chunks_expired", st.Expired, "took", time.Since(begun).String())
		begun = time.Now()
		bs, err := s.h.CollectBlobs(ctx, grace)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("blob gc failed", "err", err)
			}
			continue
		}
		s.log.Info("blob gc", "named", bs.Named, "blobs", bs.Blobs, "expired", bs.Expired, "took", time.Since(begun).String())
	}
}

// sweep applies the retention rules every rules.Every (never when 0), the
// first time one period after the start, until ctx ends; each pass is
// logged.
func (s *service) sweep(ctx context.Context, rules RetentionRules) {
	if rules.Every == 0 {
		return
	}
	t := time.NewTicker(rules.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := s.h.Sweep(ctx, rules, time.Now())
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("retention sweep failed", "err", err)
			}
			continue
		}
		s.log.Info("retention sweep", "runs_tombstoned", st.Runs, "payloads", st.Payloads, "payloads_kept_v1", st.Kept, "runs_purged", st.Purged, "audit_lines", st.Audit, "sandbox_events", st.SandboxEvents, "uploads", st.Uploads, "deletion_records", st.Deletions)
	}
}

// ended logs how a drive ended.
func (s *service) ended(e DriveEnd) {
	switch {
	case e.HandedBack:
		s.log.Info("drive handed back", "run_id", e.RunID, "status", string(e.Status), "cut", e.Cut)
	case e.Err != nil:
		s.log.Warn("drive ended with an error", "run_id", e.RunID, "err", e.Err)
	default:
		s.log.Info("drive ended", "run_id", e.RunID, "status", string(e.Status))
	}
}

// stop ends the streams, stops listening and lets the last requests
// finish, once every run is handed back.
func (s *service) stop(ctx context.Context, served chan error, begun time.Time) error {
	s.srv.CloseStreams()
	grace := max(s.cfg.ShutdownTimeout-time.Since(begun), minRequestGrace)
	shutCtx, shutCancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer shutCancel()
	if err := s.hs.Shutdown(shutCtx); err != nil {
		s.log.Warn("shutdown: requests still running were cut", "err", err)
		_ = s.hs.Close()
	}
	if s.e2b != nil {
		s.e2b.stop(shutCtx)
	}
	serveErr := <-served
	s.log.Info("stopped")
	if !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	return nil
}

// minRequestGrace is the least time the requests in flight get to finish
// once the drain is over, however long it took.
const minRequestGrace = 5 * time.Second

// drainGate is the API behind a switch: once drain is called, /readyz and
// the requests that would start new work here (creating or forking a run,
// uploading a workspace) are answered 503 unavailable, in the API's error
// shape, so that a load balancer takes this server out and clients retry
// elsewhere; the rest (reads, event streams, cancels, pauses, resumes,
// decisions) is served until the listener closes. It refuses before
// authentication: a draining server has nothing to say about a key.
type drainGate struct {
	next     http.Handler
	draining atomic.Bool
}

func (g *drainGate) drain() { g.draining.Store(true) }

func (g *drainGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.draining.Load() && startsWork(r) {
		var id [12]byte
		_, _ = rand.Read(id[:])
		body, _ := json.Marshal(api.ErrorBody{
			Code:    api.CodeUnavailable,
			Message: "the server is shutting down; retry on another", RequestID: "req_" + hex.EncodeToString(id[:]),
		})
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-store")
		h.Set("Retry-After", "1")
		h.Set("Connection", "close")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(append(body, '\n'))
		return
	}
	g.next.ServeHTTP(w, r)
}

// startsWork reports whether a request is refused while draining.
func startsWork(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/readyz":
		return true
	case r.Method != http.MethodPost:
		return false
	case p == "/v1/runs", p == "/v1/uploads":
		return true
	}
	id, ok := strings.CutPrefix(p, "/v1/runs/")
	return ok && strings.HasSuffix(id, "/fork")
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}
