package e2b_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/interp"
)

// needKernel skips t when the host root's Python has no IPython kernel
// (scripts/ci-deps.sh installs Debian's).
func needKernel(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client").Run(); err != nil {
		t.Skip("needs Debian's python3-ipykernel and python3-jupyter-client (scripts/ci-deps.sh)")
	}
}

// TestCodeInterpreterTemplate: Sandbox.create('code-interpreter-v1'), as
// @e2b/code-interpreter asks, makes a sandbox on the host's root whose
// code interpreter server was up before create returned; code run
// through it (from inside the sandbox, on its loopback) keeps its state.
// A tenant's own template of the name would win (TestStoredTemplates
// covers that order for stored templates before policies).
func TestCodeInterpreterTemplate(t *testing.T) {
	needKernel(t)
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", map[string]any{"templateID": interp.Name})
	post := func(code string) interp.Execution {
		t.Helper()
		script := `import json, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:49999/execute", data=json.dumps({"code": sys.argv[1]}).encode(), headers={"Content-Type": "application/json"})
sys.stdout.write(urllib.request.urlopen(req).read().decode())`
		r := parseRun(t, h.stream(s, "process.Process/Start",
			map[string]any{"process": map[string]any{"cmd": "python3", "args": []string{"-c", script, code}}, "stdin": false}, nil))
		if r.exit != 0 {
			t.Fatalf("POST /execute %q: exit %d, stderr %s", code, r.exit, r.stderr)
		}
		ex, err := interp.Decode(strings.NewReader(r.stdout), interp.Limits{})
		if err != nil || !ex.Ended {
			t.Fatalf("Decode(%q) = %+v, %v", r.stdout, ex, err)
		}
		return ex
	}
	post("x = 41")
	ex := post("x + 1")
	if len(ex.Results) != 1 || !ex.Results[0].Main || ex.Results[0].Text != "42" {
		t.Errorf("x + 1: results %+v, want the main result 42", ex.Results)
	}
}

// codeInterpreterSDK is the @e2b/code-interpreter release the test drives.
const codeInterpreterSDK = "@e2b/code-interpreter@2.8.0"

// TestCodeInterpreterSDK drives the official @e2b/code-interpreter SDK,
// unchanged, against the API on loopback (testdata/interp.js): create's
// envs and runCode's (for the one call) are the kernel's environment, state
// persists between runCode calls, the stdout and stderr callbacks fire, a
// matplotlib chart comes back as a PNG result, an exception is
// execution.error, a timeout interrupts the kernel and the context goes
// on, contexts are made with a cwd, listed, restarted and removed, bash,
// JavaScript and TypeScript run in contexts of their own (state kept, the
// streams, a failing command's status as the error), and a language with
// no kernel is an error that says so.
func TestCodeInterpreterSDK(t *testing.T) {
	needRoot(t)
	needKernel(t)
	node := needNode(t)
	dir := installNPM(t, "e2b-code-interpreter", codeInterpreterSDK)
	h := newHarness(t, harnessOptions{})
	script, err := filepath.Abs("testdata/interp.js")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Text     string   `json:"text"`
		Stdout   []string `json:"stdout"`
		Stderr   []string `json:"stderr"`
		Logs     struct{ Stdout, Stderr []string }
		PNG      bool       `json:"png"`
		OnResult [][]string `json:"onResult"`
		Error    *struct {
			Name, Value string
			Traceback   bool
		} `json:"error"`
		Timeout           string `json:"timeout"`
		AfterTimeout      string `json:"afterTimeout"`
		Ctx               struct{ Language, Cwd string }
		CtxCwd            string `json:"ctxCwd"`
		Listed            bool   `json:"listed"`
		CtxY              string `json:"ctxY"`
		AfterRestart      string `json:"afterRestart"`
		ListedAfterRemove bool   `json:"listedAfterRemove"`
		Bash              struct{ Stdout, Logs []string }
		BashError         *struct{ Name, Value, Stderr string }
		JS                struct {
			Text   string
			Stdout []string
		}
		JSError      string `json:"jsError"`
		TSCtx        string `json:"tsCtx"`
		TS           string `json:"ts"`
		R            string `json:"r"`
		CreateEnv    string `json:"createEnv"`
		CallEnv      string `json:"callEnv"`
		CallEnvAfter string `json:"callEnvAfter"`
		Displayed    []displayed
	}
	h.runNode(t, node, 5*time.Minute, "alpha", &r, script, filepath.Join(dir, "node_modules", "@e2b", "code-interpreter"))
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: %+v", what, r)
		}
	}
	check("create's envs", r.CreateEnv == "from create")
	check("runCode's envs for the one call", r.CallEnv == "for one call" && r.CallEnvAfter == "unset")
	check("state persists: x+1", r.Text == "2")
	check("onStdout, onStderr", slices.Equal(r.Stdout, []string{"out\n"}) && slices.Equal(r.Stderr, []string{"err\n"}))
	check("logs", slices.Equal(r.Logs.Stdout, r.Stdout) && slices.Equal(r.Logs.Stderr, r.Stderr))
	check("chart as PNG", r.PNG && len(r.OnResult) > 0 && slices.Contains(r.OnResult[0], "png"))
	check("display formats: html, markdown, svg, json, latex; the last value the main result", displayedFormats(r.Displayed))
	check("exception", r.Error != nil && r.Error.Name == "ValueError" && r.Error.Value == "bad value" && r.Error.Traceback)
	check("timeout", r.Timeout == "TimeoutError" && r.AfterTimeout == "10")
	check("context with cwd", r.Ctx.Language == "python" && r.Ctx.Cwd == "/tmp" && r.CtxCwd == "/tmp" && r.Listed && r.CtxY == "5")
	check("restart, remove", r.AfterRestart == "NameError" && !r.ListedAfterRemove)
	check("bash: state, onStdout", slices.Equal(r.Bash.Stdout, []string{"42 /tmp\n"}) && slices.Equal(r.Bash.Logs, r.Bash.Stdout))
	check("bash: a failing command", r.BashError != nil && r.BashError.Name == "ExitError" && r.BashError.Value == "exit status 2" && strings.Contains(r.BashError.Stderr, "nonexistent"))
	check("javascript", r.JS.Text == "21" && slices.Equal(r.JS.Stdout, []string{"from js\n"}) && r.JSError == "TypeError")
	check("typescript", r.TSCtx == "typescript" && r.TS == "42")
	check("a language with no kernel", strings.Contains(r.R, "no r kernel"))
}

// displayed is a result of runCode as the SDK's Result has it.
type displayed struct {
	Formats  []string
	Main     bool
	HTML     string
	Markdown string
	SVG      bool
	JSON     map[string]any
	Latex    string
	Text     string
}

// displayedFormats reports whether rs are the results of interp.js's
// display() of HTML, Markdown, SVG, JSON and Latex, then its last value:
// each in its own format, only the last the main result.
func displayedFormats(rs []displayed) bool {
	if len(rs) != 6 {
		return false
	}
	for _, r := range rs[:5] {
		if r.Main {
			return false
		}
	}
	return rs[0].HTML == "<b>bold</b>" && slices.Contains(rs[0].Formats, "html") &&
		rs[1].Markdown == "**md**" && slices.Contains(rs[1].Formats, "markdown") &&
		rs[2].SVG && slices.Contains(rs[2].Formats, "svg") &&
		rs[3].JSON["a"] == float64(1) && slices.Contains(rs[3].Formats, "json") &&
		rs[4].Latex == "$x^2$" && slices.Contains(rs[4].Formats, "latex") &&
		rs[5].Main && rs[5].Text == "last"
}
