// Package cli is airlock's command line: it parses arguments, builds what a
// command needs through Env, and maps results to exit statuses (the command's
// own status; 124 timeout; 137 limit kill; 125 airlock's own error; 2 bad
// usage). It reads no environment variable itself: cmd/airlock-host passes Env.
package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/alecthomas/kong"
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

	// pool, when set (airlock serve), keeps sandboxes ready in front of
	// the native backend for the engine and the E2B API alike.
	pool *pool.Pool
}

// sandboxes returns what creates the host's sandboxes: the pool when the
// command keeps one, else the native backend.
func (e *Env) sandboxes() (sandbox.Backend, error) {
	if e.pool != nil {
		return e.pool, nil
	}
	return e.Backend()
}

// startPool puts a pool of ready sandboxes (see package pool) in front of
// the native backend for the rest of the command; the returned function
// destroys the idle ones.
func (e *Env) startPool(o pool.Options) (func(), error) {
	b, err := e.Backend()
	if err != nil {
		return nil, err
	}
	p := pool.New(b, o)
	e.pool = p
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.Ctx), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	}, nil
}

func (e *Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

type cli struct {
	Store string `name:"store" env:"AIRLOCK_STORE" help:"Run store: sqlite (default, $AIRLOCK_HOME/airlock.db), sqlite:PATH, or postgres://USER@HOST/DB." placeholder:"URL"`

	Sandbox struct {
		Run       RunCmd             `cmd:"" help:"Run a command in a fresh sandbox, then destroy it."`
		Create    CreateCmd          `cmd:"" help:"Create a long-lived sandbox and print its id."`
		Exec      sandboxcli.ExecCmd `cmd:"" help:"Run a command in a live sandbox."`
		Ls        sandboxcli.LsCmd   `cmd:"" help:"List live sandboxes."`
		Rm        sandboxcli.RmCmd   `cmd:"" help:"Destroy live sandboxes."`
		Gc        sandboxcli.GcCmd   `cmd:"" help:"Remove what crashed airlock processes left behind."`
		Supervise SuperviseCmd       `cmd:"" hidden:"" help:"Internal: hold a sandbox for create."`
	} `cmd:"" help:"Run commands in disposable sandboxes."`
	Run       AgentRunCmd  `cmd:"" help:"Run an agent on a task in the foreground: the model on the host, its commands in sandboxes."`
	Runs      RunsCmd      `cmd:"" help:"Inspect and control runs: ls, show, events, verify, cancel, pause, resume, fork, replay."`
	Credits   CreditsCmd   `cmd:"" help:"Grant credits to a tenant and show its ledger."`
	Tenants   TenantsCmd   `cmd:"" help:"Create and list tenants, the owners of runs, secrets, credits, policies and API keys."`
	Keys      KeysCmd      `cmd:"" help:"Create, list and revoke tenants' API keys for airlock serve (stored hashed, shown once)."`
	Worker    WorkerCmd    `cmd:"" help:"Drive the store's queued and unfinished runs until stopped (several workers may share a store)."`
	Serve     ServeCmd     `cmd:"" help:"Serve the JSON API for tenants' API keys and drive the runs it creates (see --check-config)."`
	Approvals ApprovalsCmd `cmd:"" help:"List the actions that wait for a person's decision."`
	Approve   ApproveCmd   `cmd:"" help:"Approve a pending action."`
	Deny      DenyCmd      `cmd:"" help:"Deny a pending action, with a reason the model is told."`
	Secrets   SecretsCmd   `cmd:"" help:"Manage the host's encrypted secrets."`
	Policy    PolicyCmd    `cmd:"" help:"Check a policy document, explain what it decides for a tool call, and keep named policies with every version (put, history, show, ls)."`
	Doctor    DoctorCmd    `cmd:"" help:"Show which isolation layers this machine enforces."`
	Version   VersionCmd   `cmd:"" help:"Print the version."`
}

// VersionCmd is `airlock version`.
type VersionCmd struct{}

// Run prints the version.
func (VersionCmd) Run(env *Env) error {
	fmt.Fprintf(env.Stdout, "airlock %s\n", Version)
	return nil
}

// helpVars are the variables the flags' help and defaults name, like
// ${local_tenant}.
var helpVars = kong.Vars{"local_tenant": event.LocalTenant}

// Main runs the command line and returns the exit status.
func Main(env *Env, args []string) int {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("airlock"),
		kong.Description("airlock runs AI agents' commands in disposable sandboxes; the host keeps the keys."),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(int) {}),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		helpVars,
	)
	if err != nil {
		fmt.Fprintf(env.Stderr, "airlock: %v\n", err)
		return 125
	}
	if len(args) == 0 {
		_, _ = parser.Parse([]string{"--help"})
		return 2
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		if isHelp(args) {
			return 0
		}
		fmt.Fprintf(env.Stderr, "airlock: %v\n", err)
		return 2
	}
	if kctx == nil {
		return 0
	}
	if env.Store == "" {
		env.Store = c.Store
	}
	return sandboxcli.Status(env.Stderr, userError(kctx.Run(env, &env.Env)))
}

func isHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "--help" {
			return true
		}
	}
	return false
}
