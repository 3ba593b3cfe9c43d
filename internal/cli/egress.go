package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
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

// startEgress starts the egress proxy of sandbox id under policy n, with
// the audit log and key file f names, on a host of its own.
func startEgress(ctx context.Context, env *Env, id string, n *policy.Network, f *EgressFlags) (*egressRun, error) {
	h, err := host.New(hostConfig(env, hostOptions{keyFile: f.KeyFile, readOnly: true}))
	if err != nil {
		return nil, err
	}
	eg, err := h.StartEgress(ctx, host.EgressOptions{Sandbox: id, Network: n, AuditLog: f.AuditLog})
	if err != nil {
		h.Close()
		return nil, err
	}
	return &egressRun{h: h, Egress: eg}, nil
}

// egressRun is a running egress proxy and its host.
type egressRun struct {
	h *host.Host
	*host.Egress
}

// close stops the proxy and says on stderr how many requests it refused
// (when stderr is not nil).
func (e *egressRun) close(stderr io.Writer) {
	denied, path := e.Egress.Close()
	e.h.Close()
	if denied > 0 && stderr != nil {
		fmt.Fprintf(stderr, "airlock: egress: %d request(s) refused by policy (audit log: %s)\n", denied, path)
	}
}
