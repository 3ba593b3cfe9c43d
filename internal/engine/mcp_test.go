package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
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
	h := newHarness(t, func(o *engine.Options) {
		o.Policy = policyHook(doc)
		o.WrapProvider = func(p model.Provider) model.Provider { rec.Provider = p; return rec }
	})
	cfg := engine.PolicyConfig(doc)
	cfg.Sandboxes = []engine.SandboxConfig{{Name: "main"}}
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
	if o.Status != event.StatusCompleted {
		t.Fatalf("status = %s (%s), want completed", o.Status, o.Reason)
	}

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
