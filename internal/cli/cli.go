// Package cli is airlock's command line: it parses arguments, builds what a
// command needs through Env, and maps results to exit statuses: 0 success
// (for a run: completed); 1 a run that ended otherwise; 2 bad usage or
// input, refused before anything is recorded or created; 124 timeout; 125
// airlock's own error; 126 the command could not be executed; 127 it was
// not found; 137 limit kill; 128+N signal N; else the command's own status
// (the README's table). Help (--help, -h, airlock help CMD) and --version
// print and run nothing. It reads no environment variable itself:
// cmd/airlock-host passes Env.
package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// Version is set at build time.
var Version = "dev"

// Env is everything a command may use from its surroundings: sandboxcli's,
// and what the rest of the command line needs besides.
type Env struct {
	sandboxcli.Env
	// Getenv reads the host's environment (model API keys); nil reads
	// nothing.
	Getenv func(string) string
	// Store is the run store: "" or "sqlite" for $AIRLOCK_HOME/airlock.db,
	// sqlite:PATH, or a postgres:// URL (set from --store).
	Store string
}

func (e *Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

type cli struct {
	Store       string           `name:"store" env:"AIRLOCK_STORE" help:"Run store: sqlite (default, $AIRLOCK_HOME/airlock.db), sqlite:PATH, or postgres://USER@HOST/DB." placeholder:"URL"`
	VersionFlag kong.VersionFlag `name:"version" help:"Print the version (as airlock version does)."`

	Sandbox struct {
		Run         RunCmd                    `cmd:"" help:"Run a command in a fresh sandbox, then destroy it."`
		Create      CreateCmd                 `cmd:"" help:"Create a long-lived sandbox and print its id."`
		Exec        sandboxcli.ExecCmd        `cmd:"" help:"Run a command in a live sandbox."`
		Ls          sandboxcli.LsCmd          `cmd:"" help:"List live sandboxes."`
		Events      SandboxEventsCmd          `cmd:"" help:"What a live sandbox of sandbox create reported through its event channel (airlock-event); --follow waits for more until it ends."`
		Ports       SandboxPortsCmd           `cmd:"" help:"A server's sandboxes' exposed ports (AIRLOCK_URL, AIRLOCK_API_KEY): ls [ID], revoke ID PORT."`
		PortForward sandboxcli.PortForwardCmd `cmd:"" name:"port-forward" help:"Forward local TCP ports to ports inside a live sandbox until interrupted: airlock sandbox port-forward ID [LOCAL:]PORT..."`
		Rm          sandboxcli.RmCmd          `cmd:"" help:"Destroy live sandboxes."`
		Gc          sandboxcli.GcCmd          `cmd:"" help:"Remove what crashed airlock processes left behind."`
		Daemon      DaemonCmd                 `cmd:"" help:"Keep sandboxes ready for this user's sandbox run, which hands its command over (AIRLOCK_NO_HANDOFF=1: never)."`
		Supervise   SuperviseCmd              `cmd:"" hidden:"" help:"Internal: hold a sandbox for create."`
	} `cmd:"" help:"Run commands in disposable sandboxes."`
	Image     ImageCmd     `cmd:"" help:"The host's OCI images, which a sandbox's root may be made of: pull, import, ls, inspect, rm, export, push."`
	Run       AgentRunCmd  `cmd:"" help:"Run an agent on a task in the foreground: the model on the host, its commands in sandboxes."`
	Runs      RunsCmd      `cmd:"" help:"Inspect and control runs: ls, show, events, verify, cancel, pause, resume, fork, replay."`
	Credits   CreditsCmd   `cmd:"" help:"Grant credits to a tenant and show its ledger."`
	Tenants   TenantsCmd   `cmd:"" help:"Create and list tenants, the owners of runs, secrets, credits, policies and API keys."`
	Keys      KeysCmd      `cmd:"" help:"Create, list and revoke tenants' API keys for airlock serve (stored hashed, shown once)."`
	Worker    WorkerCmd    `cmd:"" help:"Drive the store's queued and unfinished runs until stopped (several workers may share a store)."`
	Serve     ServeCmd     `cmd:"" help:"Serve the JSON API for tenants' API keys and drive the runs it creates (see --check-config)."`
	MCP       MCPCmd       `cmd:"" name:"mcp" help:"Serve this host's sandboxes to an MCP client (Claude Code, Cursor, VS Code...) on stdin and stdout."`
	Approvals ApprovalsCmd `cmd:"" help:"List the actions that wait for a person's decision."`
	Approve   ApproveCmd   `cmd:"" help:"Approve a pending action."`
	Deny      DenyCmd      `cmd:"" help:"Deny a pending action, with a reason the model is told."`
	Secrets   SecretsCmd   `cmd:"" help:"Manage the host's encrypted secrets."`
	Policy    PolicyCmd    `cmd:"" help:"Check a policy document, explain what it decides for a tool call, and keep named policies with every version (put, history, show, ls)."`
	Gc        GcCmd        `cmd:"" help:"Remove the checkpoint chunks no run, paused E2B sandbox or E2B snapshot refers to."`
	Template  TemplateCmd  `cmd:"" help:"Keep named, versioned environment templates (image, start command and readiness check, env, limits, policy, warm pool): create, ls, show, rm, and build an image from a Dockerfile."`
	Doctor    DoctorCmd    `cmd:"" help:"Show which isolation layers this machine enforces."`
	Version   VersionCmd   `cmd:"" help:"Print the version."`
	Help      HelpCmd      `cmd:"" help:"Print a command's help: airlock help CMD [SUBCMD]."`
}

// VersionCmd is `airlock version`.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(env *Env) error {
	fmt.Fprintln(env.Stdout, versionLine())
	return nil
}

// HelpCmd is `airlock help [CMD [SUBCMD...]]`.
type HelpCmd struct {
	Command []string `arg:"" optional:"" help:"The command, and its subcommands." placeholder:"CMD"`
}

// Run prints the help of the command c names: what CMD... --help prints.
// It parses CMD... --help with a command line of its own and runs nothing
// that parse returns.
func (c *HelpCmd) Run(env *Env) error {
	for _, w := range c.Command {
		if strings.HasPrefix(w, "-") {
			return usageError{Err: fmt.Errorf("airlock help takes command names, not %s: airlock help CMD [SUBCMD]", w)}
		}
	}
	l, err := newCommandLine(env)
	if err != nil {
		return err
	}
	if _, status := l.parse(append(slices.Clone(c.Command), "--help")); status != 0 {
		return exitCode(status) // parse said why
	}
	return nil
}

// commandLine is the parser of the whole command line and the struct it
// fills.
type commandLine struct {
	parser *kong.Kong
	cli    cli
	stderr io.Writer
	// exit is the status kong asked to exit with once it printed help or
	// the version; -1 until it asks. kong asks in the middle of a parse
	// and would go on parsing (and Main on running the command) if the
	// exit hook returned alone: parse stops at it instead.
	exit int
}

// helpVars are the variables the flags' help and defaults name, like
// ${local_tenant}.
var helpVars = kong.Vars{"local_tenant": event.LocalTenant}

func newCommandLine(env *Env) (*commandLine, error) {
	l := &commandLine{stderr: env.Stderr, exit: -1}
	parser, err := kong.New(&l.cli,
		kong.Name("airlock"),
		kong.Description("airlock runs AI agents' commands in disposable sandboxes; the host keeps the keys."),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(code int) {
			if l.exit < 0 {
				l.exit = code
			}
		}),
		kong.Vars{"version": versionLine()},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		helpVars,
	)
	if err != nil {
		return nil, err
	}
	l.parser = parser
	return l, nil
}

// parse reads args. It returns the command to run, or nil and the exit
// status when there is none: help or the version was asked for anywhere
// in args and printed (0, whatever else args hold), or args are bad (2,
// said on stderr).
func (l *commandLine) parse(args []string) (*kong.Context, int) {
	l.exit = -1
	kctx, err := l.parser.Parse(args)
	switch {
	case l.exit >= 0:
		return nil, l.exit
	case err != nil:
		fmt.Fprintf(l.stderr, "airlock: %v\n", err)
		return nil, 2
	}
	return kctx, 0
}

func versionLine() string { return "airlock " + Version }

// Main runs the command line and returns the exit status.
func Main(env *Env, args []string) int {
	l, err := newCommandLine(env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "airlock: %v\n", err)
		return 125
	}
	if len(args) == 0 {
		l.parse([]string{"--help"})
		return 2
	}
	kctx, status := l.parse(args)
	if kctx == nil {
		return status
	}
	if env.Store == "" {
		env.Store = l.cli.Store
	}
	return sandboxcli.Status(env.Stderr, userError(kctx.Run(env, &env.Env)))
}
