package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"golang.org/x/sys/unix"
)

// SpecFlags are the flags that describe a sandbox, shared by run and create.
type SpecFlags struct {
	Workspace     string   `help:"Host directory shown at /workspace (default: an empty workspace)." placeholder:"DIR"`
	WorkspaceMode string   `help:"How the workspace is shown: cow (changes stay in the sandbox; the default), ro or rw." enum:",cow,ro,rw" default:""`
	Mount         []string `help:"Extra bind mount SRC:DST[:ro|rw] (repeatable; read-only unless :rw)." placeholder:"SRC:DST[:MODE]"`
	Env           []string `short:"e" help:"Environment variable K=V for the command (repeatable). Nothing of the host's environment passes in unless named." placeholder:"K=V"`
	Memory        string   `help:"Memory limit, swap included (default: the policy's sandbox.limits.memory, 1G)."`
	Pids          int64    `help:"Process limit (default: the policy's, 512)."`
	CPUs          float64  `name:"cpus" help:"CPU limit, in CPUs (default: the policy's, 1)."`
	Disk          string   `help:"Size of each writable layer: workspace changes and home, /tmp (default: the policy's, 1G)."`
	Network       string   `help:"Network mode: none (loopback only) or proxy (egress through airlock's proxy with --policy/--allow, or through --proxy-socket). Default: proxy when a policy or --allow is given, else none." enum:",none,proxy" default:""`
	ProxySocket   string   `help:"Host unix socket that proxy-mode connections are forwarded to." placeholder:"PATH"`
	Rootfs        string   `help:"Template root filesystem (unpacked image) instead of the host's system directories." placeholder:"DIR"`
	User          string   `help:"User inside the sandbox, name or uid (default: the unprivileged sandbox user)." placeholder:"NAME|UID"`
	SoftLimits    bool     `help:"Run even where memory, pids and CPU limits cannot be enforced (never the default)."`
	EgressFlags
}

// spec turns flags into a sandbox spec and the egress policy (nil when
// airlock runs no proxy), reporting every bad value. The flags are
// shorthand for the policy document's fields: what a flag leaves unset
// comes from --policy's document, else from the built-in default.
func (f *SpecFlags) spec() (sandbox.Spec, *policy.Network, error) {
	s, n, _, err := f.specDoc()
	return s, n, err
}

// specDoc is spec, also returning the document the flags complete.
func (f *SpecFlags) specDoc() (sandbox.Spec, *policy.Network, *policy.Document, error) {
	var errs []error
	doc := policy.Default()
	if f.Policy != "" {
		d, err := policy.Load(f.Policy)
		if err != nil {
			return sandbox.Spec{}, nil, nil, fmt.Errorf("--policy: %w", err)
		}
		doc = d
	}
	n, err := f.network(doc)
	if err != nil {
		errs = append(errs, err)
	}
	if n != nil || f.Policy != "" || len(f.Allow) > 0 || len(f.Resolve) > 0 {
		switch {
		case f.Network == sandbox.NetworkNone:
			errs = append(errs, errors.New("--network none conflicts with --policy, --allow and --resolve"))
		case f.ProxySocket != "":
			errs = append(errs, errors.New("--proxy-socket conflicts with --policy, --allow and --resolve: airlock runs the proxy"))
		}
	} else if f.Network == sandbox.NetworkProxy && f.ProxySocket == "" {
		errs = append(errs, errors.New("--network proxy needs --policy, --allow or --proxy-socket"))
	}
	sb := doc.Sandbox
	s := sandbox.Spec{Workspace: f.Workspace, Env: f.Env, Network: f.Network, ProxySocket: f.ProxySocket, RootFS: f.Rootfs, User: f.User}
	if s.RootFS == "" {
		s.RootFS = sb.RootFS
	}
	if s.Workspace == "" && sb.Workspace.Source != "" {
		s.Workspace = sb.Workspace.Source
	}
	if s.Workspace != "" {
		s.WorkspaceMode = f.WorkspaceMode
		if s.WorkspaceMode == "" {
			s.WorkspaceMode = sb.Workspace.Mode
		}
	} else if f.WorkspaceMode != "" && f.WorkspaceMode != sandbox.WorkspaceCOW {
		errs = append(errs, fmt.Errorf("--workspace-mode %s needs --workspace", f.WorkspaceMode))
	}
	if s.Network == "" && f.ProxySocket != "" {
		s.Network = sandbox.NetworkProxy
	}
	s.Limits = sandbox.Limits{MemoryBytes: int64(sb.Limits.Memory), DiskBytes: int64(sb.Limits.Disk), Pids: sb.Limits.Pids, CPUs: sb.Limits.CPUs,
		RequireHard: sb.RequireHardLimits && !f.SoftLimits}
	if f.Memory != "" {
		if s.Limits.MemoryBytes, err = sandbox.ParseSize(f.Memory); err != nil {
			errs = append(errs, fmt.Errorf("--memory: %w", err))
		}
	}
	if f.Disk != "" {
		if s.Limits.DiskBytes, err = sandbox.ParseSize(f.Disk); err != nil {
			errs = append(errs, fmt.Errorf("--disk: %w", err))
		}
	}
	if f.Pids != 0 {
		s.Limits.Pids = f.Pids
	}
	if f.CPUs != 0 {
		s.Limits.CPUs = f.CPUs
	}
	for _, m := range sb.Mounts {
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.Mode != policy.MountRW})
	}
	for _, m := range f.Mount {
		mt, err := parseMount(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.Mounts = append(s.Mounts, mt)
	}
	if len(errs) == 0 {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return s, n, doc, errors.Join(errs...)
}

func parseMount(m string) (sandbox.Mount, error) {
	parts := strings.Split(m, ":")
	mt := sandbox.Mount{ReadOnly: true}
	switch len(parts) {
	case 3:
		switch parts[2] {
		case "ro":
		case "rw":
			mt.ReadOnly = false
		default:
			return mt, fmt.Errorf("--mount %q: mode must be ro or rw", m)
		}
		fallthrough
	case 2:
		mt.Source, mt.Target = parts[0], parts[1]
	default:
		return mt, fmt.Errorf("--mount %q: want SRC:DST[:ro|rw]", m)
	}
	if !strings.HasPrefix(mt.Target, "/") {
		return mt, fmt.Errorf("--mount %q: target must be an absolute path", m)
	}
	return mt, nil
}

// ExecFlags are the per-command flags.
type ExecFlags struct {
	Timeout   time.Duration `help:"Wall-clock limit for the command (default: the policy's sandbox.limits.command_timeout, 10m)."`
	MaxOutput string        `help:"Cap on captured stdout+stderr (default: the policy's sandbox.limits.output, else 16M)."`
	JSON      bool          `name:"json" help:"Print one JSON result object on stderr at the end."`
}

// RunCmd is `airlock sandbox run`.
type RunCmd struct {
	SpecFlags
	ExecFlags
	Interactive bool     `short:"i" help:"Pass stdin to the command."`
	Command     []string `arg:"" passthrough:"" help:"Command and arguments, after --." name:"cmd"`
}

// Run creates a sandbox, runs the command, destroys the sandbox.
func (c *RunCmd) Run(env *Env) error {
	spec, netPolicy, doc, err := c.specDoc()
	if err != nil {
		return usageError{err}
	}
	maxOut, timeout := int64(doc.Sandbox.Limits.Output), time.Duration(doc.Sandbox.Limits.CommandTimeout)
	if maxOut == 0 {
		maxOut = 16 << 20
	}
	if c.MaxOutput != "" {
		if maxOut, err = sandbox.ParseSize(c.MaxOutput); err != nil {
			return usageError{fmt.Errorf("--max-output: %w", err)}
		}
	}
	if c.Timeout > 0 {
		timeout = c.Timeout
	}
	argv, err := commandArgs(c.Command, "airlock sandbox run [flags] -- CMD [ARG...]")
	if err != nil {
		return err
	}
	b, err := env.Backend()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(env.Ctx)
	defer cancel()
	// Collect what crashed runs left while this one starts, not after it:
	// GC is safe beside Create (see Backend.GC).
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		env.gc()
	}()
	defer func() { <-gcDone }()
	if netPolicy != nil {
		spec.ID = sandbox.NewID()
		eg, err := startEgress(ctx, env, spec.ID, netPolicy, &c.EgressFlags, egressOptions{})
		if err != nil {
			return err
		}
		defer eg.close(env)
		eg.apply(&spec)
	}
	sb, err := b.Create(ctx, spec)
	if err != nil {
		return err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		_ = sb.Destroy(dctx)
	}()
	cmd := sandbox.Command{Argv: argv, Stdout: env.Stdout, Stderr: env.Stderr, Timeout: timeout, MaxOutput: maxOut}
	if c.Interactive {
		cmd.Stdin = env.Stdin
	}
	p, err := sb.Start(ctx, cmd)
	if err != nil {
		return err
	}
	stop := forwardSignals(p.Signal)
	res, err := p.Wait(ctx)
	stop()
	if err != nil {
		return err
	}
	return finish(env, res, c.JSON)
}

// finish reports a result and turns it into the process exit status.
func finish(env *Env, res sandbox.Result, asJSON bool) error {
	if res.Message != "" && res.Outcome != sandbox.OutcomeExited && res.Outcome != sandbox.OutcomeSignaled {
		fmt.Fprintf(env.Stderr, "airlock: %s\n", res.Message)
	}
	if asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintf(env.Stderr, "%s\n", b)
	}
	if code := res.ExitStatus(); code != 0 {
		return exitCode(code)
	}
	return nil
}

// forwardSignals passes SIGINT, SIGTERM, SIGHUP and SIGQUIT to the command.
func forwardSignals(send func(unix.Signal) error) (stop func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-ch:
				_ = send(s.(unix.Signal))
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// commandArgs returns the command after "--". A first word that looks like
// a flag is an unknown flag, not a command.
func commandArgs(args []string, usage string) ([]string, error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	} else if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		return nil, usageError{fmt.Errorf("unknown flag %s", args[0])}
	}
	if len(args) == 0 {
		return nil, usageError{errors.New("no command given: " + usage)}
	}
	return args, nil
}

// usageError marks bad input: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// reportedError is an error printed as such that exits with a status of
// its own rather than 125.
type reportedError struct {
	err  error
	code int
}

func (e reportedError) Error() string { return e.err.Error() }
func (e reportedError) Unwrap() error { return e.err }

// exitCode is a command's exit status passed through airlock.
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

var _ io.Writer = (*os.File)(nil)
