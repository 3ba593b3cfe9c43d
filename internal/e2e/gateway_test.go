package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/secret/token"
)

// The official SDKs the gateway test installs: the newest releases that
// still run on Node 20 (openai 7 needs Node 22).
const (
	openaiSDK    = "openai@6.30.1"
	anthropicSDK = "@anthropic-ai/sdk@0.60.0"
)

// The host's provider keys. "Zq7CANARYx9" marks them: the sandbox
// searches its files for the mark without ever being told a key.
const (
	gwOpenAIKey    = "sk-proj-e2e-Zq7CANARYx9-openai-7f3a9c1d"
	gwAnthropicKey = "sk-ant-e2e-Zq7CANARYx9-anthropic-2b8e4f60"
)

// installSDKs installs the SDKs with npm into a directory a sandbox can
// read, under $AIRLOCK_TEST_CACHE when set (reused across runs) or the
// test's temp dir, and returns it.
func installSDKs(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the gateway's SDK test installs the openai and @anthropic-ai/sdk packages with it")
	}
	dir := ""
	if c := os.Getenv("AIRLOCK_TEST_CACHE"); c != "" {
		dir = filepath.Join(c, "llm-sdks")
	} else {
		d, err := os.MkdirTemp("", "ale-sdk-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The sandbox's user is an unmapped host uid: it reads only what
	// everyone may read.
	_ = os.Chmod(dir, 0o755)
	stamp := filepath.Join(dir, "installed")
	want := openaiSDK + " " + anthropicSDK
	if b, err := os.ReadFile(stamp); err == nil && string(b) == want {
		return dir
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"--no-package-lock", "--no-update-notifier", openaiSDK, anthropicSDK)
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(dir, ".npm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", want, err, out)
	}
	if err := filepath.Walk(filepath.Join(dir, "node_modules"), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, fi.Mode().Perm()|0o444|map[bool]os.FileMode{true: 0o111}[fi.IsDir()])
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// llmUpstream is a local server speaking the providers' exact wire
// formats, from the model package's fixtures; model "endless" streams
// until the gateway cuts it. It remembers the auth headers it saw.
type llmUpstream struct {
	srv *httptest.Server

	mu sync.Mutex
	// auth is guarded by mu.
	auth []string
}

func newLLMUpstream(t *testing.T) *llmUpstream {
	u := &llmUpstream{}
	fixture := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "model", "testdata", name))
		if err != nil {
			t.Error(err)
		}
		return b
	}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization")+"|"+r.Header.Get("X-Api-Key"))
		u.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+gwOpenAIKey && r.Header.Get("X-Api-Key") != gwAnthropicKey {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var body struct {
			Model          string `json:"model"`
			Stream         bool   `json:"stream"`
			EncodingFormat string `json:"encoding_format"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		sse := func(b []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(b)
		}
		js := func(b []byte) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		}
		switch {
		case body.Model == "endless":
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			anthropic := strings.HasSuffix(r.URL.Path, "/messages")
			if anthropic {
				fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"endless\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
				fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
			}
			for i := 0; i < 100_000; i++ {
				var err error
				if anthropic {
					_, err = fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"more \"}}\n\n")
				} else {
					_, err = fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"endless\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"more \"},\"finish_reason\":null}]}\n\n")
				}
				if err != nil {
					return
				}
				f.Flush()
			}
		case strings.HasSuffix(r.URL.Path, "/chat/completions") && body.Stream:
			sse(fixture("chat/tool_calls.sse"))
		case strings.HasSuffix(r.URL.Path, "/chat/completions"):
			js(fixture("chat/completion.json"))
		case strings.HasSuffix(r.URL.Path, "/responses") && body.Stream:
			sse(fixture("responses/function_call.sse"))
		case strings.HasSuffix(r.URL.Path, "/responses"):
			js(fixture("responses/response.json"))
		case strings.HasSuffix(r.URL.Path, "/embeddings"):
			// The SDK asks for base64 (little-endian float32s) unless told
			// otherwise, as OpenAI serves it.
			vec := `[0.0023064255,-0.009327292,0.015797347]`
			if body.EncodingFormat == "base64" {
				vec = `"AAAAAAAAgD8AAABA"` // 0, 1, 2
			}
			js([]byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":` + vec + `}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`))
		case strings.HasSuffix(r.URL.Path, "/messages") && body.Stream:
			sse(fixture("anthropic/tool_use.sse"))
		case strings.HasSuffix(r.URL.Path, "/messages"):
			js(fixture("anthropic/message.json"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// sdkScript calls the gateway with both official SDKs, configured by the
// environment alone (OPENAI_BASE_URL and OPENAI_API_KEY, ANTHROPIC_BASE_URL
// and ANTHROPIC_API_KEY), and prints what it got as JSON. Its argument
// picks the calls: "calls" (every endpoint, whole and streamed, tool calls
// included, then a chat stream the budget cuts) or "anthropic-cut" (a
// messages stream the budget cuts, and a foreign token).
const sdkScript = `
const OpenAI = require("openai");
const Anthropic = require("@anthropic-ai/sdk");
const fs = require("fs");
const out = {};
const tools = [{type: "function", function: {name: "run_command", parameters: {type: "object", properties: {command: {type: "string"}}}}}];
const msgs = [{role: "user", content: "run the tests"}];
async function calls() {
  const openai = new OpenAI({maxRetries: 0});
  const c = await openai.chat.completions.create({model: "gpt-4o-mini", messages: msgs, tools});
  out.chat = c.choices[0].message.tool_calls.map(t => t.function.name + " " + t.function.arguments);
  out.chatUsage = c.usage.total_tokens;
  const s = await openai.chat.completions.create({model: "gpt-4o-mini", messages: msgs, tools, stream: true});
  const calls = {};
  let usage = null;
  for await (const chunk of s) {
    for (const ch of chunk.choices) for (const tc of ch.delta.tool_calls || []) {
      calls[tc.index] = calls[tc.index] || {name: "", args: ""};
      if (tc.function && tc.function.name) calls[tc.index].name += tc.function.name;
      if (tc.function && tc.function.arguments) calls[tc.index].args += tc.function.arguments;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  out.chatStream = Object.values(calls).map(c => c.name + " " + c.args);
  out.chatStreamUsage = usage;
  const r = await openai.responses.create({model: "gpt-4.1", input: "fix it"});
  out.responses = r.output_text;
  const rs = await openai.responses.create({model: "gpt-4.1", input: "fix it", stream: true});
  for await (const ev of rs) {
    if (ev.type === "response.output_item.done" && ev.item.type === "function_call") out.responsesCall = ev.item.name;
    if (ev.type === "response.completed") out.responsesStreamUsage = ev.response.usage.output_tokens;
  }
  const e = await openai.embeddings.create({model: "text-embedding-3-small", input: "hello"});
  out.embedding = e.data[0].embedding.length;
  out.models = (await openai.models.list()).data.map(m => m.id);
  const anthropic = new Anthropic({maxRetries: 0});
  const m = await anthropic.messages.create({model: "claude-sonnet-4-5", max_tokens: 1024, messages: msgs});
  out.messages = m.content.map(b => b.type === "tool_use" ? "tool " + b.name + " " + JSON.stringify(b.input) : b.text);
  const ms = anthropic.messages.stream({model: "claude-sonnet-4-5", max_tokens: 1024, messages: msgs});
  const fin = await ms.finalMessage();
  out.messagesStream = fin.content.map(b => b.type === "tool_use" ? "tool " + b.name + " " + JSON.stringify(b.input) : b.text);
  out.messagesStreamUsage = fin.usage.output_tokens;
  try {
    const cut = await openai.chat.completions.create({model: "endless", messages: msgs, stream: true});
    let n = 0;
    for await (const _ of cut) n++;
    out.chatCut = "no error after " + n + " chunks";
  } catch (err) {
    out.chatCut = {status: err.status === undefined ? null : err.status, code: err.code, type: err.type, message: err.message};
  }
}
async function anthropicCut() {
  const anthropic = new Anthropic({maxRetries: 0});
  try {
    const st = anthropic.messages.stream({model: "endless", max_tokens: 100000, messages: msgs});
    await st.finalMessage();
    out.messagesCut = "no error";
  } catch (err) {
    out.messagesCut = {type: err.error && err.error.error ? err.error.error.type : null, message: err.message};
  }
  try {
    await new Anthropic({apiKey: "alk_" + "A".repeat(43), maxRetries: 0}).messages.create({model: "claude-sonnet-4-5", max_tokens: 5, messages: msgs});
    out.badToken = "accepted";
  } catch (err) {
    out.badToken = {status: err.status, type: err.error && err.error.error ? err.error.error.type : null};
  }
}
(async () => {
  if (process.argv[2] === "calls") await calls(); else await anthropicCut();
  out.envKeys = Object.keys(process.env).filter(k => /KEY|TOKEN|BASE_URL/.test(k)).sort();
  console.log(JSON.stringify(out));
})().catch(err => { console.error("script failed:", err); process.exit(2); });
`

// gwHost is the host side of the gateway test: token store, gateway, and
// a per-sandbox egress proxy whose Local handler is the gateway.
type gwHost struct {
	tokens *token.Store
	gw     *gateway.Gateway
	up     *llmUpstream

	mu sync.Mutex
	// calls is guarded by mu.
	calls []gateway.Call
}

// TestGatewaySDKs runs the official openai and @anthropic-ai/sdk packages
// inside real sandboxes against the LLM gateway, configured by environment
// alone (base URL and the run's token): whole and streamed calls of every
// endpoint, tool calls included, come through; a budget cut mid-stream is
// raised by each SDK; a foreign token is refused; and the real keys reach
// the upstream and never the sandbox (its environment, files, answers).
func TestGatewaySDKs(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needTool(t, "node")
	sdks := installSDKs(t)
	host := &gwHost{tokens: token.NewStore(nil), up: newLLMUpstream(t)}
	key := func(k string) func(context.Context) (secret.Value, error) {
		return func(context.Context) (secret.Value, error) { return secret.NewValue([]byte(k)), nil }
	}
	pol := &policy.LLM{
		Enabled: true, Models: []string{"gpt-4o-mini", "gpt-4.1", "text-embedding-3-small", "claude-sonnet-4-5", "endless"},
		MaxTokens: 12_000,
	}
	gw, err := gateway.New(gateway.Config{
		Tokens: host.tokens,
		Upstreams: map[string]gateway.Upstream{
			"openai":    {Kind: gateway.KindOpenAI, BaseURL: host.up.srv.URL + "/v1", Key: key(gwOpenAIKey)},
			"anthropic": {Kind: gateway.KindAnthropic, BaseURL: host.up.srv.URL, Key: key(gwAnthropicKey)},
		},
		Policy: func(context.Context, bridge.Identity) (*policy.LLM, error) { return pol, nil },
		Prices: price.Table{"*": {Input: 1_000_000, Output: 4_000_000}},
		Record: func(_ context.Context, _ bridge.Identity, c gateway.Call) (int64, error) {
			host.mu.Lock()
			defer host.mu.Unlock()
			host.calls = append(host.calls, c)
			return int64(len(host.calls)), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	host.gw = gw
	backend, err := linux.New(linux.Config{Executor: filepath.Join(filepath.Dir(airlockBin), "airlock-exec"), StateDir: filepath.Join(h.dir, "run")})
	if err != nil {
		t.Fatal(err)
	}

	var outs sync.Map
	for _, mode := range []string{"calls", "anthropic-cut"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			stdout := host.runSDKScript(t, h, backend, sdks, "run-"+mode, mode)
			outs.Store(mode, stdout)
			for _, k := range []string{gwOpenAIKey, gwAnthropicKey, "Zq7CANARYx9"} {
				if strings.Contains(stdout, k) {
					t.Errorf("the sandbox saw a provider key (%s):\n%s", k, stdout)
				}
			}
			var got map[string]any
			if err := json.Unmarshal([]byte(lastLine(stdout)), &got); err != nil {
				t.Fatalf("script output: %v\n%s", err, stdout)
			}
			var want map[string]string
			if mode == "calls" {
				want = map[string]string{
					"chat":                 `["run_command {\"command\":\"go test ./...\"}"]`,
					"chatUsage":            `99`,
					"chatStream":           `["run_command {\"command\":\"go test ./...\"}","read_file {\"path\": \"calc.go\"}"]`,
					"chatStreamUsage":      `null`, // not asked for: the gateway strips the usage chunk it asked for itself
					"responses":            `"Done: the sign is fixed."`,
					"responsesCall":        `"edit_file"`,
					"responsesStreamUsage": `150`,
					"embedding":            `3`,
					"models":               `["claude-sonnet-4-5","endless","gpt-4.1","gpt-4o-mini","text-embedding-3-small"]`,
					"messages":             `["I'll edit the file.","tool edit_file {\"path\":\"calc.go\",\"old\":\"a - b\",\"new\":\"a + b\"}"]`,
					"messagesStream":       `["Okay, let's run the tests first.","tool run_command {\"command\":\"go test ./...\",\"timeout_sec\":60}","tool list_dir {}"]`,
					"messagesStreamUsage":  `89`,
					"envKeys":              `["AIRLOCK_TOKEN","ANTHROPIC_API_KEY","ANTHROPIC_BASE_URL","OPENAI_API_KEY","OPENAI_BASE_URL"]`,
				}
			} else {
				want = map[string]string{
					"badToken": `{"status":401,"type":"authentication_error"}`,
					"envKeys":  `["AIRLOCK_TOKEN","ANTHROPIC_API_KEY","ANTHROPIC_BASE_URL","OPENAI_API_KEY","OPENAI_BASE_URL"]`,
				}
			}
			for k, v := range want {
				b, _ := json.Marshal(got[k])
				if string(b) != v {
					t.Errorf("%s = %s, want %s", k, b, v)
				}
			}
			cutKey, wantText := "chatCut", "token budget"
			if mode != "calls" {
				cutKey = "messagesCut"
			}
			cut, _ := got[cutKey].(map[string]any)
			msg, _ := cut["message"].(string)
			if !strings.Contains(msg, wantText) {
				t.Errorf("%s = %v: the SDK did not raise the budget cut", cutKey, got[cutKey])
			}
			if mode != "calls" && cut["type"] != "billing_error" {
				t.Errorf("messagesCut type = %v, want billing_error", cut["type"])
			}
		})
	}
	t.Cleanup(func() {
		// After both runs: the upstream saw only real keys, never a token.
		host.up.mu.Lock()
		defer host.up.mu.Unlock()
		for _, a := range host.up.auth {
			if strings.Contains(a, token.Prefix) || a != "Bearer "+gwOpenAIKey+"|" && a != "|"+gwAnthropicKey {
				t.Errorf("the upstream got auth %q", a)
			}
		}
		// Eight of the first sandbox (models is the gateway's own) and
		// one of the second (the foreign token goes nowhere).
		if len(host.up.auth) != 9 {
			t.Errorf("the upstream got %d calls, want 9", len(host.up.auth))
		}
		host.mu.Lock()
		defer host.mu.Unlock()
		cut := 0
		for _, c := range host.calls {
			if c.Event.Outcome == "budget_exhausted" && c.Exhausted != nil && c.Exhausted.Budget == "llm_tokens" {
				cut++
			}
		}
		if cut != 2 {
			t.Errorf("%d calls recorded as cut by the token budget, want 2", cut)
		}
	})
}

// runSDKScript starts an egress proxy for a new sandbox of run (the
// gateway its Local handler), creates the sandbox with the gateway's
// environment and the SDKs as its read-only workspace, runs the script there, and
// checks the sandbox's files hold no key. It returns the script's stdout.
func (g *gwHost) runSDKScript(t *testing.T, h *home, b sandbox.Backend, sdks, run, mode string) string {
	t.Helper()
	sbID := "sb-" + strings.ReplaceAll(mode, "-", "")
	id := bridge.Identity{Tenant: "acme", Run: run, Sandbox: sbID}
	tok, err := g.tokens.Issue(token.Scope{Tenant: id.Tenant, Run: id.Run, Sandbox: id.Sandbox, Purpose: gateway.Purpose}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.tokens.RevokeRun(id.Tenant, id.Run) })
	p, err := egress.New(egress.Config{Identity: id, Policy: &policy.Default().Network, Audit: egress.NewJSONLSink(io.Discard), Local: g.gw})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(h.dir, sbID+".sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(l)
	}()
	t.Cleanup(func() {
		_ = p.Close()
		<-done
	})
	const gwBase = "http://127.0.0.1:3128/llm/"
	sb := sandboxtest.Create(t, b, sandbox.Spec{
		ID:          sbID,
		Network:     sandbox.NetworkProxy,
		ProxySocket: sock,
		TrustedCAs:  p.CACertPEM(),
		// The SDKs are the workspace, read-only.
		Workspace:     sdks,
		WorkspaceMode: sandbox.WorkspaceRO,
		Env: []string{
			"NODE_PATH=/workspace/node_modules",
			"OPENAI_BASE_URL=" + gwBase + "openai/v1",
			"ANTHROPIC_BASE_URL=" + gwBase + "anthropic",
			"AIRLOCK_TOKEN=" + tok,
			// The SDKs read their key from these: the token is all the
			// sandbox has.
			"OPENAI_API_KEY=" + tok,
			"ANTHROPIC_API_KEY=" + tok,
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), commandWait)
	defer cancel()
	if err := sb.WriteFile(ctx, "/tmp/sdk.js", strings.NewReader(sdkScript), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := func(argv ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		proc, err := sb.Start(ctx, sandbox.Command{Argv: argv, Stdout: &stdout, Stderr: &stderr, Timeout: 2 * time.Minute})
		if err != nil {
			t.Fatalf("start %v: %v", argv, err)
		}
		res, err := proc.Wait(ctx)
		if err != nil {
			t.Fatalf("wait %v: %v", argv, err)
		}
		return stdout.String(), stderr.String(), res.ExitCode
	}
	stdout, stderr, code := sh("node", "/tmp/sdk.js", mode)
	if code != 0 {
		t.Fatalf("node exit %d\n--- stdout\n%s--- stderr\n%s", code, stdout, stderr)
	}
	// No file of the sandbox's own holds a key: search them for the keys'
	// mark (the host's system directories, shown read-only, are the
	// host's; the mark is in this command line, hence no /proc; grep
	// exits 1 when it finds nothing).
	found, _, _ := sh("sh", "-c", "grep -rlsF Zq7CANARYx9 /workspace /tmp /etc /home /root /run /var/tmp; echo exit=$?")
	if files, status, _ := strings.Cut(strings.TrimSpace(found), "exit="); strings.TrimSpace(files) != "" || status == "0" {
		t.Errorf("the sandbox's files hold a key mark:\n%s", found)
	}
	return stdout
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
