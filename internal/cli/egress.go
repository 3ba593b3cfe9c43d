package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret"
)

// EgressFlags choose what a sandbox may reach through the host's egress
// proxy. Any of them implies --network proxy with a proxy that airlock runs.
type EgressFlags struct {
	Policy   string   `help:"Policy document (YAML); its network section decides egress and implies --network proxy." placeholder:"FILE"`
	Allow    []string `help:"Allow egress to HOST[:PORT] (repeatable; implies --network proxy). Without a port: 80 and 443." placeholder:"HOST[:PORT]"`
	Resolve  []string `help:"Pin HOST:PORT to ADDR:PORT, like curl --resolve (repeatable). A pin opens nothing by itself." placeholder:"HOST:PORT=ADDR:PORT"`
	AuditLog string   `help:"Append egress audit records (JSON lines) to this file (default $AIRLOCK_HOME/audit/egress.jsonl)." placeholder:"FILE"`
	KeyFile  string   `name:"key-file" env:"AIRLOCK_SECRET_KEY_FILE" help:"Secret store key file for credentials the policy binds (default $AIRLOCK_HOME/secrets/key)." placeholder:"PATH"`
}

// network returns the egress policy the flags describe (doc's network
// section, the --policy document's when one is given, with --allow and
// --resolve added), or nil when they describe none.
func (f *EgressFlags) network(doc *policy.Document) (*policy.Network, error) {
	if f.Policy == "" && len(f.Allow) == 0 && len(f.Resolve) == 0 {
		return nil, nil
	}
	n := &doc.Network
	var errs []error
	for _, a := range f.Allow {
		r, err := parseAllow(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n.Allow = append(n.Allow, r)
	}
	for _, r := range f.Resolve {
		from, to, ok := strings.Cut(r, "=")
		if !ok || from == "" || to == "" {
			errs = append(errs, fmt.Errorf("--resolve %q: want HOST:PORT=ADDR:PORT", r))
			continue
		}
		n.Resolve = append(n.Resolve, policy.Pin{Host: from, To: to})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return n, nil
}

// parseAllow parses --allow HOST[:PORT]; an IPv6 literal with a port is
// bracketed.
func parseAllow(a string) (policy.Rule, error) {
	host, port := a, ""
	if h, p, err := net.SplitHostPort(a); err == nil {
		host, port = h, p
	} else if strings.Count(a, ":") == 1 {
		return policy.Rule{}, fmt.Errorf("--allow %q: want HOST or HOST:PORT", a)
	}
	r := policy.Rule{Host: strings.Trim(host, "[]")}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil {
			return r, fmt.Errorf("--allow %q: port %q is not a number", a, port)
		}
		r.Ports = []int{n}
	}
	return r, nil
}

// egressRun is a running egress proxy bound to one sandbox.
type egressRun struct {
	socket string
	proxy  *egress.Proxy
	audit  *os.File
	path   string // of the audit log
	served chan struct{}
}

// startEgress starts the egress proxy of sandbox id on a fresh unix socket
// under $AIRLOCK_HOME/run/egress. The proxy knows the sandbox from the
// socket alone: nothing the sandbox sends can claim another identity.
func startEgress(ctx context.Context, env *Env, id string, n *policy.Network, f *EgressFlags, o egressOptions) (_ *egressRun, err error) {
	runID, tenant := o.runID, o.tenant
	if runID == "" {
		runID = "run-" + strings.TrimPrefix(id, "sb-")
	}
	if tenant == "" {
		tenant = event.LocalTenant
	}
	var secrets egress.Secrets
	if len(n.Credentials) > 0 {
		st, err := openSecretStore(env, f.KeyFile)
		if err != nil {
			return nil, err
		}
		// Fail now, not on the first request, when a bound secret is
		// missing. A policy's credentials name the run's tenant's secrets,
		// never another's: the proxy looks them up under its identity.
		for _, c := range n.Credentials {
			if _, _, err := st.Get(ctx, tenant, c.Secret); err != nil {
				return nil, fmt.Errorf("policy credential for %s: secret %q: %w", c.Host, c.Secret, err)
			}
		}
		secrets = st
	}
	e := &egressRun{path: f.AuditLog, served: make(chan struct{})}
	if e.path == "" {
		e.path = filepath.Join(env.Home, "audit", "egress.jsonl")
	}
	if err := os.MkdirAll(filepath.Dir(e.path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if e.audit, err = os.OpenFile(e.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer func() {
		if err != nil {
			e.audit.Close()
		}
	}()
	dir := filepath.Join(env.Home, "run", "egress")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	e.socket = filepath.Join(dir, id+".sock")
	if len(e.socket) >= 108 {
		return nil, fmt.Errorf("egress socket path %s is too long for a unix socket: use a shorter AIRLOCK_HOME", e.socket)
	}
	_ = os.Remove(e.socket) // a leftover of a crashed run with this id
	ln, err := net.Listen("unix", e.socket)
	if err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	var sink egress.AuditSink = egress.NewJSONLSink(e.audit)
	if o.extra != nil {
		sink = teeSink{sink, o.extra}
	}
	e.proxy, err = egress.New(egress.Config{
		Identity: bridge.Identity{Tenant: tenant, Run: runID, Sandbox: id},
		Policy:   n,
		Secrets:  secrets,
		Audit:    sink,
		Approver: o.ask,
		Local:    o.local,
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

// egressOptions are what a run adds to a sandbox's proxy: a sink that
// gets every audit record too, the run and tenant the records name, who
// decides the policy's asks, and the handler of local requests (the LLM
// gateway).
type egressOptions struct {
	extra         egress.AuditSink
	runID, tenant string
	ask           egress.Approver
	local         http.Handler
}

// teeSink records to both sinks.
type teeSink [2]egress.AuditSink

func (t teeSink) Record(r egress.Record) {
	t[0].Record(r)
	t[1].Record(r)
}

// apply points spec at the proxy.
func (e *egressRun) apply(spec *sandbox.Spec) {
	spec.Network = sandbox.NetworkProxy
	spec.ProxySocket = e.socket
	spec.TrustedCAs = e.proxy.CACertPEM()
}

// close stops the proxy and says on stderr how many requests it refused.
func (e *egressRun) close(env *Env) {
	_ = e.proxy.Close()
	<-e.served
	_ = os.Remove(e.socket)
	_ = e.audit.Close()
	if st := e.proxy.Stats(); st.Denied > 0 && env != nil {
		fmt.Fprintf(env.Stderr, "airlock: egress: %d request(s) refused by policy (audit log: %s)\n", st.Denied, e.path)
	}
}

// openSecretStore opens $AIRLOCK_HOME/secrets with keyFile, or its default
// key.
func openSecretStore(env *Env, keyFile string) (*secret.Store, error) {
	f := SecretStoreFlags{KeyFile: keyFile, Tenant: event.LocalTenant}
	return f.open(env)
}
