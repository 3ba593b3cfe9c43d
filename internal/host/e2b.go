package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/sandboxcli"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/mcp"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/kube"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// e2bService is airlock serve's E2B-compatible API: the control plane and
// the data plane on their own listeners, sandboxes under the tenants'
// policies with the host's egress proxy. Each sandbox is a record (a run
// of kind sandbox) in the host's store, with every operation and its
// metered usage in its log; paused sandboxes' workspaces and the tenants'
// snapshots are checkpoints in the one checkpoint store the runs use
// (chunks in $AIRLOCK_HOME/chunks or PostgreSQL), what resuming them needs
// and the snapshots' index in $AIRLOCK_HOME/e2b, so they are resumable
// and listed after a restart. Every
// operation is also a line of $AIRLOCK_HOME/audit/e2b.jsonl.
type e2bService struct {
	srv      *e2b.Server
	api, sbx *http.Server
	audit    *AuditLog
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// startE2B starts the E2B API of cfg (enabled) on the run side's store;
// trust says whether tenants' policies may name host resources; ports,
// when not nil, serves the data plane's requests for sandboxes E2B does
// not hold (the MCP sessions').
func (h *Host) startE2B(ctx context.Context, rs *runSide, cfg e2b.Config, trust bool, ports e2b.PortServer, logger *slog.Logger) (_ *e2bService, err error) {
	b, err := h.backend(telemetry.OriginE2B)
	if err != nil {
		return nil, err
	}
	e := &e2bService{}
	if e.audit, err = OpenAuditLog(filepath.Join(h.cfg.Home, "audit", "e2b.jsonl")); err != nil {
		return nil, fmt.Errorf("e2b: %w", err)
	}
	defer func() {
		if err != nil {
			e.audit.Close()
		}
	}()
	log := logger.With("component", "e2b")
	images, err := h.Images()
	if err != nil {
		return nil, err
	}
	var warm e2b.Warmer
	if h.pool != nil {
		warm = h.pool
	}
	lnAPI, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("e2b.api_addr %s: %w", cfg.APIAddr, err)
	}
	lnSbx, err := net.Listen("tcp", cfg.SandboxAddr)
	if err != nil {
		lnAPI.Close()
		return nil, fmt.Errorf("e2b.sandbox_addr %s: %w", cfg.SandboxAddr, err)
	}
	// The data plane's address as listened on (a port 0 chosen), which
	// the native API tells as where a sandbox's ports are reached.
	cfg.SandboxAddr = lnSbx.Addr().String()
	peer, key, err := e2bReplica(cfg, lnAPI.Addr(), lnSbx.Addr())
	if err != nil {
		lnAPI.Close()
		lnSbx.Close()
		return nil, err
	}
	var attach e2b.Attacher
	if kb, ok := h.cluster.(*kube.Backend); ok {
		attach = kubeAttacher{kb}
	}
	e.srv, err = e2b.New(e2b.Options{
		Peer: peer, SealKey: key, Attach: attach, ReadOnlyRoot: h.cluster != nil,
		Images: images, Warm: warm,
		Config: cfg, Backend: b, Keys: auth.NewKeys(rs.store, nil), Store: rs.store, Meter: rs.meter, Checkpoints: rs.checkpoints,
		Network: &runNetwork{h: h}, TrustTenantPolicies: trust, Ports: ports,
		StateDir: filepath.Join(h.cfg.Home, sandboxcli.E2BStateDir), Audit: e.audit, Logger: log,
		Holds: rs.holds, Changes: rs.changes, Snapshots: rs.snapshots,
	})
	if err != nil {
		lnAPI.Close()
		lnSbx.Close()
		return nil, err
	}
	h.mu.Lock()
	h.e2b = e.srv
	h.mu.Unlock()
	// No WriteTimeout: streams of long commands last; the data plane sets
	// a deadline per write instead.
	e.api = &http.Server{Handler: e.srv.APIHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	e.sbx = &http.Server{Handler: e.srv.SandboxHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	e.wg.Add(3)
	go func() {
		defer e.wg.Done()
		if err := e.srv.Run(runCtx); err != nil {
			log.Error("the E2B API stopped", "err", err)
		}
	}()
	for _, x := range []struct {
		hs *http.Server
		ln net.Listener
	}{{e.api, lnAPI}, {e.sbx, lnSbx}} {
		go func() {
			defer e.wg.Done()
			if err := x.hs.Serve(x.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("e2b listener failed", "addr", x.ln.Addr().String(), "err", err)
			}
		}()
	}
	fmt.Fprintf(h.out, "airlock serve: E2B API on http://%s, sandboxes on http://%s\n", lnAPI.Addr(), lnSbx.Addr())
	log.Info("serving the E2B API", "api_addr", lnAPI.Addr().String(), "sandbox_addr", lnSbx.Addr().String())
	return e, nil
}

// stop shuts the control plane down, destroys every running E2B sandbox
// (which ends the data plane's streams; paused ones stay, for the next
// start), then shuts the data plane down; requests may finish until ctx
// ends.
func (e *e2bService) stop(ctx context.Context) {
	if err := e.api.Shutdown(ctx); err != nil {
		_ = e.api.Close()
	}
	e.cancel()
	if err := e.sbx.Shutdown(ctx); err != nil {
		_ = e.sbx.Close()
	}
	e.wg.Wait()
	_ = e.audit.Close()
}

// e2bSandboxes is the native API's view (server.Sandboxes) of the live
// sandboxes of the E2B API and of the MCP sessions of /mcp: each nil
// until its service has started, and for a host without it.
type e2bSandboxes struct {
	srv atomic.Pointer[e2b.Server]
	mcp atomic.Pointer[mcp.Server]
	// stored holds the events of sandboxes that are no longer live (the
	// run store; nil: none are served once a sandbox ends).
	stored store.SandboxEvents
}

var _ server.Sandboxes = (*e2bSandboxes)(nil)

func (x *e2bSandboxes) Sandboxes(tenant string) []api.Sandbox {
	var out []api.Sandbox
	if srv := x.srv.Load(); srv != nil {
		for _, e := range srv.Exposures(tenant) {
			out = append(out, apiSandbox(e))
		}
	}
	if ms := x.mcp.Load(); ms != nil {
		for _, b := range ms.Sandboxes(tenant) {
			out = append(out, mcpSandbox(b))
		}
	}
	slices.SortFunc(out, func(a, b api.Sandbox) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (x *e2bSandboxes) Sandbox(tenant, id string) (api.Sandbox, bool) {
	if srv := x.srv.Load(); srv != nil {
		if e, ok := srv.Exposure(tenant, id); ok {
			return apiSandbox(e), true
		}
	}
	if ms := x.mcp.Load(); ms != nil {
		if b, ok := ms.Sandbox(tenant, id); ok {
			return mcpSandbox(b), true
		}
	}
	return api.Sandbox{}, false
}

// Events is a live E2B sandbox's event log (one across its pauses and
// resumes) or an MCP sandbox's; else, for a sandbox this server does not
// hold, what the store kept of its events, redacted as they were when
// accepted: an ended log for one that ended, and for one live on another
// replica (which stores each event as it comes) a log that follows the
// store while ctx lasts and ends with the sandbox.
func (x *e2bSandboxes) Events(ctx context.Context, tenant, id string) (*report.Log, bool) {
	if srv := x.srv.Load(); srv != nil {
		if l, ok := srv.Events(tenant, id); ok {
			return l, true
		}
	}
	if ms := x.mcp.Load(); ms != nil {
		if l, ok := ms.Events(tenant, id); ok {
			return l, true
		}
	}
	if x.stored == nil {
		return nil, false
	}
	srv := x.srv.Load()
	elsewhere := srv != nil && srv.HeldElsewhere(ctx, tenant, id)
	es, err := e2b.StoredEvents(ctx, x.stored, tenant, id, 0)
	if err != nil || (len(es) == 0 && !elsewhere) {
		return nil, false
	}
	l := report.NewLog(policy.Events{}, id, 0, nil)
	l.Follow(es)
	if !elsewhere {
		l.End()
		return l, true
	}
	go x.follow(ctx, srv, l, tenant, id)
	return l, true
}

// followEvery is how often the events of a sandbox another replica holds
// are read again from the store while a client reads them here.
const followEvery = time.Second

// follow adds to l what the store gains of the events of tenant's sandbox
// id, held by another replica, until ctx ends (the client's request) or
// the sandbox is no longer live anywhere: then l ends.
func (x *e2bSandboxes) follow(ctx context.Context, srv *e2b.Server, l *report.Log, tenant, id string) {
	t := time.NewTicker(followEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live := srv.HeldElsewhere(ctx, tenant, id)
		es, err := e2b.StoredEvents(ctx, x.stored, tenant, id, l.After(^uint64(0), 0).Next-1)
		if err == nil {
			l.Follow(es)
		}
		if !live {
			l.End()
			return
		}
	}
}

func (x *e2bSandboxes) Revoke(tenant, id string, port int, by string) (api.SandboxExposure, error) {
	if srv := x.srv.Load(); srv != nil {
		if _, ok := srv.Exposure(tenant, id); ok {
			return api.SandboxExposure{}, server.ErrPolicyPorts
		}
	}
	ms := x.mcp.Load()
	if ms == nil {
		return api.SandboxExposure{}, server.ErrNoSandbox
	}
	e, err := ms.Revoke(tenant, id, port, by)
	switch {
	case errors.Is(err, mcp.ErrNoSandbox):
		return api.SandboxExposure{}, server.ErrNoSandbox
	case errors.Is(err, mcp.ErrNotExposed):
		return api.SandboxExposure{}, server.ErrNotExposed
	case err != nil:
		return api.SandboxExposure{}, err
	}
	return apiExposure(e), nil
}

// PreviewURL is where port of sandbox id is reached on the E2B API's data
// plane (mcp.Preview); false before it has started, and on a host
// without the E2B API.
func (x *e2bSandboxes) PreviewURL(id string, port int) (string, map[string]string, bool) {
	srv := x.srv.Load()
	if srv == nil {
		return "", nil, false
	}
	url, headers := srv.PreviewURL(id, port)
	return url, headers, true
}

func apiSandbox(e e2b.Exposure) api.Sandbox {
	s := api.Sandbox{
		ID: e.ID, Origin: "e2b", RunID: e.RunID, Template: e.Template, State: e.State, Started: e.Started, EndAt: e.EndAt,
		Open: e.Open, Bytes: e.Bytes, Ports: make([]api.SandboxPorts, 0, len(e.Ports)), Exposures: []api.SandboxExposure{},
	}
	for _, p := range e.Ports {
		s.Ports = append(s.Ports, api.SandboxPorts{Ports: p.Ports.String(), Access: string(p.Access), URL: p.URL, Open: p.Open})
	}
	return s
}

// mcpSandbox is an MCP session's sandbox as the native API shows it.
func mcpSandbox(b mcp.LiveSandbox) api.Sandbox {
	s := api.Sandbox{
		ID: b.ID, Origin: "mcp", Template: b.Policy, State: "running", Started: b.Created,
		Open: b.Open, Bytes: b.Bytes, Ports: []api.SandboxPorts{}, Exposures: make([]api.SandboxExposure, 0, len(b.Exposures)),
	}
	for _, e := range b.Exposures {
		s.Exposures = append(s.Exposures, apiExposure(e))
	}
	return s
}

func apiExposure(e mcp.Exposure) api.SandboxExposure {
	return api.SandboxExposure{
		Port: e.Port, URL: e.URL, Headers: e.Headers, Access: string(e.Access), TokenRequired: e.Access == policy.AccessToken,
		By: e.By, At: e.At, Open: e.Open,
	}
}

// e2bReplica returns what makes this E2B API one replica of a service:
// the address the others reach its listeners at (advertise_host on the
// listeners' ports) and the key the replicas share (seal_key_file).
func e2bReplica(cfg e2b.Config, api, sbx net.Addr) (e2b.Peer, []byte, error) {
	var key []byte
	if cfg.SealKeyFile != "" {
		b, err := os.ReadFile(cfg.SealKeyFile)
		if err != nil {
			return e2b.Peer{}, nil, fmt.Errorf("e2b.seal_key_file: %w", err)
		}
		key = bytes.TrimSpace(b)
		if len(key) < 32 {
			return e2b.Peer{}, nil, fmt.Errorf("e2b.seal_key_file %s: %d bytes, want at least 32 (e.g. openssl rand -hex 32)", cfg.SealKeyFile, len(key))
		}
	}
	if cfg.AdvertiseHost == "" {
		return e2b.Peer{}, key, nil
	}
	h := strings.TrimSuffix(strings.TrimPrefix(cfg.AdvertiseHost, "["), "]")
	url := func(a net.Addr) string {
		_, port, _ := net.SplitHostPort(a.String())
		return "http://" + net.JoinHostPort(h, port)
	}
	return e2b.Peer{APIURL: url(api), SandboxURL: url(sbx)}, key, nil
}

// kubeAttacher attaches to the kubernetes backend's sandboxes another
// replica made (e2b.Options.Attach).
type kubeAttacher struct{ b *kube.Backend }

func (k kubeAttacher) Attach(ctx context.Context, backend, id string, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if backend != "kubernetes" {
		return nil, fmt.Errorf("a sandbox of the %s backend is not reachable from another replica", backend)
	}
	sb, err := k.b.Attach(ctx, id, spec)
	if err != nil {
		return nil, err
	}
	return sb, nil
}
