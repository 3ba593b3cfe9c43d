package host

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// runNetwork gives each sandbox of a run (or of the E2B API) an egress
// proxy under its policy (none when the policy allows nothing: no route at
// all then), serves the LLM gateway through it when the policy enables
// it, and records the proxy's decisions in the run's log.
type runNetwork struct{ h *Host }

// Attach parses a's policy once and starts what it asks for.
func (n *runNetwork) Attach(ctx context.Context, a sandbox.Attachment) (func(), error) {
	if len(a.Policy) == 0 {
		return func() {}, nil
	}
	doc, err := policy.Parse(a.Policy)
	if err != nil {
		return nil, err
	}
	if len(doc.Network.Allow) == 0 && len(doc.Network.Credentials) == 0 && doc.Network.Default != policy.Ask && !doc.LLM.Enabled {
		return func() {}, nil
	}
	o := EgressOptions{
		Sandbox: a.Spec.ID, Run: a.RunID, Tenant: a.Tenant, Network: &doc.Network, narrow: a.Narrow,
		extra: auditFunc(func(r egress.Record) {
			host := r.Host
			if r.Local {
				host = "(local) " + r.Path
			}
			a.Audit(event.EgressDecision{
				Decision: r.Decision, Reason: r.Reason, Rule: r.Rule, Method: r.Method, Host: host, Port: r.Port,
				Addr: r.Addr, Status: r.Status, BytesIn: r.BytesIn, BytesOut: r.BytesOut, DurationMS: r.Duration.Milliseconds(),
				Inspected: r.Inspected, Credential: r.Credential,
			})
		}),
		ask: approverFunc(func(ctx context.Context, _ bridge.Identity, r policy.Request) (bool, error) {
			return a.Ask(ctx, r.Host, r.Port)
		}),
	}
	endLLM := func() {}
	if doc.LLM.Enabled {
		gw, end, err := n.h.llm.attach(a, &doc.LLM)
		if err != nil {
			return nil, err
		}
		o.local, endLLM = gw, end
	}
	eg, err := n.h.StartEgress(ctx, o)
	if err != nil {
		endLLM()
		return nil, err
	}
	eg.Apply(a.Spec)
	return func() {
		eg.Close()
		endLLM()
	}, nil
}

type approverFunc func(context.Context, bridge.Identity, policy.Request) (bool, error)

func (f approverFunc) Ask(ctx context.Context, id bridge.Identity, r policy.Request) (bool, error) {
	return f(ctx, id, r)
}

type auditFunc func(egress.Record)

func (f auditFunc) Record(r egress.Record) { f(r) }

// EgressOptions say which sandbox a proxy serves and under what policy.
type EgressOptions struct {
	// Sandbox is the sandbox's id, which names its socket. Run and Tenant
	// are what the proxy's records name: a sandbox of no run gets a run
	// name of its own, and the local tenant.
	Sandbox, Run, Tenant string
	// Network is the policy the proxy enforces; its credentials name the
	// tenant's secrets.
	Network *policy.Network
	// AuditLog is the file the proxy's records are appended to, as JSON
	// lines; "" is Home/audit/egress.jsonl.
	AuditLog string

	// What a run adds: a sink that gets every record too (the run's
	// log), who decides the policy's asks, and the handler of local
	// requests (the LLM gateway).
	extra  egress.AuditSink
	ask    egress.Approver
	local  http.Handler
	narrow func(host string, a netip.Addr) bool
}

// Egress is a running egress proxy bound to one sandbox.
type Egress struct {
	socket string
	proxy  *egress.Proxy
	audit  *AuditLog
	path   string // of the audit log
	served chan struct{}
}

// StartEgress starts the egress proxy of a sandbox on a fresh unix socket
// under Home/run/egress. The proxy knows the sandbox from the socket alone:
// nothing the sandbox sends can claim another identity. A credential the
// policy binds must exist now, not at the first request, and its value
// joins the redactor before the proxy starts.
func (h *Host) StartEgress(ctx context.Context, o EgressOptions) (_ *Egress, err error) {
	runID, tenant := o.Run, o.Tenant
	if runID == "" {
		runID = "run-" + strings.TrimPrefix(o.Sandbox, "sb-")
	}
	if tenant == "" {
		tenant = event.LocalTenant
	}
	n := o.Network
	var secrets egress.Secrets
	if len(n.Credentials) > 0 {
		st, err := h.Secrets()
		if err != nil {
			return nil, err
		}
		// A policy's credentials name the run's tenant's secrets, never
		// another's: the proxy looks them up under its identity.
		for _, c := range n.Credentials {
			v, _, err := st.Get(ctx, tenant, c.Secret)
			if err != nil {
				return nil, fmt.Errorf("policy credential for %s: secret %q: %w", c.Host, c.Secret, err)
			}
			h.red.Add(v)
		}
		secrets = st
	}
	e := &Egress{path: o.AuditLog, served: make(chan struct{})}
	if e.path == "" {
		e.path = filepath.Join(h.cfg.Home, "audit", "egress.jsonl")
	}
	if e.audit, err = OpenAuditLog(e.path); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			e.audit.Close()
		}
	}()
	dir := filepath.Join(h.cfg.Home, "run", "egress")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	e.socket = filepath.Join(dir, o.Sandbox+".sock")
	if len(e.socket) >= 108 {
		return nil, fmt.Errorf("egress socket path %s is too long for a unix socket: use a shorter AIRLOCK_HOME", e.socket)
	}
	_ = os.Remove(e.socket) // a leftover of a crashed run with this id
	ln, err := sandbox.ListenProxySocket(e.socket)
	if err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	sink := egress.NewJSONLSink(e.audit)
	if o.extra != nil {
		sink = teeSink{sink, o.extra}
	}
	e.proxy, err = egress.New(egress.Config{
		Identity: bridge.Identity{Tenant: tenant, Run: runID, Sandbox: o.Sandbox},
		Policy:   n,
		Secrets:  secrets,
		Redactor: h.red,
		Audit:    sink,
		Approver: o.ask,
		Local:    o.local,
		Narrow:   o.narrow,
	})
	if err != nil {
		ln.Close()
		os.Remove(e.socket)
		return nil, err
	}
	go func() {
		defer close(e.served)
		_ = e.proxy.Serve(ln)
	}()
	return e, nil
}

// teeSink records to both sinks.
type teeSink [2]egress.AuditSink

func (t teeSink) Record(r egress.Record) {
	t[0].Record(r)
	t[1].Record(r)
}

// Apply points spec at the proxy: its socket, and its CA in the sandbox's
// trust store.
func (e *Egress) Apply(spec *sandbox.Spec) {
	spec.Network = sandbox.NetworkProxy
	spec.ProxySocket = e.socket
	spec.TrustedCAs = e.proxy.CACertPEM()
}

// Close stops the proxy and returns how many requests it refused by policy,
// and where its audit log is.
func (e *Egress) Close() (denied int64, auditLog string) {
	_ = e.proxy.Close()
	<-e.served
	_ = os.Remove(e.socket)
	_ = e.audit.Close()
	return e.proxy.Stats().Denied, e.path
}
