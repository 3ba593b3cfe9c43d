package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/telemetry"
	"go.opentelemetry.io/otel"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"
)

// ServeCmd is `airlock serve`: the host as a service. One process serves
// the JSON API and drives the runs it creates (and every other queued or
// unfinished run of the store) with in-process workers.
//
// Configuration comes from a YAML file (--config), then environment
// variables, then flags; each overrides what came before. The file's
// schema is serveConfig; --check-config prints it resolved.
type ServeCmd struct {
	Config      string `name:"config" env:"AIRLOCK_SERVE_CONFIG" help:"Configuration file (YAML; airlock serve --check-config prints the resolved configuration)." placeholder:"FILE"`
	Listen      string `env:"AIRLOCK_LISTEN" help:"Address to listen on (default 127.0.0.1:8080)." placeholder:"HOST:PORT"`
	TLSCert     string `name:"tls-cert" env:"AIRLOCK_TLS_CERT" help:"TLS certificate (PEM); with --tls-key the API is served over HTTPS." placeholder:"FILE"`
	TLSKey      string `name:"tls-key" env:"AIRLOCK_TLS_KEY" help:"TLS private key (PEM)." placeholder:"FILE"`
	Workers     int    `env:"AIRLOCK_WORKERS" default:"-1" help:"Most runs driven at once in this process; 0 drives none (other airlock worker or serve processes do). Default: the file's, else 2."`
	LogLevel    string `name:"log-level" env:"AIRLOCK_LOG_LEVEL" help:"debug, info, warn or error (default info)." placeholder:"LEVEL"`
	CheckConfig bool   `name:"check-config" help:"Validate the configuration, print it resolved (YAML), and exit: 0 when valid, 2 when not."`
	KeyFile     string `name:"key-file" env:"AIRLOCK_SECRET_KEY_FILE" help:"Secret store key file (policy credentials)." placeholder:"PATH"`
}

// serveConfig is the configuration file's schema (and --check-config's
// output).
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
//	telemetry:                  # telemetry.Config
//	  otlp_endpoint: ""         # traces over OTLP/HTTP, e.g. http://collector:4318; empty: none
//	  service_name: airlock
type serveConfig struct {
	Listen          string        `yaml:"listen"`
	TLS             serveTLS      `yaml:"tls"`
	Store           string        `yaml:"store"`
	Workers         *int          `yaml:"workers"`
	WorkerPoll      time.Duration `yaml:"worker_poll"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	LogLevel        string        `yaml:"log_level"`
	Pool            servePool     `yaml:"sandbox_pool"`
	API             server.Config `yaml:"api"`
	E2B             e2b.Config    `yaml:"e2b"`
	// Telemetry says where traces go. OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// (a full URL) or OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, to which
	// /v1/traces is added) and OTEL_SERVICE_NAME override the file.
	Telemetry telemetry.Config `yaml:"telemetry"`
}

// servePool configures the pool of ready sandboxes (package pool).
type servePool struct {
	PerSpec *int          `yaml:"per_spec"`
	Max     int           `yaml:"max"`
	Idle    time.Duration `yaml:"idle"`
}

type serveTLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Defaults of serveConfig.
const (
	defaultListen          = "127.0.0.1:8080"
	defaultWorkers         = 2
	defaultWorkerPoll      = time.Second
	defaultShutdownTimeout = 30 * time.Second
	defaultPoolPerSpec     = 2
	defaultPoolMax         = 16
	defaultPoolIdle        = 10 * time.Minute
)

// resolve reads the file, then lays the environment and flags (already
// merged by the parser) over it, then the defaults under both.
func (c *ServeCmd) resolve(env *Env) (serveConfig, error) {
	var cfg serveConfig
	if c.Config != "" {
		b, err := os.ReadFile(c.Config)
		if err != nil {
			return cfg, fmt.Errorf("--config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && err.Error() != "EOF" {
			return cfg, fmt.Errorf("--config %s: %w", c.Config, err)
		}
	}
	if c.Listen != "" {
		cfg.Listen = c.Listen
	}
	if c.TLSCert != "" {
		cfg.TLS.Cert = c.TLSCert
	}
	if c.TLSKey != "" {
		cfg.TLS.Key = c.TLSKey
	}
	if c.Workers >= 0 {
		w := c.Workers
		cfg.Workers = &w
	}
	if c.LogLevel != "" {
		cfg.LogLevel = c.LogLevel
	}
	if env.Store != "" {
		cfg.Store = env.Store
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
	cfg.API = cfg.API.WithDefaults()
	cfg.E2B = cfg.E2B.WithDefaults()
	if v := env.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		cfg.Telemetry.OTLPEndpoint = v
	} else if v := env.getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		cfg.Telemetry.OTLPEndpoint = strings.TrimSuffix(v, "/") + "/v1/traces"
	}
	if v := env.getenv("OTEL_SERVICE_NAME"); v != "" {
		cfg.Telemetry.ServiceName = v
	}
	cfg.Telemetry = cfg.Telemetry.WithDefaults()
	return cfg, cfg.validate()
}

// validate reports every problem of a resolved configuration.
func (cfg serveConfig) validate() error {
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
		errs = append(errs, fmt.Errorf("store %q: want sqlite, sqlite:PATH or a postgres:// URL", redactURL(s)))
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
	if _, err := logLevel(cfg.LogLevel); err != nil {
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

func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("log_level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// Run serves until SIGINT or SIGTERM (or env.Ctx's end), then shuts down
// gracefully and returns nil:
//
//  1. It drains: /readyz answers 503 at once, and so do the requests that
//     would start new work (creating or forking a run, uploading a
//     workspace), so that a load balancer sends them to another server;
//     everything else is still served.
//  2. Its workers take no more runs; each step in flight finishes and is
//     recorded, up to shutdown_timeout, after which the drives still in a
//     step are cut (a second signal cuts them at once). Every run it drove
//     is handed back with its lease released: another server resumes it
//     at once, not after the lease expires.
//  3. It ends the event streams (clients reconnect elsewhere with
//     Last-Event-ID), stops listening, and lets the last requests finish.
func (c *ServeCmd) Run(env *Env) error {
	cfg, err := c.resolve(env)
	if c.CheckConfig {
		out := cfg
		out.Store = redactURL(out.Store)
		out.Telemetry.OTLPEndpoint = redactURL(out.Telemetry.OTLPEndpoint)
		if err != nil {
			fmt.Fprintln(env.Stderr, err)
			return exitCode(2)
		}
		enc := yaml.NewEncoder(env.Stdout)
		enc.SetIndent(2)
		if err := enc.Encode(out); err != nil {
			return err
		}
		return enc.Close()
	}
	if err != nil {
		return usageError{Err: err}
	}
	level, _ := logLevel(cfg.LogLevel)
	// One redactor for the host and every sink: the store's events, the
	// log and the telemetry all scrub every value it learns.
	red := secret.NewRedactor()
	logger := slog.New(telemetry.NewRedactingHandler(slog.NewJSONHandler(env.Stderr, &slog.HandlerOptions{Level: level}), red))
	env.Store = cfg.Store
	nWorkers := *cfg.Workers
	feed := server.NewFeed()
	tel, err := telemetry.New(telemetry.Options{Config: cfg.Telemetry, Redactor: red, Version: Version})
	if err != nil {
		return err
	}
	if tel.Tracing() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("telemetry: exporting spans failed", "err", err) }))
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(env.Ctx), 10*time.Second)
		defer cancel()
		if err := tel.Shutdown(ctx); err != nil {
			logger.Warn("telemetry: spans still buffered were dropped", "err", err)
		}
	}()
	// Every sandbox this process makes is counted where it is made, by
	// the component it is for (airlock_sandboxes{origin}).
	env.countSandboxes = tel.Metrics().Sandboxes
	if n := *cfg.Pool.PerSpec; n > 0 {
		stopPool, err := env.startPool(pool.Options{PerSpec: n, Max: cfg.Pool.Max, Idle: cfg.Pool.Idle, Logger: logger.With("component", "pool")})
		if err != nil {
			return err
		}
		defer stopPool()
	}
	h, err := openHost(env, hostOptions{keyFile: c.KeyFile, readOnly: nWorkers == 0, red: red, wrapStore: tel.WrapStore,
		onEvents: func(evs []event.Event) {
			feed.Publish(evs)
			for _, ev := range evs {
				tel.Event(ev)
			}
		}})
	if err != nil {
		return err
	}
	defer h.close()
	if err := tel.UseStore(h.store); err != nil {
		return err
	}
	var pool *workers
	secrets, err := openSecretStore(env, c.KeyFile)
	if err != nil {
		return err
	}
	o := server.Options{Store: h.store, Blobs: h.blobs, Engine: h.eng, Auth: auth.NewKeys(h.store, nil), Feed: feed,
		Logger: logger, Config: cfg.API, Metrics: tel.Registry(), Secrets: secrets, Redactor: red}
	if nWorkers > 0 {
		env.GC()
		pool = newWorkers(h.eng, h.store, nWorkers, cfg.WorkerPoll)
		pool.ended = func(id string, o engine.Outcome, err error) {
			switch {
			case errors.Is(err, engine.ErrDrained), errors.Is(err, errDetached):
				logger.Info("drive handed back", "run_id", id, "status", string(o.Status), "cut", errors.Is(err, errDetached))
			case err != nil && !errors.Is(err, engine.ErrBusy) && !errors.Is(err, engine.ErrFinal) && !errors.Is(err, context.Canceled):
				logger.Warn("drive ended with an error", "run_id", id, "err", err)
			default:
				logger.Info("drive ended", "run_id", id, "status", string(o.Status))
			}
		}
		pool.failed = func(err error) { logger.Error("workers: cannot list runs", "err", err) }
	}
	// A resume is queued in the store, for any server's workers: one of
	// this process's, or of another on the same database.
	o.Resume = func(ctx context.Context, id string) error {
		if _, err := h.eng.QueueResume(ctx, id); err != nil {
			return err
		}
		if pool != nil {
			pool.queued()
		}
		return nil
	}
	srv, err := server.New(o)
	if err != nil {
		return err
	}
	hs := srv.HTTPServer()
	gate := &drainGate{next: hs.Handler}
	hs.Handler = tel.HTTP(gate)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	var e2bAPI *e2bService
	if cfg.E2B.Enabled() {
		if e2bAPI, err = startE2B(env.Ctx, env, h, cfg.E2B, c.KeyFile, cfg.API.TrustTenantPolicies, logger); err != nil {
			ln.Close()
			return err
		}
	}
	scheme := "http"
	if cfg.TLS.Cert != "" {
		scheme = "https"
		hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	} else if ip := net.ParseIP(strings.Trim(hostOf(cfg.Listen), "[]")); ip == nil || !ip.IsLoopback() {
		logger.Warn("serving plain HTTP beyond loopback: API keys cross the network in clear text; give --tls-cert and --tls-key")
	}

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, unix.SIGINT, unix.SIGTERM)
	defer signal.Stop(sig)

	served := make(chan error, 1)
	go func() {
		var err error
		if cfg.TLS.Cert != "" {
			err = hs.ServeTLS(ln, cfg.TLS.Cert, cfg.TLS.Key)
		} else {
			err = hs.Serve(ln)
		}
		served <- err
	}()
	// The drives outlive env.Ctx's end, which drains like a signal;
	// stopWork cuts them short.
	workCtx, stopWork := context.WithCancelCause(context.WithoutCancel(env.Ctx))
	defer stopWork(nil)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if pool != nil {
			_ = pool.run(workCtx)
		}
	}()
	fmt.Fprintf(env.Stdout, "airlock serve: listening on %s://%s (%d workers)\n", scheme, ln.Addr(), nWorkers)
	logger.Info("serving", "addr", ln.Addr().String(), "tls", cfg.TLS.Cert != "", "workers", nWorkers)

	select {
	case s := <-sig:
		logger.Info("shutting down: draining", "signal", s.String(), "timeout", cfg.ShutdownTimeout.String())
	case <-env.Ctx.Done():
		logger.Info("shutting down: draining", "timeout", cfg.ShutdownTimeout.String())
	case err := <-served:
		logger.Error("the listener failed; shutting down", "err", err)
		served <- err
	}
	begun := time.Now()
	gate.drain()
	if pool != nil {
		pool.drain()
	}
	drainTimer := time.NewTimer(cfg.ShutdownTimeout)
	defer drainTimer.Stop()
	select {
	case <-drained:
	case <-drainTimer.C:
		logger.Warn("shutdown: steps still in flight at shutdown_timeout are cut; their runs are handed back as they are")
		stopWork(errDetached)
		<-drained
	case s := <-sig:
		logger.Warn("shutdown: second signal; steps in flight are cut, their runs handed back as they are", "signal", s.String())
		stopWork(errDetached)
		<-drained
	}
	// Every run is handed back: end the streams, stop listening, and let
	// the last requests finish.
	srv.CloseStreams()
	grace := max(cfg.ShutdownTimeout-time.Since(begun), minRequestGrace)
	shutCtx, shutCancel := context.WithTimeout(context.WithoutCancel(env.Ctx), grace)
	defer shutCancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		logger.Warn("shutdown: requests still running were cut", "err", err)
		_ = hs.Close()
	}
	if e2bAPI != nil {
		e2bAPI.stop(shutCtx)
	}
	serveErr := <-served
	logger.Info("stopped")
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
		body, _ := json.Marshal(api.ErrorBody{Code: api.CodeUnavailable,
			Message: "the server is shutting down; retry on another", RequestID: "req_" + hex.EncodeToString(id[:])})
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
