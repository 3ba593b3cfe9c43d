package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret/scan"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/template"
)

// Config is what a run is asked to do beyond its task. It is recorded in the
// run's first event (run.created), so any host process can resume, fork or
// replay the run from its log alone. Field names are part of the log format.
type Config struct {
	// Model is the provider spec: "anthropic:MODEL", "openai:MODEL",
	// "openai-responses:MODEL", "openai-compatible:MODEL", "script:NAME" or
	// "replay:RUN".
	Model   string `json:"model"`
	BaseURL string `json:"base_url,omitempty"`
	// Script is the digest of the script file of a scripted run, kept in the
	// blob store so that the run can go on after the file is gone.
	Script string `json:"script,omitempty"`
	// ScriptAfter is how many assistant turns of the conversation come
	// before the script's first: a fork given a new script starts it at the
	// fork point (its turn 1 answers the turn after the fork's step), and
	// the number stays with the run, so a resumed fork asks the script for
	// the turns after the ones it recorded.
	ScriptAfter int `json:"script_after,omitempty"`
	// Sandboxes are the run's named sandboxes; the first is where the
	// completion checks run. Each is provisioned on first use.
	Sandboxes []SandboxConfig `json:"sandboxes"`
	// Limits of every sandbox.
	Limits Limits `json:"limits"`
	// RootFS is a template root filesystem (an unpacked image) instead of
	// the host's system directories; it needs tar and gzip for restores.
	RootFS string `json:"rootfs,omitempty"`
	// Image, instead of RootFS, is the image of the host's store that
	// every sandbox's root is made of. A request may name it by tag; the
	// run records it by digest (NAME@sha256:HEX, or sha256:HEX for an
	// image no registry holds), resolved when the run is created, so a
	// resumed or recovered run, on this host or another, gets the same
	// image.
	Image string `json:"image,omitempty"`
	// Runtime isolates every sandbox of the run (sandbox.RuntimeNative,
	// the default, or sandbox.RuntimeGVisor): the policy's sandbox.runtime.
	Runtime string `json:"runtime,omitempty"`
	// WritableRoot lets every sandbox's commands write anywhere, into
	// the sandbox's own layer (sandbox.Spec.WritableRoot): the policy's
	// sandbox.root: writable.
	WritableRoot bool `json:"writable_root,omitempty"`
	// Sudo gives every sandbox a sudo command (sandbox.Spec.Sudo): the
	// policy's sandbox.sudo: true.
	Sudo bool `json:"sudo,omitempty"`
	// StaticReadOnly: the host leaves the read-only workspace and mounts
	// unchanged while the run's sandboxes run (sandbox.Spec.StaticReadOnly):
	// the policy's sandbox.static_read_only.
	StaticReadOnly bool `json:"static_read_only,omitempty"`
	// Template, when set, is the stored template the run's sandboxes
	// start from (its image, environment, limits and policy are in the
	// other fields): the run records its name, version and hash; its
	// start command runs and its readiness check passes in each sandbox
	// before the run uses it.
	Template *RunTemplate `json:"template,omitempty"`
	// Mounts are host directories shown in every sandbox.
	Mounts []Mount `json:"mounts,omitempty"`
	// Env is added to the environment of every command in the run's
	// sandboxes, as KEY=VALUE (sandbox.CheckEnv). Like all of Config it
	// is in the run's log: no place for a secret.
	Env []string `json:"env,omitempty"`
	// Checks run after the model calls finish.
	Checks Checks `json:"checks"`
	// Secrets says what happens to credentials the host was never given
	// in the task, tool results and the patch (the policy's secrets
	// section; its arguments part is the policy hook's).
	Secrets Secrets `json:"secrets,omitzero"`
	// Events bounds what the run's sandboxes report through their event
	// channel (the policy's events section).
	Events Events `json:"events,omitzero"`
	// Artifacts are globs (relative to /workspace) of files kept as the
	// run's artifacts after verification, besides the patch.
	Artifacts []string `json:"artifacts,omitempty"`
	// MCP are the run's MCP servers (the policy's mcp section), whose
	// tools the model may call (mcp.go).
	MCP []MCPServer `json:"mcp,omitempty"`
	// Budgets end the run when exhausted; zero means the default.
	MaxSteps int `json:"max_steps"`
	// TimeoutMS bounds the run's active wall time (paused time excluded).
	TimeoutMS int64 `json:"timeout_ms"`
	// MaxTokens bounds the input plus output tokens of all model calls;
	// zero means no bound.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// MaxSandboxCPUMS bounds the CPU time of all the run's sandboxes and
	// MaxEgressBytes the bytes through its egress proxies, both as the
	// host measures them; zero means no bound.
	MaxSandboxCPUMS int64 `json:"max_sandbox_cpu_ms,omitempty"`
	MaxEgressBytes  int64 `json:"max_egress_bytes,omitempty"`
	// MaxCredits bounds what the run's model calls may cost, in
	// micro-credits, priced by the host's table; zero means no bound.
	MaxCredits int64 `json:"max_credits,omitempty"`
	// ContextTokens is the model's context window, for fitting long
	// conversations; zero means 200,000.
	ContextTokens int `json:"context_tokens,omitempty"`
	// MaxResultBytes caps each tool result fed back to the model.
	MaxResultBytes int `json:"max_result_bytes,omitempty"`
	// CommandTimeoutMS is run_command's default timeout.
	CommandTimeoutMS int64 `json:"command_timeout_ms,omitempty"`
	// ApprovalTimeoutMS and ApprovalOnTimeout ("deny" or "allow") say how
	// long an approval of this run waits and what then happens; zero and
	// empty take the engine's.
	ApprovalTimeoutMS int64  `json:"approval_timeout_ms,omitempty"`
	ApprovalOnTimeout string `json:"approval_on_timeout,omitempty"`
	// ModelAttempts bounds the tries of one model call, the first
	// included (the provider's default, 5, when zero); SandboxAttempts
	// the tries of provisioning a sandbox, its workspace restored (2 when
	// zero): when every one failed, the run fails. RecoveryAttempts
	// bounds the drive sessions in a row that make no progress (no model
	// turn, snapshot, verification or decision on an approval), the first
	// included (4 when zero): a run recovered once more than that without
	// progress fails instead.
	ModelAttempts    int `json:"model_attempts,omitempty"`
	SandboxAttempts  int `json:"sandbox_attempts,omitempty"`
	RecoveryAttempts int `json:"recovery_attempts,omitempty"`
}

// SandboxConfig is one named sandbox of a run.
type SandboxConfig struct {
	Name string `json:"name"`
	// Workspace is the host directory the sandbox's /workspace starts as;
	// empty for an empty workspace.
	Workspace string `json:"workspace,omitempty"`
	// Mode is how the sandbox sees Workspace: sandbox.WorkspaceCOW (the
	// default: a copy-on-write view, the host copy never changes),
	// sandbox.WorkspaceRO (read-only) or sandbox.WorkspaceRW (changes
	// reach the host directory as they are made). An ro or rw sandbox that
	// is replaced (lost, or a recovery) sees the host directory again, as
	// it is then, instead of its last snapshot.
	Mode string `json:"mode,omitempty"`
	// Tar, instead of Workspace, is the digest of a gzipped tar in the
	// blob store (an uploaded workspace) that the sandbox's /workspace
	// starts as; it is unpacked inside the sandbox, like a snapshot, so
	// the host never unpacks what a client sent.
	Tar string `json:"tar,omitempty"`
	// Git, instead of Workspace or Tar, is a repository the sandbox's
	// /workspace starts as, fetched inside the sandbox through its egress
	// proxy (see GitSource).
	Git *GitSource `json:"git,omitempty"`
}

// mode returns the workspace mode of s.
func (s SandboxConfig) mode() string {
	if s.Mode == "" {
		return sandbox.WorkspaceCOW
	}
	return s.Mode
}

// Mount is a host directory shown in a run's sandboxes.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
}

// Limits are the resource limits of a run's sandboxes.
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes"`
	Pids        int64   `json:"pids"`
	CPUs        float64 `json:"cpus"`
	DiskBytes   int64   `json:"disk_bytes"`
}

// Secrets configures the secret scanner of a run (internal/secret/scan).
// The zero value scans and redacts.
type Secrets struct {
	// Off turns the scanner off.
	Off bool `json:"off,omitempty"`
	// Task, Results and Patch are what happens to a finding in each:
	// "redact" (the default when empty) or "keep"; Task may also be
	// "refuse".
	Task    string `json:"task,omitempty"`
	Results string `json:"results,omitempty"`
	Patch   string `json:"patch,omitempty"`
	// Allow and Disable adjust the scanner's rules (scan.Options).
	Allow   []string `json:"allow,omitempty"`
	Disable []string `json:"disable,omitempty"`
}

// scanner is the scanner s asks for, nil when it is off; the default one
// when s names rules this build does not know (a config recorded by
// another build): a run is never left unscanned by mistake.
func (s Secrets) scanner() *scan.Scanner {
	if s.Off {
		return nil
	}
	return scan.NewOrDefault(scan.Options{Allow: s.Allow, Disable: s.Disable})
}

// checkTask applies s to a run's task: it returns the task to record and
// the rules whose findings it redacted, or an ErrInvalid error when s
// refuses a task with findings.
func (s Secrets) checkTask(task string) (string, []string, error) {
	if s.Task == string(policy.SecretKeep) {
		return task, nil, nil
	}
	red, fs := s.scanner().Redact(task)
	ids := scan.IDs(fs)
	if len(ids) > 0 && s.Task == string(policy.SecretRefuse) {
		return "", nil, fmt.Errorf("%w: the task carries what looks like a secret (%s): give the run a credential through the policy instead, or set secrets.task: redact", ErrInvalid, strings.Join(ids, ", "))
	}
	return red, ids, nil
}

// Checks are a run's completion checks; they do not trust the model.
type Checks struct {
	// Commands must exit 0 in the first sandbox (sh -c, in /workspace).
	Commands []string `json:"commands,omitempty"`
	// Changed are workspace paths that must differ from the source.
	Changed []string `json:"changed,omitempty"`
	// OnlyChanged are globs; a change to a path outside all of them fails.
	OnlyChanged []string `json:"only_changed,omitempty"`
	// TimeoutMS bounds each command; zero means 10 minutes.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Defaults.
const (
	DefaultSandbox       = "main"
	DefaultMaxSteps      = 50
	DefaultTimeout       = 30 * time.Minute
	DefaultContextTokens = 200_000
	DefaultCheckTimeout  = 10 * time.Minute
	DefaultResultBytes   = 32 << 10
	// MaxSandboxes bounds a run's named sandboxes.
	MaxSandboxes = 8
	// MaxChecks bounds each list of checks and artifact globs.
	MaxChecks = 64
	// MaxAttempts bounds ModelAttempts, SandboxAttempts and
	// RecoveryAttempts.
	MaxAttempts = 11
)

var sandboxName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if len(c.Sandboxes) == 0 {
		c.Sandboxes = []SandboxConfig{{Name: DefaultSandbox}}
	}
	if c.MaxSteps <= 0 {
		c.MaxSteps = DefaultMaxSteps
	}
	if c.TimeoutMS <= 0 {
		c.TimeoutMS = DefaultTimeout.Milliseconds()
	}
	if c.ContextTokens <= 0 {
		c.ContextTokens = DefaultContextTokens
	}
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = DefaultResultBytes
	}
	if c.SandboxAttempts <= 0 {
		c.SandboxAttempts = 2
	}
	if c.RecoveryAttempts <= 0 {
		c.RecoveryAttempts = 4
	}
	if c.Checks.TimeoutMS <= 0 {
		c.Checks.TimeoutMS = DefaultCheckTimeout.Milliseconds()
	}
	if c.Limits == (Limits{}) {
		c.Limits = Limits{MemoryBytes: 1 << 30, Pids: 512, CPUs: 1, DiskBytes: 1 << 30}
	}
	return c
}

// Validate reports every problem of c (after defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("model: empty"))
	}
	if kind, _, _ := strings.Cut(c.Model, ":"); kind == "script" && c.Script == "" {
		errs = append(errs, errors.New("script: a scripted run needs its script"))
	}
	if err := scan.CheckOptions(scan.Options{Allow: c.Secrets.Allow, Disable: c.Secrets.Disable}); err != nil {
		errs = append(errs, err)
	}
	if len(c.MCP) > 0 {
		if err := checkMCP(c.MCP); err != nil {
			errs = append(errs, err)
		}
	}
	if ev := c.Events.policy(); true {
		if err := ev.Check(); err != nil {
			errs = append(errs, err)
		} else if _, err := policy.CompileEventRules(ev); err != nil {
			errs = append(errs, err)
		}
	}
	for _, a := range []struct{ name, v string }{{"task", c.Secrets.Task}, {"results", c.Secrets.Results}, {"patch", c.Secrets.Patch}} {
		switch a.v {
		case "", string(policy.SecretRedact), string(policy.SecretKeep):
		case string(policy.SecretRefuse):
			if a.name != "task" {
				errs = append(errs, fmt.Errorf("secrets.%s: refuse is for the task only", a.name))
			}
		default:
			errs = append(errs, fmt.Errorf("secrets.%s: %q is not redact, keep or refuse", a.name, a.v))
		}
	}
	if c.ScriptAfter < 0 {
		errs = append(errs, fmt.Errorf("script_after %d: want 0 or more", c.ScriptAfter))
	}
	if len(c.Sandboxes) > MaxSandboxes {
		errs = append(errs, fmt.Errorf("sandboxes: %d, at most %d", len(c.Sandboxes), MaxSandboxes))
	}
	seen := map[string]bool{}
	for i, s := range c.Sandboxes {
		if !sandboxName.MatchString(s.Name) {
			errs = append(errs, fmt.Errorf("sandboxes[%d]: name %q must match %s", i, s.Name, sandboxName))
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("sandboxes[%d]: name %q used twice", i, s.Name))
		}
		seen[s.Name] = true
		if s.Workspace != "" && !filepath.IsAbs(s.Workspace) {
			errs = append(errs, fmt.Errorf("sandboxes[%d]: workspace %q is not an absolute path", i, s.Workspace))
		}
		if s.Tar != "" && (s.Workspace != "" || blob.ValidDigest(s.Tar) != nil) {
			errs = append(errs, fmt.Errorf("sandboxes[%d]: tar %q: want a blob digest, and no workspace directory beside it", i, s.Tar))
		}
		if s.Git != nil {
			if s.Workspace != "" || s.Tar != "" {
				errs = append(errs, fmt.Errorf("sandboxes[%d]: a git source and a workspace directory or tar: want one source", i))
			}
			if err := s.Git.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("sandboxes[%d]: %w", i, err))
			}
		}
		switch s.Mode {
		case "", sandbox.WorkspaceCOW:
		case sandbox.WorkspaceRO, sandbox.WorkspaceRW:
			if s.Workspace == "" {
				errs = append(errs, fmt.Errorf("sandboxes[%d]: workspace mode %s needs a workspace directory", i, s.Mode))
			}
			if i == 0 && s.Mode == sandbox.WorkspaceRW && (len(c.Checks.Changed) > 0 || len(c.Checks.OnlyChanged) > 0) {
				errs = append(errs, fmt.Errorf("sandboxes[%d]: the changed and only_changed checks compare with an unchanged source, which workspace mode rw does not keep", i))
			}
		default:
			errs = append(errs, fmt.Errorf("sandboxes[%d]: workspace mode %q: want cow, ro or rw", i, s.Mode))
		}
	}
	for name, list := range map[string][]string{
		"checks.commands": c.Checks.Commands, "checks.changed": c.Checks.Changed,
		"checks.only_changed": c.Checks.OnlyChanged, "artifacts": c.Artifacts,
	} {
		if len(list) > MaxChecks {
			errs = append(errs, fmt.Errorf("%s: %d entries, at most %d", name, len(list), MaxChecks))
		}
		for i, v := range list {
			if strings.TrimSpace(v) == "" || strings.ContainsRune(v, 0) {
				errs = append(errs, fmt.Errorf("%s[%d]: empty or contains NUL", name, i))
			}
		}
	}
	// The globs a policy document, a run's request and the command line
	// give are held to one check (a glob outside the workspace matches
	// nothing, and is refused).
	for _, l := range []struct {
		name string
		list []string
	}{{"checks.only_changed", c.Checks.OnlyChanged}, {"artifacts", c.Artifacts}} {
		for i, g := range l.list {
			if strings.TrimSpace(g) == "" || strings.ContainsRune(g, 0) {
				continue // reported above
			}
			if _, err := policy.WorkspaceGlob(g); err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", l.name, i, err))
			}
		}
	}
	for _, a := range []int{c.ModelAttempts, c.SandboxAttempts, c.RecoveryAttempts} {
		if a < 0 || a > MaxAttempts {
			errs = append(errs, fmt.Errorf("model_attempts, sandbox_attempts and recovery_attempts: want 1-%d", MaxAttempts))
			break
		}
	}
	if c.RootFS != "" && !filepath.IsAbs(c.RootFS) {
		errs = append(errs, fmt.Errorf("rootfs %q is not an absolute path", c.RootFS))
	}
	if !sandbox.ValidRuntime(c.Runtime) {
		errs = append(errs, fmt.Errorf("runtime %q: want native or gvisor", c.Runtime))
	}
	if c.RootFS != "" && c.Image != "" {
		errs = append(errs, errors.New("rootfs and image exclude each other"))
	}
	if t := c.Template; t != nil {
		if err := t.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	var own []string // what the engine sets itself
	for _, kv := range sandboxEnv {
		k, _, _ := strings.Cut(kv, "=")
		own = append(own, k)
	}
	// An entry the engine sets the same way (a template's env, say) is
	// no conflict.
	env := slices.DeleteFunc(slices.Clone(c.Env), func(kv string) bool { return slices.Contains(sandboxEnv, kv) })
	if err := sandbox.CheckEnv(env, own...); err != nil {
		errs = append(errs, fmt.Errorf("env: %w", err))
	}
	for i, m := range c.Mounts {
		if !filepath.IsAbs(m.Source) || !path.IsAbs(m.Target) || path.Clean(m.Target) == "/" || path.Clean(m.Target) == "/workspace" {
			errs = append(errs, fmt.Errorf("mounts[%d]: source and target must be absolute, and the target not / or /workspace", i))
		}
	}
	for _, p := range c.Checks.Changed {
		if rel, err := workspaceRel(p); err != nil || rel == "." {
			errs = append(errs, fmt.Errorf("checks.changed: %q is not a path inside /workspace", p))
		}
	}
	if c.MaxSteps < 1 || c.MaxSteps > 10_000 {
		errs = append(errs, fmt.Errorf("max_steps: %d, want 1..10000", c.MaxSteps))
	}
	if c.MaxTokens < 0 || c.TimeoutMS < 0 || c.ApprovalTimeoutMS < 0 || c.MaxSandboxCPUMS < 0 || c.MaxEgressBytes < 0 || c.MaxCredits < 0 {
		errs = append(errs, errors.New("budgets and timeouts must not be negative"))
	}
	switch c.ApprovalOnTimeout {
	case "", "deny", "allow":
	default:
		errs = append(errs, fmt.Errorf("approval_on_timeout %q: want deny or allow", c.ApprovalOnTimeout))
	}
	return errors.Join(errs...)
}

// sandbox returns the config of the sandbox called name.
func (c Config) sandbox(name string) (SandboxConfig, bool) {
	for _, s := range c.Sandboxes {
		if s.Name == name {
			return s, true
		}
	}
	return SandboxConfig{}, false
}

// workspaceRel turns a path given relative to /workspace, or absolute under
// it, into a clean relative path; anything outside is an error.
func workspaceRel(p string) (string, error) {
	p = strings.TrimSpace(p)
	if path.IsAbs(p) {
		p = path.Clean(p)
		if p != "/workspace" && !strings.HasPrefix(p, "/workspace/") {
			return "", fmt.Errorf("%q is outside /workspace", p)
		}
		p = strings.TrimPrefix(strings.TrimPrefix(p, "/workspace"), "/")
	}
	if p == "" {
		return ".", nil
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q is outside /workspace", p)
	}
	return c, nil
}

// matchGlob reports whether the workspace-relative path rel matches glob g:
// path.Match on the whole path, or, for a glob ending in "/**", anything
// below that directory.
func matchGlob(g, rel string) bool {
	g = strings.TrimPrefix(g, "/workspace/")
	if dir, ok := strings.CutSuffix(g, "/**"); ok {
		if m, _ := path.Match(dir, rel); m {
			return true
		}
		for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
			if m, _ := path.Match(dir, d); m {
				return true
			}
		}
		return false
	}
	m, _ := path.Match(g, rel)
	return m
}

func decodeConfig(raw json.RawMessage) (Config, error) {
	var c Config
	if len(raw) == 0 {
		return c, errors.New("engine: run.created has no config")
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, fmt.Errorf("engine: decode run config: %w", err)
	}
	return c.withDefaults(), nil
}

// DecideTool answers the engine's policy hook (Options.Policy) from doc,
// the run's policy document: the call, the run and its usage and time so
// far, as the document's tool rules see them.
func DecideTool(doc *policy.Document, q PolicyQuery) event.PolicyDecision {
	d := doc.DecideTool(policy.ToolRequest{
		Tool: q.Call.Name, Args: q.Call.Input, External: q.Call.External, Sandbox: q.Call.Sandbox,
		Run: policy.RunInfo{
			Tenant: q.Run.Tenant, Task: q.Run.Task, Step: int64(q.Step),
			Tokens: q.Usage.InputTokens + q.Usage.OutputTokens, ElapsedSeconds: int64(q.Elapsed / time.Second),
		},
	})
	return event.PolicyDecision{Decision: string(d.Action), Rule: d.Rule, Reason: d.Reason, Secrets: d.Secrets}
}

// PolicyConfig is the Config a policy document asks for: its budgets,
// sandbox limits, workspace, mounts, checks, artifacts, approvals and
// retries. The caller adds the model and anything the document does not
// say (context window, extra sandboxes).
func PolicyConfig(doc *policy.Document) Config {
	lim := doc.Sandbox.Limits
	cfg := Config{
		MaxSteps:         int(doc.Budgets.MaxSteps),
		TimeoutMS:        time.Duration(doc.Budgets.MaxWallTime).Milliseconds(),
		MaxTokens:        doc.Budgets.MaxTokens,
		MaxSandboxCPUMS:  doc.Budgets.MaxSandboxCPUSeconds * 1000,
		MaxEgressBytes:   int64(doc.Budgets.MaxEgressBytes),
		MaxCredits:       doc.Budgets.MaxCredits * 1_000_000,
		CommandTimeoutMS: time.Duration(lim.CommandTimeout).Milliseconds(),
		ModelAttempts:    int(doc.Retries.Model) + 1,
		SandboxAttempts:  int(doc.Retries.Sandbox) + 1,
		RecoveryAttempts: int(doc.Retries.Recovery) + 1,
		Artifacts:        slices.Clone(doc.Artifacts),
		MCP:              mcpServersOf(doc),
		Checks: Checks{
			Commands:    slices.Clone(doc.Verify.Commands),
			Changed:     slices.Clone(doc.Verify.Changed),
			OnlyChanged: slices.Clone(doc.Verify.OnlyChanged),
			TimeoutMS:   time.Duration(doc.Verify.Timeout).Milliseconds(),
		},
		Secrets: Secrets{
			Off: doc.Secrets.Off, Task: string(doc.Secrets.Task), Results: string(doc.Secrets.Results), Patch: string(doc.Secrets.Patch),
			Allow: slices.Clone(doc.Secrets.Allow), Disable: slices.Clone(doc.Secrets.Disable),
		},
		Events:            EventsOf(doc.Events),
		ApprovalTimeoutMS: time.Duration(doc.Approvals.Timeout).Milliseconds(),
		ApprovalOnTimeout: string(doc.Approvals.OnTimeout),
		Limits:            Limits{MemoryBytes: int64(lim.Memory), Pids: lim.Pids, CPUs: lim.CPUs, DiskBytes: int64(lim.Disk)},
		RootFS:            doc.Sandbox.RootFS,
		Image:             doc.Sandbox.Image,
		Runtime:           doc.Sandbox.Runtime,
		WritableRoot:      doc.Sandbox.Root == policy.RootWritable,
		Sudo:              doc.Sandbox.Sudo != nil && *doc.Sandbox.Sudo,
		StaticReadOnly:    doc.Sandbox.StaticReadOnly,
	}
	main := SandboxConfig{Name: DefaultSandbox}
	if ws := doc.Sandbox.Workspace; ws.Source != "" {
		main.Workspace, main.Mode = ws.Source, ws.Mode
	}
	cfg.Sandboxes = []SandboxConfig{main}
	for _, m := range doc.Sandbox.Mounts {
		cfg.Mounts = append(cfg.Mounts, Mount{Source: m.Source, Target: m.Target, ReadOnly: m.Mode != policy.MountRW})
	}
	return cfg
}

// RunTemplate is what a run's sandboxes take of the stored template they
// start from, beyond its image, environment, limits and policy.
type RunTemplate struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
	// Hash is the stored version's (store.TemplateVersion.Hash).
	Hash  string           `json:"hash"`
	Start template.Command `json:"start,omitempty"`
	Ready *template.Ready  `json:"ready,omitempty"`
}

func (t *RunTemplate) validate() error {
	if store.ValidateTemplateName(t.Name) != nil || t.Version < 1 {
		return fmt.Errorf("template %q v%d: want a stored template's name and version", t.Name, t.Version)
	}
	if err := t.template().Validate(); err != nil {
		return fmt.Errorf("template %s v%d: %w", t.Name, t.Version, err)
	}
	return nil
}

// template is t as package template brings a sandbox to readiness with.
func (t *RunTemplate) template() *template.Template {
	return &template.Template{Image: "-", Start: t.Start, Ready: t.Ready}
}
