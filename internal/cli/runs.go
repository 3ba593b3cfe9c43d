package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/template"
)

// AgentRunCmd is `airlock run "TASK"`.
type AgentRunCmd struct {
	Task      string        `arg:"" help:"What the agent should do."`
	Workspace string        `help:"Host directory the agent works on; it sees a copy-on-write view, the host copy never changes (default: an empty workspace)." placeholder:"DIR"`
	Git       string        `help:"Start the workspace as this git repository (http or https), fetched inside the sandbox through its egress proxy: the policy must allow its host (--allow). Excludes --workspace." placeholder:"URL"`
	GitRef    string        `name:"git-ref" help:"Branch, tag or commit id of --git to check out (default: its default branch)." placeholder:"REF"`
	WSMode    string        `name:"workspace-mode" help:"How the sandbox sees --workspace: cow (default; the host copy never changes), ro (read-only), rw (changes reach the host directory)." enum:",cow,ro,rw" default:"" placeholder:"MODE"`
	Model     string        `help:"Model as PROVIDER:MODEL: anthropic:…, openai:…, openai-responses:…, or openai-compatible:… with --base-url. Keys come from ANTHROPIC_API_KEY / OPENAI_API_KEY or the secret store." placeholder:"PROVIDER:MODEL"`
	BaseURL   string        `name:"base-url" help:"API base URL (openai-compatible: e.g. http://localhost:11434/v1)." placeholder:"URL"`
	Script    string        `help:"Drive the run with a scripted model: a YAML file of model turns." placeholder:"FILE"`
	Policy    string        `help:"Policy file (YAML), or a stored policy NAME[@vN|@HASHPREFIX] when no such file exists; its network section gives the sandboxes an egress proxy." placeholder:"FILE|NAME"`
	PolicyAs  string        `name:"policy-name" help:"Store the --policy file as a version of this policy (default: the file's name without extension)." placeholder:"NAME"`
	Verify    []string      `help:"Command that must exit 0 in the sandbox after the model finishes (repeatable)." placeholder:"CMD"`
	Changed   []string      `name:"verify-changed" help:"Workspace path that must have changed (repeatable)." placeholder:"PATH"`
	Only      []string      `name:"verify-only-changed" help:"Glob outside which nothing may change (repeatable; DIR/** for a tree)." placeholder:"GLOB"`
	Artifact  []string      `help:"Glob of workspace files to keep as artifacts (repeatable)." placeholder:"GLOB"`
	Sandbox   []string      `help:"Another named sandbox NAME or NAME=DIR the model may use (repeatable)." placeholder:"NAME[=DIR]"`
	MaxSteps  int           `name:"max-steps" help:"Most model turns (default: the policy's budgets.max_steps, 50)."`
	Timeout   time.Duration `help:"Most active wall time of the run (default: the policy's budgets.max_wall_time, 30m)."`
	MaxTokens int64         `name:"max-tokens" help:"Most input+output tokens of all model calls (default: the policy's budgets.max_tokens, none)."`
	Context   int           `name:"context-window" help:"The model's context window in tokens; older tool output is shortened to fit." default:"200000"`
	Out       string        `help:"Directory the patch and artifacts are written to (default $AIRLOCK_HOME/runs/ID)." placeholder:"DIR"`
	Memory    string        `help:"Memory limit of each sandbox (default: the policy's sandbox.limits.memory, 1G)."`
	Pids      int64         `help:"Process limit of each sandbox (default: the policy's, 512)."`
	CPUs      float64       `name:"cpus" help:"CPU limit of each sandbox (default: the policy's, 1)."`
	Disk      string        `help:"Size of each sandbox's writable layer (default: the policy's, 1G)."`
	Detach    bool          `help:"Only record the run (queued) and print its id: airlock worker or airlock runs resume drives it."`
	KeyFile   string        `name:"key-file" env:"AIRLOCK_SECRET_KEY_FILE" help:"Secret store key file (policy credentials)." placeholder:"PATH"`
	Allow     []string      `help:"Allow egress to HOST[:PORT] (repeatable; added to the policy's network.allow). Without a port: 80 and 443." placeholder:"HOST[:PORT]"`
	Resolve   []string      `help:"Pin HOST:PORT to ADDR:PORT, like curl --resolve (repeatable; added to network.resolve)." placeholder:"HOST:PORT=ADDR:PORT"`
	Metadata  []string      `help:"Label the run with KEY=VALUE (repeatable); airlock runs ls --metadata finds it by them." placeholder:"KEY=VALUE" sep:"none"`
	Image     string        `help:"Make the run's sandboxes of this image of the host's store (airlock image ls; the policy's sandbox.image): a tag is recorded by its digest when the run starts." placeholder:"REF"`
	Template  string        `help:"Start the run's sandboxes from this stored template (airlock template ls): NAME or NAME@vN. Its image, environment, limits and policy apply (flags win); its start command runs and its readiness check passes in each sandbox first; the run records its name and version." placeholder:"NAME"`
	Runtime   string        `help:"What isolates the run's sandboxes: native or gvisor (the policy's sandbox.runtime; airlock doctor says which work here)." enum:",native,gvisor" default:""`
	Env       []string      `short:"e" sep:"none" help:"Environment variable KEY=VALUE of every command in the run's sandboxes (repeatable). It is recorded in the run's log, so a resumed run has it too: not for secrets (bind those with a policy credential)." placeholder:"KEY=VALUE"`

	// templateLimits are the --template's limits, over the policy's.
	templateLimits *template.Limits
}

// Run creates the run and drives it in the foreground (against a server:
// follows it as the server's workers drive it).
func (c *AgentRunCmd) Run(env *Env) error {
	return startRun(env, hostOptions{keyFile: c.KeyFile}, c.Detach, c.Out, func(b backend) (string, error) {
		q, err := c.request(env.Ctx, env, b)
		if err != nil {
			var rep reportedError
			if errors.As(err, &rep) {
				return "", err
			}
			return "", usageError{Err: err}
		}
		return b.create(env.Ctx, q)
	})
}

// startRun makes a run with start on the backend o opens, then drives it
// in the foreground with the live timeline, its artifacts written to out;
// detached, it prints the run's id instead.
func startRun(env *Env, o hostOptions, detach bool, out string, start func(backend) (string, error)) error {
	if !detach {
		o.timeline = newTimeline(env.Stdout, stdoutTTY(env), false)
	}
	b, err := openBackend(env, o)
	if err != nil {
		return err
	}
	defer b.close()
	id, err := start(b)
	if err != nil {
		return err
	}
	if detach {
		fmt.Fprintln(env.Stdout, id)
		return nil
	}
	return b.drive(id, out, false)
}

// request builds the run c asks for, once, for either backend: the API's
// request, and what only this host's command line may ask besides, which a
// server refuses (the flags are named). The policy document (the built-in
// default when none is given) is what the flags override; --verify,
// --verify-changed, --verify-only-changed and --artifact add to its lists.
// Errors are usage errors, but for a store that fails.
func (c *AgentRunCmd) request(ctx context.Context, env *Env, b backend) (host.RunRequest, error) {
	_, remote := b.(*remoteBackend)
	q := host.RunRequest{CreateRunRequest: api.CreateRunRequest{Task: c.Task, Model: c.Model}}
	var errs []error
	if strings.TrimSpace(c.Task) == "" {
		errs = append(errs, errors.New("the task is empty"))
	}
	var err error
	if q.Metadata, err = parseMetadata(c.Metadata); err != nil {
		errs = append(errs, err)
	}
	if c.MaxSteps < 0 {
		errs = append(errs, fmt.Errorf("--max-steps %d: want at least 1", c.MaxSteps))
	}
	if c.Timeout < 0 || c.MaxTokens < 0 {
		errs = append(errs, errors.New("--timeout and --max-tokens must not be negative"))
	}
	if remote {
		errs = append(errs, c.remoteOnly()...)
	} else if c.Policy == "" && c.PolicyAs != "" {
		errs = append(errs, errors.New("--policy-name needs --policy FILE"))
	}
	if c.Template != "" && !remote {
		if err := c.useTemplate(env, &q); err != nil {
			return q, err
		}
	}
	doc, perr := c.policy(ctx, env, b, &q)
	if perr != nil {
		var rep reportedError
		if errors.As(perr, &rep) {
			return q, perr
		}
		errs = append(errs, perr)
	}
	switch {
	case c.Script != "" && c.Model != "":
		errs = append(errs, errors.New("--script and --model exclude each other"))
	case c.Script != "":
		b, err := os.ReadFile(c.Script)
		if err == nil {
			err = host.CheckScript(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--script %s: %w", c.Script, err))
		}
		q.Script, q.ScriptName = string(b), c.Script
	case c.Model == "":
		errs = append(errs, errors.New("give --model PROVIDER:MODEL or --script FILE"))
	}
	// A local run's workspace is the policy's (the flag is written in
	// it); a server's is --workspace, uploaded.
	ws, wsName := c.Workspace, "--workspace "+c.Workspace
	if !remote && doc != nil {
		if ws = doc.Sandbox.Workspace.Source; c.Workspace == "" {
			wsName = "sandbox.workspace.source " + ws
		}
	}
	switch {
	case c.GitRef != "" && c.Git == "":
		errs = append(errs, errors.New("--git-ref goes with --git"))
	case c.Git != "" && remote && ws != "":
		errs = append(errs, errors.New("--git and --workspace exclude each other"))
	case c.Git != "" && ws != "":
		errs = append(errs, errors.New("--git and a workspace directory (--workspace or sandbox.workspace.source) exclude each other"))
	case c.Git != "":
		if err := host.CheckGit(c.Git, c.GitRef); err != nil {
			errs = append(errs, fmt.Errorf("--git: %w", err))
		}
		q.Workspace = &api.WorkspaceSource{Git: c.Git, Ref: c.GitRef}
	}
	if ws != "" {
		if fi, err := os.Stat(ws); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", wsName, err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%s: not a directory", wsName))
		}
	}
	if remote {
		q.UploadDir = c.Workspace
		return q, errors.Join(errs...)
	}
	q.BaseURL, q.ContextTokens, q.Env = c.BaseURL, c.Context, c.Env
	for _, s := range c.Sandbox {
		name, dir, _ := strings.Cut(s, "=")
		sb := host.NamedSandbox{Name: name}
		if dir != "" {
			abs, err := filepath.Abs(dir)
			if err != nil {
				errs = append(errs, err)
			}
			sb.Dir = abs
		}
		q.Sandboxes = append(q.Sandboxes, sb)
	}
	if err := host.CheckEnv(c.Env); err != nil {
		errs = append(errs, fmt.Errorf("--env: %w", err))
	}
	return q, errors.Join(errs...)
}

// remoteOnly are the errors of the flags a server does not take.
func (c *AgentRunCmd) remoteOnly() []error {
	var errs []error
	for _, f := range []struct {
		set      bool
		flag, do string
	}{
		{c.BaseURL != "", "--base-url", "a server calls only its own model providers"},
		{len(c.Sandbox) > 0, "--sandbox", "a server's runs have one sandbox"},
		{c.WSMode != "" && c.WSMode != policy.WorkspaceCOW, "--workspace-mode " + c.WSMode, "the server's sandbox works on an uploaded copy of --workspace"},
		{c.PolicyAs != "", "--policy-name", "store the policy with airlock policy put, then give --policy NAME"},
		{c.Context != defaultContextWindow, "--context-window", "the API takes no context window"},
		{len(c.Env) > 0, "--env", "the API takes no environment for a run's sandboxes"},
	} {
		if f.set {
			errs = append(errs, fmt.Errorf("%s is not available against a server (AIRLOCK_URL is set): %s", f.flag, f.do))
		}
	}
	return errs
}

// policy reads --policy into q and writes the flags into the document it
// names (the default when none): q gets the document the run is held to,
// and where it came from. It returns that document, nil when it cannot be
// read or names a stored policy a server reads itself.
func (c *AgentRunCmd) policy(ctx context.Context, env *Env, b backend, q *host.RunRequest) (*policy.Document, error) {
	_, remote := b.(*remoteBackend)
	if remote && c.Template != "" {
		// The server reads the template and its policy itself.
		switch {
		case c.Policy != "":
			return nil, errors.New("--template and --policy exclude each other: the template names its policy")
		case c.Image != "":
			return nil, errors.New("--template and --image exclude each other: the template names its image")
		case c.policyFlags():
			return nil, fmt.Errorf("--template %s: against a server, only --max-steps, --verify*, and --artifact go with it (the template and its policy say the rest)", c.Template)
		}
		q.CreateRunRequest.Template = c.Template
		c.requestFields(q)
		return nil, nil
	}
	doc, base := policy.Default(), []byte(nil)
	if c.Policy != "" {
		nameAs := c.PolicyAs
		if remote {
			nameAs = ""
		}
		p, err := readRunPolicy(c.Policy, nameAs)
		switch {
		case err != nil:
			return nil, err
		case p.ref != "" && remote:
			// The flags cannot be written into a document the server
			// reads; the checks, artifacts and step budget have fields of
			// their own.
			if c.policyFlags() || c.Image != "" {
				return nil, fmt.Errorf("--policy %s names a stored policy: against a server, only --max-steps, --verify*, and --artifact go with it (give the policy file to change more)", p.ref)
			}
			q.Policy = p.ref
			c.requestFields(q)
			return nil, nil
		case p.ref != "":
			if p, err = p.loadStored(ctx, b); err != nil {
				return nil, err
			}
			q.PolicyVersion = p.version
		case !remote && p.name != "":
			q.PolicyName, q.PolicyBy = p.name, whoami(env)
		}
		doc, base, q.PolicySource = p.parsed, p.doc, p.source
	}
	flags := *c
	if remote {
		// The workspace is uploaded, not a host directory of the policy.
		flags.Workspace, flags.WSMode = "", ""
	}
	d, changed, err := flags.applyFlags(doc)
	if err != nil {
		return nil, err
	}
	q.PolicyDocument = string(base)
	if changed {
		// The flags are shorthand for the document the run records; the
		// policy given (a file still recorded as a version of its name)
		// is the one they changed, whose hash the run records too.
		q.PolicyDocument, q.Flags, q.BasePolicy = string(d.Canonical()), !remote, base
	}
	return d, nil
}

// policyFlags reports whether a flag that writes the policy document,
// but has no field of its own in the API's request, is set.
func (c *AgentRunCmd) policyFlags() bool {
	return c.Memory != "" || c.Disk != "" || c.Pids > 0 || c.CPUs > 0 || c.Timeout > 0 || c.MaxTokens > 0 ||
		len(c.Allow) > 0 || len(c.Resolve) > 0 || c.Runtime != ""
}

// requestFields sets the API request's own fields for the flags that
// have them: the step budget, the checks and the artifacts.
func (c *AgentRunCmd) requestFields(q *host.RunRequest) {
	q.MaxSteps, q.Artifacts = c.MaxSteps, c.Artifact
	if len(c.Verify)+len(c.Changed)+len(c.Only) > 0 {
		q.Verify = &api.VerifySpec{Commands: c.Verify, Changed: c.Changed, OnlyChanged: c.Only}
	}
}

// applyFlags writes the flags into doc, which it may change: they are
// shorthand for the document's fields. It returns the document the run
// uses and whether any flag changed it; a changed document is validated as
// a whole, like one read from a file.
func (c *AgentRunCmd) applyFlags(doc *policy.Document) (*policy.Document, bool, error) {
	before := string(doc.Canonical())
	var errs []error
	b, lim := &doc.Budgets, &doc.Sandbox.Limits
	if c.templateLimits != nil {
		c.templateLimits.Apply(lim) // the flags below win
	}
	if c.MaxSteps > 0 {
		b.MaxSteps = int64(c.MaxSteps)
	}
	if c.Timeout > 0 {
		b.MaxWallTime = policy.Duration(c.Timeout)
	}
	if c.MaxTokens > 0 {
		b.MaxTokens = c.MaxTokens
	}
	for _, f := range []struct {
		name, v string
		to      *policy.Size
	}{{"--memory", c.Memory, &lim.Memory}, {"--disk", c.Disk, &lim.Disk}} {
		if f.v == "" {
			continue
		}
		n, err := sandbox.ParseSize(f.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
			continue
		}
		*f.to = policy.Size(n)
	}
	if c.Pids > 0 {
		lim.Pids = c.Pids
	}
	if c.CPUs > 0 {
		lim.CPUs = c.CPUs
	}
	doc.Verify.Commands = append(doc.Verify.Commands, c.Verify...)
	doc.Verify.Changed = append(doc.Verify.Changed, c.Changed...)
	doc.Verify.OnlyChanged = append(doc.Verify.OnlyChanged, c.Only...)
	doc.Artifacts = append(doc.Artifacts, c.Artifact...)
	ws := &doc.Sandbox.Workspace
	if c.Workspace != "" {
		abs, err := filepath.Abs(c.Workspace)
		if err != nil {
			errs = append(errs, fmt.Errorf("--workspace %s: %w", c.Workspace, err))
		}
		ws.Source = abs
	}
	if c.WSMode != "" {
		if ws.Source == "" && c.WSMode != policy.WorkspaceCOW {
			errs = append(errs, fmt.Errorf("--workspace-mode %s needs --workspace", c.WSMode))
		}
		ws.Mode = c.WSMode
	}
	if c.Image != "" {
		doc.Sandbox.Image = c.Image
	}
	if c.Runtime != "" {
		doc.Sandbox.Runtime = c.Runtime
	}
	ef := EgressFlags{Allow: c.Allow, Resolve: c.Resolve}
	if _, err := ef.network(doc); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return doc, false, err
	}
	after := doc.Canonical()
	if string(after) == before {
		return doc, false, nil
	}
	checked, err := policy.Parse(after)
	if err != nil {
		return doc, false, fmt.Errorf("the policy with the flags: %w", err)
	}
	return checked, true, nil
}

// errDetached ends a drive without ending the run (SIGTERM, SIGHUP): it can
// be resumed.
var errDetached = errors.New("airlock stopped; the run can be resumed")

// foreground drives run id in this process (resume: a stopped one) with
// Ctrl-C cancelling it and SIGTERM detaching from it, writes its
// artifacts, and maps its status to the exit status.
func (h *local) foreground(id, out string, resume bool) error {
	ctx, cancel := context.WithCancelCause(h.env.Ctx)
	defer cancel(nil)
	stop := onSignals(cancel)
	defer stop()
	r, arts, err := h.h.Drive(ctx, id, resume)
	if err != nil {
		if errors.Is(context.Cause(ctx), errDetached) {
			fmt.Fprintf(h.env.Stderr, "airlock: %v: airlock runs resume %s\n", errDetached, id)
			return exitCode(1)
		}
		return hostError(err)
	}
	return report(h.env, r, arts, out, func(a api.Artifact, w io.Writer) error {
		return h.h.CopyArtifact(h.env.Ctx, a, w)
	})
}

// onSignals cancels the drive on SIGINT and detaches on SIGTERM or SIGHUP.
func onSignals(cancel context.CancelCauseFunc) (stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			if s == unix.SIGINT {
				cancel(host.ErrCancelled)
			} else {
				cancel(errDetached)
			}
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// report writes a run's artifacts out, fetching each with fetch, and
// says where everything is.
func report(env *Env, o api.Run, arts []api.Artifact, out string, fetch func(a api.Artifact, w io.Writer) error) error {
	w := env.Stdout
	if len(arts) > 0 {
		if out == "" {
			out = filepath.Join(env.Home, "runs", o.ID)
		}
		written, err := writeArtifacts(arts, out, fetch)
		if err != nil {
			return err
		}
		for _, p := range written {
			fmt.Fprintf(w, "wrote %s\n", p)
		}
	}
	// A completed run exits 0 whether or not anything checked the model's
	// claim: its line says which it is.
	fmt.Fprintf(w, "run %s: %s%s\n", o.ID, o.Status, unverified(o))
	fmt.Fprintf(w, "log: airlock runs events %s   (verify: airlock runs verify %s)\n", o.ID, o.ID)
	switch o.Status {
	case event.StatusCompleted:
		return nil
	case event.StatusPaused:
		fmt.Fprintf(w, "resume: airlock runs resume %s\n", o.ID)
	}
	return exitCode(1)
}

// unverified is what follows a run's status on its last lines when it
// completed with no check run on its result.
func unverified(o api.Run) string {
	if o.Status != event.StatusCompleted || o.Verification != nil && len(o.Verification.Checks) > 0 {
		return ""
	}
	return " (not verified: no checks configured)"
}

// writeArtifacts copies artifacts into dir, each fetched by fetch. Names
// come from the sandbox: they are written through an os.Root, so none can
// land outside dir.
func writeArtifacts(arts []api.Artifact, dir string, fetch func(a api.Artifact, w io.Writer) error) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var out []string
	for _, a := range arts {
		name := filepath.Clean(a.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			continue
		}
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return out, fmt.Errorf("artifact %s: %w", a.Name, err)
			}
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, 0o644)
		if err == nil {
			err = fetch(a, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = root.Remove(name) // not the artifact: leave nothing that looks like it
			}
		}
		if err != nil {
			return out, fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		out = append(out, filepath.Join(dir, name))
	}
	return out, nil
}

// RunsCmd is `airlock runs ...`.
type RunsCmd struct {
	Ls     RunsLsCmd     `cmd:"" help:"List runs."`
	Show   RunsShowCmd   `cmd:"" help:"Show a run: status, steps, usage, checks, artifacts."`
	Events RunsEventsCmd `cmd:"" help:"Print a run's event log."`
	Verify RunsVerifyCmd `cmd:"" help:"Check a run's hash chain: no event changed, lost or reordered."`
	Cancel RunsCancelCmd `cmd:"" help:"Cancel a run: its command is killed, its sandboxes destroyed."`
	Pause  RunsPauseCmd  `cmd:"" help:"Pause a run: its sandboxes are destroyed, its workspace kept as a snapshot."`
	Resume RunsResumeCmd `cmd:"" help:"Resume a paused run, or with no id every unfinished run, in the foreground."`
	Fork   RunsForkCmd   `cmd:"" help:"Start a new run from a run's conversation and workspace after a step."`
	Replay RunsReplayCmd `cmd:"" help:"Re-drive a run from its recorded model turns in a fresh sandbox and report differences."`
	Purge  RunsPurgeCmd  `cmd:"" help:"Delete a run for good: its forks, events, artifacts and files (asks first; an audit record stays)."`
}

// RunsLsCmd is `airlock runs ls`.
type RunsLsCmd struct {
	JSON     bool     `name:"json" help:"One JSON object per run."`
	Status   []string `help:"Only runs in these statuses." placeholder:"STATUS"`
	Metadata []string `help:"Only runs whose metadata has KEY=VALUE (repeatable: every one)." placeholder:"KEY=VALUE" sep:"none"`
	Limit    int      `help:"Most runs listed (newest)." default:"50"`
}

// Run lists runs, oldest first of the newest Limit.
func (c *RunsLsCmd) Run(env *Env) error {
	var statuses []event.Status
	for _, s := range c.Status {
		if !event.Status(s).Valid() {
			return usageError{Err: fmt.Errorf("--status %q: not a run status", s)}
		}
		statuses = append(statuses, event.Status(s))
	}
	metadata, err := parseMetadata(c.Metadata)
	if err != nil {
		return usageError{Err: err}
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	runs, err := b.listRuns(env.Ctx, statuses, metadata, c.Limit)
	if err != nil {
		return err
	}
	if c.JSON {
		vs := make([]api.Run, 0, len(runs))
		for i := len(runs) - 1; i >= 0; i-- {
			vs = append(vs, runs[i])
		}
		return sandboxcli.WriteJSON(env.Stdout, vs...)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tMODEL\tCREATED\tTASK")
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Status, clip(r.Model, 30), r.Created.Local().Format("2006-01-02 15:04:05"), clip(oneLine(r.Task), 50))
	}
	return tw.Flush()
}

// RunsShowCmd is `airlock runs show RUN`.
type RunsShowCmd struct {
	ID   string `arg:"" name:"run" help:"Run id (or a unique part of it)."`
	JSON bool   `name:"json" help:"One JSON object."`
}

// Run shows a run.
func (c *RunsShowCmd) Run(env *Env) error {
	b, r, err := openRun(env, c.ID)
	if err != nil {
		return err
	}
	defer b.close()
	o, arts, err := b.outcome(env.Ctx, r.ID)
	if err != nil {
		return err
	}
	rep, err := gatherReported(env.Ctx, b, r.ID)
	if err != nil {
		return err
	}
	if c.JSON {
		type art struct {
			Name   string `json:"name"`
			Digest string `json:"digest"`
			Size   int64  `json:"size"`
		}
		v := struct {
			api.Run
			Artifacts []art `json:"artifacts"`
			// Sandbox is what the run's sandboxes reported about
			// themselves: untrusted data.
			Sandbox reported `json:"sandbox_events"`
		}{Run: o, Artifacts: []art{}, Sandbox: rep}
		for _, a := range arts {
			v.Artifacts = append(v.Artifacts, art{a.Name, a.Digest, a.Size})
		}
		return sandboxcli.WriteJSON(env.Stdout, v)
	}
	var steps int
	var usage event.Usage
	if o.Steps != nil {
		steps = *o.Steps
	}
	if o.Usage != nil {
		usage = *o.Usage
	}
	w := env.Stdout
	fmt.Fprintf(w, "run      %s\nstatus   %s\nmodel    %s\ntask     %s\ncreated  %s\n", o.ID, o.Status, o.Model, oneLine(o.Task), o.Created.Local().Format(time.RFC3339))
	if o.ParentRunID != "" {
		fmt.Fprintf(w, "parent   %s (event %d)\n", o.ParentRunID, o.ParentSeq)
	}
	if p := o.Policy; p != nil {
		fmt.Fprintf(w, "policy   %s\n", policyLine(event.PolicyResolved{Source: p.Source, Version: p.Version, BaseHash: p.BaseHash}, o.PolicyHash, true))
	} else if o.PolicyHash != "" {
		fmt.Fprintf(w, "policy   %s\n", o.PolicyHash)
	}
	if o.Image != "" {
		fmt.Fprintf(w, "image    %s\n", o.Image)
	}
	fmt.Fprintf(w, "steps    %d\ntokens   %d in, %d out\nevents   %d\n", steps, usage.InputTokens, usage.OutputTokens, o.Events)
	if usage.CostMicroUSD > 0 {
		fmt.Fprintf(w, "cost     %s credits\n", formatCredits(usage.CostMicroUSD))
	}
	if d := o.PayloadsDeleted; d != nil {
		fmt.Fprintf(w, "deleted  %d payloads deleted by retention on %s (steps, usage and summary went with them)\n", d.Count, d.At.UTC().Format(time.DateOnly))
	}
	if o.Reason != "" {
		fmt.Fprintf(w, "reason   %s\n", o.Reason)
	}
	if o.Summary != "" {
		fmt.Fprintf(w, "summary  %s\n", oneLine(o.Summary))
	}
	if v := o.Verification; v != nil {
		for _, ch := range v.Checks {
			mark := "pass"
			if !ch.Passed {
				mark = "FAIL"
			}
			fmt.Fprintf(w, "check    %s %s\n", mark, ch.Name)
		}
	}
	if c := o.Checkpoints; c != nil {
		fmt.Fprintf(w, "checkpoints %d: %s stored new, %s shared, workspace %s\n", c.Count,
			byteCount(c.StoredBytes), byteCount(c.SharedBytes), byteCount(c.TreeBytes))
	}
	for _, a := range arts {
		fmt.Fprintf(w, "artifact %s %s %s\n", a.Name, sandbox.FormatSize(a.Size), a.Digest)
	}
	rep.print(w)
	return nil
}

// RunsEventsCmd is `airlock runs events RUN`.
type RunsEventsCmd struct {
	ID   string `arg:"" name:"run" help:"Run id (or a unique part of it)."`
	JSON bool   `name:"json" help:"One JSON object per event: run_id, seq, type, time, payload, prev_hash, hash."`
	From int64  `help:"First seq to print." default:"1"`
}

// Run prints the log.
func (c *RunsEventsCmd) Run(env *Env) error {
	b, r, err := openRun(env, c.ID)
	if err != nil {
		return err
	}
	defer b.close()
	for from := max(c.From, 1); ; {
		page, err := b.events(env.Ctx, r.ID, from)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		if c.JSON {
			if err := sandboxcli.WriteJSON(env.Stdout, page...); err != nil {
				return err
			}
			from = page[len(page)-1].Seq + 1
			continue
		}
		for _, e := range page {
			fmt.Fprintf(env.Stdout, "%5d  %s  %-20s %s\n", e.Seq, e.Time.Local().Format("15:04:05.000"), e.Type, clip(string(e.Payload), 160))
		}
		from = page[len(page)-1].Seq + 1
	}
}

// RunsVerifyCmd is `airlock runs verify RUN`.
type RunsVerifyCmd struct {
	ID string `arg:"" name:"run" help:"Run id (or a unique part of it)."`
}

// Run checks the chain; exit 1 when broken.
func (c *RunsVerifyCmd) Run(env *Env) error {
	b, r, err := openRun(env, c.ID)
	if err != nil {
		return err
	}
	defer b.close()
	v, err := b.verify(env.Ctx, r)
	if err != nil {
		return err
	}
	if v.Broken != nil {
		fmt.Fprintf(env.Stderr, "airlock: run %s: the log does not verify after %d events: %s\n", r.ID, v.Events, userText(v.Broken))
		return exitCode(1)
	}
	deleted := ""
	if v.Deleted > 0 {
		// The chain covers each deleted payload's digest, so it still
		// verifies; say so, and when, rather than let the gap pass unsaid.
		deleted = fmt.Sprintf(", %d payloads deleted by retention on %s", v.Deleted, v.DeletedAt.UTC().Format(time.DateOnly))
	}
	fmt.Fprintf(env.Stdout, "run %s: %d events, hash chain verified%s (last %s)\n", r.ID, v.Events, deleted, shortHash(v.Last))
	return nil
}

// RunsCancelCmd is `airlock runs cancel RUN`.
type RunsCancelCmd struct {
	ID     string `arg:"" name:"run" help:"Run id (or a unique part of it)."`
	Reason string `help:"Why, for the log."`
}

// Run cancels and waits (up to a minute) for a driving process to let go.
func (c *RunsCancelCmd) Run(env *Env) error {
	return stopRun(env, c.ID, false, c.Reason)
}

// RunsPauseCmd is `airlock runs pause RUN`.
type RunsPauseCmd struct {
	ID     string `arg:"" name:"run" help:"Run id (or a unique part of it)."`
	Reason string `help:"Why, for the log."`
}

// Run pauses the run.
func (c *RunsPauseCmd) Run(env *Env) error {
	return stopRun(env, c.ID, true, c.Reason)
}

// openRun opens the backend (read-only) and finds the run arg names.
func openRun(env *Env, arg string) (backend, api.Run, error) {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return nil, api.Run{}, err
	}
	r, err := b.run(env.Ctx, arg)
	if err != nil {
		b.close()
		return nil, api.Run{}, err
	}
	return b, r, nil
}

func stopRun(env *Env, arg string, pause bool, reason string) error {
	b, r, err := openRun(env, arg)
	if err != nil {
		return err
	}
	defer b.close()
	if err := b.stop(env.Ctx, r.ID, pause, reason); err != nil {
		return err
	}
	what := "cancelled"
	if pause {
		what = "paused"
	}
	fmt.Fprintf(env.Stdout, "run %s %s\n", r.ID, what)
	return nil
}

// RunsResumeCmd is `airlock runs resume [RUN...]`.
type RunsResumeCmd struct {
	Runs []string `arg:"" optional:"" help:"Runs to resume (default: every unfinished run no process drives)."`
	Out  string   `help:"Directory the artifacts are written to (one run)." placeholder:"DIR"`
}

// Run resumes runs and stays in the foreground until they end.
func (c *RunsResumeCmd) Run(env *Env) error {
	several := len(c.Runs) != 1
	tl := newTimeline(env.Stdout, stdoutTTY(env), several)
	b, err := openBackend(env, hostOptions{timeline: tl})
	if err != nil {
		return err
	}
	defer b.close()
	var ids []string
	for _, a := range c.Runs {
		r, err := b.run(env.Ctx, a)
		if err != nil {
			return err
		}
		ids = append(ids, r.ID)
	}
	if len(c.Runs) == 0 {
		if ids, err = b.unfinished(env.Ctx); err != nil {
			return err
		}
		if len(ids) == 0 {
			fmt.Fprintln(env.Stdout, "no unfinished runs")
			return nil
		}
	}
	if len(ids) == 1 {
		return b.drive(ids[0], c.Out, true)
	}
	var mu sync.Mutex
	var failed error
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := b.drive(id, "", true)
			if err != nil {
				mu.Lock()
				if failed == nil || errors.As(failed, new(exitCode)) {
					failed = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// RunsForkCmd is `airlock runs fork RUN --at STEP`.
type RunsForkCmd struct {
	ID       string `arg:"" name:"run" help:"Run to fork (id or a unique part of it)."`
	At       int    `required:"" help:"Step after which the new run starts (0: from the start)."`
	Model    string `help:"Another model for the new run." placeholder:"PROVIDER:MODEL"`
	BaseURL  string `name:"base-url" help:"API base URL for --model." placeholder:"URL"`
	Script   string `help:"Another script for the new run; it starts at the fork point: its first turn is the model's first after step --at." placeholder:"FILE"`
	Policy   string `help:"Another policy for the new run: a file, or a stored policy NAME[@vN|@HASHPREFIX] when no such file exists." placeholder:"FILE|NAME"`
	PolicyAs string `name:"policy-name" help:"Store the --policy file as a version of this policy (default: the file's name without extension)." placeholder:"NAME"`
	MaxSteps int    `name:"max-steps" help:"Another step budget."`
	Detach   bool   `help:"Only create the new run (resume it later)."`
	Out      string `help:"Directory the artifacts are written to." placeholder:"DIR"`
}

// Run forks and drives the new run.
func (c *RunsForkCmd) Run(env *Env) error {
	return startRun(env, hostOptions{}, c.Detach, c.Out, func(b backend) (string, error) {
		q, err := c.request()
		if err != nil {
			return "", err
		}
		return b.fork(env.Ctx, c.ID, q)
	})
}

// request reads the flags into the fork's request; errors are usage
// errors. A stored policy (PolicyRef) is for the backend to read, as the
// parent's tenant's.
func (c *RunsForkCmd) request() (host.ForkRequest, error) {
	q := host.ForkRequest{AtStep: c.At, Model: c.Model, BaseURL: c.BaseURL, MaxSteps: c.MaxSteps}
	if c.Script != "" {
		if c.Model != "" {
			return q, usageError{Err: errors.New("--script and --model exclude each other")}
		}
		b, err := os.ReadFile(c.Script)
		if err != nil {
			return q, usageError{Err: fmt.Errorf("--script: %w", err)}
		}
		q.Script, q.ScriptName = string(b), c.Script
	}
	if c.Policy == "" && c.PolicyAs != "" {
		return q, usageError{Err: errors.New("--policy-name needs --policy FILE")}
	}
	if c.Policy != "" {
		pol, err := readRunPolicy(c.Policy, c.PolicyAs)
		if err != nil {
			return q, usageError{Err: err}
		}
		q.PolicyDocument, q.PolicySource, q.PolicyName, q.PolicyRef = string(pol.doc), pol.source, pol.name, pol.ref
	}
	return q, nil
}

// RunsReplayCmd is `airlock runs replay RUN`.
type RunsReplayCmd struct {
	ID   string `arg:"" name:"run" help:"Run to replay (id or a unique part of it)."`
	JSON bool   `name:"json" help:"One JSON object per difference: step, call_id, tool, field, run, replay."`
}

// Run replays and compares; exit 0 when the outcome is the same.
func (c *RunsReplayCmd) Run(env *Env) error {
	var tl *timeline
	if !c.JSON {
		tl = newTimeline(env.Stdout, stdoutTTY(env), false)
	}
	b, err := openBackend(env, hostOptions{timeline: tl})
	if err != nil {
		return err
	}
	defer b.close()
	h, err := b.localHost("airlock runs replay")
	if err != nil {
		return err
	}
	orig, err := b.run(env.Ctx, c.ID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(env.Ctx)
	defer cancel(nil)
	stop := onSignals(cancel)
	repID, diffs, err := h.h.Replay(ctx, orig.ID)
	stop()
	if err != nil {
		return hostError(err)
	}
	if c.JSON {
		if err := sandboxcli.WriteJSON(env.Stdout, diffs...); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "replay %s of %s: ", repID, orig.ID)
		if len(diffs) == 0 {
			fmt.Fprintln(env.Stdout, "same outcome at every step")
		} else {
			fmt.Fprintf(env.Stdout, "%d differences\n", len(diffs))
			for _, d := range diffs {
				where := ""
				if d.Step > 0 {
					where = fmt.Sprintf("step %d %s %s: ", d.Step, d.Tool, d.CallID)
				}
				fmt.Fprintf(env.Stdout, "  %s%s: run %q, replay %q\n", where, d.Field, clip(oneLine(d.Run), 100), clip(oneLine(d.Replay), 100))
			}
		}
	}
	if len(diffs) > 0 {
		return exitCode(1)
	}
	return nil
}

func stdoutTTY(env *Env) bool {
	f, ok := env.Stdout.(*os.File)
	return ok && isTerminal(f)
}

// parseMetadata reads --metadata KEY=VALUE flags; a key given twice keeps
// its last value.
func parseMetadata(flags []string) (map[string]string, error) {
	var md map[string]string
	for _, kv := range flags {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--metadata %q: want KEY=VALUE", clip(kv, 80))
		}
		if md == nil {
			md = map[string]string{}
		}
		md[k] = v
	}
	if err := event.CheckMetadata(md); err != nil {
		return nil, fmt.Errorf("--metadata: %s", strings.TrimPrefix(err.Error(), "event: "))
	}
	return md, nil
}

// byteCount writes n bytes for a reader: "812 B", "3.4 KiB", "1.2 GiB".
func byteCount(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	d, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		d *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(d), "KMGTPE"[exp])
}
