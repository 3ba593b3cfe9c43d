package interp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/interp"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// executorPath is the airlock-exec binary built for these tests.
var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// needKernel skips the test when the host's Python has no IPython kernel
// (scripts/ci-deps.sh installs Debian's).
func needKernel(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	// Why /usr/bin: the sandbox's root is the host's system, whose
	// python3 is Debian's, whatever a shell's PATH finds first.
	if err := exec.Command("/usr/bin/python3", "-c", "import ipykernel, jupyter_client, matplotlib").Run(); err != nil {
		t.Skip("needs Debian's python3-ipykernel, python3-jupyter-client and python3-matplotlib (scripts/ci-deps.sh)")
	}
}

// newServer creates a sandbox on the host's root and starts the server in
// it.
func newServer(t *testing.T) sandbox.Sandbox {
	t.Helper()
	needKernel(t)
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := interp.Start(ctx, sb); err != nil {
		t.Fatalf("Start = %v", err)
	}
	return sb
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func run(t *testing.T, sb sandbox.Sandbox, req interp.Request) interp.Execution {
	t.Helper()
	ex, err := interp.Execute(ctxT(t), sb, req, time.Minute, interp.Limits{})
	if err != nil {
		t.Fatalf("Execute(%q) = %v", req.Code, err)
	}
	if !ex.Ended {
		t.Fatalf("Execute(%q): no end_of_execution", req.Code)
	}
	return ex
}

func mainText(ex interp.Execution) string {
	for _, r := range ex.Results {
		if r.Main {
			return r.Text
		}
	}
	return ""
}

type codeContext struct {
	ID, Language, Cwd string
}

func contexts(t *testing.T, sb sandbox.Sandbox, method, path string, body string) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := interp.Call(ctxT(t), sb, method, path, []byte(body), &out, time.Minute, 1<<20); err != nil {
		t.Fatalf("%s %s = %v", method, path, err)
	}
	return out.Bytes()
}

// TestServer drives the server in a real sandbox through the wire
// @e2b/code-interpreter uses: state, streams, results, charts, errors,
// env vars, timeouts with the interrupt, and contexts.
func TestServer(t *testing.T) {
	sb := newServer(t)

	t.Run("state persists", func(t *testing.T) {
		run(t, sb, interp.Request{Code: "x = 1"})
		ex := run(t, sb, interp.Request{Code: "x+1"})
		if got := mainText(ex); got != "2" {
			t.Errorf("x+1 = %q, want 2 (results %+v)", got, ex.Results)
		}
		if ex.Count == 0 {
			t.Errorf("execution count = 0, want the kernel's")
		}
	})

	t.Run("stdout and stderr", func(t *testing.T) {
		ex := run(t, sb, interp.Request{Code: "import sys\nprint('out')\nprint('err', file=sys.stderr)"})
		if ex.Stdout != "out\n" || ex.Stderr != "err\n" {
			t.Errorf("stdout %q, stderr %q; want out and err", ex.Stdout, ex.Stderr)
		}
	})

	t.Run("chart", func(t *testing.T) {
		ex := run(t, sb, interp.Request{Code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"})
		var png []byte
		for _, r := range ex.Results {
			if len(r.PNG) > 0 {
				png = r.PNG
			}
		}
		if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("no PNG result: results %+v, stderr %q, error %+v", ex.Results, ex.Stderr, ex.Error)
		}
	})

	t.Run("exception", func(t *testing.T) {
		ex := run(t, sb, interp.Request{Code: "raise ValueError('bad value')"})
		if ex.Error == nil || ex.Error.Name != "ValueError" || ex.Error.Value != "bad value" || !strings.Contains(ex.Error.Traceback, "ValueError") {
			t.Fatalf("error = %+v, want ValueError: bad value with a traceback", ex.Error)
		}
	})

	t.Run("env vars for one call", func(t *testing.T) {
		ex := run(t, sb, interp.Request{Code: "import os; os.environ.get('AIRLOCK_T', 'unset')", EnvVars: map[string]string{"AIRLOCK_T": "it's set"}})
		if got := mainText(ex); got != "it's set" {
			t.Errorf("with env_vars: %q, want it's set", got)
		}
		ex = run(t, sb, interp.Request{Code: "import os; os.environ.get('AIRLOCK_T', 'unset')"})
		if got := mainText(ex); got != "unset" {
			t.Errorf("after: %q, want unset", got)
		}
	})

	t.Run("timeout interrupts the kernel", func(t *testing.T) {
		ex, err := interp.Execute(ctxT(t), sb, interp.Request{Code: "import time\nprint('start', flush=True)\ntime.sleep(600)"}, 3*time.Second, interp.Limits{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Execute(sleep 600) = %v, want a deadline", err)
		}
		if ex.Ended {
			t.Errorf("a timed-out execution says it ended")
		}
		// The next call runs once the kernel is interrupted: were it not,
		// it would wait for the sleep (and the test's deadline).
		ex = run(t, sb, interp.Request{Code: "x * 10"})
		if got := mainText(ex); got != "10" {
			t.Errorf("after the timeout: x*10 = %q, want 10 (the state kept)", got)
		}
	})

	t.Run("over a connection into the sandbox", func(t *testing.T) {
		c, ok := sb.(sandbox.Connector)
		if !ok {
			t.Skip("the sandbox has no Connect")
		}
		ex, err := interp.ExecuteConn(ctxT(t), c, interp.Request{Code: "x + 100"}, time.Minute, interp.Limits{})
		if err != nil || !ex.Ended || mainText(ex) != "101" {
			t.Fatalf("ExecuteConn(x + 100) = %+v, %v; want 101", ex, err)
		}
		_, err = interp.ExecuteConn(ctxT(t), c, interp.Request{Code: "import time\ntime.sleep(600)"}, 2*time.Second, interp.Limits{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ExecuteConn(sleep 600) = %v, want a deadline", err)
		}
		if ex := run(t, sb, interp.Request{Code: "x"}); mainText(ex) != "1" {
			t.Errorf("after the timeout: x = %q, want 1", mainText(ex))
		}
	})

	t.Run("contexts", func(t *testing.T) {
		var c codeContext
		if err := json.Unmarshal(contexts(t, sb, "POST", "/contexts", `{"cwd": "/tmp"}`), &c); err != nil || c.ID == "" || c.Language != "python" || c.Cwd != "/tmp" {
			t.Fatalf("create context = %+v, %v", c, err)
		}
		ex := run(t, sb, interp.Request{Code: "import os; y = 5; os.getcwd()", ContextID: c.ID})
		if got := mainText(ex); got != "/tmp" {
			t.Errorf("cwd = %q, want /tmp", got)
		}
		// A separate kernel: the default context has no y.
		if ex := run(t, sb, interp.Request{Code: "y"}); ex.Error == nil || ex.Error.Name != "NameError" {
			t.Errorf("y in the default context: error %+v, want NameError", ex.Error)
		}
		var list []codeContext
		if err := json.Unmarshal(contexts(t, sb, "GET", "/contexts", ""), &list); err != nil {
			t.Fatalf("list contexts: %v", err)
		}
		found := false
		for _, l := range list {
			found = found || l == c
		}
		if !found || len(list) < 2 {
			t.Errorf("list = %+v, want the default and %+v", list, c)
		}
		contexts(t, sb, "POST", "/contexts/"+c.ID+"/restart", "")
		if ex := run(t, sb, interp.Request{Code: "import os; print(os.getcwd()); y", ContextID: c.ID}); ex.Error == nil || ex.Error.Name != "NameError" || ex.Stdout != "/tmp\n" {
			t.Errorf("after restart: stdout %q, error %+v; want /tmp and NameError", ex.Stdout, ex.Error)
		}
		contexts(t, sb, "DELETE", "/contexts/"+c.ID, "")
		_, err := interp.Execute(ctxT(t), sb, interp.Request{Code: "1", ContextID: c.ID}, time.Minute, interp.Limits{})
		var se *interp.StatusError
		if !errors.As(err, &se) || se.Status != 404 {
			t.Errorf("execute in a removed context = %v, want 404", err)
		}
	})

	t.Run("unsupported language", func(t *testing.T) {
		_, err := interp.Execute(ctxT(t), sb, interp.Request{Code: "1", Language: "r"}, time.Minute, interp.Limits{})
		var se *interp.StatusError
		if !errors.As(err, &se) || se.Status != 404 || !strings.Contains(se.Body, "no r kernel") || !strings.Contains(se.Body, "bash") {
			t.Errorf("r = %v, want 404 saying there is no kernel, and which languages there are", err)
		}
	})
}

// TestBashContext drives a bash context (airlock's own: one bash process)
// in a real sandbox: the shell's state (variables, functions, the working
// directory) persists between calls, stdout and stderr stream apart, a
// status other than 0 is the error "exit status N", env_vars hold for one
// call, a timeout interrupts the command and keeps the shell, and a cell
// that ends the shell is an error after which a fresh one answers.
func TestBashContext(t *testing.T) {
	sb := newServer(t)
	bash := func(code string, env map[string]string) interp.Execution {
		t.Helper()
		return run(t, sb, interp.Request{Code: code, Language: "bash", EnvVars: env})
	}

	ex := bash("x=41; f() { echo \"f:$1\"; }; cd /tmp; echo out; echo err >&2", nil)
	if ex.Stdout != "out\n" || ex.Stderr != "err\n" || ex.Error != nil || ex.Count != 1 {
		t.Errorf("first cell: stdout %q, stderr %q, error %+v, count %d; want out, err, none, 1", ex.Stdout, ex.Stderr, ex.Error, ex.Count)
	}
	if ex := bash("echo $((x+1)) $PWD; f a", nil); ex.Stdout != "42 /tmp\nf:a\n" || ex.Count != 2 {
		t.Errorf("state: stdout %q (count %d), want 42 /tmp and f:a", ex.Stdout, ex.Count)
	}
	if ex := bash("echo before; ls /nonexistent", nil); ex.Error == nil || ex.Error.Name != "ExitError" || ex.Error.Value != "exit status 2" || ex.Stdout != "before\n" {
		t.Errorf("failing command: stdout %q, error %+v; want before and exit status 2", ex.Stdout, ex.Error)
	}
	if ex := bash("echo \"[$AIRLOCK_T]\"", map[string]string{"AIRLOCK_T": "it's $set"}); ex.Stdout != "[it's $set]\n" {
		t.Errorf("with env_vars: %q, want [it's $set]", ex.Stdout)
	}
	if ex := bash("echo \"[${AIRLOCK_T-unset}]\"", nil); ex.Stdout != "[unset]\n" {
		t.Errorf("after env_vars: %q, want [unset]", ex.Stdout)
	}
	_, err := interp.Execute(ctxT(t), sb, interp.Request{Code: "echo start; sleep 600; echo after", Language: "bash"}, 3*time.Second, interp.Limits{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute(sleep 600) = %v, want a deadline", err)
	}
	// Were the sleep not interrupted, this call would wait for it.
	if ex := bash("echo $x", nil); ex.Stdout != "41\n" {
		t.Errorf("after the timeout: %q, want 41 (the state kept)", ex.Stdout)
	}
	// What the shell started in the background keeps its pipes open:
	// the shell's end is seen all the same.
	if ex := bash("sleep 600 & exit 3", nil); ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "status 3") {
		t.Errorf("exit 3: error %+v, want KernelDied with status 3", ex.Error)
	}
	if ex := bash("echo \"[$x]\"; pgrep -x sleep || true", nil); ex.Stdout != "[]\n" || ex.Error != nil {
		t.Errorf("after the shell's exit: stdout %q, error %+v; want a fresh shell, and the old one's sleep gone", ex.Stdout, ex.Error)
	}
	_, err = interp.Execute(ctxT(t), sb, interp.Request{Code: "true", Language: "bash", EnvVars: map[string]string{"not a name": "v"}}, time.Minute, interp.Limits{})
	var se *interp.StatusError
	if !errors.As(err, &se) || se.Status != 400 {
		t.Errorf("env var with a bad name = %v, want 400", err)
	}
}

// TestNodeContexts drives JavaScript and TypeScript contexts (airlock's
// own: one node process each) in a real sandbox: top-level declarations
// persist, console output streams, the last expression is the result
// (awaited when a promise), a thrown error is the execution's error with
// the cell's frames, top-level await works, env_vars hold for one call,
// a timeout interrupts a busy loop and keeps the state, TypeScript's
// types are dropped, and contexts of the language are made and removed.
func TestNodeContexts(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("needs node (scripts/ci-deps.sh)")
	}
	sb := newServer(t)
	js := func(code string, env map[string]string) interp.Execution {
		t.Helper()
		return run(t, sb, interp.Request{Code: code, Language: "js", EnvVars: env})
	}
	ex := js("let a = 20; console.log('out'); console.error('err'); a + 1", nil)
	if ex.Stdout != "out\n" || ex.Stderr != "err\n" || mainText(ex) != "21" || ex.Error != nil {
		t.Errorf("first cell: stdout %q, stderr %q, result %q, error %+v", ex.Stdout, ex.Stderr, mainText(ex), ex.Error)
	}
	if ex := js("a * 2", nil); mainText(ex) != "40" {
		t.Errorf("a * 2 = %q, want 40 (a kept)", mainText(ex))
	}
	if ex := js("Promise.resolve('resolved')", nil); mainText(ex) != "resolved" {
		t.Errorf("a promise's result = %q, want resolved", mainText(ex))
	}
	if ex := js("await new Promise((r) => setTimeout(r, 10)); return a", nil); mainText(ex) != "20" {
		t.Errorf("top-level await: %q, want 20", mainText(ex))
	}
	ex = js("function g() { throw new TypeError('bad value') }\ng()", nil)
	if ex.Error == nil || ex.Error.Name != "TypeError" || ex.Error.Value != "bad value" || !strings.Contains(ex.Error.Traceback, "at g (cell:1") || strings.Contains(ex.Error.Traceback, "node-driver") {
		t.Errorf("error = %+v, want TypeError bad value with the cell's frames only", ex.Error)
	}
	if ex := js("process.env.AIRLOCK_T", map[string]string{"AIRLOCK_T": "set"}); mainText(ex) != "set" {
		t.Errorf("with env_vars: %q, want set", mainText(ex))
	}
	if ex := js("process.env.AIRLOCK_T ?? 'unset'", nil); mainText(ex) != "unset" {
		t.Errorf("after env_vars: %q, want unset", mainText(ex))
	}
	_, err := interp.Execute(ctxT(t), sb, interp.Request{Code: "while (true) {}", Language: "javascript"}, 3*time.Second, interp.Limits{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute(while (true)) = %v, want a deadline", err)
	}
	if ex := js("a", nil); mainText(ex) != "20" {
		t.Errorf("after the timeout: a = %q, want 20", mainText(ex))
	}

	t.Run("typescript", func(t *testing.T) { typescriptContext(t, sb) })
}

func typescriptContext(t *testing.T, sb sandbox.Sandbox) {
	if _, err := os.Stat("/usr/share/nodejs/typescript/package.json"); err != nil {
		t.Skip("needs Debian's node-typescript (scripts/ci-deps.sh)")
	}
	var c codeContext
	if err := json.Unmarshal(contexts(t, sb, "POST", "/contexts", `{"language": "ts", "cwd": "/tmp"}`), &c); err != nil || c.Language != "typescript" || c.Cwd != "/tmp" {
		t.Fatalf("create a typescript context = %+v, %v", c, err)
	}
	run(t, sb, interp.Request{Code: "const n: number = 2\ninterface P { x: number }\nconst p: P = { x: 3 }", ContextID: c.ID})
	if ex := run(t, sb, interp.Request{Code: "n * p.x + ':' + process.cwd()", ContextID: c.ID}); mainText(ex) != "6:/tmp" {
		t.Errorf("typescript: %q (error %+v), want 6:/tmp", mainText(ex), ex.Error)
	}
	// A context of its own: the default JavaScript one's a is not here.
	if ex := run(t, sb, interp.Request{Code: "typeof a", ContextID: c.ID}); mainText(ex) != "undefined" {
		t.Errorf("typeof a in the new context = %q, want undefined", mainText(ex))
	}
	contexts(t, sb, "POST", "/contexts/"+c.ID+"/restart", "")
	if ex := run(t, sb, interp.Request{Code: "typeof n", ContextID: c.ID}); mainText(ex) != "undefined" {
		t.Errorf("typeof n after restart = %q, want undefined", mainText(ex))
	}
	contexts(t, sb, "DELETE", "/contexts/"+c.ID, "")
	_, err := interp.Execute(ctxT(t), sb, interp.Request{Code: "1", ContextID: c.ID}, time.Minute, interp.Limits{})
	var se *interp.StatusError
	if !errors.As(err, &se) || se.Status != 404 {
		t.Errorf("execute in a removed context = %v, want 404", err)
	}
}

// TestCallNotRunning: with no server in the sandbox, Call says so.
func TestCallNotRunning(t *testing.T) {
	needKernel(t)
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	var out bytes.Buffer
	if err := interp.Call(ctxT(t), sb, "GET", "/health", nil, &out, time.Minute, 1<<20); !errors.Is(err, interp.ErrNotRunning) {
		t.Errorf("Call(/health) with no server = %v, want ErrNotRunning", err)
	}
}
