package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/mcp"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/ratelimit"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/telemetry"
	"github.com/airlockrun/airlock/internal/tools"
)

// MCPOptions configure the host's MCP server (MCPServer).
type MCPOptions struct {
	// Default is the policy of sandboxes created without a policy name
	// (nil: the built-in default), shown to clients as DefaultName.
	Default     *policy.Document
	DefaultName string
	// TrustTenantPolicies lets tenants' stored policies name host
	// resources (directories, a root filesystem, pinned addresses).
	TrustTenantPolicies bool
	// Rate and Burst, when Rate is positive, limit each API key's requests
	// to the HTTP handler (and each remote address's failed
	// authentications), as the API's: tokens a second and at most at once.
	Rate  float64
	Burst int
	// Preview, when not nil, is the data plane expose_port's URLs are
	// on (airlock serve's); nil opens a loopback listener per exposed
	// port (airlock mcp).
	Preview mcp.Preview
	// Audit receives the calls' records, as JSON lines.
	Audit  io.Writer
	Logger *slog.Logger
}

// MCPServer returns the MCP server of this host's sandboxes: built from
// the tenants' stored policies (or o.Default), on the host's backend, with
// the policy's egress through the host's proxy, refused to a tenant whose
// credits are spent, results scrubbed by the host's redactor, and calls
// the policy asks about held as approvals in the host's store.
func (h *Host) MCPServer(o MCPOptions) (*mcp.Server, error) {
	b, err := h.backend(telemetry.OriginMCP)
	if err != nil {
		return nil, err
	}
	if o.Default == nil {
		o.Default, o.DefaultName = policy.Default(), "default"
	}
	boxes := &mcpBoxes{h: h, b: b, o: o}
	// The sandboxes' events are kept in the run store; a host whose
	// store does not open keeps them in memory.
	var events store.SandboxEvents
	if st, err := h.Store(); err == nil {
		events = st
	}
	var keys, fails *ratelimit.Limiter
	if o.Rate > 0 {
		keys, fails = ratelimit.New(o.Rate, max(o.Burst, 1), nil), ratelimit.New(o.Rate, max(o.Burst, 1), nil)
	}
	return mcp.New(mcp.Options{
		RateLimit: keys, FailLimit: fails,
		Sandboxes: boxes,
		Runs:      &mcpRuns{h: h, trust: o.TrustTenantPolicies},
		Approver:  newMCPApprover(h),
		Preview:   o.Preview,
		Audit:     o.Audit,
		Limits:    MCPLimits(o.Default),
		Redact:    h.red.String,
		Events:    events,
		Version:   h.cfg.Version,
		Logger:    o.Logger,
	}), nil
}

// MCPRelay carries one MCP session between local (the command's stdio)
// and the /mcp of the airlock serve at url, with API key key.
func MCPRelay(ctx context.Context, local sdkmcp.Transport, url, key string) error {
	return mcp.Relay(ctx, local, url, key, nil)
}

// LocalPrincipal is the caller of `airlock mcp`: the local tenant, with
// every scope, as who (the user) for the audit records.
func LocalPrincipal(who string) auth.Principal {
	return auth.Principal{Tenant: event.LocalTenant, KeyID: who, Scopes: []string{auth.ScopeAdmin}}
}

// MCPLimits are the sandbox tools' bounds under doc: its command timeout
// is the longest a command may ask for.
func MCPLimits(doc *policy.Document) tools.Limits {
	var l tools.Limits
	if d := time.Duration(doc.Sandbox.Limits.CommandTimeout); d > 0 {
		l.MaxTimeout = d
	}
	return l
}

// mcpBoxes makes the MCP sessions' sandboxes.
type mcpBoxes struct {
	h *Host
	b sandbox.Backend
	o MCPOptions
}

var _ mcp.Sandboxes = (*mcpBoxes)(nil)

// Create boots a sandbox for p under the policy req names (a stored
// policy of p's tenant, NAME or NAME@vN) with req's image and limits.
func (x *mcpBoxes) Create(ctx context.Context, p auth.Principal, req mcp.CreateRequest) (*mcp.Box, error) {
	rs, err := x.h.run()
	if err != nil {
		return nil, err
	}
	a, err := rs.meter.Account(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	if spent := a.Spent(); spent != nil {
		return nil, &mcp.RequestError{Msg: "the tenant's credits are spent: no sandbox can be created (airlock credits)"}
	}
	doc, name := x.o.Default, x.o.DefaultName
	if req.Policy != "" {
		v, err := x.h.Policy(ctx, p.Tenant, req.Policy)
		var nf *PolicyNotFoundError
		var in *InputError
		switch {
		case errors.As(err, &nf), errors.As(err, &in):
			return nil, &mcp.RequestError{Msg: fmt.Sprintf("policy %q: %v", req.Policy, err)}
		case err != nil:
			return nil, err
		}
		if doc, err = policy.Parse([]byte(v.Document)); err != nil {
			return nil, &mcp.RequestError{Msg: fmt.Sprintf("policy %s v%d does not load: %v", v.Name, v.Version, err)}
		}
		// Why: a tenant's policy that names host directories, a root
		// filesystem, pinned addresses or CIDR rules would reach the
		// host's own resources.
		if bad := doc.HostResources(); len(bad) > 0 && !x.o.TrustTenantPolicies {
			return nil, &mcp.RequestError{Msg: fmt.Sprintf("policy %s: %s name host resources, which this server does not let tenants use", req.Policy, strings.Join(bad, ", "))}
		}
		name = fmt.Sprintf("%s@v%d", v.Name, v.Version)
	}
	egress := len(doc.Network.Allow) > 0 || len(doc.Network.Credentials) > 0 || doc.Network.Default == policy.Ask
	f := sandboxcli.SpecFlags{Memory: req.Memory, Disk: req.Disk, Pids: req.Pids, CPUs: req.CPUs}
	spec, err := f.Spec(SandboxDefaults(doc), egress)
	if err != nil {
		return nil, &mcp.RequestError{Msg: err.Error()}
	}
	ref, from := req.Image, "image"
	if ref == "" {
		ref, from = doc.Sandbox.Image, "sandbox.image"
	}
	if ref != "" {
		if spec.RootFS != "" {
			return nil, &mcp.RequestError{Msg: from + " and the policy's sandbox.rootfs exclude each other"}
		}
		st, err := x.h.Images()
		if err != nil {
			return nil, err
		}
		root, err := st.Root(ctx, ref)
		if errors.Is(err, ErrNoImage) {
			return nil, &mcp.RequestError{Msg: fmt.Sprintf("%s %q: no such image in the host's store (airlock image ls lists them)", from, ref)}
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", from, ref, err)
		}
		root.Apply(&spec)
	}
	spec.ID = sandbox.NewID()
	stop := func() {}
	if egress {
		eg, err := x.h.StartEgress(ctx, EgressOptions{Sandbox: spec.ID, Tenant: p.Tenant, Network: &doc.Network})
		if err != nil {
			return nil, fmt.Errorf("start the egress proxy of %s: %w", spec.ID, err)
		}
		eg.Apply(&spec)
		stop = func() { eg.Close() }
	}
	sb, err := x.b.Create(ctx, spec)
	if err != nil {
		stop()
		return nil, err
	}
	return &mcp.Box{Sandbox: sb, Policy: doc, PolicyName: name, Destroy: func(ctx context.Context) error {
		defer stop()
		return sb.Destroy(ctx)
	}}, nil
}

// SandboxDefaults is the sandbox section of doc as package sandboxcli
// takes it: what a sandbox gets where no flag or request says otherwise.
func SandboxDefaults(doc *policy.Document) sandboxcli.Defaults {
	sb := doc.Sandbox
	d := sandboxcli.Defaults{
		RootFS: sb.RootFS, Workspace: sb.Workspace.Source, WorkspaceMode: sb.Workspace.Mode, Runtime: sb.Runtime,
		StaticReadOnly: sb.StaticReadOnly,
		Limits: sandbox.Limits{
			MemoryBytes: int64(sb.Limits.Memory), DiskBytes: int64(sb.Limits.Disk), Pids: sb.Limits.Pids, CPUs: sb.Limits.CPUs,
			RequireHard: sb.RequireHardLimits,
		},
		CommandTimeout: time.Duration(sb.Limits.CommandTimeout),
		Output:         int64(sb.Limits.Output),
	}
	for _, m := range sb.Mounts {
		d.Mounts = append(d.Mounts, sandbox.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.Mode != policy.MountRW})
	}
	return d
}

// startMCP serves /mcp beside the API on the service's listener: the MCP
// server of the host's sandboxes for tenants' API keys (Authorization:
// Bearer KEY or X-API-Key, as the API), each call audited to
// $AIRLOCK_HOME/audit/mcp.jsonl, its sandboxes' exposed ports on the E2B
// API's data plane (startE2B hands it their requests). It returns the handler of both; the
// sessions end, and their sandboxes are destroyed, when the HTTP server
// shuts down.
func (s *service) startMCP(ctx context.Context, rs *runSide) (http.Handler, error) {
	audit, err := OpenAuditLog(filepath.Join(s.h.cfg.Home, "audit", "mcp.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	ac := s.cfg.API.WithDefaults()
	ms, err := s.h.MCPServer(MCPOptions{
		TrustTenantPolicies: ac.TrustTenantPolicies, Rate: ac.Rate, Burst: ac.Burst,
		// expose_port's URLs are the data plane's, where a remote client
		// reaches them: the E2B API's, once it has started (none without
		// it, and expose_port says so).
		Preview: &s.sandboxes,
		Audit:   audit, Logger: s.log.With("component", "mcp"),
	})
	if err != nil {
		audit.Close()
		return nil, err
	}
	closeMCP := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		ms.Close(ctx)
	}
	s.mcp = ms
	s.sandboxes.mcp.Store(ms)
	s.hs.RegisterOnShutdown(closeMCP)
	s.closers = append(s.closers, func() { audit.Close() }, closeMCP)
	keys := auth.NewKeys(rs.store, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", ms.Handler(func(ctx context.Context, h http.Header) (auth.Principal, error) {
		key, err := headerKey(h)
		if err != nil {
			return auth.Principal{}, err
		}
		p, err := keys.Verify(ctx, key)
		if auth.TenantDeleted(err) {
			return auth.Principal{}, errors.New("the API key is not valid: its tenant is being deleted")
		}
		if err != nil {
			return auth.Principal{}, errors.New("the API key is not valid")
		}
		return p, nil
	}))
	mux.Handle("/", s.hs.Handler)
	return mux, nil
}

// headerKey reads the API key of "Authorization: Bearer KEY" or
// "X-API-Key: KEY".
func headerKey(h http.Header) (string, error) {
	key := strings.TrimSpace(h.Get("X-API-Key"))
	if a := h.Get("Authorization"); a != "" {
		scheme, rest, ok := strings.Cut(a, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", errors.New("the Authorization header must be Bearer and an API key")
		}
		key = strings.TrimSpace(rest)
	}
	if key == "" || len(key) > 512 {
		return "", errors.New("an API key is required (Authorization: Bearer KEY)")
	}
	return key, nil
}

// mcpRuns are the MCP server's run-level tools on this host's runs: a
// caller sees only its tenant's runs and approvals, and names a run by
// its full id (a prefix would tell one tenant about another's ids).
type mcpRuns struct {
	h     *Host
	trust bool
}

var _ mcp.Runs = (*mcpRuns)(nil)

// userError turns the conditions a caller can correct (KnownErrors of
// class input or refused, a missing policy, a decider the policy does not
// name) into an mcp.RequestError with the words a person is told.
func userError(err error) error {
	var nf *PolicyNotFoundError
	var in *InputError
	var na *NotApproverError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf), errors.As(err, &in):
		return &mcp.RequestError{Msg: err.Error()}
	case errors.As(err, &na):
		return &mcp.RequestError{Msg: "you may not decide it: " + na.Error()}
	}
	for _, k := range KnownErrors {
		if errors.Is(err, k.Err) && k.Class != ClassInternal {
			if k.Words == "" {
				return &mcp.RequestError{Msg: err.Error()}
			}
			return &mcp.RequestError{Msg: k.Words}
		}
	}
	return err
}

func (x *mcpRuns) Start(ctx context.Context, p auth.Principal, q mcp.StartRun) (string, error) {
	req := RunRequest{CreateRunRequest: api.CreateRunRequest{
		Task: q.Task, Model: q.Model, Script: q.Script, MaxSteps: q.MaxSteps, Metadata: q.Metadata,
	}, Tenant: p.Tenant, ScriptName: "mcp"}
	if q.Git != "" {
		req.Workspace = &api.WorkspaceSource{Git: q.Git, Ref: q.Ref}
	}
	if q.Policy != "" {
		v, err := x.h.Policy(ctx, p.Tenant, q.Policy)
		if err != nil {
			return "", userError(err)
		}
		doc, err := policy.Parse([]byte(v.Document))
		if err != nil {
			return "", &mcp.RequestError{Msg: fmt.Sprintf("policy %s v%d does not load: %v", v.Name, v.Version, err)}
		}
		if bad := doc.HostResources(); len(bad) > 0 && !x.trust {
			return "", &mcp.RequestError{Msg: fmt.Sprintf("policy %s: %s name host resources, which this server does not let tenants use", q.Policy, strings.Join(bad, ", "))}
		}
		req.PolicyDocument, req.PolicySource = v.Document, fmt.Sprintf("policy %s v%d", v.Name, v.Version)
		req.PolicyVersion = fmt.Sprintf("%s@v%d", v.Name, v.Version)
	}
	id, err := x.h.CreateRun(ctx, req)
	return id, userError(err)
}

func (x *mcpRuns) Run(ctx context.Context, p auth.Principal, id string) (api.Run, error) {
	r, _, err := x.h.Outcome(ctx, id)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalid) || err == nil && r.Tenant != p.Tenant {
		return api.Run{}, &mcp.RequestError{Msg: fmt.Sprintf("no run %q (start_run returns runs' ids)", id)}
	}
	return r, userError(err)
}

func (x *mcpRuns) Events(ctx context.Context, p auth.Principal, id string, from int64) ([]event.Event, error) {
	if _, err := x.Run(ctx, p, id); err != nil {
		return nil, err
	}
	evs, err := x.h.Events(ctx, id, from)
	return evs, userError(err)
}

func (x *mcpRuns) Approvals(ctx context.Context, p auth.Principal) ([]api.Approval, error) {
	as, err := x.h.Approvals(ctx, p.Tenant)
	return as, userError(err)
}

func (x *mcpRuns) Decide(ctx context.Context, p auth.Principal, id string, approve bool, reason string) error {
	by := p.KeyID
	if by == "" {
		by = "mcp"
	}
	return userError(x.h.Decide(ctx, id, p.Tenant, by, []string{by}, approve, reason))
}
