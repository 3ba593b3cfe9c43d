package cli

import (
	"context"
	"encoding/json"
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

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/store"
	"golang.org/x/sys/unix"
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
	Env       []string      `short:"e" sep:"none" help:"Environment variable KEY=VALUE of every command in the run's sandboxes (repeatable). It is recorded in the run's log, so a resumed run has it too: not for secrets (bind those with a policy credential)." placeholder:"KEY=VALUE"`
}

// Run creates the run and drives it in the foreground (against a server:
// follows it as the server's workers drive it).
func (c *AgentRunCmd) Run(env *Env) error {
	return startRun(env, hostOptions{keyFile: c.KeyFile}, c.Detach, c.Out, func(b backend) (string, error) {
		return b.create(env.Ctx, c)
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

// request builds the run from the policy document (the built-in default
// when none is given) and the flags, which override it; --verify,
// --verify-changed, --verify-only-changed and --artifact add to the
// policy's lists.
func (c *AgentRunCmd) request(env *Env) (engine.Request, error) {
	var errs []error
	req := engine.Request{Task: c.Task}
	if strings.TrimSpace(c.Task) == "" {
		errs = append(errs, errors.New("the task is empty"))
	}
	var err error
	if req.Metadata, err = parseMetadata(c.Metadata); err != nil {
		errs = append(errs, err)
	}
	if c.MaxSteps < 0 {
		errs = append(errs, fmt.Errorf("--max-steps %d: want at least 1", c.MaxSteps))
	}
	if c.Timeout < 0 || c.MaxTokens < 0 {
		errs = append(errs, errors.New("--timeout and --max-tokens must not be negative"))
	}
	doc := policy.Default()
	if c.Policy == "" && c.PolicyAs != "" {
		errs = append(errs, errors.New("--policy-name needs --policy FILE"))
	}
	if c.Policy != "" {
		p, err := readRunPolicy(c.Policy, c.PolicyAs)
		if err == nil && p.ref != "" {
			p, err = p.loadStoredFrom(env, event.LocalTenant)
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			// A file's document is recorded (by the engine) as a version
			// of p.name; a stored version is not recorded again.
			doc = p.parsed
			req.Policy, req.PolicySource, req.PolicyName, req.PolicyVersion = p.doc, p.source, p.name, p.version
			if p.name != "" {
				req.PolicyBy = whoami(env)
			}
		}
	}
	doc, changed, ferr := c.applyFlags(doc)
	if ferr != nil {
		errs = append(errs, ferr)
	} else if changed {
		// The flags are shorthand for the document the run records; the
		// policy given (the file still recorded as a version of its name)
		// is the one they changed, whose hash the run records too.
		req.Flags, req.BasePolicy, req.Policy = true, req.Policy, doc.Canonical()
	}
	cfg := engine.PolicyConfig(doc)
	cfg.Model, cfg.BaseURL, cfg.ContextTokens = c.Model, c.BaseURL, c.Context
	switch {
	case c.Script != "" && c.Model != "":
		errs = append(errs, errors.New("--script and --model exclude each other"))
	case c.Script != "":
		b, err := os.ReadFile(c.Script)
		if err == nil {
			_, err = model.ParseScript(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--script %s: %w", c.Script, err))
		}
		req.Script = b
		cfg.Model = "script:" + filepath.Base(c.Script)
	case c.Model == "":
		errs = append(errs, errors.New("give --model PROVIDER:MODEL or --script FILE"))
	}
	if c.GitRef != "" && c.Git == "" {
		errs = append(errs, errors.New("--git-ref goes with --git"))
	}
	if c.Git != "" {
		g := engine.GitSource{URL: c.Git, Ref: c.GitRef}
		switch err := g.Validate(); {
		case err != nil:
			errs = append(errs, fmt.Errorf("--git: %w", err))
		case cfg.Sandboxes[0].Workspace != "":
			errs = append(errs, errors.New("--git and a workspace directory (--workspace or sandbox.workspace.source) exclude each other"))
		default:
			cfg.Sandboxes[0].Git = &g
		}
	}
	if ws := cfg.Sandboxes[0].Workspace; ws != "" {
		name := "--workspace " + c.Workspace
		if c.Workspace == "" {
			name = "sandbox.workspace.source " + ws
		}
		if fi, err := os.Stat(ws); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("%s: not a directory", name))
		}
	}
	for _, s := range c.Sandbox {
		name, dir, _ := strings.Cut(s, "=")
		sc := engine.SandboxConfig{Name: name}
		if dir != "" {
			abs, err := filepath.Abs(dir)
			if err != nil {
				errs = append(errs, err)
			}
			sc.Workspace = abs
		}
		cfg.Sandboxes = append(cfg.Sandboxes, sc)
	}
	if err := sandbox.CheckEnv(c.Env, host.GatewayEnv...); err != nil {
		errs = append(errs, fmt.Errorf("--env: %w", err))
	}
	cfg.Env = c.Env
	req.Config = cfg
	return req, errors.Join(errs...)
}

// applyFlags writes the flags into doc, which it may change: they are
// shorthand for the document's fields. It returns the document the run
// uses and whether any flag changed it; a changed document is validated as
// a whole, like one read from a file.
func (c *AgentRunCmd) applyFlags(doc *policy.Document) (*policy.Document, bool, error) {
	before := string(doc.Canonical())
	var errs []error
	b, lim := &doc.Budgets, &doc.Sandbox.Limits
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

// foreground drives a run with Ctrl-C cancelling it and SIGTERM detaching
// from it, writes its artifacts, and maps its status to the exit status.
func (h *local) foreground(id, out string, drive func(context.Context) (engine.Outcome, error)) error {
	ctx, cancel := context.WithCancelCause(h.env.Ctx)
	defer cancel(nil)
	stop := onSignals(cancel)
	defer stop()
	o, err := drive(ctx)
	if err != nil {
		if errors.Is(context.Cause(ctx), errDetached) {
			fmt.Fprintf(h.env.Stderr, "airlock: %v: airlock runs resume %s\n", errDetached, id)
			return exitCode(1)
		}
		return err
	}
	return h.report(o, out)
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
				cancel(engine.ErrCancelled)
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

// report writes the artifacts out and says where everything is.
func (h *local) report(o engine.Outcome, out string) error {
	return report(h.env, o, out, h.copyBlob)
}

// report writes a run's artifacts out, fetching each with fetch, and
// says where everything is.
func report(env *Env, o engine.Outcome, out string, fetch func(a store.Artifact, w io.Writer) error) error {
	w := env.Stdout
	if len(o.Artifacts) > 0 {
		if out == "" {
			out = filepath.Join(env.Home, "runs", o.RunID)
		}
		written, err := writeArtifacts(o.Artifacts, out, fetch)
		if err != nil {
			return err
		}
		for _, p := range written {
			fmt.Fprintf(w, "wrote %s\n", p)
		}
	}
	// A completed run exits 0 whether or not anything checked the model's
	// claim: its line says which it is.
	fmt.Fprintf(w, "run %s: %s%s\n", o.RunID, o.Status, unverified(o))
	fmt.Fprintf(w, "log: airlock runs events %s   (verify: airlock runs verify %s)\n", o.RunID, o.RunID)
	switch o.Status {
	case event.StatusCompleted:
		return nil
	case event.StatusPaused:
		fmt.Fprintf(w, "resume: airlock runs resume %s\n", o.RunID)
	}
	return exitCode(1)
}

// unverified is what follows a run's status on its last lines when it
// completed with no check run on its result.
func unverified(o engine.Outcome) string {
	if o.Status != event.StatusCompleted || o.Verification != nil && len(o.Verification.Checks) > 0 {
		return ""
	}
	return " (not verified: no checks configured)"
}

// writeArtifacts copies artifacts into dir, each fetched by fetch. Names
// come from the sandbox: they are written through an os.Root, so none can
// land outside dir.
func writeArtifacts(arts []store.Artifact, dir string, fetch func(a store.Artifact, w io.Writer) error) ([]string, error) {
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

// copyBlob writes artifact a from the blob store to w.
func (h *local) copyBlob(a store.Artifact, w io.Writer) error {
	r, err := h.blobs.Open(h.env.Ctx, a.Digest)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
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
}

// toJSON is the stable JSON form of a run: the API's (without the
// fields only its GET of one run has), so that a run prints the same from
// this host's store and from a server.
func toJSON(r store.Run) api.Run {
	j := api.Run{ID: r.ID, Tenant: r.Tenant, Status: r.Status, Model: r.Model, Task: r.Task, Created: r.Created.UTC(), Updated: r.Updated.UTC(),
		ParentRunID: r.ParentRunID, ParentSeq: r.ParentSeq, Events: r.LastSeq, PolicyHash: r.PolicyHash}
	if !r.Finished.IsZero() {
		f := r.Finished.UTC()
		j.Finished = &f
	}
	if !r.LastHash.IsZero() {
		j.LastHash = r.LastHash.String()
	}
	return j
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
			vs = append(vs, toJSON(runs[i]))
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
	o, err := b.outcome(env.Ctx, r)
	if err != nil {
		return err
	}
	pol, err := policyResolved(env.Ctx, b, r.ID)
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
			Steps        int                       `json:"steps"`
			Usage        event.Usage               `json:"usage"`
			Reason       string                    `json:"reason,omitempty"`
			Summary      string                    `json:"summary,omitempty"`
			Verification *event.VerificationResult `json:"verification,omitempty"`
			Artifacts    []art                     `json:"artifacts"`
		}{Run: toJSON(r), Steps: o.Steps, Usage: o.Usage, Reason: o.Reason, Summary: o.Summary, Verification: o.Verification, Artifacts: []art{}}
		if pol != nil {
			v.Policy = &api.RunPolicy{Source: pol.Source, Version: pol.Version, BaseHash: pol.BaseHash}
		}
		for _, a := range o.Artifacts {
			v.Artifacts = append(v.Artifacts, art{a.Name, a.Digest, a.Size})
		}
		return sandboxcli.WriteJSON(env.Stdout, v)
	}
	w := env.Stdout
	fmt.Fprintf(w, "run      %s\nstatus   %s\nmodel    %s\ntask     %s\ncreated  %s\n", r.ID, r.Status, r.Model, oneLine(r.Task), r.Created.Local().Format(time.RFC3339))
	if r.ParentRunID != "" {
		fmt.Fprintf(w, "parent   %s (event %d)\n", r.ParentRunID, r.ParentSeq)
	}
	if pol != nil {
		fmt.Fprintf(w, "policy   %s\n", policyLine(*pol, r.PolicyHash, true))
	} else if r.PolicyHash != "" {
		fmt.Fprintf(w, "policy   %s\n", r.PolicyHash)
	}
	fmt.Fprintf(w, "steps    %d\ntokens   %d in, %d out\nevents   %d\n", o.Steps, o.Usage.InputTokens, o.Usage.OutputTokens, r.LastSeq)
	if o.Usage.CostMicroUSD > 0 {
		fmt.Fprintf(w, "cost     %s credits\n", formatCredits(o.Usage.CostMicroUSD))
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
	for _, a := range o.Artifacts {
		fmt.Fprintf(w, "artifact %s %s %s\n", a.Name, sandbox.FormatSize(a.Size), a.Digest)
	}
	return nil
}

// policyResolved returns run id's policy.resolved event, which its first
// events hold; nil when it has none.
func policyResolved(ctx context.Context, b backend, id string) (*event.PolicyResolved, error) {
	evs, err := b.events(ctx, id, 1)
	if err != nil {
		return nil, err
	}
	for _, e := range evs[:min(len(evs), 4)] {
		if e.Type != event.TypePolicyResolved {
			continue
		}
		var p event.PolicyResolved
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return nil, fmt.Errorf("run %s: policy.resolved: %w", id, err)
		}
		return &p, nil
	}
	return nil, nil
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
	n, last, broken, err := b.verify(env.Ctx, r)
	if err != nil {
		return err
	}
	if broken != nil {
		fmt.Fprintf(env.Stderr, "airlock: run %s: the log does not verify after %d events: %s\n", r.ID, n, userText(broken))
		return exitCode(1)
	}
	fmt.Fprintf(env.Stdout, "run %s: %d events, hash chain verified (last %s)\n", r.ID, n, shortHash(last))
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
func openRun(env *Env, arg string) (backend, store.Run, error) {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return nil, store.Run{}, err
	}
	r, err := b.run(env.Ctx, arg)
	if err != nil {
		b.close()
		return nil, store.Run{}, err
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
		return b.fork(env.Ctx, c)
	})
}

// options reads the flags into the fork's options; errors are usage
// errors. A stored policy (pol.ref) is for the caller to read.
func (c *RunsForkCmd) options() (engine.ForkOptions, runPolicy, error) {
	o := engine.ForkOptions{Model: c.Model, BaseURL: c.BaseURL, MaxSteps: c.MaxSteps}
	var pol runPolicy
	if c.Script != "" {
		if c.Model != "" {
			return o, pol, usageError{Err: errors.New("--script and --model exclude each other")}
		}
		b, err := os.ReadFile(c.Script)
		if err != nil {
			return o, pol, usageError{Err: fmt.Errorf("--script: %w", err)}
		}
		o.Script, o.Model = b, "script:"+filepath.Base(c.Script)
	}
	if c.Policy == "" && c.PolicyAs != "" {
		return o, pol, usageError{Err: errors.New("--policy-name needs --policy FILE")}
	}
	if c.Policy != "" {
		var err error
		if pol, err = readRunPolicy(c.Policy, c.PolicyAs); err != nil {
			return o, pol, usageError{Err: err}
		}
		o.Policy, o.PolicySource = pol.doc, pol.source
	}
	return o, pol, nil
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
	orig, err := h.resolve(env.Ctx, c.ID)
	if err != nil {
		return err
	}
	rep, err := h.eng.Replay(env.Ctx, orig.ID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(env.Ctx)
	defer cancel(nil)
	stop := onSignals(cancel)
	_, err = h.eng.Drive(ctx, rep.ID)
	stop()
	if err != nil {
		return err
	}
	diffs, err := h.eng.Compare(env.Ctx, orig.ID, rep.ID)
	if err != nil {
		return err
	}
	if c.JSON {
		if err := sandboxcli.WriteJSON(env.Stdout, diffs...); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "replay %s of %s: ", rep.ID, orig.ID)
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
