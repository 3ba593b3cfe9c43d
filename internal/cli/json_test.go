package cli_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

// procHome is an $AIRLOCK_HOME that airlock commands run against as
// processes: the test binary as the airlock on $PATH (TestMain).
type procHome struct {
	dir, executor string
	// env is more of the commands' environment (a server's AIRLOCK_URL).
	env []string
}

func newProcHome(t *testing.T, executor string) *procHome {
	t.Helper()
	// Short: egress sockets live under it, and a socket path must fit in
	// 108 bytes.
	dir, err := os.MkdirTemp("", "alh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = linux.Forget(filepath.Join(dir, "run"))
		os.RemoveAll(dir)
	})
	return &procHome{dir: dir, executor: executor}
}

// command is airlock args with stdin, in the home.
func (h *procHome) command(stdin string, args ...string) *exec.Cmd {
	cmd := exec.Command("airlock", args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AIRLOCK_HOME="+h.dir, "AIRLOCK_EXEC="+h.executor, "GORACE=atexit_sleep_ms=10")
	cmd.Env = append(cmd.Env, h.env...)
	cmd.Stdin = strings.NewReader(stdin)
	return cmd
}

// run runs airlock args and returns its exit status, stdout and stderr.
func (h *procHome) run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := h.command(stdin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case !errors.As(err, &exit):
		t.Fatalf("airlock %s: %v", strings.Join(args, " "), err)
	}
	return exit.ExitCode(), stdout.String(), stderr.String()
}

// must runs airlock args and fails the test unless they exit 0; it returns
// stdout without its trailing newline.
func (h *procHome) must(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	code, out, errOut := h.run(t, stdin, args...)
	if code != 0 {
		t.Fatalf("airlock %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return strings.TrimSuffix(out, "\n")
}

// file writes content to a file of the test and returns its path.
func file(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// busyboxArchive is the busybox test image as a docker archive; it skips
// t without busybox-static.
func busyboxArchive(t *testing.T) string {
	img := testImages(t)
	if img == nil {
		t.Skip("busybox-static is not installed")
	}
	return img["BUSYBOX_ARCHIVE"]
}

const finishScript = "turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"

// jsonRun is one run of a --json command: what makes the home it runs in,
// and what its output must be.
type jsonRun struct {
	name string
	// sandbox: the run needs root and the executor (it starts sandboxes).
	sandbox bool
	// args prepares h and returns the command with --json.
	args func(t *testing.T, h *procHome) []string
	// lines is how many JSON lines it prints; -1 is at least one.
	lines int
	// stderr: the command prints its JSON on stderr (its stdout is the
	// sandboxed command's).
	stderr bool
	code   int
}

// TestJSONLines runs every command that has --json, as the command line's
// model lists them (so a new one cannot be left out), with something to
// print and, for a list, with nothing: every line it prints is one compact
// JSON object, and an empty list prints nothing at all.
func TestJSONLines(t *testing.T) {
	none := func(args ...string) func(*testing.T, *procHome) []string {
		return func(*testing.T, *procHome) []string { return args }
	}
	detached := func(t *testing.T, h *procHome) string {
		return h.must(t, "", "run", "--detach", "--script", file(t, "s.yaml", finishScript), "task")
	}
	cases := map[string][]jsonRun{
		"approvals ls": {
			{name: "none", args: none("approvals", "--json"), lines: 0},
			{name: "one", sandbox: true, lines: 1, args: func(t *testing.T, h *procHome) []string {
				pending(t, h)
				return []string{"approvals", "--json"}
			}},
		},
		"credits show": {
			{name: "no ledger", args: none("credits", "show", "local", "--json"), lines: 0},
			{name: "two entries", lines: 2, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "credits", "grant", "local", "5")
				h.must(t, "", "credits", "grant", "local", "2.5")
				return []string{"credits", "show", "local", "--json"}
			}},
		},
		"image import": {
			{name: "one image", lines: 1, args: func(t *testing.T, h *procHome) []string {
				return []string{"image", "import", busyboxArchive(t), "--json"}
			}},
		},
		"image ls": {
			{name: "none", args: none("image", "ls", "--json"), lines: 0},
			{name: "one", lines: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "image", "import", busyboxArchive(t))
				return []string{"image", "ls", "--json"}
			}},
		},
		"image pull": {
			{name: "one image", lines: 1, args: func(t *testing.T, h *procHome) []string {
				img := testImages(t)
				if img == nil {
					t.Skip("busybox-static is not installed")
				}
				h.must(t, img["REG_USER"]+":"+img["REG_PASS"], "secrets", "set", img["REGISTRY_SECRET"])
				return []string{"image", "pull", img["REGISTRY"] + "/busybox:1", "--json"}
			}},
		},
		"keys ls": {
			{name: "none", args: none("keys", "ls", "--json"), lines: 0},
			{name: "one", lines: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "tenants", "create", "acme")
				h.must(t, "", "keys", "create", "--tenant", "acme", "--name", "ci")
				return []string{"keys", "ls", "--json"}
			}},
		},
		"policy explain": {
			{name: "a known tool", lines: 1, args: func(t *testing.T, h *procHome) []string {
				return []string{"policy", "explain", file(t, "p.yaml", "budgets: {max_steps: 5}\n"), "--tool", "run_command", "--args", `{"command":"ls"}`, "--json"}
			}},
			{name: "an unknown tool", lines: 1, args: func(t *testing.T, h *procHome) []string {
				return []string{"policy", "explain", file(t, "p.yaml", "budgets: {max_steps: 5}\n"), "--tool", "nosuchtool", "--json"}
			}},
		},
		"policy history": {
			{name: "two versions", lines: 2, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "policy", "put", "p", file(t, "a.yaml", "budgets: {max_steps: 5}\n"))
				h.must(t, "", "policy", "put", "p", file(t, "b.yaml", "budgets: {max_steps: 6}\n"))
				return []string{"policy", "history", "p", "--json"}
			}},
		},
		"policy ls": {
			{name: "none", args: none("policy", "ls", "--json"), lines: 0},
			{name: "one", lines: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "policy", "put", "p", file(t, "a.yaml", "budgets: {max_steps: 5}\n"))
				return []string{"policy", "ls", "--json"}
			}},
		},
		"policy scan": {
			{name: "nothing found", lines: 0, args: func(t *testing.T, h *procHome) []string {
				return []string{"policy", "scan", file(t, "clean.txt", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"), "--json"}
			}},
			{name: "two findings", lines: 2, code: 1, args: func(t *testing.T, h *procHome) []string {
				return []string{"policy", "scan", file(t, "leaky.txt", "AWS_KEY_ID=AKIAZ7QKXJ2RW5TLM3VN\npostgres://app:Xk29fLq7pZ2mW@db/app\n"), "--json"}
			}},
			{name: "the rules", lines: -1, args: none("policy", "scan", "--rules", "--json")},
		},
		"runs events": {
			{name: "a run's log", lines: -1, args: func(t *testing.T, h *procHome) []string {
				return []string{"runs", "events", detached(t, h), "--json"}
			}},
		},
		"runs ls": {
			{name: "none", args: none("runs", "ls", "--json"), lines: 0},
			{name: "two", lines: 2, args: func(t *testing.T, h *procHome) []string {
				detached(t, h)
				detached(t, h)
				return []string{"runs", "ls", "--json"}
			}},
		},
		"runs replay": {
			{name: "no differences", sandbox: true, lines: 0, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "run", "--script", file(t, "s.yaml", finishScript), "task")
				return []string{"runs", "replay", lastRun(t, h), "--json"}
			}},
			{name: "a difference", sandbox: true, lines: 1, code: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "run", "--script", file(t, "s.yaml", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: 'date +%s%N'}\n"+finishScript[len("turns:\n"):]), "task")
				return []string{"runs", "replay", lastRun(t, h), "--json"}
			}},
		},
		"runs show": {
			{name: "a run", lines: 1, args: func(t *testing.T, h *procHome) []string {
				return []string{"runs", "show", detached(t, h), "--json"}
			}},
		},
		"sandbox exec": {
			{name: "a result", sandbox: true, lines: 1, stderr: true, args: func(t *testing.T, h *procHome) []string {
				id := h.must(t, "", "sandbox", "create", "--ttl", "5m")
				t.Cleanup(func() { h.run(t, "", "sandbox", "rm", id) })
				return []string{"sandbox", "exec", "--json", id, "--", "true"}
			}},
		},
		"sandbox events": {
			{name: "one", sandbox: true, lines: 1, args: func(t *testing.T, h *procHome) []string {
				id := h.must(t, "", "sandbox", "create", "--ttl", "5m")
				t.Cleanup(func() { h.run(t, "", "sandbox", "rm", id) })
				h.must(t, "", "sandbox", "exec", id, "--", "airlock-event", "progress", "--pct", "40", "x")
				// Kept as the supervisor reads it: asked until there.
				for deadline := time.Now().Add(30 * time.Second); h.must(t, "", "sandbox", "events", id) == ""; time.Sleep(50 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the event was not kept within 30s")
					}
				}
				return []string{"sandbox", "events", "--json", id}
			}},
		},
		"sandbox ls": {
			{name: "none", args: none("sandbox", "ls", "--json"), lines: 0},
			{name: "one", sandbox: true, lines: 1, args: func(t *testing.T, h *procHome) []string {
				id := h.must(t, "", "sandbox", "create", "--ttl", "5m")
				t.Cleanup(func() { h.run(t, "", "sandbox", "rm", id) })
				return []string{"sandbox", "ls", "--json"}
			}},
		},
		"sandbox ports ls": {
			// A server's sandboxes; what a listed one holds is
			// TestMCPServePorts'.
			{name: "none", lines: 0, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "tenants", "create", "local")
				key := h.must(t, "", "keys", "create", "--tenant", "local", "--name", "ops", "--scope", "runs:read")
				srv := startServe(t, h.dir, h.executor)
				h.env = []string{"AIRLOCK_URL=" + srv.url, "AIRLOCK_API_KEY=" + key}
				return []string{"sandbox", "ports", "ls", "--json"}
			}},
		},
		"sandbox run": {
			{name: "a result", sandbox: true, lines: 1, stderr: true, args: none("sandbox", "run", "--json", "--", "true")},
		},
		"secrets ls": {
			{name: "none", args: none("secrets", "ls", "--json"), lines: 0},
			{name: "two", lines: 2, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "v1", "secrets", "set", "a")
				h.must(t, "v2", "secrets", "set", "b", "--host", "example.com")
				return []string{"secrets", "ls", "--json"}
			}},
		},
		"template build": {
			{name: "a config-only build", lines: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "image", "import", busyboxArchive(t))
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte("FROM localhost/busybox:test\nENV A=1\nCMD [\"sh\"]\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return []string{"template", "build", "-t", "localhost/built:1", "--json", dir}
			}},
		},
		"template create": {
			{name: "one version", lines: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "image", "import", busyboxArchive(t))
				return []string{"template", "create", "t", "--image", "localhost/busybox:test", "--json"}
			}},
		},
		"template ls": {
			{name: "none", args: none("template", "ls", "--json"), lines: 0},
			{name: "two", lines: 2, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "image", "import", busyboxArchive(t))
				h.must(t, "", "template", "create", "a", "--image", "localhost/busybox:test")
				h.must(t, "", "template", "create", "b", "--image", "localhost/busybox:test")
				return []string{"template", "ls", "--json"}
			}},
		},
		"template show": {
			{name: "a version", lines: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "image", "import", busyboxArchive(t))
				h.must(t, "", "template", "create", "a", "--image", "localhost/busybox:test")
				return []string{"template", "show", "a", "--json"}
			}},
			{name: "two versions", lines: 2, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "image", "import", busyboxArchive(t))
				h.must(t, "", "template", "create", "a", "--image", "localhost/busybox:test")
				h.must(t, "", "template", "create", "a", "--image", "localhost/busybox:test", "--pool", "1")
				return []string{"template", "show", "a", "--versions", "--json"}
			}},
		},
		"template rm": {
			{name: "one", lines: 1, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "image", "import", busyboxArchive(t))
				h.must(t, "", "template", "create", "a", "--image", "localhost/busybox:test")
				return []string{"template", "rm", "a", "--json"}
			}},
		},
		"tenants ls": {
			{name: "none", args: none("tenants", "ls", "--json"), lines: 0},
			{name: "two", lines: 2, args: func(t *testing.T, h *procHome) []string {
				h.must(t, "", "tenants", "create", "acme")
				h.must(t, "", "tenants", "create", "globex")
				return []string{"tenants", "ls", "--json"}
			}},
		},
	}

	commands, err := cli.JSONCommands()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands {
		if _, ok := cases[c]; !ok {
			t.Errorf("airlock %s has --json, but TestJSONLines has no case for it", c)
		}
	}
	for c := range cases {
		if !slices.Contains(commands, c) {
			t.Errorf("TestJSONLines has a case for airlock %s, which has no --json (commands with it: %v)", c, commands)
		}
	}

	exe, exeErr := executor()
	for _, c := range commands {
		for _, r := range cases[c] {
			t.Run(c+"/"+r.name, func(t *testing.T) {
				if r.sandbox && (os.Geteuid() != 0 || exeErr != nil) {
					t.Skipf("needs root and the executor (%v)", exeErr)
				}
				h := newProcHome(t, exe)
				args := r.args(t, h)
				code, stdout, stderr := h.run(t, "", args...)
				out := stdout
				if r.stderr {
					out = stderr
				}
				if code != r.code {
					t.Fatalf("airlock %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, r.code, stdout, stderr)
				}
				checkJSONLines(t, strings.Join(args, " "), out, r.lines)
			})
		}
	}
}

// checkJSONLines checks that out is lines of one compact JSON object each,
// want of them (-1: at least one).
func checkJSONLines(t *testing.T, cmd, out string, want int) {
	t.Helper()
	if want == 0 {
		if out != "" {
			t.Errorf("airlock %s printed %q, want nothing", cmd, out)
		}
		return
	}
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("airlock %s: output %q does not end its last line", cmd, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want > 0 && len(lines) != want || want < 0 && len(lines) == 0 {
		t.Errorf("airlock %s printed %d lines, want %d:\n%s", cmd, len(lines), want, out)
	}
	for _, l := range lines {
		var obj map[string]any
		if err := json.Unmarshal([]byte(l), &obj); err != nil {
			t.Errorf("airlock %s: line %q is not a JSON object: %v", cmd, l, err)
			continue
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, []byte(l)); err != nil || compact.String() != l {
			t.Errorf("airlock %s: line %q is not compact JSON", cmd, l)
		}
	}
}

// lastRun returns the id of h's newest run.
func lastRun(t *testing.T, h *procHome) string {
	t.Helper()
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(h.must(t, "", "runs", "ls", "--json", "--limit", "1")), &r); err != nil || r.ID == "" {
		t.Fatalf("runs ls --json --limit 1: %v", err)
	}
	return r.ID
}

// pending leaves a run of h waiting for a decision on one tool call: a
// process drives it until the test ends, when the call is denied.
func pending(t *testing.T, h *procHome) {
	t.Helper()
	policy := file(t, "ask.yaml", "tools:\n  run_command:\n    rules:\n      - when: 'true'\n        action: ask\n        reason: a person decides\n")
	script := file(t, "s.yaml", "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: 'true'}\n"+finishScript[len("turns:\n"):])
	drive := h.command("", "run", "--script", script, "--policy", policy, "task")
	if err := drive.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- drive.Wait() }()
	t.Cleanup(func() {
		if id := pendingID(t, h); id != "" {
			h.run(t, "", "deny", id, "--reason", "the test is over")
		}
		<-done
	})
	for pendingID(t, h) == "" {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the run ended without asking: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pendingID is the id of h's first pending approval, or "".
func pendingID(t *testing.T, h *procHome) string {
	t.Helper()
	_, out, _ := h.run(t, "", "approvals", "--json")
	var a struct {
		ID string `json:"id"`
	}
	line, _, _ := strings.Cut(out, "\n")
	_ = json.Unmarshal([]byte(line), &a)
	return a.ID
}
