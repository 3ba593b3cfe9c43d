package cli

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// TestHelpRunsNothing walks every command of the command line, as kong's
// model has them, and asks for its help three ways (--help, -h, airlock
// help CMD) with arguments that would run the command without them. Each
// must print the command's help and exit 0 having run nothing: parse
// returns no command to run, the environment is not read, and a fresh
// AIRLOCK_HOME stays empty. The front end (cmd/airlock) must hand each to
// the whole command line rather than run it itself.
func TestHelpRunsNothing(t *testing.T) {
	l, err := newCommandLine(&Env{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*kong.Node
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		nodes = append(nodes, n)
		for _, c := range n.Children {
			if c.Type == kong.CommandNode {
				walk(c)
			}
		}
	}
	walk(l.parser.Model.Node)
	if len(nodes) < 40 {
		t.Fatalf("found %d commands in the model, want the whole tree", len(nodes))
	}
	for _, n := range nodes {
		path := commandPath(n)
		runnable := append(slices.Clone(path), sampleArgs(t, n)...)
		if len(n.Children) == 0 {
			// Without help these arguments run the command, so the
			// forms below test help, not a parse error.
			kctx, status := newTestCommandLine(t).parse(runnable)
			if kctx == nil {
				t.Errorf("airlock %q does not parse (status %d): the sample arguments are wrong", runnable, status)
			}
		}
		help := append(slices.Clone(path), "-h")
		help = append(help, sampleArgs(t, n)...)
		forms := [][]string{append(slices.Clone(runnable), "--help"), help, append([]string{"help"}, path...)}
		if hasPassthrough(n) {
			// After the command's first word, --help is the command's.
			forms[0] = append(append(slices.Clone(path), "--help"), sampleArgs(t, n)...)
		}
		for _, args := range forms {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				// Only the help command runs, which parses again and
				// runs nothing (TestHelpCommand).
				pl := newTestCommandLine(t)
				kctx, status := pl.parse(args)
				if kctx != nil && !strings.HasPrefix(kctx.Command(), "help") || status != 0 {
					t.Errorf("parse(%q) = a command to run, status %d; want none, status 0", args, status)
				}
				if sandboxcli.Fast(args) {
					t.Errorf("sandboxcli.Fast(%q) = true: the front end would run it instead of printing help", args)
				}
				env, stdout, stderr := helpEnv(t)
				if status := Main(env, args); status != 0 {
					t.Errorf("Main(%q) = %d, want 0; stderr: %s", args, status, stderr)
				}
				want := "Usage: airlock " + strings.Join(path, " ")
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("Main(%q) printed %q, want help starting %q", args, stdout, want)
				}
				if stderr.Len() > 0 {
					t.Errorf("Main(%q) wrote %q on stderr", args, stderr)
				}
				if ents, err := os.ReadDir(env.Home); err != nil || len(ents) > 0 {
					t.Errorf("after Main(%q), AIRLOCK_HOME holds %v (%v), want nothing", args, ents, err)
				}
			})
		}
	}
}

// TestHelpCommand: airlock help with no command is the top-level help;
// with an unknown command or a flag it is a usage error, and it never
// runs what it names.
func TestHelpCommand(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		status int
		stdout string
		stderr string
	}{
		{[]string{"help"}, 0, "Usage: airlock <command>", ""},
		{[]string{"help", "nosuch"}, 2, "", "airlock: unexpected argument nosuch"},
		{[]string{"help", "sandbox", "run", "--", "true"}, 2, "", "airlock: "},
		{[]string{"help", "sandbox", "run", "--memory"}, 2, "", "airlock: "},
		{[]string{"--version"}, 0, "airlock " + Version + "\n", ""},
		{[]string{"version"}, 0, "airlock " + Version + "\n", ""},
		{[]string{"--version", "sandbox", "run", "--", "true"}, 0, "airlock " + Version + "\n", ""},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			env, stdout, stderr := helpEnv(t)
			if status := Main(env, tt.args); status != tt.status {
				t.Errorf("Main(%q) = %d, want %d; stderr: %s", tt.args, status, tt.status, stderr)
			}
			if !strings.Contains(stdout.String(), tt.stdout) || tt.stdout == "" && stdout.Len() > 0 {
				t.Errorf("Main(%q) printed %q, want %q", tt.args, stdout, tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) || tt.stderr == "" && stderr.Len() > 0 {
				t.Errorf("Main(%q) wrote %q on stderr, want %q", tt.args, stderr, tt.stderr)
			}
			if ents, _ := os.ReadDir(env.Home); len(ents) > 0 {
				t.Errorf("after Main(%q), AIRLOCK_HOME holds %v, want nothing", tt.args, ents)
			}
		})
	}
}

func newTestCommandLine(t *testing.T) *commandLine {
	t.Helper()
	env, _, _ := helpEnv(t)
	l, err := newCommandLine(env)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// helpEnv is an Env in which a command that runs leaves a trace: its home
// is a fresh empty directory, reading the environment fails the test, and
// its context is already cancelled, so that a server or worker run by
// mistake returns rather than serve.
func helpEnv(t *testing.T) (*Env, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	env := &Env{
		Env: sandboxcli.Env{
			Ctx: ctx, Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
			Home: t.TempDir(), Executor: "/nonexistent/airlock-exec", Self: "/nonexistent/airlock",
		},
		Getenv: func(k string) string {
			t.Errorf("the command read $%s: it ran", k)
			return ""
		},
	}
	return env, &stdout, &stderr
}

// commandPath is the words that name command n.
func commandPath(n *kong.Node) []string {
	var path []string
	for ; n != nil && n.Type == kong.CommandNode; n = n.Parent {
		path = append([]string{n.Name}, path...)
	}
	return path
}

func hasPassthrough(n *kong.Node) bool {
	return slices.ContainsFunc(n.Positional, func(v *kong.Value) bool { return v.Passthrough || v.PassthroughMode != 0 })
}

// sampleArgs are arguments that parse for command n: each required flag
// with a value of its type, and each positional argument.
func sampleArgs(t *testing.T, n *kong.Node) []string {
	var args []string
	for _, f := range n.Flags {
		if f.Required {
			args = append(args, "--"+f.Name)
			if !f.IsBool() {
				args = append(args, sampleValue(t, f.Value))
			}
		}
	}
	for _, p := range n.Positional {
		if p.Passthrough || p.PassthroughMode != 0 {
			args = append(args, "--", "true")
			continue
		}
		args = append(args, sampleValue(t, p))
	}
	return args
}

func sampleValue(t *testing.T, v *kong.Value) string {
	for _, e := range v.EnumSlice() {
		if e != "" {
			return e
		}
	}
	ty := v.Target.Type()
	if ty.Kind() == reflect.Slice {
		ty = ty.Elem()
	}
	switch {
	case ty == reflect.TypeFor[time.Duration]():
		return "1s"
	case ty.Kind() >= reflect.Int && ty.Kind() <= reflect.Float64:
		return "1"
	case ty.Kind() == reflect.String:
		return "x"
	}
	t.Fatalf("no sample value for %s of type %s", v.Name, ty)
	return ""
}
