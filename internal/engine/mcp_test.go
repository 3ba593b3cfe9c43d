package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/mcpclient"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret"
)

// mcpFilesystem is the reference MCP server the test runs in a sandbox.
const mcpFilesystem = "@modelcontextprotocol/server-filesystem@2026.8.31"

// installNPM installs pkg with npm, under $AIRLOCK_TEST_CACHE when set
// (reused across runs) or the test's temp dir, and returns the directory
// holding node_modules.
func installNPM(t *testing.T, pkg string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skipf("npm is not installed: the test installs %s with it", pkg)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the MCP server runs on it")
	}
	dir := t.TempDir()
	if c := os.Getenv("AIRLOCK_TEST_CACHE"); c != "" {
		dir = filepath.Join(c, "npm-"+strings.NewReplacer("/", "_", "@", "_").Replace(pkg))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(dir, "installed")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == pkg {
		return dir
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"--no-package-lock", "--no-update-notifier", pkg)
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(dir, ".npm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", pkg, err, out)
	}
	if err := os.WriteFile(stamp, []byte(pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// specRecorder keeps the tools offered to the model at its first turn.
type specRecorder struct {
	model.Provider
	mu    sync.Mutex
	specs []model.ToolSpec
}

func (r *specRecorder) Complete(ctx context.Context, req model.Request, stream func(model.Delta)) (model.Response, error) {
	r.mu.Lock()
	if r.specs == nil {
		r.specs = req.Tools
	}
	r.mu.Unlock()
	return r.Provider.Complete(ctx, req, stream)
}

// policyHook decides with doc, as the host does.
func policyHook(doc *policy.Document) engine.PolicyHook {
	return func(_ context.Context, q engine.PolicyQuery) event.PolicyDecision {
		return engine.DecideTool(doc, q)
	}
}

func mustParse(t *testing.T, doc string) *policy.Document {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("policy.Parse: %v", err)
	}
	return d
}

// TestMCPFilesystemServer: the reference filesystem server from npm runs
// in a sandbox of its own; its tools are offered to the model as fs__TOOL
// with the server's schemas, and the run's policy decides each call: a
// rule allows writes and reads under /tmp, mcp_default denies the rest.
func TestMCPFilesystemServer(t *testing.T) {
	src := installNPM(t, mcpFilesystem)
	doc := mustParse(t, `tools:
  rules:
    - when: server == "fs" && tool in ["fs__write_file", "fs__read_text_file"] && args.path.startsWith("/tmp/")
      action: allow
mcp:
  servers:
    - name: fs
      command: [node, /workspace/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js, /tmp]
      source: `+src+`
      timeout: 2m
`)
	rec := &specRecorder{}
	h, cfg := mcpHarness(t, doc, func(o *engine.Options) {
		o.WrapProvider = func(p model.Provider) model.Provider { rec.Provider = p; return rec }
	})
	o := h.run("use the filesystem server", `
turns:
  - tool_calls:
      - name: fs__write_file
        args: {path: /tmp/note.txt, content: "written through MCP"}
  - tool_calls:
      - name: fs__read_text_file
        args: {path: /tmp/note.txt}
      - name: fs__list_directory
        args: {path: /tmp}
      - name: fs__read_text_file
        args: {path: /workspace/installed}
  - tool_calls:
      - name: run_command
        args: {command: "test -e /tmp/note.txt && echo present || echo absent"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, cfg)
	completed(t, o)

	var write *model.ToolSpec
	for i, s := range rec.specs {
		if s.Name == "fs__write_file" {
			write = &rec.specs[i]
		}
	}
	if write == nil {
		t.Fatalf("fs__write_file not offered to the model; offered %d tools", len(rec.specs))
	}
	if !strings.Contains(string(write.Schema), `"path"`) || !strings.Contains(write.Description, `MCP server "fs"`) {
		t.Errorf("fs__write_file spec = %s %q, want the server's schema and a marked description", write.Schema, write.Description)
	}

	fin := h.finished(o.RunID)
	byTool := map[string][]event.ToolFinished{}
	for _, f := range fin {
		if f.Outcome == "denied" {
			byTool["denied "+f.Tool] = append(byTool["denied "+f.Tool], f)
			continue
		}
		byTool[f.Tool] = append(byTool[f.Tool], f)
	}
	if f := byTool["fs__read_text_file"]; len(f) != 1 || f[0].IsError || f[0].Output != "written through MCP" {
		t.Errorf("fs__read_text_file results = %+v, want the text written through MCP", f)
	}
	if f := byTool["fs__write_file"]; len(f) != 1 || f[0].IsError {
		t.Errorf("fs__write_file results = %+v", f)
	}
	decisions := map[string]string{}
	for _, e := range h.verifyLog(o.RunID) {
		if e.Type == event.TypePolicyDecision {
			var pd event.PolicyDecision
			mustUnmarshal(t, e.Payload, &pd)
			decisions[pd.Tool+" "+pd.Decision] = pd.Rule
		}
		if e.Type == event.TypeToolStarted {
			var ts event.ToolStarted
			mustUnmarshal(t, e.Payload, &ts)
			if strings.HasPrefix(ts.Tool, "fs__") && !ts.External {
				t.Errorf("tool.started of %s is not external", ts.Tool)
			}
		}
	}
	for _, want := range []string{"fs__write_file allow", "fs__read_text_file allow", "fs__list_directory deny", "fs__read_text_file deny"} {
		if _, ok := decisions[want]; !ok {
			t.Errorf("no decision %q; decisions %v", want, decisions)
		}
	}
	if r := decisions["fs__list_directory deny"]; r != "tools.mcp_default" {
		t.Errorf("fs__list_directory denied by %q, want tools.mcp_default", r)
	}
	// The server ran in a sandbox of its own: the run's never saw its file.
	if f := byTool["run_command"]; len(f) != 1 || !strings.Contains(f[0].Output, "absent") {
		t.Errorf("run_command in the run's sandbox = %+v, want absent", f)
	}
	if f := byTool["fs__list_directory"]; len(f) != 0 || len(byTool["denied fs__list_directory"]) != 1 {
		t.Errorf("fs__list_directory ran: %+v", f)
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// buildEvil builds testdata/mcpevil, static, into a directory of its own,
// the source of the server's sandbox.
func buildEvil(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "mcpevil"), "./testdata/mcpevil")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build mcpevil: %v\n%s", err, out)
	}
	return dir
}

// TestMCPMaliciousServer: a server that lies, injects, floods, leaks,
// hangs and crashes is contained, each case checked: its annotations do
// not make a call allowed, its descriptions reach the model capped, on one
// line and marked, its results are capped and scrubbed of secrets, and a
// server that hangs, crashes or floods its output is a tool error, started
// again at the next call.
func TestMCPMaliciousServer(t *testing.T) {
	src := buildEvil(t)
	doc := mustParse(t, `tools:
  rules:
    - when: server in ["evil", "slow"] && tool != "evil__cleanup"
      action: allow
mcp:
  servers:
    - name: evil
      command: [/workspace/mcpevil]
      source: `+src+`
    - name: slow
      command: [/workspace/mcpevil]
      source: `+src+`
      timeout: 5s
`)
	const storeSecret = "store-secret-6f1d2c9a8b7e" // mcpevil's Secret
	red := secret.NewRedactor()
	red.Add(secret.NewValue([]byte(storeSecret)))
	rec := &specRecorder{}
	h, cfg := mcpHarness(t, doc, func(o *engine.Options) {
		o.Redact = red.String
		o.WrapProvider = func(p model.Provider) model.Provider { rec.Provider = p; return rec }
	})
	o := h.run("use the evil server", `
turns:
  - tool_calls:
      - name: evil__cleanup
        args: {}
  - tool_calls:
      - name: evil__huge
        args: {}
  - tool_calls:
      - name: evil__leak
        args: {}
  - tool_calls:
      - name: slow__hang
        args: {}
  - tool_calls:
      - name: slow__echo
        args: {text: after hang}
  - tool_calls:
      - name: evil__crash
        args: {}
  - tool_calls:
      - name: evil__echo
        args: {text: after crash}
  - tool_calls:
      - name: evil__flood
        args: {}
  - tool_calls:
      - name: evil__echo
        args: {text: after flood}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, cfg)
	completed(t, o)

	t.Run("descriptions", func(t *testing.T) {
		offered := map[string]model.ToolSpec{}
		for _, s := range rec.specs {
			offered[s.Name] = s
		}
		if _, ok := offered["evil__badschema"]; ok {
			t.Errorf("a tool with a %d-byte schema was offered", 64<<10)
		}
		echo, ok := offered["evil__echo"]
		if !ok {
			t.Fatalf("evil__echo not offered; offered %v", rec.specs)
		}
		d := echo.Description
		if len(d) > 2*mcpclientMaxDescription || strings.ContainsAny(d, "\n\x1b\u202e") || !strings.HasPrefix(d, `A tool of the MCP server "evil". The server describes it as follows (its own words, not verified`) {
			t.Errorf("evil__echo description (%d bytes) = %q, want capped, on one line, without control characters, marked", len(d), d)
		}
	})

	fin := h.byTool(o.RunID)
	decisions := map[string]event.PolicyDecision{}
	for _, e := range h.verifyLog(o.RunID) {
		switch e.Type {
		case event.TypePolicyDecision:
			var pd event.PolicyDecision
			mustUnmarshal(t, e.Payload, &pd)
			decisions[pd.Tool] = pd
		case event.TypeToolStarted:
			var ts event.ToolStarted
			mustUnmarshal(t, e.Payload, &ts)
			if (strings.HasPrefix(ts.Tool, "evil__") || strings.HasPrefix(ts.Tool, "slow__")) && !ts.External {
				t.Errorf("tool.started of %s is not external", ts.Tool)
			}
		}
	}
	t.Run("lying annotations", func(t *testing.T) {
		if pd := decisions["evil__cleanup"]; pd.Decision != event.DecisionDeny || pd.Rule != "tools.mcp_default" {
			t.Errorf("evil__cleanup (annotated read-only) decided %+v, want deny by tools.mcp_default", pd)
		}
		if f := fin["evil__cleanup"]; len(f) != 1 || f[0].Outcome != "denied" {
			t.Errorf("evil__cleanup ran: %+v", f)
		}
	})
	t.Run("huge result", func(t *testing.T) {
		f := fin["evil__huge"]
		if len(f) != 1 || f[0].IsError || len(f[0].Output) > 64<<10 || !strings.Contains(f[0].Output, "bytes truncated") {
			t.Errorf("evil__huge = %+v, want one result, capped", f)
		}
	})
	t.Run("secret in a result", func(t *testing.T) {
		f := fin["evil__leak"]
		if len(f) != 1 || strings.Contains(f[0].Output, storeSecret) || strings.Contains(f[0].Output, "ghp_1234567890") || len(f[0].Secrets) == 0 {
			t.Errorf("evil__leak = %+v, want the store's secret and the token scrubbed", f)
		}
		for _, e := range h.verifyLog(o.RunID) {
			if strings.Contains(string(e.Payload), storeSecret) || strings.Contains(string(e.Payload), "ghp_1234567890") {
				t.Errorf("event %s carries the secret: %s", e.Type, e.Payload)
			}
		}
	})
	t.Run("hang, crash, flood", func(t *testing.T) {
		for _, c := range []struct{ tool, want string }{
			{"slow__hang", "did not answer within 5s"},
			{"evil__crash", "the connection ended"},
			{"evil__flood", "the connection ended"},
		} {
			f := fin[c.tool]
			if len(f) != 1 || !f[0].IsError || !strings.Contains(f[0].Output, c.want) || !strings.Contains(f[0].Output, "started again at the next call") {
				t.Errorf("%s = %+v, want a tool error %q", c.tool, f, c.want)
			}
		}
		echo := append(fin["slow__echo"], fin["evil__echo"]...)
		if len(echo) != 3 {
			t.Fatalf("evil__echo and slow__echo ran %d times, want 3", len(echo))
		}
		for i, want := range []string{"after hang", "after crash", "after flood"} {
			if echo[i].IsError || !strings.Contains(echo[i].Output, want) {
				t.Errorf("evil__echo %d (the server started again) = %+v, want %q", i, echo[i], want)
			}
		}
	})
}

// mcpHarness is a harness whose runs are under doc (its policy hook, and
// mod's changes to the engine's options), and the configuration of a run
// with doc's MCP servers and one sandbox, main.
func mcpHarness(t *testing.T, doc *policy.Document, mod ...func(*engine.Options)) (*harness, engine.Config) {
	t.Helper()
	h := newHarness(t, append([]func(*engine.Options){func(o *engine.Options) { o.Policy = policyHook(doc) }}, mod...)...)
	cfg := engine.PolicyConfig(doc)
	cfg.Sandboxes = []engine.SandboxConfig{{Name: "main"}}
	return h, cfg
}

// completed fails the test unless the run completed.
func completed(t *testing.T, o engine.Outcome) {
	t.Helper()
	if o.Status != event.StatusCompleted {
		t.Fatalf("status = %s (%s), want completed", o.Status, o.Reason)
	}
}

// mcpclientMaxDescription is mcpclient.MaxDescription.
const mcpclientMaxDescription = mcpclient.MaxDescription

// secretNetwork gives the run a real egress proxy under pol, whose
// credentials come from secrets.
type secretNetwork struct {
	t       *testing.T
	pol     *policy.Network
	secrets fixedSecrets
}

func (n *secretNetwork) Attach(_ context.Context, a sandbox.Attachment) (func(), error) {
	p, err := egress.New(egress.Config{
		Identity: bridge.Identity{Tenant: "t", Run: a.RunID, Sandbox: a.Spec.ID},
		Policy:   n.pol,
		Secrets:  n.secrets,
		Audit: auditFunc(func(r egress.Record) {
			a.Audit(event.EgressDecision{Decision: r.Decision, Reason: r.Reason, Rule: r.Rule, Host: r.Host, Port: r.Port, Status: r.Status, Credential: r.Credential})
		}),
	})
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(n.t.TempDir(), "p.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	go func() { _ = p.Serve(ln) }()
	a.Spec.Network, a.Spec.ProxySocket = sandbox.NetworkProxy, sock
	return func() { _ = p.Close() }, nil
}

// fixedSecrets is a secret store of fixed values, for egress.Config.
type fixedSecrets map[string]string

func (s fixedSecrets) Get(_ context.Context, _, name string) (secret.Value, secret.Info, error) {
	v, ok := s[name]
	if !ok {
		return secret.Value{}, secret.Info{}, fmt.Errorf("secret %s: %w", name, os.ErrNotExist)
	}
	return secret.NewValue([]byte(v)), secret.Info{Name: name}, nil
}

// remoteServer is a remote MCP server for the tests: the go-sdk's
// Streamable HTTP server on loopback, named mcp.test by the run's policy,
// which binds it a credential. good and bad count the requests that came
// with the credential and without; calls counts its tool's calls.
type remoteServer struct {
	doc              *policy.Document
	network          *secretNetwork
	good, bad, calls atomic.Int32
}

// mcpRemoteToken is the credential of remoteServer's host.
const mcpRemoteToken = "mcp-remote-token-58e1c0a7d2"

func newRemoteServer(t *testing.T) *remoteServer {
	t.Helper()
	const token = mcpRemoteToken
	rs := &remoteServer{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, r *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			rs.calls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "you sent: " + r.Extra.Header.Get("Authorization")}}}, nil
		})
	// The server stands for a remote one, reached by its name (mcp.test)
	// pinned to loopback: the SDK's guard against DNS rebinding, which
	// refuses a loopback server any other Host, is off.
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			rs.bad.Add(1)
			http.Error(w, "no credential", http.StatusUnauthorized)
			return
		}
		rs.good.Add(1)
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	_, port, _ := net.SplitHostPort(hs.Listener.Addr().String())
	rs.doc = mustParse(t, fmt.Sprintf(`tools:
  rules:
    - when: server == "remote"
      action: allow
network:
  resolve:
    - {host: "mcp.test:%[1]s", to: "127.0.0.1:%[1]s"}
  allow:
    - {host: mcp.test, ports: [%[1]s]}
  credentials:
    - {host: mcp.test, secret: mcp_token, header: Authorization, value: "Bearer {{secret}}"}
mcp:
  servers:
    - name: remote
      url: http://mcp.test:%[1]s/mcp
`, port))
	rs.network = &secretNetwork{t: t, pol: &rs.doc.Network, secrets: fixedSecrets{"mcp_token": token}}
	return rs
}

// TestMCPRemoteServer: a remote Streamable HTTP server (the go-sdk's, on
// loopback) is reached through the run's egress proxy, which injects the
// credential the policy binds to its host: the server's handler checks
// that it arrived, on every request, and the run never sees it (not in a
// result, even one that echoes it, nor anywhere in its log).
func TestMCPRemoteServer(t *testing.T) {
	const token = mcpRemoteToken
	rs := newRemoteServer(t)
	doc := rs.doc
	good, bad := &rs.good, &rs.bad
	h, cfg := mcpHarness(t, doc, func(o *engine.Options) { o.Network = rs.network })
	o := h.run("use the remote server", `
turns:
  - tool_calls:
      - name: remote__whoami
        args: {}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, cfg)
	if o.Status != event.StatusCompleted {
		for _, e := range h.verifyLog(o.RunID) {
			if e.Type == event.TypeEgressDecision {
				t.Logf("%s", e.Payload)
			}
		}
		t.Fatalf("status = %s (%s), want completed", o.Status, o.Reason)
	}
	if good.Load() == 0 || bad.Load() != 0 {
		t.Errorf("the server saw the credential on %d requests and lacked it on %d, want every request with it", good.Load(), bad.Load())
	}
	var who []event.ToolFinished
	for _, f := range h.finished(o.RunID) {
		if f.Tool == "remote__whoami" {
			who = append(who, f)
		}
	}
	// The server echoes the credential: the proxy scrubbed it from the
	// response that carried it back.
	if len(who) != 1 || who[0].IsError || who[0].Output != "you sent: Bearer [redacted]" {
		t.Fatalf("remote__whoami = %+v, want the server's answer, its credential scrubbed", who)
	}
	audited := 0
	for _, e := range h.verifyLog(o.RunID) {
		if strings.Contains(string(e.Payload), token) {
			t.Errorf("event %s carries the credential: %s", e.Type, e.Payload)
		}
		if e.Type == event.TypeEgressDecision {
			var ed event.EgressDecision
			mustUnmarshal(t, e.Payload, &ed)
			if ed.Sandbox == "mcp" && ed.Host == "mcp.test" && ed.Decision == "allowed" {
				audited++
			}
		}
	}
	if audited == 0 {
		t.Errorf("no egress.decision of the MCP server's requests in the run's log")
	}
}

// TestMCPUncertainCallFailsClosed: a call of an MCP server's tool that
// started and has no recorded result (the host died mid-call) is never
// repeated on recovery, whatever the server says of the tool: the run
// fails with a tool.uncertain, and the server never got the call again.
func TestMCPUncertainCallFailsClosed(t *testing.T) {
	rs := newRemoteServer(t)
	h, cfg := mcpHarness(t, rs.doc, func(o *engine.Options) { o.Network = rs.network })
	r := h.start("whoami", "turns:\n  - tool_calls:\n      - name: remote__whoami\n        args: {}\n", cfg)
	o := h.diedMidCall(r, "remote__whoami")
	if o.Status != event.StatusFailed || !strings.Contains(o.Reason, "uncertain") {
		t.Fatalf("status %s reason %q, want failed for an uncertain call", o.Status, o.Reason)
	}
	if n := rs.calls.Load(); n != 0 {
		t.Errorf("the MCP call was repeated %d times", n)
	}
	if count(h.verifyLog(r.ID), event.TypeToolUncertain) != 1 {
		t.Error("no tool.uncertain event")
	}
}

// policyNetwork gives a sandbox a real egress proxy under the network
// section of the policy document it is attached with (none for an empty
// one), its credentials from secrets.
type policyNetwork struct {
	t       *testing.T
	secrets fixedSecrets
}

func (n *policyNetwork) Attach(ctx context.Context, a sandbox.Attachment) (func(), error) {
	if len(a.Policy) == 0 {
		return func() {}, nil
	}
	doc, err := policy.Parse(a.Policy)
	if err != nil {
		return nil, err
	}
	if doc.Network.IsZero() {
		return func() {}, nil
	}
	return (&secretNetwork{t: n.t, pol: &doc.Network, secrets: n.secrets}).Attach(ctx, a)
}

// TestMCPServerNetwork: a stdio server's sandbox reaches what its own
// network allows, through an egress proxy of its own that injects the
// credential bound there, and nothing else; the run's sandbox, under the
// run's network (none), reaches nothing.
func TestMCPServerNetwork(t *testing.T) {
	const token = "server-net-token-93ab17"
	var good, bad atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Token") != token {
			bad.Add(1)
		} else {
			good.Add(1)
		}
		fmt.Fprint(w, "hello from upstream")
	}))
	defer hs.Close()
	_, port, _ := net.SplitHostPort(hs.Listener.Addr().String())
	src := buildEvil(t)
	doc := mustParse(t, fmt.Sprintf(`tools:
  rules:
    - when: server == "evil"
      action: allow
mcp:
  servers:
    - name: evil
      command: [/workspace/mcpevil]
      source: %[2]s
      network:
        resolve:
          - {host: "api.test:%[1]s", to: "127.0.0.1:%[1]s"}
          - {host: "other.test:%[1]s", to: "127.0.0.1:%[1]s"}
        allow:
          - {host: api.test, ports: [%[1]s]}
        credentials:
          - {host: api.test, secret: api_token, header: X-Token}
`, port, src))
	h, cfg := mcpHarness(t, doc, func(o *engine.Options) {
		o.Network = &policyNetwork{t: t, secrets: fixedSecrets{"api_token": token}}
	})
	o := h.run("fetch", fmt.Sprintf(`
turns:
  - tool_calls:
      - name: evil__fetch
        args: {url: "http://api.test:%[1]s/"}
  - tool_calls:
      - name: evil__fetch
        args: {url: "http://other.test:%[1]s/"}
  - tool_calls:
      - name: run_command
        args: {command: "curl -sS -m 5 http://api.test:%[1]s/ || echo unreachable"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, port), cfg)
	completed(t, o)
	var out []string
	for _, f := range h.finished(o.RunID) {
		out = append(out, f.Output)
	}
	if len(out) < 3 || out[0] != "status 200: hello from upstream" || !strings.HasPrefix(out[1], "status 403") || !strings.Contains(out[2], "unreachable") {
		t.Fatalf("results = %q, want the allowed host reached, the other refused (403), the run's sandbox without network", out)
	}
	if good.Load() != 1 || bad.Load() != 0 {
		t.Errorf("upstream saw the credential on %d requests and lacked it on %d, want 1 and 0", good.Load(), bad.Load())
	}
	for _, e := range h.verifyLog(o.RunID) {
		if strings.Contains(string(e.Payload), token) {
			t.Errorf("event %s carries the credential: %s", e.Type, e.Payload)
		}
	}
}

// TestConfigMCPValidate: a run's configuration names its MCP servers as a
// policy would, checked the same way.
func TestConfigMCPValidate(t *testing.T) {
	ok := engine.Config{Model: "openai:x", MaxSteps: 10, TimeoutMS: 60000, MCP: []engine.MCPServer{{Name: "fs", Command: []string{"node", "s.js"}}, {Name: "r", URL: "https://mcp.example/mcp"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", ok.MCP, err)
	}
	for _, bad := range [][]engine.MCPServer{
		{{Name: "a__b", Command: []string{"x"}}},
		{{Name: "a"}},
		{{Name: "a", Command: []string{"x"}}, {Name: "a", Command: []string{"y"}}},
		{{Name: "a", URL: "file:///etc/passwd"}},
	} {
		c := engine.Config{Model: "openai:x", MaxSteps: 10, TimeoutMS: 60000, MCP: bad}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "mcp") {
			t.Errorf("Validate(%+v) = %v, want an mcp error", bad, err)
		}
	}
}

// TestMCPServerLimits: a stdio server's limits (calls per run, calls at
// once, result bytes) bound what the run makes of it, each refusal a
// tool error naming the bound.
func TestMCPServerLimits(t *testing.T) {
	src := buildEvil(t)
	doc := mustParse(t, `tools:
  rules:
    - when: server == "lim"
      action: allow
mcp:
  servers:
    - name: lim
      command: [/workspace/mcpevil]
      source: `+src+`
      timeout: 30s
      limits:
        calls: 4
        concurrent: 1
        result_bytes: 1K
`)
	if l := doc.MCP.Servers[0].Limits; l.CallLimit() != 4 || l.ConcurrentLimit() != 1 || l.ResultLimit() != 1024 {
		t.Fatalf("limits = %+v", l)
	}
	h, cfg := mcpHarness(t, doc)
	o := h.run("use the limited server", `
turns:
  - tool_calls:
      - name: lim__huge
        args: {}
  - tool_calls:
      - name: lim__inflight
        args: {}
      - name: lim__inflight
        args: {}
  - tool_calls:
      - name: lim__echo
        args: {text: four}
  - tool_calls:
      - name: lim__echo
        args: {text: five}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, cfg)
	completed(t, o)
	fin := h.byTool(o.RunID)
	if f := fin["lim__huge"]; len(f) != 1 || f[0].IsError || len(f[0].Output) > 2<<10 || !strings.Contains(f[0].Output, "bytes truncated") {
		t.Errorf("lim__huge under result_bytes 1K = %+v, want one result cut near 1K", f)
	}
	for i, f := range fin["lim__inflight"] {
		if f.IsError || !strings.Contains(f.Output, "most in flight: 1") {
			t.Errorf("lim__inflight %d under concurrent 1 = %+v, want one call at a time", i, f)
		}
	}
	if f := fin["lim__echo"]; len(f) != 2 || f[0].IsError || !strings.Contains(f[0].Output, "four") ||
		!f[1].IsError || !strings.Contains(f[1].Output, "the run's calls of this server are spent (limits.calls: 4)") {
		t.Errorf("lim__echo = %+v, want the fourth call answered and the fifth refused by limits.calls", f)
	}
}

// everySpec keeps the tools offered to the model at each turn.
type everySpec struct {
	model.Provider
	mu    sync.Mutex
	turns [][]string
}

func (r *everySpec) Complete(ctx context.Context, req model.Request, stream func(model.Delta)) (model.Response, error) {
	var names []string
	for _, s := range req.Tools {
		names = append(names, s.Name)
	}
	r.mu.Lock()
	r.turns = append(r.turns, names)
	r.mu.Unlock()
	return r.Provider.Complete(ctx, req, stream)
}

// TestMCPToolsListChanged: a server that changes its tools mid-run
// (notifications/tools/list_changed) has them listed again at the next
// step: its new tool is offered and decided by the run's policy, and a
// call of the tool it withdrew is refused, saying so.
func TestMCPToolsListChanged(t *testing.T) {
	src := buildEvil(t)
	doc := mustParse(t, `tools:
  rules:
    - when: server == "g" && tool != "g__cleanup"
      action: allow
mcp:
  servers:
    - name: g
      command: [/workspace/mcpevil]
      source: `+src+`
`)
	rec := &everySpec{}
	h, cfg := mcpHarness(t, doc, func(o *engine.Options) {
		o.WrapProvider = func(p model.Provider) model.Provider { rec.Provider = p; return rec }
	})
	o := h.run("use a server that changes", `
turns:
  - tool_calls:
      - name: g__echo
        args: {text: one}
  - tool_calls:
      - name: g__grow
        args: {}
  - tool_calls:
      - name: g__echo
        args: {text: two}
  - tool_calls:
      - name: g__grown
        args: {}
  - tool_calls:
      - name: finish
        args: {summary: done}
`, cfg)
	completed(t, o)
	rec.mu.Lock()
	turns := rec.turns
	rec.mu.Unlock()
	if len(turns) != 5 {
		t.Fatalf("%d model turns, want 5", len(turns))
	}
	has := func(turn int, name string) bool { return slices.Contains(turns[turn], name) }
	if !has(0, "g__echo") || has(0, "g__grown") || !has(1, "g__echo") {
		t.Errorf("tools before the change = %v, want g__echo and no g__grown", turns[0])
	}
	for i := 2; i < 5; i++ {
		if has(i, "g__echo") || !has(i, "g__grown") || !has(i, "g__grow") {
			t.Errorf("tools at turn %d after the change = %v, want g__grown and no g__echo", i+1, turns[i])
		}
	}
	fin := h.byTool(o.RunID)
	if f := fin["g__echo"]; len(f) != 2 || f[0].IsError || !f[1].IsError || !strings.Contains(f[1].Output, "it no longer offers the tool echo (its tool list changed); the call was not made") {
		t.Errorf("g__echo = %+v, want the first answered and the second refused as withdrawn", f)
	}
	if f := fin["g__grown"]; len(f) != 1 || f[0].IsError || !strings.Contains(f[0].Output, "grown answers") {
		t.Errorf("g__grown = %+v, want its answer", f)
	}
	decided := false
	for _, e := range h.verifyLog(o.RunID) {
		if e.Type == event.TypePolicyDecision {
			var pd event.PolicyDecision
			mustUnmarshal(t, e.Payload, &pd)
			if pd.Tool == "g__grown" && pd.Decision == event.DecisionAllow && pd.Rule == "tools.rules[0]" {
				decided = true
			}
		}
	}
	if !decided {
		t.Errorf("no policy decision of g__grown by tools.rules[0] in the log")
	}
}
