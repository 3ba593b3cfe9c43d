package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// home is an $AIRLOCK_HOME that commands run against in this process.
type home struct {
	dir string
	// exe stands for the executor: commands that only record runs need
	// the backend to open, never to start a sandbox.
	exe string
}

func newHome(t *testing.T) *home {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return &home{dir: t.TempDir(), exe: exe}
}

// run runs the command line on args with stdin and returns its exit
// status, stdout and stderr.
func (h *home) run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Env: sandboxcli.Env{
		Ctx: context.Background(), Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Home: h.dir, Executor: h.exe, Self: h.exe,
	}, Getenv: func(string) string { return "" }}
	code := cli.Main(env, args)
	return code, stdout.String(), stderr.String()
}

// mustRun runs args and fails the test unless they exit 0; it returns
// stdout without its trailing newline.
func (h *home) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := h.run(t, "", args...)
	if code != 0 {
		t.Fatalf("airlock %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return strings.TrimSuffix(out, "\n")
}

// packagePrefix matches a message part that starts with the name of one of
// airlock's packages, like "engine: " or "store: ": the words of the
// package below, which a command line user must not get.
func packagePrefix(t *testing.T) *regexp.Regexp {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			names[filepath.Base(filepath.Dir(path))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !names["engine"] || !names["store"] || !names["secret"] {
		t.Fatalf("the walk of ../ found the packages %v, not airlock's", names)
	}
	var alt []string
	for n := range names {
		alt = append(alt, regexp.QuoteMeta(n))
	}
	return regexp.MustCompile(`(^|: |\()(` + strings.Join(alt, "|") + `): `)
}

// TestErrorText runs commands into the conditions the packages below the
// command line report (an unknown approval or run, a run that has ended,
// bad input the engine or a store refuses, a secret store another key
// sealed): each is said in the command line's words, with its exit status,
// and no package's name starts any part of the message.
func TestErrorText(t *testing.T) {
	h := newHome(t)
	script := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(script, []byte("turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ended := h.mustRun(t, "run", "--detach", "--script", script, "task")
	h.mustRun(t, "runs", "cancel", ended)
	// The secret store is sealed with its default key from now on.
	if code, out, errOut := h.run(t, "value", "secrets", "set", "sealed"); code != 0 {
		t.Fatalf("airlock secrets set: exit %d\n%s%s", code, out, errOut)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	const noApproval = "run_01AAAAAAAAAAAAAAAAAAAAAAAA.call_1_0"
	re := regexp.QuoteMeta
	tests := []struct {
		name  string
		args  []string
		stdin string
		code  int
		want  string // a regular expression stderr must match
	}{
		{"approve an unknown id", []string{"approve", noApproval}, "", 2, `^airlock: no such approval: "` + re(noApproval) + `"\n$`},
		{"deny an unknown id", []string{"deny", noApproval, "--reason", "no"}, "", 2, `^airlock: no such approval: "` + re(noApproval) + `"\n$`},
		{"approve a malformed id", []string{"approve", "nosuch"}, "", 2, `^airlock: no such approval: "nosuch"\n$`},
		{"show an unknown run", []string{"runs", "show", "nosuch"}, "", 2, `^airlock: no run "nosuch"\n$`},
		{"events of an unknown run", []string{"runs", "events", "run_01AAAAAAAAAAAAAAAAAAAAAAAA"}, "", 2, `^airlock: no run "run_01A+"\n$`},
		{"cancel an ended run", []string{"runs", "cancel", ended}, "", 1, `^airlock: run already ended: run ` + ended + ` is cancelled\n$`},
		{"pause an ended run", []string{"runs", "pause", ended}, "", 1, `^airlock: run already ended: run ` + ended + ` is cancelled\n$`},
		{"resume an ended run", []string{"runs", "resume", ended}, "", 1, `^airlock: run already ended: run ` + ended + ` is cancelled\n$`},
		{"fork after the last step", []string{"runs", "fork", ended, "--at", "3", "--detach"}, "", 2, `^airlock: run ` + ended + ` has 0 steps; cannot fork at step 3\n$`},
		{"replay a run without model turns", []string{"runs", "replay", ended}, "", 2, `^airlock: run ` + ended + ` recorded no model turn to replay\n$`},
		{"run with a bad sandbox name", []string{"run", "--detach", "--script", script, "--sandbox", "BAD", "task"}, "", 2, `^airlock: config: sandboxes\[1\]: name "BAD" must match `},
		{"remove a secret of a bad name", []string{"secrets", "rm", "bad name"}, "", 2, `^airlock: invalid name "bad name": only letters, digits`},
		{"list secrets of a bad tenant", []string{"secrets", "ls", "--tenant", "bad name"}, "", 2, `^airlock: --tenant: invalid name "bad name": only letters, digits`},
		{"set a secret with another key", []string{"secrets", "set", "--key-file", filepath.Join(t.TempDir(), "other"), "x"}, "value", 125, `^airlock: wrong key for this secret store`},
		{"grant credits to no tenant", []string{"credits", "grant", "nosuch", "5"}, "", 2, `^airlock: no tenant "nosuch" \(airlock tenants create nosuch makes it\)\n$`},
		{"check a missing policy file", []string{"policy", "check", missing}, "", 2, `^airlock: open ` + re(missing) + `: no such file or directory\n$`},
		{"explain a missing policy file", []string{"policy", "explain", missing, "--tool", "run_command"}, "", 2, `^airlock: open ` + re(missing) + `: no such file or directory\n$`},
		{"sandbox run under a missing policy file", []string{"sandbox", "run", "--policy", missing, "--", "true"}, "", 2, `^airlock: --policy: open ` + re(missing) + `: no such file or directory\n$`},
	}
	prefix := packagePrefix(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := h.run(t, tt.stdin, tt.args...)
			if code != tt.code || !regexp.MustCompile(tt.want).MatchString(stderr) {
				t.Errorf("airlock %s: exit %d, stderr %q; want exit %d, stderr matching %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.want)
			}
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if m := prefix.FindStringSubmatch(strings.TrimPrefix(line, "airlock: ")); m != nil {
					t.Errorf("airlock %s: stderr line %q names package %s", strings.Join(tt.args, " "), line, m[2])
				}
			}
		})
	}
}
