package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// guardedPolicy denies rm and asks about commands starting with "ask".
const guardedPolicy = `tools:
  run_command:
    rules:
      - when: args.command.contains("rm ")
        action: deny
        reason: nothing is deleted here
      - when: args.command.startsWith("ask")
        action: ask
        reason: a person looks at these
`

// mcpHome is a home with the stored policy "guarded".
func mcpHome(t *testing.T) (home, exe string) {
	t.Helper()
	home, exe = serveHome(t, "almcp-")
	file := filepath.Join(t.TempDir(), "guarded.yaml")
	if err := os.WriteFile(file, []byte(guardedPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := airlockIn(t, context.Background(), home, exe, io.Discard, "policy", "put", "guarded", file); code != 0 {
		t.Fatalf("policy put = %d", code)
	}
	return home, exe
}

func mcpText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func mcpCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s) = %v", name, err)
	}
	return res
}

// waitCLIApproval waits until `airlock approvals --json` on home lists a
// pending approval of run_command in sandbox sb (any sandbox when sb is
// empty), and returns its id.
func waitCLIApproval(t *testing.T, home, exe, sb string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var out bytes.Buffer
		if code := airlockIn(t, context.Background(), home, exe, &out, "approvals", "--json"); code != 0 {
			t.Fatalf("airlock approvals = %d", code)
		}
		d := json.NewDecoder(&out)
		for {
			var a struct{ ID, Sandbox, Action string }
			if d.Decode(&a) != nil {
				break
			}
			if (sb == "" || a.Sandbox == sb) && strings.HasPrefix(a.Action, "run_command ") {
				return a.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no approval of sandbox %s listed by airlock approvals", sb)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// progressTo is a client's options whose progress notifications' messages
// go to ch.
func progressTo(ch chan<- string) *sdk.ClientOptions {
	return &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		select {
		case ch <- r.Params.Message:
		default:
		}
	}}
}

// exerciseMCP runs the calls both transports must answer alike.
func exerciseMCP(t *testing.T, cs *sdk.ClientSession, progress <-chan string, home, exe string) {
	t.Helper()
	res := mcpCall(t, cs, "run_command", map[string]any{"command": "echo in-sandbox; exit 4"})
	if !res.IsError || !strings.Contains(mcpText(res), "in-sandbox") || !strings.Contains(mcpText(res), "exit status 4") {
		t.Errorf("run_command = %q, want its output and exit status 4", mcpText(res))
	}
	res = mcpCall(t, cs, "create_sandbox", map[string]any{"policy": "guarded"})
	id, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)
	if res.IsError || id == "" || !strings.Contains(mcpText(res), "guarded@v1") {
		t.Fatalf("create_sandbox(guarded) = %q", mcpText(res))
	}
	res = mcpCall(t, cs, "run_command", map[string]any{"command": "rm -rf /workspace", "sandbox": id})
	if !res.IsError || !strings.Contains(mcpText(res), "nothing is deleted here") {
		t.Errorf("rm under guarded = %q, want the policy's denial", mcpText(res))
	}
	// ask: held as an approval that `airlock approvals` lists and `airlock
	// approve`/`deny` decides (another host on the same store), while the
	// client gets progress notifications naming it.
	for _, approve := range []bool{true, false} {
		done := make(chan *sdk.CallToolResult, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "ask; echo asked-ran", "sandbox": id}}
			p.SetProgressToken("ask")
			res, err := cs.CallTool(ctx, p)
			if err != nil {
				t.Errorf("CallTool(ask) = %v", err)
			}
			done <- res
		}()
		approval := waitCLIApproval(t, home, exe, id)
	named:
		for {
			select {
			case msg := <-progress:
				if strings.Contains(msg, approval) {
					break named
				}
			case <-time.After(time.Minute):
				t.Errorf("no progress notification named approval %s while the call waited", approval)
				break named
			}
		}
		args := []string{"approve", approval}
		if !approve {
			args = []string{"deny", approval, "--reason", "not this one"}
		}
		if code := airlockIn(t, context.Background(), home, exe, io.Discard, args...); code != 0 {
			t.Fatalf("airlock %s = %d", args[0], code)
		}
		res = <-done
		switch {
		case res == nil:
		case approve && (res.IsError || !strings.Contains(mcpText(res), "asked-ran")):
			t.Errorf("approved ask = %q, want it run", mcpText(res))
		case !approve && (!res.IsError || !strings.Contains(mcpText(res), "not this one") || strings.Contains(mcpText(res), "asked-ran")):
			t.Errorf("denied ask = %q, want the denial's reason, not run", mcpText(res))
		}
	}
	res = mcpCall(t, cs, "create_sandbox", map[string]any{"policy": "missing"})
	if !res.IsError || !strings.Contains(mcpText(res), `no stored policy "missing"`) {
		t.Errorf("create_sandbox(missing) = %q, want no stored policy", mcpText(res))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read_file", Arguments: map[string]any{"file": "x"}})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, "file") {
		t.Errorf("read_file with a bad argument = %v, want invalid params naming it", err)
	}
}

// TestMCPStdio drives `airlock mcp` with the Go SDK's client over its
// stdin and stdout.
func TestMCPStdio(t *testing.T) {
	home, exe := mcpHome(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		env := &cli.Env{Env: sandboxcli.Env{Ctx: context.Background(), Stdin: inR, Stdout: outW, Stderr: &stderr, Home: home, Executor: exe, Spawner: true}}
		done <- cli.Main(env, []string{"mcp"})
		outW.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	progress := make(chan string, 16)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, progressTo(progress)).Connect(ctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	exerciseMCP(t, cs, progress, home, exe)
	_ = cs.Close()
	inW.Close()
	if code := <-done; code != 0 {
		t.Errorf("airlock mcp = %d; stderr %s", code, stderr.String())
	}
	logs, _ := filepath.Glob(filepath.Join(home, "audit", "mcp-*.jsonl"))
	if len(logs) != 1 {
		t.Fatalf("audit logs %v, want one for the session", logs)
	}
	b, _ := os.ReadFile(logs[0])
	for _, want := range []string{`"tool":"run_command","decision":"deny"`, `"outcome":"denied"`, `"tool":"session.end"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("audit log lacks %s:\n%s", want, b)
		}
	}
}

// bearer adds an API key to every request.
type bearer string

func (k bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// serveMCP starts airlock serve on home with keys for tenant local: one
// with the sandboxes scope and the run scopes, and a narrow one
// (runs:read).
func serveMCP(t *testing.T, home, exe string) (url, key, narrow string) {
	t.Helper()
	if code := airlockIn(t, context.Background(), home, exe, io.Discard, "tenants", "create", "local"); code != 0 {
		t.Fatalf("tenants create local = %d", code)
	}
	keys := map[string]string{}
	for _, scope := range []string{"sandboxes,runs:write,runs:read,approvals", "runs:read"} {
		var out bytes.Buffer
		if code := airlockIn(t, context.Background(), home, exe, &out, "keys", "create", "--tenant", "local", "--name", strings.NewReplacer(":", "-", ",", "-").Replace(scope), "--scope", scope); code != 0 {
			t.Fatalf("keys create = %d", code)
		}
		keys[scope] = strings.TrimSpace(out.String())
	}
	srv := startServe(t, home, exe)
	return srv.url + "/mcp", keys["sandboxes,runs:write,runs:read,approvals"], keys["runs:read"]
}

// TestMCPServe drives /mcp on airlock serve with the Go SDK's client over
// Streamable HTTP.
func TestMCPServe(t *testing.T) {
	home, exe := mcpHome(t)
	url, key, narrow := serveMCP(t, home, exe)
	progress := make(chan string, 16)
	connect := func(k string) (*sdk.ClientSession, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer(k)}, MaxRetries: -1}
		return sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, progressTo(progress)).Connect(ctx, tr, nil)
	}
	cs, err := connect(key)
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	defer cs.Close()
	exerciseMCP(t, cs, progress, home, exe)

	ns, err := connect(narrow)
	if err != nil {
		t.Fatalf("Connect(narrow) = %v", err)
	}
	defer ns.Close()
	_, err = ns.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "true"}})
	if err == nil || !strings.Contains(err.Error(), `"sandboxes" scope`) {
		t.Errorf("run_command with a runs:read key = %v, want refused for the scope", err)
	}
	if _, err := connect("airlock_not_a_key"); err == nil {
		t.Errorf("Connect with a wrong key succeeded")
	}

	// The run-level tools: a scripted run under "guarded" asks about its
	// command; the approval is listed and decided over MCP, and the run
	// completes.
	_, err = ns.CallTool(context.Background(), &sdk.CallToolParams{Name: "start_run", Arguments: map[string]any{"task": "t", "script": "turns: []"}})
	if err == nil || !strings.Contains(err.Error(), `"runs:write" scope`) {
		t.Errorf("start_run with a runs:read key = %v, want refused for runs:write", err)
	}
	script := "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"ask=1; echo approved-ran\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	res := mcpCall(t, cs, "start_run", map[string]any{"task": "ask then finish", "script": script, "policy": "guarded"})
	run, _ := res.StructuredContent.(map[string]any)["run"].(string)
	if res.IsError || run == "" {
		t.Fatalf("start_run = %q", mcpText(res))
	}
	var approval string
	deadline := time.Now().Add(90 * time.Second)
	for approval == "" {
		res = mcpCall(t, cs, "list_approvals", nil)
		for _, a := range res.StructuredContent.(map[string]any)["approvals"].([]any) {
			if m := a.(map[string]any); m["run_id"] == run {
				approval, _ = m["id"].(string)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no approval of run %s listed: %q", run, mcpText(res))
		}
		time.Sleep(100 * time.Millisecond) // the serve's workers drive the run
	}
	if res = mcpCall(t, cs, "decide_approval", map[string]any{"approval": approval, "approve": true}); res.IsError {
		t.Fatalf("decide_approval = %q", mcpText(res))
	}
	for {
		res = mcpCall(t, cs, "run_status", map[string]any{"run": run})
		if st := res.StructuredContent.(map[string]any)["status"]; st == "completed" {
			break
		} else if st == "failed" || st == "cancelled" || time.Now().After(deadline) {
			t.Fatalf("run_status = %q, want completed", mcpText(res))
		}
		time.Sleep(100 * time.Millisecond)
	}
	res = mcpCall(t, cs, "run_timeline", map[string]any{"run": run})
	for _, want := range []string{"approval.requested", "approval.decided", "approved-ran", "run.completed"} {
		if !strings.Contains(mcpText(res), want) {
			t.Errorf("run_timeline lacks %s:\n%s", want, mcpText(res))
		}
	}
	// Another tenant's key does not see the run.
	if code := airlockIn(t, context.Background(), home, exe, io.Discard, "tenants", "create", "other"); code != 0 {
		t.Fatalf("tenants create other = %d", code)
	}
	var otherKey bytes.Buffer
	if code := airlockIn(t, context.Background(), home, exe, &otherKey, "keys", "create", "--tenant", "other", "--name", "o", "--scope", "runs:read"); code != 0 {
		t.Fatalf("keys create = %d", code)
	}
	os2, err := connect(strings.TrimSpace(otherKey.String()))
	if err != nil {
		t.Fatalf("Connect(other) = %v", err)
	}
	defer os2.Close()
	if res = mcpCall(t, os2, "run_status", map[string]any{"run": run}); !res.IsError || !strings.Contains(mcpText(res), "no run") {
		t.Errorf("run_status of another tenant's run = %q, want no run", mcpText(res))
	}

	// airlock mcp with AIRLOCK_URL and AIRLOCK_API_KEY relays to the
	// server: the sandbox is the server's, under its policies.
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		vars := map[string]string{"AIRLOCK_URL": strings.TrimSuffix(url, "/mcp"), "AIRLOCK_API_KEY": key}
		env := &cli.Env{Env: sandboxcli.Env{Ctx: context.Background(), Stdin: inR, Stdout: outW, Stderr: logWriter{t, "mcp relay: "}, Home: t.TempDir(), Executor: exe}, Getenv: func(k string) string { return vars[k] }}
		done <- cli.Main(env, []string{"mcp"})
		outW.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("Connect through the relay = %v", err)
	}
	res = mcpCall(t, rs, "create_sandbox", map[string]any{"policy": "guarded"})
	if res.IsError || !strings.Contains(mcpText(res), "guarded@v1") {
		t.Errorf("create_sandbox through the relay = %q, want the server's stored policy", mcpText(res))
	}
	if res = mcpCall(t, rs, "run_command", map[string]any{"command": "echo relayed"}); res.IsError || !strings.Contains(mcpText(res), "relayed") {
		t.Errorf("run_command through the relay = %q", mcpText(res))
	}
	_ = rs.Close()
	inW.Close()
	if code := <-done; code != 0 {
		t.Errorf("airlock mcp (relay) = %d", code)
	}
}

// mcpSDKVersion is the official TypeScript SDK the test installs.
const mcpSDKVersion = "@modelcontextprotocol/sdk@1.32.2"

// installMCPSDK installs the TypeScript SDK with npm and returns the
// directory holding node_modules.
func installMCPSDK(t *testing.T) string { return installNPM(t, mcpSDKVersion, "mcp-sdk") }

// installNPM installs npm package spec (NAME@VERSION) with npm, under
// $AIRLOCK_TEST_CACHE/sub when set (reused across runs) or the test's
// temp dir, and returns the directory holding node_modules. Without npm
// or node the test is skipped, naming what is missing.
func installNPM(t *testing.T, spec, sub string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skipf("npm is not installed: the test installs %s with it", spec)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("node is not installed: the test runs %s with it", spec)
	}
	dir := t.TempDir()
	if c := os.Getenv("AIRLOCK_TEST_CACHE"); c != "" {
		dir = filepath.Join(c, sub)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := filepath.Join(dir, "installed")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == spec {
		return dir
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"--no-package-lock", "--no-update-notifier", spec)
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(dir, ".npm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", spec, err, out)
	}
	if err := os.WriteFile(stamp, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tsResult is what testdata/mcp/client.mjs prints.
type tsResult struct {
	Tools []struct {
		Name        string `json:"name"`
		ReadOnly    bool   `json:"readOnly"`
		Destructive bool   `json:"destructive"`
		OpenWorld   bool   `json:"openWorld"`
	} `json:"tools"`
	Run struct {
		Text     string `json:"text"`
		IsError  bool   `json:"isError"`
		ExitCode int    `json:"exitCode"`
	} `json:"run"`
	Created string `json:"created"`
	Denied  struct {
		Text    string `json:"text"`
		IsError bool   `json:"isError"`
	} `json:"denied"`
	BadArg struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"badArg"`
	Asked struct {
		Text     string   `json:"text"`
		IsError  bool     `json:"isError"`
		Progress []string `json:"progress"`
	} `json:"asked"`
	Narrow struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"narrow"`
	WrongKey string `json:"wrongKey"`
}

// TestMCPTypeScriptSDK drives `airlock mcp` (stdio) and /mcp on airlock
// serve (Streamable HTTP) with the official TypeScript SDK.
func TestMCPTypeScriptSDK(t *testing.T) {
	dir := installMCPSDK(t)
	home, exe := mcpHome(t)
	script := filepath.Join(dir, "client.mjs") // beside node_modules, which node resolves from
	src, err := os.ReadFile(filepath.Join("testdata", "mcp", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	url, key, narrow := serveMCP(t, home, exe)
	run := func(args ...string) tsResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
		// `airlock` on PATH is this test binary (TestMain) acting as it.
		cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home, "AIRLOCK_EXEC="+exe)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("node client.mjs %s: %v", args[0], err)
		}
		// The client's asked call waits for a person: approve it from
		// the command line (another process than the server holding it).
		approval := waitCLIApproval(t, home, exe, "")
		if code := airlockIn(t, context.Background(), home, exe, io.Discard, "approve", approval); code != 0 {
			t.Errorf("airlock approve %s = %d", approval, code)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("node client.mjs %s: %v\n%s", args[0], err, stderr.String())
		}
		out := stdout.Bytes()
		var r tsResult
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("node client.mjs %s printed %q: %v", args[0], out, err)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stdio", []string{"stdio"}},
		{"http", []string{"http", url, key, narrow}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(tc.args...)
			names := map[string]bool{}
			for _, tl := range r.Tools {
				names[tl.Name] = true
				if tl.Name == "read_file" && (!tl.ReadOnly || tl.Destructive || tl.OpenWorld) {
					t.Errorf("read_file annotations %+v, want read-only, not destructive, closed world", tl)
				}
				if tl.Name == "run_command" && (tl.ReadOnly || !tl.Destructive || !tl.OpenWorld) {
					t.Errorf("run_command annotations %+v, want destructive and open world", tl)
				}
			}
			for _, n := range []string{"create_sandbox", "destroy_sandbox", "list_sandboxes", "run_command", "read_file", "write_file", "edit_file", "list_dir", "search"} {
				if !names[n] {
					t.Errorf("tools/list lacks %s", n)
				}
			}
			if !r.Run.IsError || r.Run.ExitCode != 4 || !strings.Contains(r.Run.Text, "from-ts") {
				t.Errorf("run_command = %+v, want exit code 4 and its output", r.Run)
			}
			if !strings.Contains(r.Created, "guarded@v1") {
				t.Errorf("create_sandbox = %q", r.Created)
			}
			if !r.Denied.IsError || !strings.Contains(r.Denied.Text, "nothing is deleted here") {
				t.Errorf("denied call = %+v, want the policy's reason", r.Denied)
			}
			if r.BadArg.Code != -32602 || !strings.Contains(r.BadArg.Message, "file") {
				t.Errorf("bad argument = %+v, want JSON-RPC -32602 naming the argument", r.BadArg)
			}
			if r.Asked.IsError || !strings.Contains(r.Asked.Text, "asked-ran") {
				t.Errorf("asked call = %+v, want it run once approved", r.Asked)
			}
			if len(r.Asked.Progress) == 0 || !strings.Contains(strings.Join(r.Asked.Progress, "\n"), "airlock approve ") {
				t.Errorf("asked call's progress = %q, want notifications naming the approval", r.Asked.Progress)
			}
			if tc.name == "http" {
				if r.Narrow.Code != -32001 || !strings.Contains(r.Narrow.Message, `"sandboxes" scope`) {
					t.Errorf("narrow key = %+v, want -32001 naming the scope", r.Narrow)
				}
				if !strings.Contains(r.WrongKey, "401") && !strings.Contains(strings.ToLower(r.WrongKey), "unauthorized") {
					t.Errorf("wrong key = %q, want refused", r.WrongKey)
				}
			}
		})
	}
}

// TestMCPElicitation: `airlock mcp` asks a client that declares
// elicitation about a held call itself; its answer is the decision,
// recorded in the store by mcp-user.
func TestMCPElicitation(t *testing.T) {
	home, exe := mcpHome(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		env := &cli.Env{Env: sandboxcli.Env{Ctx: context.Background(), Stdin: inR, Stdout: outW, Stderr: logWriter{t, "mcp: "}, Home: home, Executor: exe, Spawner: true}}
		done <- cli.Main(env, []string{"mcp", "--policy", "guarded"})
		outW.Close()
	}()
	answers := make(chan bool, 2)
	answers <- true
	answers <- false
	var forms []string
	opts := &sdk.ClientOptions{ElicitationHandler: func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
		forms = append(forms, r.Params.Message)
		return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"approve": <-answers}}, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	if res := mcpCall(t, cs, "run_command", map[string]any{"command": "ask; echo elicited-ran"}); res.IsError || !strings.Contains(mcpText(res), "elicited-ran") {
		t.Errorf("ask answered yes = %q, want it run", mcpText(res))
	}
	if res := mcpCall(t, cs, "run_command", map[string]any{"command": "ask; echo elicited-ran"}); !res.IsError || !strings.Contains(mcpText(res), "denied by mcp-user") {
		t.Errorf("ask answered no = %q, want denied by mcp-user", mcpText(res))
	}
	if len(forms) != 2 || !strings.Contains(forms[0], "a person looks at these") || !strings.Contains(forms[0], "echo elicited-ran") {
		t.Errorf("forms = %q, want two naming the action and the rule's reason", forms)
	}
	var out bytes.Buffer
	if code := airlockIn(t, context.Background(), home, exe, &out, "approvals", "--json"); code != 0 || strings.TrimSpace(out.String()) != "" {
		t.Errorf("airlock approvals = %d %q, want none pending", code, out.String())
	}
	_ = cs.Close()
	inW.Close()
	if code := <-done; code != 0 {
		t.Errorf("airlock mcp = %d", code)
	}
}

// inspectorVersion is the MCP Inspector the test installs for its CLI
// mode.
const inspectorVersion = "@modelcontextprotocol/inspector@0.17.2"

// TestMCPInspectorCLI drives `airlock mcp` (stdio) and /mcp on airlock
// serve (Streamable HTTP) with the MCP Inspector's CLI mode: list the
// tools, run a command, a call refused (stdio: by the policy; HTTP: for
// the key's scope) and a bad argument.
func TestMCPInspectorCLI(t *testing.T) {
	dir := installNPM(t, inspectorVersion, "mcp-inspector")
	inspector := filepath.Join(dir, "node_modules", ".bin", "mcp-inspector")
	home, exe := mcpHome(t)
	url, key, narrow := serveMCP(t, home, exe)
	// The stdio server under the stored policy "guarded": a script, so
	// that the Inspector's flags and the server's stay apart.
	guarded := filepath.Join(t.TempDir(), "airlock-mcp-guarded")
	if err := os.WriteFile(guarded, []byte("#!/bin/sh\nexec airlock mcp --policy guarded\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, server []string, args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, inspector, append(append([]string{"--cli"}, server...), args...)...)
		// `airlock` on PATH is this test binary (TestMain) acting as it.
		cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home, "AIRLOCK_EXEC="+exe)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("mcp-inspector: %v", err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	for _, tc := range []struct {
		name           string
		server, narrow []string
		refused        []string // the call refused, and what its output says
		refusedWant    string
	}{
		{
			name: "stdio", server: []string{guarded},
			refused:     []string{"--method", "tools/call", "--tool-name", "run_command", "--tool-arg", "command=rm -rf /workspace"},
			refusedWant: "nothing is deleted here",
		},
		{
			name: "http", server: []string{url, "--transport", "http", "--header", "Authorization: Bearer " + key},
			narrow:      []string{url, "--transport", "http", "--header", "Authorization: Bearer " + narrow},
			refused:     []string{"--method", "tools/call", "--tool-name", "run_command", "--tool-arg", "command=true"},
			refusedWant: `"sandboxes" scope`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(t, tc.server, "--method", "tools/list")
			if code != 0 || !strings.Contains(out, `"run_command"`) || !strings.Contains(out, `"create_sandbox"`) || !strings.Contains(out, `"readOnlyHint": true`) {
				t.Errorf("tools/list = %d %s, want the tools and their annotations", code, out)
			}
			out, code = run(t, tc.server, "--method", "tools/call", "--tool-name", "run_command", "--tool-arg", "command=echo from-inspector")
			if code != 0 || !strings.Contains(out, "from-inspector") || !strings.Contains(out, `"exit_code": 0`) {
				t.Errorf("tools/call run_command = %d %s, want its output and exit code 0", code, out)
			}
			server := tc.server
			if tc.narrow != nil {
				server = tc.narrow
			}
			out, _ = run(t, server, tc.refused...)
			if !strings.Contains(out, tc.refusedWant) || strings.Contains(out, `"exit_code"`) {
				t.Errorf("refused call = %s, want %q and nothing run", out, tc.refusedWant)
			}
			out, code = run(t, tc.server, "--method", "tools/call", "--tool-name", "read_file", "--tool-arg", "file=x")
			if code == 0 || !strings.Contains(out, "-32602") || !strings.Contains(out, `unknown argument(s) "file"`) {
				t.Errorf("tools/call read_file with a bad argument = %d %s, want JSON-RPC -32602 naming it", code, out)
			}
		})
	}
}
