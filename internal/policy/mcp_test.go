package policy

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseMCP(t *testing.T) {
	doc, err := Parse([]byte(`mcp:
  servers:
    - name: fs
      command: [node, /workspace/server.js, /tmp]
      source: /srv/mcp
      timeout: 30s
      limits: {calls: 5, concurrent: 2, result_bytes: 64K}
    - name: tracker
      url: https://mcp.example.com/mcp
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	s := doc.MCP.Servers
	if len(s) != 2 || !s[0].Stdio() || s[1].Stdio() || s[0].CallTimeout() != 30*time.Second || s[1].CallTimeout() != DefaultMCPTimeout {
		t.Fatalf("Parse: mcp.servers = %+v", s)
	}
	if l := s[0].Limits; l.CallLimit() != 5 || l.ConcurrentLimit() != 2 || l.ResultLimit() != 64<<10 || s[1].Limits.CallLimit() != DefaultMCPCalls {
		t.Fatalf("Parse: limits = %+v, %+v", s[0].Limits, s[1].Limits)
	}
	c := doc.Canonical()
	if !bytes.Contains(c, []byte("\nmcp:\n")) || !bytes.Contains(c, []byte("name: tracker")) {
		t.Fatalf("Canonical has no mcp section:\n%s", c)
	}
	again, err := Parse(c)
	if err != nil {
		t.Fatalf("Parse(Canonical): %v", err)
	}
	if !bytes.Equal(again.Canonical(), c) {
		t.Fatalf("Canonical is not stable:\n%s\nthen\n%s", c, again.Canonical())
	}
	// A document without servers keeps the hash it had before the
	// section existed: no mcp section, no mcp_default.
	if d := Default().Canonical(); bytes.Contains(d, []byte("mcp")) {
		t.Fatalf("Default().Canonical() mentions mcp:\n%s", d)
	}
}

func TestParseMCPErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"no name", "mcp:\n  servers:\n    - command: [x]\n", "policy: mcp.servers[0].name: missing"},
		{"bad name", "mcp:\n  servers:\n    - name: a__b\n      command: [x]\n", `policy: mcp.servers[0].name: "a__b" is not a server name`},
		{"upper name", "mcp:\n  servers:\n    - name: FS\n      command: [x]\n", `policy: mcp.servers[0].name: "FS" is not a server name`},
		{"duplicate", "mcp:\n  servers:\n    - name: a\n      command: [x]\n    - name: a\n      command: [y]\n", "policy: mcp.servers[1].name: a is named already by mcp.servers[0]"},
		{"neither", "mcp:\n  servers:\n    - name: a\n", "policy: mcp.servers[0]: neither command nor url"},
		{"both", "mcp:\n  servers:\n    - name: a\n      command: [x]\n      url: https://a.example/mcp\n", "policy: mcp.servers[0]: both command and url"},
		{"empty program", "mcp:\n  servers:\n    - name: a\n      command: ['']\n", "policy: mcp.servers[0].command[0]: empty, too long or contains NUL"},
		{"bad url", "mcp:\n  servers:\n    - name: a\n      url: ftp://a.example/\n", `policy: mcp.servers[0].url: "ftp://a.example/" is not an http or https URL`},
		{"url with user", "mcp:\n  servers:\n    - name: a\n      url: https://u:p@a.example/\n", `policy: mcp.servers[0].url: "https://u:p@a.example/" is not an http or https URL`},
		{"image without command", "mcp:\n  servers:\n    - name: a\n      url: https://a.example/\n      image: x\n", "policy: mcp.servers[0].image: given without command"},
		{"relative source", "mcp:\n  servers:\n    - name: a\n      command: [x]\n      source: srv\n", `policy: mcp.servers[0].source: "srv" is not an absolute path`},
		{"timeout", "mcp:\n  servers:\n    - name: a\n      command: [x]\n      timeout: 2h\n", "policy: mcp.servers[0].timeout: 2h out of range"},
		{"calls", "mcp:\n  servers:\n    - name: a\n      command: [x]\n      limits: {calls: -1}\n", "policy: mcp.servers[0].limits.calls: -1 out of range"},
		{"concurrent", "mcp:\n  servers:\n    - name: a\n      command: [x]\n      limits: {concurrent: 65}\n", "policy: mcp.servers[0].limits.concurrent: 65 out of range"},
		{"result_bytes", "mcp:\n  servers:\n    - name: a\n      command: [x]\n      limits: {result_bytes: 2M}\n", "policy: mcp.servers[0].limits.result_bytes: 2M out of range"},
		{"unknown limit", "mcp:\n  servers:\n    - name: a\n      command: [x]\n      limits: {bytes: 1}\n", "policy: mcp.servers[0].limits: field bytes not found"},
		{"unknown key", "mcp:\n  servers:\n    - name: a\n      cmd: [x]\n", "policy: mcp.servers[0]: field cmd not found"},
		{"mcp_default", "tools:\n  mcp_default: maybe\n", `policy: tools.mcp_default: "maybe" is not one of allow, deny, ask`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse = %s, want error %q", doc.Canonical(), tt.want)
			}
			found := false
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(line, tt.want+" (line") || line == tt.want {
					found = true
				}
			}
			if !found {
				t.Fatalf("Parse error:\n%v\nwant a line starting %q", err, tt.want)
			}
		})
	}
}

// TestDecideMCPTool: an MCP server's tool is denied by tools.mcp_default
// unless a rule on its name, server or arguments decides; the tools
// section's default (allow) never reaches it.
func TestDecideMCPTool(t *testing.T) {
	doc, err := Parse([]byte(`tools:
  default: allow
  rules:
    - when: server == "fs" && tool == "fs__read_file" && workspace_path(args.path).startsWith("src/")
      action: allow
    - when: server == "fs" && tool.startsWith("fs__write")
      action: ask
mcp:
  servers:
    - name: fs
      command: [x]
    - name: other
      command: [y]
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		tool, server, args string
		want               Verdict
		rule               string
	}{
		{"fs__read_file", "fs", `{"path":"src/a.go"}`, Allow, "tools.rules[0]"},
		{"fs__read_file", "fs", `{"path":"/etc/passwd"}`, Deny, "tools.mcp_default"},
		{"fs__write_file", "fs", `{"path":"src/a.go"}`, Ask, "tools.rules[1]"},
		{"fs__delete", "fs", `{}`, Deny, "tools.mcp_default"},
		{"other__read_file", "other", `{"path":"src/a.go"}`, Deny, "tools.mcp_default"},
		{"read_file", "", `{"path":"src/a.go"}`, Allow, "tools.default"},
	}
	for _, tt := range tests {
		d := doc.DecideTool(ToolRequest{Tool: tt.tool, Server: tt.server, Args: []byte(tt.args), External: tt.server != ""})
		if d.Action != tt.want || d.Rule != tt.rule {
			t.Errorf("DecideTool(%s, %s) = %s by %s, want %s by %s", tt.tool, tt.args, d.Action, d.Rule, tt.want, tt.rule)
		}
	}

	allow, err := Parse([]byte("tools:\n  mcp_default: allow\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if d := allow.DecideTool(ToolRequest{Tool: "fs__x", Server: "fs", External: true}); d.Action != Allow || d.Rule != "tools.mcp_default" {
		t.Errorf("DecideTool with mcp_default allow = %s by %s, want allow by tools.mcp_default", d.Action, d.Rule)
	}
	if !bytes.Contains(allow.Canonical(), []byte("mcp_default: allow")) {
		t.Errorf("Canonical leaves out mcp_default: allow:\n%s", allow.Canonical())
	}
	// The server is the document's when the caller does not say (the
	// command line's explain).
	if d := doc.DecideTool(ToolRequest{Tool: "fs__delete", Args: []byte(`{}`)}); d.Action != Deny || d.Rule != "tools.mcp_default" {
		t.Errorf("DecideTool(fs__delete) without a server = %s by %s, want deny by tools.mcp_default", d.Action, d.Rule)
	}
	if d := doc.DecideTool(ToolRequest{Tool: "nosuch__x", Args: []byte(`{}`)}); d.Rule != "tools.default" {
		t.Errorf("DecideTool(nosuch__x) = %s by %s, want tools.default: no server is named nosuch", d.Action, d.Rule)
	}
	var hand Document // not parsed: an empty mcp_default denies
	if d := hand.DecideTool(ToolRequest{Tool: "fs__x", Server: "fs"}); d.Action != Deny {
		t.Errorf("DecideTool on a Document built by hand = %s, want deny", d.Action)
	}
}

// TestParseMCPNetwork: a stdio server has a network of its own, checked
// as the document's network section is.
func TestParseMCPNetwork(t *testing.T) {
	doc, err := Parse([]byte(`mcp:
  servers:
    - name: fetch
      command: [x]
      network:
        allow:
          - {host: API.Example.com, ports: [443]}
        credentials:
          - {host: api.example.com, secret: tok, header: Authorization, value: "Bearer {{secret}}"}
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	n := doc.MCP.Servers[0].Network
	if n.IsZero() || n.Allow[0].Host != "api.example.com" || len(n.Credentials) != 1 || !doc.Network.IsZero() {
		t.Fatalf("server network = %+v (run's %+v), want its own, hosts normalized", n, doc.Network)
	}
	again, err := Parse(doc.Canonical())
	if err != nil || !bytes.Equal(again.Canonical(), doc.Canonical()) {
		t.Fatalf("Canonical does not round-trip (%v):\n%s", err, doc.Canonical())
	}
	for _, bad := range []struct{ doc, want string }{
		{"mcp:\n  servers:\n    - name: a\n      command: [x]\n      network:\n        default: allow\n", "policy: mcp.servers[0].network: network.default: \"allow\" is not supported"},
		{"mcp:\n  servers:\n    - name: a\n      url: http://a.example/\n      network:\n        allow: [{host: a.example}]\n", "policy: mcp.servers[0].network: given without command"},
		{"mcp:\n  servers:\n    - name: a\n      command: [x]\n      network:\n        alow: []\n", "policy: mcp.servers[0].network: field alow not found"},
	} {
		_, err := Parse([]byte(bad.doc))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want %q", bad.doc, err, bad.want)
		}
	}
}
