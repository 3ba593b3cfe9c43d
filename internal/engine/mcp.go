package engine

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"

	"github.com/airlockrun/airlock/internal/mcpclient"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// MCPServer is one MCP server of a run (the policy's mcp.servers): a
// stdio server (Command) run in a sandbox of its own, or a remote
// Streamable HTTP server (URL). Its tools are offered to the model as
// NAME__TOOL; each call is decided by the run's policy and is external.
type MCPServer struct {
	Name    string   `json:"name"`
	Command []string `json:"command,omitempty"`
	// Image is the image of the host's store the server's sandbox is made
	// of; empty means the run's root filesystem (RootFS), or the host's
	// system directories.
	Image string `json:"image,omitempty"`
	// Source is a host directory the server's sandbox sees read-only as
	// its /workspace.
	Source string `json:"source,omitempty"`
	// Network is what the server's sandbox may reach, through an egress
	// proxy of its own; nil means no network.
	Network *policy.Network `json:"network,omitempty"`
	URL     string          `json:"url,omitempty"`
	// TimeoutMS bounds one call (and the server's start); zero means a
	// minute.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Calls, Concurrent and ResultBytes are the server's limits
	// (policy.MCPLimits); zero takes the default.
	Calls       int64 `json:"calls,omitempty"`
	Concurrent  int64 `json:"concurrent,omitempty"`
	ResultBytes int64 `json:"result_bytes,omitempty"`
}

func (s MCPServer) policy() policy.MCPServer {
	p := policy.MCPServer{
		Name: s.Name, Command: s.Command, Image: s.Image, Source: s.Source, URL: s.URL,
		Timeout: policy.Duration(time.Duration(s.TimeoutMS) * time.Millisecond),
		Limits:  policy.MCPLimits{Calls: s.Calls, Concurrent: s.Concurrent, ResultBytes: policy.Size(s.ResultBytes)},
	}
	if s.Network != nil {
		p.Network = *s.Network
	}
	return p
}

// mcpServersOf is the mcp section as a run's Config says it.
func mcpServersOf(doc *policy.Document) []MCPServer {
	var out []MCPServer
	for _, s := range doc.MCP.Servers {
		c := MCPServer{
			Name: s.Name, Command: slices.Clone(s.Command), Image: s.Image, Source: s.Source, URL: s.URL,
			TimeoutMS: time.Duration(s.Timeout).Milliseconds(),
			Calls:     s.Limits.Calls, Concurrent: s.Limits.Concurrent, ResultBytes: int64(s.Limits.ResultBytes),
		}
		if !s.Network.IsZero() {
			n := s.Network
			c.Network = &n
		}
		out = append(out, c)
	}
	return out
}

func checkMCP(servers []MCPServer) error {
	ps := make([]policy.MCPServer, len(servers))
	for i, s := range servers {
		ps[i] = s.policy()
	}
	if err := policy.CheckMCP(ps); err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	return nil
}

// openMCP starts or connects to the run's MCP servers and registers their
// tools. The servers stay up for the drive (closeMCP).
//
// Preconditions: called by setup, before the specs are taken.
func (d *driver) openMCP(ctx context.Context) error {
	if len(d.cfg.MCP) == 0 {
		return nil
	}
	servers := make([]policy.MCPServer, len(d.cfg.MCP))
	for i, s := range d.cfg.MCP {
		servers[i] = s.policy()
	}
	used, err := d.mcpCallsMade(ctx)
	if err != nil {
		return err
	}
	o := mcpclient.Options{Launch: d.launchMCP, Redact: d.e.o.Redact, Used: used}
	if slices.ContainsFunc(servers, func(s policy.MCPServer) bool { return !s.Stdio() }) {
		client, release, err := d.mcpHTTP(ctx)
		if err != nil {
			return fmt.Errorf("mcp: the egress proxy of remote servers: %w", err)
		}
		d.mcpRelease, o.HTTPClient = release, client
	}
	set, err := mcpclient.Open(ctx, servers, o)
	if err != nil {
		return err
	}
	d.mcp = set
	for _, t := range set.Tools() {
		if err := d.reg.Register(t); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
	}
	return nil
}

// refreshMCP follows the servers' tools/list_changed notifications, at
// the start of a step: the servers that sent one are listed again, their
// new tools registered (the run's policy decides their calls as any
// other's) and the model offered the tools as they are now, without the
// ones a server no longer offers (a call of one is refused, saying so). A
// server that cannot be listed now keeps its tools until the next step.
//
// Preconditions: called by the loop, between steps (no call in flight).
func (d *driver) refreshMCP(ctx context.Context) error {
	if d.mcp == nil || !d.mcp.Changed() {
		return nil
	}
	added, _ := d.mcp.Refresh(ctx) // a server not listed now is tried again at the next step
	for _, t := range added {
		if err := d.reg.Register(t); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
	}
	specs := d.reg.Specs(d.names...)
	offered := specs[:0]
	for _, sp := range specs {
		if t, ok := d.reg.Get(sp.Name); ok {
			if mt, ok := t.(*mcpclient.Tool); ok && mt.Gone() {
				continue
			}
		}
		offered = append(offered, sp)
	}
	d.specs = offered
	return nil
}

// mcpCallsMade counts the calls of each MCP server's tools the run's log
// holds (tool.started of SERVER__TOOL), so that limits.calls bounds the
// run, not one drive of it.
func (d *driver) mcpCallsMade(ctx context.Context) (map[string]int64, error) {
	evs, err := d.e.events(ctx, d.run.ID, 0)
	if err != nil {
		return nil, fmt.Errorf("mcp: count the run's calls: %w", err)
	}
	used := map[string]int64{}
	for _, ev := range evs {
		if ev.Type != event.TypeToolStarted {
			continue
		}
		p, err := ev.Unpack()
		if err != nil {
			return nil, fmt.Errorf("mcp: count the run's calls: seq %d: %w", ev.Seq, err)
		}
		if ts, ok := p.(*event.ToolStarted); ok {
			if server, _, ok := strings.Cut(ts.Tool, policy.MCPToolSep); ok {
				used[server]++
			}
		}
	}
	return used, nil
}

// closeMCP stops the run's MCP servers, destroying their sandboxes, and
// the egress proxy of its remote servers.
func (d *driver) closeMCP() {
	if d.mcp != nil {
		d.mcp.Close()
		d.mcp = nil
	}
	if d.mcpRelease != nil {
		d.mcpRelease()
		d.mcpRelease = nil
	}
}

// mcpSandbox names the egress proxy of the run's remote MCP servers in
// the run's egress decisions.
const mcpSandbox = "mcp"

// mcpHTTP returns the HTTP client of the run's remote MCP servers: every
// request goes through an egress proxy of its own under the run's network
// policy, as a sandbox's would, so the policy decides each destination
// and the proxy injects the credentials it binds to them (the run, and
// this process's MCP client, never hold them). A host without a network,
// or a policy that reaches nothing, refuses.
func (d *driver) mcpHTTP(ctx context.Context) (*http.Client, func(), error) {
	if d.e.o.Network == nil {
		return nil, nil, errors.New("this host gives runs no network")
	}
	spec := sandbox.Spec{ID: sandbox.NewID()}
	release, err := d.attach(ctx, mcpSandbox, d.run.Policy, &spec)
	if err != nil {
		return nil, nil, err
	}
	if spec.Network != sandbox.NetworkProxy || spec.ProxySocket == "" {
		release()
		return nil, nil, errors.New("the run's network policy reaches nothing (network.allow)")
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if len(spec.TrustedCAs) > 0 && !roots.AppendCertsFromPEM(spec.TrustedCAs) {
		release()
		return nil, nil, errors.New("the proxy's CA does not parse")
	}
	sock := spec.ProxySocket
	tr := &http.Transport{
		// The proxy's address is its socket: the URL only makes the
		// transport speak to a proxy (CONNECT, absolute-form requests).
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "egress.invalid"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sock)
		},
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 30 * time.Second,
		MaxIdleConnsPerHost: 4,
	}
	return &http.Client{Transport: tr}, func() { tr.CloseIdleConnections(); release() }, nil
}

// launchMCP makes the sandbox of stdio server s: the run's limits and root
// (or the server's image), the server's source read-only as /workspace,
// and no network. It is not one of the run's sandboxes: no snapshots, no
// checkpoints, nothing of it in the run's patch.
func (d *driver) launchMCP(ctx context.Context, s policy.MCPServer) (sandbox.Sandbox, func(), error) {
	spec, err := d.baseSpec(ctx, nil, s.Image, true)
	if err != nil {
		return nil, nil, err
	}
	if s.Source != "" {
		spec.Workspace, spec.WorkspaceMode = s.Source, sandbox.WorkspaceRO
	}
	release := func() {}
	if !s.Network.IsZero() {
		rel, err := d.attachMCP(ctx, s, &spec)
		if err != nil {
			return nil, nil, fmt.Errorf("network: %w", err)
		}
		release = rel
	}
	sb, err := d.e.o.Backend.Create(ctx, spec)
	if err != nil {
		release()
		return nil, nil, err
	}
	return sb, func() { destroy(ctx, sb); release() }, nil
}

// attachMCP gives the sandbox of stdio server s an egress proxy of its own
// under the server's network (a document of the default policy with that
// network section): its decisions are in the run's log, as the server's
// (mcp:NAME).
func (d *driver) attachMCP(ctx context.Context, s policy.MCPServer, spec *sandbox.Spec) (func(), error) {
	if d.e.o.Network == nil {
		return nil, errors.New("this host gives sandboxes no network")
	}
	doc := policy.Default()
	doc.Network = s.Network
	spec.ID = sandbox.NewID()
	return d.attach(ctx, mcpSandbox+":"+s.Name, doc.Canonical(), spec)
}
