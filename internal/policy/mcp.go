package policy

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// MCP names the MCP servers whose tools a run's model may call. Each
// server's tools are offered to the model as SERVER__TOOL; every call is
// judged by the tools section like any other (its rules see the server as
// `server`), and, when no rule decides, by tools.mcp_default (deny by
// default): what a server says of its tools (read-only, harmless) is never
// trusted.
//
//	mcp:
//	  servers:
//	    - name: fs
//	      command: [node, /workspace/node_modules/.bin/mcp-server-filesystem, /tmp]
//	      source: /srv/mcp/fs
//	    - name: tracker
//	      url: https://mcp.example.com/mcp
type MCP struct {
	// Servers are the run's MCP servers, at most 16.
	Servers []MCPServer `yaml:"servers"`
}

// MCPServer is one MCP server of a run: a stdio server (Command), which
// runs in a sandbox of its own, or a remote Streamable HTTP server (URL).
type MCPServer struct {
	// Name prefixes the server's tools (NAME__TOOL) and is `server` in a
	// rule: 1 to 32 of a-z, 0-9, _ and -, starting with a letter or a
	// digit, without "__".
	Name string `yaml:"name"`
	// Command is the argv of a stdio server, run in its own sandbox
	// (with /workspace as its working directory): the host speaks MCP to
	// it over the command's stdin and stdout.
	Command []string `yaml:"command,omitempty"`
	// Image is an image of the host's store the server's sandbox is made
	// of (as sandbox.image); empty means the run's sandbox.rootfs, or the
	// host's system directories.
	Image string `yaml:"image,omitempty"`
	// Source is an absolute host directory the server's sandbox sees,
	// read-only, as its /workspace (where its code may live); empty gives
	// an empty workspace.
	Source string `yaml:"source,omitempty"`
	// Network is what the server's sandbox may reach through an egress
	// proxy of its own, written as the document's network section
	// (destinations, pins, the credentials the proxy injects); empty
	// means no network at all. The run's own network section does not
	// apply to it, nor this to the run's sandboxes.
	Network Network `yaml:"network,omitempty"`
	// URL is the endpoint of a remote Streamable HTTP server, http or
	// https.
	URL string `yaml:"url,omitempty"`
	// Timeout bounds one call of a tool of the server (default 1m): a
	// server that does not answer in time is a tool error the model sees.
	// Its start (and the listing of its tools) gets at least a minute.
	Timeout Duration `yaml:"timeout,omitempty"`
	// Limits bound the server's use in a run; zero fields take the
	// defaults.
	Limits MCPLimits `yaml:"limits,omitempty"`
}

// MCPLimits bound what a run makes of one MCP server. A call past a bound
// is a tool error the model reads, naming the bound; the server is kept.
//
//	limits:
//	  calls: 200           # calls per run (default 1000)
//	  concurrent: 2        # calls at once (default 4); more wait their turn within the timeout
//	  result_bytes: 64K    # a result is cut here (default and most 1M)
type MCPLimits struct {
	// Calls bounds the calls of the server's tools over a run (all its
	// drives): every call the run started counts, one a bound refused
	// included; calls the policy denied do not.
	Calls int64 `yaml:"calls,omitempty"`
	// Concurrent bounds the calls in flight at once; a call past it waits
	// for one to end, within its timeout.
	Concurrent int64 `yaml:"concurrent,omitempty"`
	// ResultBytes bounds one result as the server returns it (text, before
	// the run's own cap on every tool result).
	ResultBytes Size `yaml:"result_bytes,omitempty"`
}

// The defaults and bounds of an MCP server's limits.
const (
	DefaultMCPCalls       = 1000
	DefaultMCPConcurrent  = 4
	DefaultMCPResultBytes = 1 << 20
	maxMCPCalls           = 1_000_000
	maxMCPConcurrent      = 64
)

// CallLimit is l.Calls, or its default.
func (l MCPLimits) CallLimit() int64 { return cmpOr(l.Calls, DefaultMCPCalls) }

// ConcurrentLimit is l.Concurrent, or its default.
func (l MCPLimits) ConcurrentLimit() int64 { return cmpOr(l.Concurrent, DefaultMCPConcurrent) }

// ResultLimit is l.ResultBytes, or its default.
func (l MCPLimits) ResultLimit() int64 { return cmpOr(int64(l.ResultBytes), DefaultMCPResultBytes) }

func cmpOr(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

// Stdio reports whether s is a stdio server (run in a sandbox).
func (s MCPServer) Stdio() bool { return len(s.Command) > 0 }

// CallTimeout is s.Timeout, or its default.
func (s MCPServer) CallTimeout() time.Duration {
	if s.Timeout > 0 {
		return time.Duration(s.Timeout)
	}
	return DefaultMCPTimeout
}

// DefaultMCPTimeout bounds one call of an MCP server's tool when the
// server's timeout is not set.
const DefaultMCPTimeout = time.Minute

// MCPToolSep joins a server's name and its tool's: SERVER__TOOL.
const MCPToolSep = "__"

// Bounds of the mcp section.
const (
	maxMCPServers = 16
	maxMCPArgs    = 64
	maxMCPArg     = 4096
	maxMCPTimeout = time.Hour
)

var mcpServerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

func (m *MCP) isZero() bool { return len(m.Servers) == 0 }

// IsZero reports whether n allows nothing, asks about nothing and binds
// no credential: no network at all.
func (n *Network) IsZero() bool {
	return n.Default != Ask && len(n.Allow) == 0 && len(n.Resolve) == 0 && len(n.Credentials) == 0 && n.UpstreamCA == ""
}

func (m *MCP) validate(p *problems) {
	if len(m.Servers) > maxMCPServers {
		p.add("mcp.servers", "", "%d servers, at most %d", len(m.Servers), maxMCPServers)
	}
	names := map[string]int{}
	for i, s := range m.Servers {
		f := fmt.Sprintf("mcp.servers[%d]", i)
		switch {
		case s.Name == "":
			p.add(f+".name", "a short name the server's tools are prefixed with, like fs", "missing")
		case !mcpServerName.MatchString(s.Name) || strings.Contains(s.Name, MCPToolSep):
			p.add(f+".name", `1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit, without "__"`, "%q is not a server name", shorten(s.Name))
		default:
			if j, dup := names[s.Name]; dup {
				p.add(f+".name", "", "%s is named already by mcp.servers[%d]", s.Name, j)
			}
			names[s.Name] = i
		}
		switch {
		case s.Stdio() && s.URL != "":
			p.add(f, "a server is a command (stdio, in a sandbox) or a url (remote), not both", "both command and url")
		case !s.Stdio() && s.URL == "":
			p.add(f, "command: [argv...] for a stdio server run in a sandbox, or url: for a remote Streamable HTTP server", "neither command nor url")
		}
		if len(s.Command) > maxMCPArgs {
			p.add(f+".command", "", "%d arguments, at most %d", len(s.Command), maxMCPArgs)
		}
		for j, a := range s.Command {
			if a == "" && j == 0 || len(a) > maxMCPArg || strings.ContainsRune(a, 0) {
				p.add(fmt.Sprintf("%s.command[%d]", f, j), "a program and its arguments, like [node, server.js]", "empty, too long or contains NUL")
			}
		}
		if s.Image != "" {
			switch {
			case !s.Stdio():
				p.add(f+".image", "only a stdio server (command) runs in a sandbox", "given without command")
			case !imageRef.MatchString(s.Image):
				p.add(f+".image", "NAME[:TAG], NAME@sha256:HEX or sha256:HEX of an image in the host's store", "%q is not an image reference", shorten(s.Image))
			}
		}
		if s.Source != "" {
			switch {
			case !s.Stdio():
				p.add(f+".source", "only a stdio server (command) runs in a sandbox", "given without command")
			case !absPath(s.Source):
				p.add(f+".source", "an absolute host directory, shown read-only as the server's /workspace", "%q is not an absolute path", shorten(s.Source))
			}
		}
		switch {
		case !s.Stdio() && (!s.Network.IsZero() || s.Network.Default != ""):
			p.add(f+".network", "a remote server is reached under the document's network section, which binds its credentials", "given without command")
		case s.Stdio():
			if !s.Network.IsZero() && s.Network.Default == "" {
				// As the document's section: one canonical form.
				m.Servers[i].Network.Default = Deny
			}
			if err := m.Servers[i].Network.Validate(); err != nil {
				for _, e := range unjoin(err) {
					p.add(f+".network", "as the document's network section", "%s", strings.TrimPrefix(e.Error(), "policy: "))
				}
			}
		}
		if s.URL != "" {
			if u, err := url.Parse(s.URL); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || hasCTL(s.URL) {
				p.add(f+".url", "the server's endpoint, like https://mcp.example.com/mcp (credentials belong in network.credentials)", "%q is not an http or https URL", shorten(s.URL))
			}
		}
		if s.Timeout < 0 || time.Duration(s.Timeout) > maxMCPTimeout {
			p.add(f+".timeout", "a duration up to 1h, like 30s; 0 means 1m", "%s out of range", s.Timeout)
		}
		if l := s.Limits; l.Calls < 0 || l.Calls > maxMCPCalls {
			p.add(f+".limits.calls", fmt.Sprintf("calls per run, up to %d; 0 means %d", maxMCPCalls, DefaultMCPCalls), "%d out of range", l.Calls)
		}
		if l := s.Limits; l.Concurrent < 0 || l.Concurrent > maxMCPConcurrent {
			p.add(f+".limits.concurrent", fmt.Sprintf("calls at once, up to %d; 0 means %d", maxMCPConcurrent, DefaultMCPConcurrent), "%d out of range", l.Concurrent)
		}
		if l := s.Limits; l.ResultBytes < 0 || l.ResultBytes > DefaultMCPResultBytes {
			p.add(f+".limits.result_bytes", "a size up to 1M, like 64K; 0 means 1M", "%s out of range", l.ResultBytes)
		}
	}
}

// CheckMCP checks servers as the mcp section would (a run's configuration
// names them too): every problem, joined.
func CheckMCP(servers []MCPServer) error {
	p := &problems{}
	m := MCP{Servers: servers}
	m.validate(p)
	if len(p.errs) == 0 {
		return nil
	}
	return joinErrors(p.errs)
}

// ServerOf returns the name of the server whose tool is called tool
// (SERVER__TOOL, the server one of m's), or "" for any other tool.
func (m *MCP) ServerOf(tool string) string {
	server, _, ok := strings.Cut(tool, MCPToolSep)
	if !ok {
		return ""
	}
	for _, s := range m.Servers {
		if s.Name == server {
			return server
		}
	}
	return ""
}
