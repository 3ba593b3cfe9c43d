package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/mcp"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/ratelimit"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/tools"
)

// executorPath is the airlock-exec binary built for these tests.
var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// testPolicy denies rm, asks about commands starting with "ask", allows the
// rest.
const testPolicy = `
tools:
  run_command:
    rules:
      - when: args.command.contains("rm ")
        action: deny
        reason: no deleting here
      - when: args.command.startsWith("ask")
        action: ask
        reason: a person looks at these
`

// boxes is the test's Sandboxes: real sandboxes of a linux backend, with
// policies from a map by name ("" is testPolicy).
type boxes struct {
	t *testing.T
	b *linux.Backend

	mu      sync.Mutex
	created []sandbox.Sandbox
}

func newBoxes(t *testing.T) *boxes {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &boxes{t: t, b: b}
}

func (x *boxes) Create(ctx context.Context, _ auth.Principal, req mcp.CreateRequest) (*mcp.Box, error) {
	src := map[string]string{"": testPolicy, "strict": "tools:\n  default: deny\n", "approvers": testPolicy + "approvals:\n  approvers: [alice]\n", "ports": testPolicy + portsPolicy, "bigevents": testPolicy + "events:\n  max_size: 16k\n  kinds:\n    - name: blob\n"}[req.Policy]
	if src == "" {
		return nil, &mcp.RequestError{Msg: fmt.Sprintf("no policy %q", req.Policy)}
	}
	doc, err := policy.Parse([]byte(src))
	if err != nil {
		return nil, err
	}
	sb, err := x.b.Create(ctx, sandbox.Spec{})
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.created = append(x.created, sb)
	x.mu.Unlock()
	name := req.Policy
	if name == "" {
		name = "default"
	}
	return &mcp.Box{Sandbox: sb, Policy: doc, PolicyName: name, Destroy: sb.Destroy}, nil
}

func (x *boxes) all() []sandbox.Sandbox {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]sandbox.Sandbox(nil), x.created...)
}

// approver is the test's Approver: it hands each ask to the test, which
// decides through dec, as a person would; the MCP user's answers are
// kept.
type approver struct {
	asks chan mcp.Ask
	dec  chan mcp.Decision

	mu sync.Mutex
	// elicited are the answers Answer recorded (guarded by mu).
	elicited []mcp.Decision
	// ended are the sandboxes End was called for (guarded by mu).
	ended []string
}

func newApprover() *approver {
	return &approver{asks: make(chan mcp.Ask, 1), dec: make(chan mcp.Decision, 1)}
}

func (a *approver) Ask(ctx context.Context, q mcp.Ask, held func(string)) (mcp.Decision, error) {
	held("appr-1")
	a.asks <- q
	select {
	case d := <-a.dec:
		return d, nil
	case <-ctx.Done():
		return mcp.Decision{}, ctx.Err()
	}
}

func (a *approver) Request(_ context.Context, q mcp.Ask) (string, error) {
	a.asks <- q
	return "appr-1", nil
}

func (a *approver) Answer(ctx context.Context, _ mcp.Ask, id string, d *mcp.Decision) (mcp.Decision, error) {
	if id != "appr-1" {
		return mcp.Decision{}, fmt.Errorf("no approval %q", id)
	}
	if d != nil {
		a.mu.Lock()
		a.elicited = append(a.elicited, *d)
		a.mu.Unlock()
		return *d, nil
	}
	select {
	case d := <-a.dec:
		return d, nil
	case <-ctx.Done():
		return mcp.Decision{}, ctx.Err()
	}
}

func (a *approver) End(_ context.Context, _, sandbox string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = append(a.ended, sandbox)
}

// lockedBuffer is an audit sink the test reads while the server writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) records(t *testing.T) []mcp.Record {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []mcp.Record
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var r mcp.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type harness struct {
	srv   *mcp.Server
	boxes *boxes
	appr  *approver
	audit *lockedBuffer
	// progress receives the messages of progress notifications.
	progress chan string
	// logs receives the logging notifications.
	logs chan logMessage
	// elicit, when set, is the clients' elicitation handler (they
	// declare the capability).
	elicit func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)
	// protocol, when set, is the protocol version the clients ask for.
	protocol string
}

func newHarness(t *testing.T, o mcp.Options) *harness {
	h := &harness{boxes: newBoxes(t), appr: newApprover(), audit: &lockedBuffer{}, progress: make(chan string, 64), logs: make(chan logMessage, 256)}
	o.Sandboxes, o.Approver, o.Audit = h.boxes, h.appr, h.audit
	if o.ProgressInterval == 0 {
		o.ProgressInterval = 20 * time.Millisecond
	}
	h.srv = mcp.New(o)
	t.Cleanup(func() { h.srv.Close(context.Background()) })
	return h
}

func (h *harness) clientOptions() *sdk.ClientOptions {
	o := &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		select {
		case h.progress <- r.Params.Message:
		default:
		}
	}, ElicitationHandler: h.elicit}
	// Why: MCP logging is deprecated from protocol 2026-07-28 (SEP-2577)
	// but is what clients speak today; the push of sandbox events uses it.
	//lint:ignore SA1019 see above
	o.LoggingMessageHandler = func(_ context.Context, r *sdk.LoggingMessageRequest) { //nolint:staticcheck // see above
		select {
		case h.logs <- logMessage{Logger: r.Params.Logger, Data: r.Params.Data}:
		default:
		}
	}
	return o
}

// stdio connects a client over in-process pipes, as `airlock mcp` serves
// stdio.
func (h *harness) stdio(t *testing.T) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() {
		done <- h.srv.ServeStdio(context.Background(), st, auth.Principal{Tenant: "local", KeyID: "local-user", Scopes: []string{auth.ScopeAdmin}})
	}()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, h.clientOptions()).Connect(ctxT(t), ct, &sdk.ClientSessionOptions{ProtocolVersion: h.protocol})
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeStdio = %v", err)
		}
	})
	return cs
}

var testKeys = map[string]auth.Principal{
	"key-full":   {Tenant: "acme", KeyID: "key_full", Scopes: []string{auth.ScopeSandboxes}},
	"key-other":  {Tenant: "other", KeyID: "key_other", Scopes: []string{auth.ScopeSandboxes}},
	"key-narrow": {Tenant: "acme", KeyID: "key_narrow", Scopes: []string{auth.ScopeRunsRead}},
}

func testAuth(_ context.Context, h http.Header) (auth.Principal, error) {
	p, ok := testKeys[h.Get("X-API-Key")]
	if !ok {
		return auth.Principal{}, errors.New("unknown API key")
	}
	return p, nil
}

// keyed adds an API key header to every request, and the Host header
// host when set.
type keyed struct{ key, host string }

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-API-Key", k.key)
	if k.host != "" {
		r.Host = k.host
	}
	return http.DefaultTransport.RoundTrip(r)
}

// httpServer serves the Server's /mcp on loopback.
func (h *harness) httpServer(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/mcp", h.srv.Handler(testAuth))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

func (h *harness) httpClient(t *testing.T, url, key string) (*sdk.ClientSession, error) {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: keyed{key: key}}, MaxRetries: -1}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, h.clientOptions()).Connect(ctxT(t), tr, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, progress bool) (*sdk.CallToolResult, error) {
	t.Helper()
	p := &sdk.CallToolParams{Name: name, Arguments: args}
	if progress {
		p.SetProgressToken("tok-" + name)
	}
	return cs.CallTool(ctxT(t), p)
}

func mustCall(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := call(t, cs, name, args, false)
	if err != nil {
		t.Fatalf("CallTool(%s, %v) = %v", name, args, err)
	}
	return res
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestListTools(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	cs := h.stdio(t)
	res, err := cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatalf("ListTools = %v", err)
	}
	got := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		got[tl.Name] = tl
		if tl.Description == "" {
			t.Errorf("tool %s has no description", tl.Name)
		}
		if tl.Annotations == nil || tl.Annotations.DestructiveHint == nil || tl.Annotations.OpenWorldHint == nil {
			t.Errorf("tool %s: annotations %+v, want every hint set", tl.Name, tl.Annotations)
		}
	}
	for _, name := range []string{"create_sandbox", "destroy_sandbox", "list_sandboxes"} {
		if got[name] == nil {
			t.Errorf("tools/list has no %s", name)
		}
	}
	// The sandbox tools are the engine's, with their own schemas, and
	// claim what their effects are.
	for _, tl := range tools.SandboxTools(tools.Limits{}) {
		sp := tl.Spec()
		m := got[sp.Name]
		if m == nil {
			t.Errorf("tools/list has no %s", sp.Name)
			continue
		}
		if m.Description != sp.Description {
			t.Errorf("%s: description %q, want the engine's %q", sp.Name, m.Description, sp.Description)
		}
		var want map[string]any
		_ = json.Unmarshal(sp.Schema, &want)
		schema, _ := m.InputSchema.(map[string]any)
		props, _ := schema["properties"].(map[string]any)
		for p := range want["properties"].(map[string]any) {
			if props[p] == nil {
				t.Errorf("%s: schema lacks the engine's argument %s", sp.Name, p)
			}
		}
		if props[mcp.SandboxArg] == nil {
			t.Errorf("%s: schema lacks the sandbox argument", sp.Name)
		}
		mutates := tl.Mutating() || tl.External()
		if m.Annotations.ReadOnlyHint == mutates {
			t.Errorf("%s: readOnlyHint = %v, but the tool says Mutating=%v External=%v", sp.Name, m.Annotations.ReadOnlyHint, tl.Mutating(), tl.External())
		}
	}
}

func TestRunCommandAndFiles(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	cs := h.stdio(t)

	// Without a sandbox, the first call creates the session's first one.
	res := mustCall(t, cs, "run_command", map[string]any{"command": "echo hello; echo oops >&2; exit 3"})
	if !res.IsError || !strings.Contains(text(res), "exit status 3") || !strings.Contains(text(res), "hello") || !strings.Contains(text(res), "oops") {
		t.Errorf("run_command = %v %q, want an error with exit status 3 and both streams", res.IsError, text(res))
	}
	st, _ := res.StructuredContent.(map[string]any)
	if st["exit_code"] != float64(3) || st["sandbox"] == "" {
		t.Errorf("structured = %v, want exit_code 3 and the sandbox", st)
	}
	id, _ := st["sandbox"].(string)

	res = mustCall(t, cs, "write_file", map[string]any{"path": "notes.txt", "content": "one\ntwo\n", "sandbox": id})
	if res.IsError {
		t.Fatalf("write_file = %q", text(res))
	}
	res = mustCall(t, cs, "edit_file", map[string]any{"path": "notes.txt", "old": "two", "new": "three"})
	if res.IsError {
		t.Fatalf("edit_file = %q", text(res))
	}
	if res = mustCall(t, cs, "read_file", map[string]any{"path": "/workspace/notes.txt"}); text(res) != "one\nthree\n" {
		t.Errorf("read_file = %q, want the edited file", text(res))
	}
	if res = mustCall(t, cs, "list_dir", map[string]any{"path": "."}); !strings.Contains(text(res), "notes.txt") {
		t.Errorf("list_dir = %q, want notes.txt", text(res))
	}
	if res = mustCall(t, cs, "search", map[string]any{"pattern": "thr+ee"}); !strings.Contains(text(res), "notes.txt") {
		t.Errorf("search = %q, want a match in notes.txt", text(res))
	}

	res = mustCall(t, cs, "create_sandbox", map[string]any{"policy": "strict"})
	id2, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)
	if res.IsError || id2 == "" || id2 == id {
		t.Fatalf("create_sandbox = %q, want a second sandbox", text(res))
	}
	res = mustCall(t, cs, "list_sandboxes", nil)
	if !strings.Contains(text(res), id) || !strings.Contains(text(res), id2) {
		t.Errorf("list_sandboxes = %q, want both", text(res))
	}
	// The second sandbox's policy decides its calls.
	res = mustCall(t, cs, "read_file", map[string]any{"path": "x", "sandbox": id2})
	if !res.IsError || !strings.Contains(text(res), "tools.default") {
		t.Errorf("read_file under the strict policy = %q, want a denial by tools.default", text(res))
	}
	res = mustCall(t, cs, "destroy_sandbox", map[string]any{"sandbox": id2})
	if res.IsError {
		t.Fatalf("destroy_sandbox = %q", text(res))
	}
	res = mustCall(t, cs, "read_file", map[string]any{"path": "x", "sandbox": id2})
	if !res.IsError || !strings.Contains(text(res), "no sandbox") {
		t.Errorf("read_file in a destroyed sandbox = %q, want no sandbox", text(res))
	}
	res = mustCall(t, cs, "create_sandbox", map[string]any{"policy": "nope"})
	if !res.IsError || !strings.Contains(text(res), `no policy "nope"`) {
		t.Errorf("create_sandbox(nope) = %q, want the provider's message", text(res))
	}
}

func TestPolicyDecides(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	cs := h.stdio(t)
	mustCall(t, cs, "write_file", map[string]any{"path": "keep", "content": "x"})

	res := mustCall(t, cs, "run_command", map[string]any{"command": "rm -f keep"})
	if !res.IsError || !strings.Contains(text(res), "tools.run_command.rules[0]") || !strings.Contains(text(res), "no deleting here") {
		t.Errorf("denied run_command = %q, want the rule and reason", text(res))
	}
	if res = mustCall(t, cs, "read_file", map[string]any{"path": "keep"}); text(res) != "x" {
		t.Errorf("after a denied rm, read_file = %q, want the file kept", text(res))
	}

	// ask: held until the approver decides; the client sees the
	// approval's id in progress notifications.
	for _, tc := range []struct {
		name string
		dec  mcp.Decision
		want string
	}{
		{"approved", mcp.Decision{Approved: true, By: "ops"}, "ran"},
		{"denied", mcp.Decision{Approved: false, By: "ops", Reason: "not today"}, "denied by ops: not today"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type out struct {
				res *sdk.CallToolResult
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := call(t, cs, "run_command", map[string]any{"command": "ask=1; echo ran"}, true)
				done <- out{res, err}
			}()
			q := <-h.appr.asks
			if q.Tool != "run_command" || !strings.Contains(string(q.Args), "echo ran") || q.Rule != "tools.run_command.rules[1]" {
				t.Errorf("ask = %+v, want run_command by rule 1", q)
			}
			for msg := range h.progress {
				if strings.Contains(msg, "appr-1") {
					break
				}
			}
			h.appr.dec <- tc.dec
			o := <-done
			if o.err != nil {
				t.Fatalf("CallTool = %v", o.err)
			}
			if !strings.Contains(text(o.res), tc.want) || o.res.IsError == tc.dec.Approved {
				t.Errorf("held run_command = %v %q, want %q", o.res.IsError, text(o.res), tc.want)
			}
		})
	}

	var outcomes []string
	for _, r := range h.audit.records(t) {
		if r.Tool == "run_command" {
			outcomes = append(outcomes, r.Decision+"/"+r.Outcome)
		}
	}
	want := []string{"deny/denied", "ask/ok", "ask/denied"}
	if strings.Join(outcomes, " ") != strings.Join(want, " ") {
		t.Errorf("audit of run_command = %v, want %v", outcomes, want)
	}
}

// TestElicitation: a client that declares elicitation is asked about a
// held call with a yes/no form naming the action and the rule; its answer
// is recorded as the decision of mcp-user. Under a policy that names its
// approvers the form is never shown, and the approval waits for them.
func TestElicitation(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		answer       map[string]any
		action       string
		wantForm     bool
		want         string
		protocol     string
	}{
		{"yes", "", map[string]any{"approve": true}, "accept", true, "ran", ""},
		// A client of a protocol before multi round-trip requests gets
		// an elicitation request during the call instead.
		{"yes, 2025-11-25", "", map[string]any{"approve": true}, "accept", true, "ran", "2025-11-25"},
		{"no", "", map[string]any{"approve": false}, "accept", true, "denied by mcp-user: the MCP user said no", ""},
		{"declined", "", nil, "decline", true, "denied by mcp-user: the MCP user declined", ""},
		{"approvers named", "approvers", map[string]any{"approve": true}, "accept", false, "denied by alice: no", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, mcp.Options{})
			h.protocol = tc.protocol
			forms := make(chan *sdk.ElicitParams, 1)
			h.elicit = func(_ context.Context, r *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				forms <- r.Params
				return &sdk.ElicitResult{Action: tc.action, Content: tc.answer}, nil
			}
			cs := h.stdio(t)
			id := ""
			if tc.policy != "" {
				res := mustCall(t, cs, "create_sandbox", map[string]any{"policy": tc.policy})
				id = res.StructuredContent.(map[string]any)["sandbox"].(string)
			}
			done := make(chan *sdk.CallToolResult, 1)
			go func() {
				res, err := call(t, cs, "run_command", map[string]any{"command": "ask=1; echo ran", "sandbox": id}, true)
				if err != nil {
					t.Errorf("CallTool = %v", err)
				}
				done <- res
			}()
			<-h.appr.asks
			if tc.wantForm {
				f := <-forms
				for _, want := range []string{"run_command", "echo ran", "tools.run_command.rules[1]", "a person looks at these", "appr-1"} {
					if !strings.Contains(f.Message, want) {
						t.Errorf("form message %q lacks %q", f.Message, want)
					}
				}
			} else {
				h.appr.dec <- mcp.Decision{By: "alice", Reason: "no"}
			}
			res := <-done
			if res == nil || !strings.Contains(text(res), tc.want) {
				t.Fatalf("held run_command = %v, want %q", res, tc.want)
			}
			select {
			case f := <-forms:
				if !tc.wantForm {
					t.Errorf("a form was shown under a policy naming its approvers: %q", f.Message)
				}
			default:
			}
			h.appr.mu.Lock()
			elicited := h.appr.elicited
			h.appr.mu.Unlock()
			if tc.wantForm && (len(elicited) != 1 || elicited[0].By != mcp.ByMCPUser) {
				t.Errorf("answers recorded = %+v, want one by %s", elicited, mcp.ByMCPUser)
			}
			if !tc.wantForm && len(elicited) != 0 {
				t.Errorf("answers recorded = %+v, want none", elicited)
			}
			if id != "" {
				mustCall(t, cs, "destroy_sandbox", map[string]any{"sandbox": id})
				h.appr.mu.Lock()
				ended := h.appr.ended
				h.appr.mu.Unlock()
				if len(ended) != 1 || ended[0] != id {
					t.Errorf("End was called for %v, want %s once it was destroyed", ended, id)
				}
			}
		})
	}
}

func TestAskWithoutApproverIsDenied(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	h.srv = mcp.New(mcp.Options{Sandboxes: h.boxes})
	t.Cleanup(func() { h.srv.Close(context.Background()) })
	cs := h.stdio(t)
	res := mustCall(t, cs, "run_command", map[string]any{"command": "ask; touch ran"})
	if !res.IsError || !strings.Contains(text(res), "cannot hold approvals") {
		t.Errorf("ask without an approver = %q, want a denial saying so", text(res))
	}
	if res = mustCall(t, cs, "list_dir", map[string]any{"path": "."}); strings.Contains(text(res), "ran") {
		t.Errorf("list_dir = %q: the asked command ran", text(res))
	}
}

func TestBadArguments(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	cs := h.stdio(t)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_command", map[string]any{"cmd": "ls"}, "cmd"},
		{"run_command", map[string]any{"command": 7}, "command"},
		{"run_command", map[string]any{"command": "true", "sandbox": 3}, "sandbox must be a string"},
		{"read_file", map[string]any{}, "path"},
		{"create_sandbox", map[string]any{"memory": 5}, "memory"},
		{"create_sandbox", map[string]any{"colour": "red"}, "colour"},
		{"destroy_sandbox", map[string]any{}, "sandbox is required"},
	} {
		_, err := call(t, cs, tc.tool, tc.args, false)
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, tc.want) {
			t.Errorf("CallTool(%s, %v) = %v, want an invalid-params error naming %q", tc.tool, tc.args, err, tc.want)
		}
	}
	if n := len(h.boxes.all()); n != 0 {
		t.Errorf("bad calls created %d sandboxes, want none", n)
	}
}

func TestProgressWhileRunning(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	cs := h.stdio(t)
	mustCall(t, cs, "list_dir", map[string]any{"path": "."}) // the session's sandbox
	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		res, err := call(t, cs, "run_command", map[string]any{"command": "while [ ! -e go ]; do sleep 0.01; done; echo went"}, true)
		if err != nil {
			t.Errorf("CallTool = %v", err)
		}
		done <- res
	}()
	msg := <-h.progress // the command runs until the test answers
	if !strings.Contains(msg, "run_command running") {
		t.Errorf("progress = %q, want run_command running", msg)
	}
	mustCall(t, cs, "write_file", map[string]any{"path": "go", "content": ""})
	if res := <-done; res == nil || res.IsError || !strings.Contains(text(res), "went") {
		t.Errorf("run_command = %v, want went", res)
	}
}

func TestCapsAndRedacts(t *testing.T) {
	h := newHarness(t, mcp.Options{
		Limits: tools.Limits{MaxContent: 1024},
		Redact: func(s string) string { return strings.ReplaceAll(s, "s3cr3t", "[redacted]") },
	})
	cs := h.stdio(t)
	res := mustCall(t, cs, "run_command", map[string]any{"command": "echo s3cr3t; seq 1 5000"})
	got := text(res)
	if strings.Contains(got, "s3cr3t") || !strings.Contains(got, "[redacted]") {
		t.Errorf("run_command = %q, want the secret redacted", got[:min(len(got), 200)])
	}
	if !strings.Contains(got, "bytes truncated") || len(got) > 2048 || !strings.Contains(got, "5000") {
		t.Errorf("run_command of 5000 lines = %d bytes, want a capped result with its tail and a truncation note", len(got))
	}
	if st, _ := res.StructuredContent.(map[string]any); st["truncated_bytes"] == nil {
		t.Errorf("structured = %v, want truncated_bytes", st)
	}
	for _, r := range h.audit.records(t) {
		if strings.Contains(r.Detail, "s3cr3t") {
			t.Errorf("audit record %+v holds the secret", r)
		}
	}
}

func TestSessionEndDestroysSandboxes(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	ct, st := sdk.NewInMemoryTransports()
	done := make(chan error, 1)
	go func() {
		done <- h.srv.ServeStdio(context.Background(), st, auth.Principal{Tenant: "local", Scopes: []string{auth.ScopeSandboxes}})
	}()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctxT(t), ct, nil)
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	mustCall(t, cs, "create_sandbox", nil)
	mustCall(t, cs, "create_sandbox", nil)
	_ = cs.Close()
	if err := <-done; err != nil {
		t.Errorf("ServeStdio = %v", err)
	}
	all := h.boxes.all()
	if len(all) != 2 {
		t.Fatalf("created %d sandboxes, want 2", len(all))
	}
	ended := map[string]string{}
	for _, r := range h.audit.records(t) {
		if r.Tool == "session.end" {
			ended[r.Sandbox] = r.Outcome
		}
	}
	ctx := ctxT(t)
	for _, sb := range all {
		if ended[sb.ID()] != "ok" {
			t.Errorf("sandbox %s: session.end outcome %q, want ok", sb.ID(), ended[sb.ID()])
		}
		select {
		case <-sb.Done():
		case <-ctx.Done():
			t.Errorf("sandbox %s outlived its session", sb.ID())
		}
	}
}

func TestHTTP(t *testing.T) {
	h := newHarness(t, mcp.Options{})
	url := h.httpServer(t)

	if _, err := h.httpClient(t, url, "wrong"); err == nil {
		t.Errorf("Connect with a wrong key succeeded")
	}

	cs, err := h.httpClient(t, url, "key-full")
	if err != nil {
		t.Fatalf("Connect = %v", err)
	}
	res, err := call(t, cs, "run_command", map[string]any{"command": "echo over http"}, true)
	if err != nil || res.IsError || !strings.Contains(text(res), "over http") {
		t.Fatalf("run_command over HTTP = %v, %v", res, err)
	}
	id, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)

	narrow, err := h.httpClient(t, url, "key-narrow")
	if err != nil {
		t.Fatalf("Connect(narrow) = %v", err)
	}
	_, err = call(t, narrow, "run_command", map[string]any{"command": "true"}, false)
	var we *jsonrpc.Error
	if !errors.As(err, &we) || !strings.Contains(we.Message, `"sandboxes" scope`) {
		t.Errorf("run_command with a narrow key = %v, want a forbidden error naming the scope", err)
	}

	// Behind a reverse proxy on the same machine, the Host is the
	// proxy's name: the key is what authenticates.
	tr := &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: keyed{key: "key-full", host: "airlock.example.com"}}, MaxRetries: -1}
	proxied, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctxT(t), tr, nil)
	if err != nil {
		t.Fatalf("Connect with Host airlock.example.com = %v", err)
	}
	if res := mustCall(t, proxied, "list_sandboxes", nil); res.IsError {
		t.Errorf("list_sandboxes behind a proxy = %q", text(res))
	}
	_ = proxied.Close()

	// Another tenant's client does not see acme's sandbox.
	other, err := h.httpClient(t, url, "key-other")
	if err != nil {
		t.Fatalf("Connect(other) = %v", err)
	}
	res = mustCall(t, other, "read_file", map[string]any{"path": "x", "sandbox": id})
	if !res.IsError || !strings.Contains(text(res), "no sandbox") {
		t.Errorf("read_file in another tenant's sandbox = %q, want no sandbox", text(res))
	}

	var keys []string
	for _, r := range h.audit.records(t) {
		if r.Tool == "run_command" {
			keys = append(keys, r.KeyID+"/"+r.Outcome)
		}
	}
	if strings.Join(keys, " ") != "key_full/ok key_narrow/forbidden" {
		t.Errorf("audit = %v, want the full key's call ok and the narrow one's forbidden", keys)
	}
}

// TestRateLimit: /mcp answers a key past its rate 429 with Retry-After,
// before the protocol; another key has its own bucket; an address whose
// authentications keep failing is limited too.
func TestRateLimit(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now } // never moves: no bucket refills
	h := newHarness(t, mcp.Options{RateLimit: ratelimit.New(1, 3, clock), FailLimit: ratelimit.New(1, 2, clock)})
	url := h.httpServer(t)
	post := func(key string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("X-API-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	for i := range 3 {
		if res := post("key-full"); res.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("request %d of a burst of 3 = 429", i+1)
		}
	}
	res := post("key-full")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Errorf("request 4 = %d, Retry-After %q, want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if res := post("key-other"); res.StatusCode == http.StatusTooManyRequests {
		t.Errorf("another key's first request = 429, want its own bucket")
	}
	for i := range 2 {
		if res := post("wrong"); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("wrong key %d = %d, want 401", i+1, res.StatusCode)
		}
	}
	if res := post("wrong"); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a third failed authentication = %d, want 429", res.StatusCode)
	}
}

// TestSandboxEvents: what code in an MCP sandbox reports through
// airlock-event is listed by sandbox_events, validated and capped by the
// sandbox's policy, marked as the sandbox's; refused lines are counted;
// another session's sandbox is not reachable.
func TestSandboxEvents(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h := newHarness(t, mcp.Options{Events: db})
	url := h.httpServer(t)
	cs, err := h.httpClient(t, url, "key-full")
	if err != nil {
		t.Fatal(err)
	}
	res := mustCall(t, cs, "run_command", map[string]any{"command": `airlock-event progress --pct 40 x && airlock-event log --level warn "careful" && echo 'not json' | airlock-event lines && airlock-event emit bogus '{}' && echo done`})
	if res.IsError || !strings.Contains(text(res), "done") {
		t.Fatalf("run_command = %q", text(res))
	}
	id, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)

	// The lines reach the host asynchronously: ask until both are there.
	var st map[string]any
	deadline := time.Now().Add(30 * time.Second)
	for {
		res = mustCall(t, cs, "sandbox_events", map[string]any{"sandbox": id})
		if res.IsError {
			t.Fatalf("sandbox_events = %q", text(res))
		}
		st, _ = res.StructuredContent.(map[string]any)
		evs, _ := st["events"].([]any)
		dropped, _ := st["dropped"].(map[string]any)
		if len(evs) >= 2 && dropped["malformed"] != nil && dropped["unknown_kind"] != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox_events never had both events and the refusals: %q", text(res))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(text(res), "untrusted data") {
		t.Errorf("text = %q, want it to say the events are untrusted data", text(res))
	}
	evs := st["events"].([]any)
	if len(evs) != 2 {
		t.Fatalf("events = %v, want 2", evs)
	}
	first := evs[0].(map[string]any)["event"].(map[string]any)
	if first["kind"] != "progress" || first["pct"] != float64(40) || first["message"] != "x" || first["source"] != "sandbox" || first["sandbox"] != id {
		t.Errorf("first event = %v, want progress 40%% x from sandbox %s", first, id)
	}
	second := evs[1].(map[string]any)
	if second["event"].(map[string]any)["kind"] != "log" || second["seq"] != float64(2) {
		t.Errorf("second = %v, want the log event, seq 2", second)
	}
	dropped := st["dropped"].(map[string]any)
	if dropped["malformed"] != float64(1) || dropped["unknown_kind"] != float64(1) {
		t.Errorf("dropped = %v, want 1 malformed and 1 unknown kind", dropped)
	}
	// after: only newer ones.
	res = mustCall(t, cs, "sandbox_events", map[string]any{"sandbox": id, "after": 1})
	if got := res.StructuredContent.(map[string]any)["events"].([]any); len(got) != 1 {
		t.Errorf("after 1: %v, want the second event only", got)
	}
	res = mustCall(t, cs, "sandbox_events", map[string]any{"sandbox": id, "limit": 1})
	if got := res.StructuredContent.(map[string]any)["events"].([]any); len(got) != 1 || got[0].(map[string]any)["seq"] != float64(1) {
		t.Errorf("limit 1: %v, want the first event only", got)
	}
	if _, err := call(t, cs, "sandbox_events", map[string]any{"sandbox": id, "limit": 5000}, false); err == nil {
		t.Errorf("limit 5000 accepted, want an invalid-params error")
	}
	// Another tenant's session has no such sandbox.
	other, err := h.httpClient(t, url, "key-other")
	if err != nil {
		t.Fatal(err)
	}
	res = mustCall(t, other, "sandbox_events", map[string]any{"sandbox": id})
	if !res.IsError || !strings.Contains(text(res), "no sandbox") {
		t.Errorf("another session's sandbox_events = %q, want no sandbox", text(res))
	}
	// The server's own view serves the native API.
	if l, ok := h.srv.Events("acme", id); !ok || len(l.After(0, 0).Events) != 2 {
		t.Errorf("Server.Events(acme, %s) = %v, want the log of 2 events", id, ok)
	}
	if _, ok := h.srv.Events("other", id); ok {
		t.Errorf("Server.Events of another tenant found the sandbox")
	}
	// Each is kept in the store, and is an audit line of source sandbox.
	rows, err := db.SandboxEvents(context.Background(), "acme", id, 0, 0)
	if err != nil || len(rows) != 2 || rows[0].Seq != 1 || !strings.Contains(string(rows[0].Event), `"message":"x"`) {
		t.Errorf("stored = %+v, %v; want the 2 events", rows, err)
	}
	var audited int
	for _, r := range h.audit.records(t) {
		if r.Tool == "sandbox.event" && r.Source == "sandbox" && r.Sandbox == id && r.Tenant == "acme" {
			audited++
		}
	}
	if audited != 2 {
		t.Errorf("%d audit lines of source sandbox, want 2", audited)
	}
}

// logMessage is a logging notification a client got.
type logMessage struct {
	Logger string
	Data   any
}

// TestSandboxEventsPushed: a client that asked for log messages
// (logging/setLevel) gets each event its sandbox reports pushed as a
// notifications/message of logger airlock.sandbox.events, marked as
// untrusted data; an event larger than a notification carries is pushed
// as its kind, size and seq only. Over Streamable HTTP at the protocol
// version the SDK's client asks for, and over stdio at 2025-06-18.
func TestSandboxEventsPushed(t *testing.T) {
	for _, transport := range []string{"http", "stdio 2025-06-18"} {
		t.Run(transport, func(t *testing.T) {
			h := newHarness(t, mcp.Options{})
			var cs *sdk.ClientSession
			if transport == "http" {
				var err error
				if cs, err = h.httpClient(t, h.httpServer(t), "key-full"); err != nil {
					t.Fatal(err)
				}
			} else {
				h.protocol = "2025-06-18"
				cs = h.stdio(t)
			}
			testSandboxEventsPushed(t, h, cs)
		})
	}
}

func testSandboxEventsPushed(t *testing.T, h *harness, cs *sdk.ClientSession) {
	//lint:ignore SA1019 the push of sandbox events is logging notifications (deprecated from 2026-07-28)
	if err := cs.SetLoggingLevel(ctxT(t), &sdk.SetLoggingLevelParams{Level: "info"}); err != nil { //nolint:staticcheck // as above
		t.Fatal(err)
	}
	// A policy that lets events be larger than a notification carries.
	if res := mustCall(t, cs, "create_sandbox", map[string]any{"policy": "bigevents"}); res.IsError {
		t.Fatalf("create_sandbox = %q", text(res))
	}
	big := strings.Repeat("b", mcp.PushMaxEvent+100)
	res := mustCall(t, cs, "run_command", map[string]any{"command": `airlock-event progress --pct 40 pushed && airlock-event emit blob '{"b":"` + big + `"}' && echo done`})
	if res.IsError || !strings.Contains(text(res), "done") {
		t.Fatalf("run_command = %q", text(res))
	}
	id, _ := res.StructuredContent.(map[string]any)["sandbox"].(string)
	var got []map[string]any
	timeout := time.After(30 * time.Second)
	for len(got) < 2 {
		select {
		case p := <-h.logs:
			if p.Logger != mcp.PushLogger {
				continue
			}
			b, _ := json.Marshal(p.Data)
			var d map[string]any
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("data %s: %v", b, err)
			}
			got = append(got, d)
		case <-timeout:
			t.Fatalf("pushed %d sandbox events in 30s, want 2: %v", len(got), got)
		}
	}
	for _, d := range got {
		if d["untrusted"] != true || !strings.Contains(fmt.Sprint(d["note"]), "untrusted data") || d["sandbox"] != id {
			t.Errorf("pushed %v: want it marked untrusted, of sandbox %s", d, id)
		}
	}
	ev, _ := got[0]["event"].(map[string]any)
	if ev["kind"] != "progress" || ev["message"] != "pushed" || ev["source"] != "sandbox" || got[0]["seq"] != float64(1) {
		t.Errorf("first pushed = %v, want progress pushed, seq 1", got[0])
	}
	ev, _ = got[1]["event"].(map[string]any)
	if ev["kind"] != "blob" || len(ev) != 1 || got[1]["omitted"] == nil || got[1]["bytes"].(float64) <= mcp.PushMaxEvent {
		t.Errorf("second pushed = %v, want the log event's kind and size only", got[1])
	}
}
