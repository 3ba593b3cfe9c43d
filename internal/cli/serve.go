package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"

	"go.yaml.in/yaml/v3"
	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/host"
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
	// E2BAdvertise and E2BSealKey override the file's e2b.advertise_host
	// and e2b.seal_key_file (a pod's IP comes from the environment).
	E2BAdvertise string `name:"e2b-advertise-host" env:"AIRLOCK_E2B_ADVERTISE_HOST" help:"Host or IP at which the other replicas reach this one's E2B listeners (e2b.advertise_host)." placeholder:"HOST"`
	E2BSealKey   string `name:"e2b-seal-key-file" env:"AIRLOCK_E2B_SEAL_KEY_FILE" help:"File of the key the replicas share for E2B sandboxes' secrets (e2b.seal_key_file)." placeholder:"PATH"`
	SandboxFlags
}

// SandboxFlags override the configuration file's sandboxes section
// (airlock serve's and airlock doctor's).
type SandboxFlags struct {
	SandboxBackend string `name:"sandbox-backend" env:"AIRLOCK_SANDBOX_BACKEND" help:"What makes the sandboxes: native (this machine) or kubernetes (pods; the file's sandboxes.kubernetes section, docs/kubernetes.md)." placeholder:"NAME"`
	Kubeconfig     string `name:"kubeconfig" env:"AIRLOCK_KUBECONFIG" help:"Kubeconfig of the kubernetes backend's cluster (default: in-cluster, the pod's service account)." placeholder:"FILE"`
	KubeNamespace  string `name:"kube-namespace" env:"AIRLOCK_KUBE_NAMESPACE" help:"Namespace of the kubernetes backend's sandbox pods (default airlock-sandboxes)." placeholder:"NAME"`
}

// apply lays f over cfg's sandboxes section.
func (f SandboxFlags) apply(cfg *host.ServeConfig) {
	if f.SandboxBackend != "" {
		cfg.Sandboxes.Backend = f.SandboxBackend
	}
	if f.Kubeconfig != "" {
		cfg.Sandboxes.Kubernetes.Kubeconfig = f.Kubeconfig
		cfg.Sandboxes.Kubernetes.InCluster = false
	}
	if f.KubeNamespace != "" {
		cfg.Sandboxes.Kubernetes.Namespace = f.KubeNamespace
	}
}

// resolve reads the file, then lays the environment and flags (already
// merged by the parser) over it, then the defaults under both.
func (c *ServeCmd) resolve(env *Env) (host.ServeConfig, error) {
	var cfg host.ServeConfig
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
	if c.E2BAdvertise != "" {
		cfg.E2B.AdvertiseHost = c.E2BAdvertise
	}
	if c.E2BSealKey != "" {
		cfg.E2B.SealKeyFile = c.E2BSealKey
	}
	c.SandboxFlags.apply(&cfg)
	cfg = cfg.WithDefaults(env.getenv)
	return cfg, cfg.Validate()
}

// Run serves until SIGINT or SIGTERM (or env.Ctx's end), then shuts down
// gracefully (host.Serve) and returns nil; a second signal cuts the steps
// still in flight.
func (c *ServeCmd) Run(env *Env) error {
	cfg, err := c.resolve(env)
	if c.CheckConfig {
		out := cfg
		out.Store = host.RedactURL(out.Store)
		out.Telemetry.OTLPEndpoint = host.RedactURL(out.Telemetry.OTLPEndpoint)
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
	env.Store = cfg.Store
	h, err := host.New(hostConfig(env, hostOptions{keyFile: c.KeyFile}))
	if err != nil {
		return err
	}
	ctx, cut, stop := signalled(env)
	defer stop()
	return h.Serve(ctx, cfg, host.ServeOptions{Out: env.Stdout, Log: env.Stderr}, cut)
}

// signalled returns a context that ends at the first SIGINT or SIGTERM (or
// env.Ctx's end), and a channel closed at the second: how airlock serve
// and airlock worker drain, then cut the drain short. stop ends the
// watch.
func signalled(env *Env) (ctx context.Context, cut <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(env.Ctx)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, unix.SIGINT, unix.SIGTERM)
	second, done, watched := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		defer signal.Stop(sig)
		select {
		case <-sig:
		case <-ctx.Done():
		case <-done:
			return
		}
		cancel()
		select {
		case <-sig:
			close(second)
		case <-done:
		}
	}()
	return ctx, second, func() {
		close(done)
		<-watched
		cancel()
	}
}
