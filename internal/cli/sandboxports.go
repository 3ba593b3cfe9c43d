package cli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// SandboxPortsCmd is `airlock sandbox ports`: the exposed ports of a
// server's sandboxes (AIRLOCK_URL, AIRLOCK_API_KEY), and their revocation.
type SandboxPortsCmd struct {
	Ls     SandboxPortsLsCmd     `cmd:"" default:"withargs" help:"List the exposed ports of the key's tenant's live sandboxes (or of one): an E2B sandbox's policy rules, an MCP sandbox's expose_port exposures with who exposed them and when."`
	Revoke SandboxPortsRevokeCmd `cmd:"" help:"Revoke a port an MCP client exposed: its URL reaches nothing from now on and its open connections end."`
}

// SandboxPortsLsCmd is `airlock sandbox ports [ls] [ID]`.
type SandboxPortsLsCmd struct {
	ID   string `arg:"" optional:"" help:"A sandbox id (default: every live sandbox of the tenant)."`
	JSON bool   `name:"json" help:"One JSON object per sandbox, as GET /v1/sandboxes/{id} answers."`
}

// SandboxPortsRevokeCmd is `airlock sandbox ports revoke ID PORT`.
type SandboxPortsRevokeCmd struct {
	ID   string `arg:"" help:"The sandbox's id."`
	Port int    `arg:"" help:"The exposed port."`
}

// errPortsLocal says why the ports commands need a server.
var errPortsLocal = errors.New("airlock sandbox ports lists a server's sandboxes: set AIRLOCK_URL and AIRLOCK_API_KEY (the ports `airlock mcp` exposes live in that process, and end with its session)")

// portsRemote opens the server the ports commands talk to.
func portsRemote(env *Env) (*remoteBackend, error) {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return nil, err
	}
	r, ok := b.(*remoteBackend)
	if !ok {
		b.close()
		return nil, usageError{Err: errPortsLocal}
	}
	return r, nil
}

// Run lists the sandboxes' exposed ports.
func (c *SandboxPortsLsCmd) Run(env *Env) error {
	b, err := portsRemote(env)
	if err != nil {
		return err
	}
	var boxes []api.Sandbox
	if c.ID != "" {
		one, err := b.c.Sandbox(env.Ctx, c.ID)
		if err != nil {
			return b.fail(err)
		}
		boxes = []api.Sandbox{one}
	} else if boxes, err = b.c.Sandboxes(env.Ctx); err != nil {
		return b.fail(err)
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, boxes...)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tORIGIN\tPORT\tACCESS\tURL\tOPEN\tBY\tAT")
	for _, s := range boxes {
		rows := 0
		for _, p := range s.Ports {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Origin, p.Ports, p.Access, p.URL, p.Open, "policy", "-")
			rows++
		}
		for _, e := range s.Exposures {
			url := e.URL
			if len(e.Headers) > 0 {
				var hs []string
				for k, v := range e.Headers {
					hs = append(hs, k+": "+v)
				}
				slices.Sort(hs)
				url += " (" + strings.Join(hs, ", ") + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", s.ID, s.Origin, e.Port, e.Access, url, e.Open, e.By, e.At.UTC().Format(time.RFC3339))
			rows++
		}
		if rows == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\tnothing exposed\t0\t-\t-\n", s.ID, s.Origin)
		}
	}
	return tw.Flush()
}

// Run revokes the exposure.
func (c *SandboxPortsRevokeCmd) Run(env *Env) error {
	if c.Port < 1 || c.Port > 65535 {
		return usageError{Err: fmt.Errorf("port %d is not a TCP port (1-65535)", c.Port)}
	}
	b, err := portsRemote(env)
	if err != nil {
		return err
	}
	e, err := b.c.RevokeExposure(env.Ctx, c.ID, c.Port)
	if err != nil {
		return b.fail(err)
	}
	fmt.Fprintf(env.Stdout, "revoked port %d of sandbox %s (%s at %s, exposed by %s); %s connections ended\n", e.Port, c.ID, e.Access, e.URL, e.By, strconv.FormatInt(e.Open, 10))
	return nil
}
