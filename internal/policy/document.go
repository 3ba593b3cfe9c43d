package policy

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Sandbox is the execution environment of a run's sandboxes.
type Sandbox struct {
	// RootFS is an absolute host path of an unpacked root filesystem the
	// sandbox starts from, read-only; empty means the host's system
	// directories.
	RootFS string `yaml:"rootfs"`
	// Image is an image of the host's store the sandbox's root is made
	// of, instead of RootFS: NAME[:TAG], resolved to its digest when a run
	// starts (the run records the digest, and keeps it when resumed), or
	// NAME@sha256:HEX or sha256:HEX, a pin. Empty means none.
	Image string `yaml:"image,omitempty"`
	// Workspace is what /workspace starts as.
	Workspace Workspace `yaml:"workspace"`
	// Mounts are extra bind mounts from the host.
	Mounts []Mount `yaml:"mounts"`
	// Limits bound each sandbox's resources.
	Limits Limits `yaml:"limits"`
	// RequireHardLimits makes sandbox creation fail when the machine cannot
	// enforce the memory, pids or CPU limit (default true).
	RequireHardLimits bool `yaml:"require_hard_limits"`
	// Runtime isolates the sandboxes: RuntimeNative (default, empty) or
	// RuntimeGVisor.
	Runtime string `yaml:"runtime,omitempty"`
	// Root is RootReadOnly or RootWritable; empty is the consumer's
	// default: read-only for runs, writable for E2B sandboxes (E2B's is a
	// whole writable machine).
	Root string `yaml:"root,omitempty"`
	// Sudo gives the sandboxes a sudo command (to their own root, never
	// the host's); unset is the consumer's default: off for runs, on for
	// E2B sandboxes (E2B's user has a passwordless sudo).
	Sudo *bool `yaml:"sudo,omitempty"`
	// StaticReadOnly promises that the host leaves the read-only
	// workspace and read-only mounts unchanged while a sandbox runs: the
	// native runtime then shows them without naming their host paths in
	// mountinfo (Linux 6.13; sandbox.Spec.StaticReadOnly), at the price of
	// missing changes the host makes anyway.
	StaticReadOnly bool `yaml:"static_read_only,omitempty"`
}

// The sandbox roots (Sandbox.Root).
const (
	// RootReadOnly: commands write only to /workspace, home and /tmp.
	RootReadOnly = "read-only"
	// RootWritable: commands write anywhere their user may, into the
	// sandbox's own upper layer (in its disk limit, removed with it); the
	// host's or the image's files never change.
	RootWritable = "writable"
)

// The sandbox runtimes.
const (
	RuntimeNative = "native" // namespaces, seccomp, Landlock, cgroups on the host's kernel (default)
	RuntimeGVisor = "gvisor" // gVisor (runsc): system calls reach gVisor's kernel, not the host's
)

// The workspace modes.
const (
	WorkspaceCOW = "cow" // an overlay over the source: the host copy never changes (default)
	WorkspaceRO  = "ro"  // the source, read-only
	WorkspaceRW  = "rw"  // the source, writable: changes reach the host
)

// The mount modes.
const (
	MountRO = "ro" // read-only (default)
	MountRW = "rw" // writable: changes reach the host
)

// Workspace says what /workspace starts as.
type Workspace struct {
	// Source is an absolute host directory; empty gives an empty workspace
	// (or the one the command line names).
	Source string `yaml:"source"`
	// Mode is WorkspaceCOW (default), WorkspaceRO or WorkspaceRW.
	Mode string `yaml:"mode"`
}

// Mount is an extra bind mount from the host into every sandbox.
type Mount struct {
	// Source is an absolute host path.
	Source string `yaml:"source"`
	// Target is a clean absolute path inside the sandbox; /, /proc, /dev,
	// /etc and /run/airlock are reserved.
	Target string `yaml:"target"`
	// Mode is MountRO (default) or MountRW.
	Mode string `yaml:"mode"`
}

// Limits bound a sandbox's resources. Memory, Pids, CPUs, Disk and
// CommandTimeout are always set (a document may change them, not remove
// them); TTL and Output are optional, 0 meaning no bound from the policy.
type Limits struct {
	Memory Size    `yaml:"memory"`
	Pids   int64   `yaml:"pids"`
	CPUs   float64 `yaml:"cpus"`
	// Disk bounds each writable layer (workspace changes, home, /tmp).
	Disk Size `yaml:"disk"`
	// CommandTimeout bounds one command's wall clock.
	CommandTimeout Duration `yaml:"command_timeout"`
	// TTL ends a sandbox this long after it was created.
	TTL Duration `yaml:"ttl,omitempty"`
	// Output caps the captured output of one command.
	Output Size `yaml:"output,omitempty"`
}

// Budgets end a run when one is spent. MaxSteps and MaxWallTime are always
// set; the others are optional, 0 meaning no bound from the policy.
type Budgets struct {
	MaxSteps  int64 `yaml:"max_steps"`
	MaxTokens int64 `yaml:"max_tokens,omitempty"`
	// MaxWallTime bounds the run's active wall time (paused time excluded).
	MaxWallTime          Duration `yaml:"max_wall_time"`
	MaxSandboxCPUSeconds int64    `yaml:"max_sandbox_cpu_seconds,omitempty"`
	MaxEgressBytes       Size     `yaml:"max_egress_bytes,omitempty"`
	MaxCredits           int64    `yaml:"max_credits,omitempty"`
}

// Approvals say who may answer a decision of "ask" and how long it waits.
type Approvals struct {
	// Approvers are the names of the people who may approve; empty means
	// any local user of the host.
	Approvers []string `yaml:"approvers"`
	// Timeout is how long an approval waits (default 15m).
	Timeout Duration `yaml:"timeout"`
	// OnTimeout is what an unanswered approval becomes: Deny (default) or
	// Allow.
	OnTimeout Verdict `yaml:"on_timeout"`
}

// MayDecide reports whether the one named by any of names (a user, a uid,
// an API key id) may decide the run's approvals: anyone when Approvers is
// empty, else one it lists. Empty names match nothing.
func (a Approvals) MayDecide(names ...string) bool {
	if len(a.Approvers) == 0 {
		return true
	}
	for _, n := range names {
		if n != "" && slices.Contains(a.Approvers, n) {
			return true
		}
	}
	return false
}

// Verify are a run's completion checks.
type Verify struct {
	// Commands must exit 0 in the run's first sandbox (sh -c, in /workspace).
	Commands []string `yaml:"commands"`
	// Changed are workspace paths that must differ from the source.
	Changed []string `yaml:"changed"`
	// OnlyChanged are globs; a change to a path outside all of them fails.
	OnlyChanged []string `yaml:"only_changed"`
	// Timeout bounds each command (default 10m).
	Timeout Duration `yaml:"timeout"`
}

// Retries bound automatic retries.
type Retries struct {
	// Model is how many times a failed model call is retried after the
	// first attempt (default 4).
	Model int64 `yaml:"model"`
	// Sandbox is how many times creating a run's sandbox (a fresh one, or
	// one that replaces a lost sandbox), with the restore of its
	// workspace, is tried again after it fails (default 1); when every try
	// failed, the run fails.
	Sandbox int64 `yaml:"sandbox"`
	// Recovery is how many times in a row a run may be recovered (picked
	// up again, in fresh sandboxes, after the host process that drove it
	// stopped or failed) without making progress in between (a model
	// turn, a workspace snapshot, a verification, a decision on an
	// approval); the next recovery fails the run instead (default 3).
	Recovery int64 `yaml:"recovery"`
}

// Bounds of a document's lists. They keep a decision and a check fast and
// a mistake visible.
const (
	maxMounts    = 64
	maxChecks    = 64 // each of verify.commands, changed, only_changed, artifacts
	maxApprovers = 256
	maxTools     = 512
	maxRules     = 256 // per tool, and in tools.rules
	maxAllRules  = 1024
	maxReason    = 1024
)

// problems collects validation errors, located by the index.
type problems struct {
	ix   *index
	errs []*Error
}

// addExpr adds a problem at line exprLine (1-based) of the multi-line
// expression at field, when the document wrote it as a literal block.
func (p *problems) addExpr(field string, exprLine int, hint, format string, args ...any) {
	p.add(field, hint, format, args...)
	if p.ix == nil || exprLine < 1 {
		return
	}
	if start, ok := p.ix.literal[field]; ok {
		p.errs[len(p.errs)-1].Line = start + exprLine - 1
	}
}

func (p *problems) add(field, hint, format string, args ...any) {
	line := 0
	if p.ix != nil {
		line = p.ix.line(field)
	}
	p.errs = append(p.errs, &Error{Line: line, Field: field, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// validate checks every section but network, and fills the defaults of list
// items (mount modes).
func (d *Document) validate(p *problems) {
	d.Sandbox.validate(p)
	d.Tools.validate(p)
	d.Budgets.validate(p)
	d.Approvals.validate(p)
	d.Verify.validate(p)
	checkGlobs(p, "artifacts", d.Artifacts)
	d.LLM.validate(p)
	d.Secrets.validate(p)
	d.Ports.validate(p)
	d.Events.validate(p)
	d.MCP.validate(p)
	d.Retention.validate(p)
	for _, r := range []struct {
		field string
		v     int64
	}{{"retries.model", d.Retries.Model}, {"retries.sandbox", d.Retries.Sandbox}, {"retries.recovery", d.Retries.Recovery}} {
		if r.v < 0 || r.v > 10 {
			p.add(r.field, "0 turns retries off", "%d out of range 0-10", r.v)
		}
	}
}

// reservedTargets are paths a mount may not cover: they hold the sandbox's
// own machinery.
var reservedTargets = []string{"/", "/proc", "/dev", "/run/airlock", "/etc"}

func (s *Sandbox) validate(p *problems) {
	if s.RootFS != "" && !absPath(s.RootFS) {
		p.add("sandbox.rootfs", "an absolute host path of an unpacked root filesystem, or empty for the host's system directories",
			"%q is not an absolute path", shorten(s.RootFS))
	}
	switch {
	case s.Image == "":
	case s.RootFS != "":
		p.add("sandbox.image", "a sandbox's root is an image or a root filesystem, not both", "given with sandbox.rootfs")
	case !imageRef.MatchString(s.Image):
		p.add("sandbox.image", "NAME[:TAG], NAME@sha256:HEX or sha256:HEX of an image in the host's store (airlock image ls)",
			"%q is not an image reference", shorten(s.Image))
	}
	if s.Workspace.Source != "" && !absPath(s.Workspace.Source) {
		p.add("sandbox.workspace.source", "an absolute host directory, or empty for an empty workspace",
			"%q is not an absolute path", shorten(s.Workspace.Source))
	}
	switch s.Runtime {
	case "", RuntimeNative, RuntimeGVisor:
	default:
		p.add("sandbox.runtime", "native isolates with namespaces, seccomp and Landlock on the host's kernel; gvisor runs the sandbox on gVisor's kernel (runsc)",
			"%q is not one of native, gvisor", shorten(s.Runtime))
	}
	switch s.Root {
	case "", RootReadOnly, RootWritable:
	default:
		p.add("sandbox.root", "read-only lets commands write only to /workspace, home and /tmp; writable lets them write anywhere, into the sandbox's own layer",
			"%q is not one of read-only, writable", shorten(s.Root))
	}
	switch s.Workspace.Mode {
	case WorkspaceCOW, WorkspaceRO, WorkspaceRW:
	default:
		p.add("sandbox.workspace.mode", "cow keeps the host copy unchanged, ro shows it read-only, rw lets changes reach it",
			"%q is not one of cow, ro, rw", shorten(s.Workspace.Mode))
	}
	if len(s.Mounts) > maxMounts {
		p.add("sandbox.mounts", "", "%d mounts, at most %d", len(s.Mounts), maxMounts)
	}
	targets := map[string]int{}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		field := fmt.Sprintf("sandbox.mounts[%d]", i)
		if !absPath(m.Source) {
			p.add(field+".source", "an absolute host path", "%q is not an absolute path", shorten(m.Source))
		}
		switch {
		case !absPath(m.Target) || path.Clean(m.Target) != m.Target:
			p.add(field+".target", "a clean absolute path inside the sandbox, like /data", "%q is not a clean absolute path", shorten(m.Target))
		case reservedTarget(m.Target) != "":
			p.add(field+".target", "mount somewhere else, like /mnt/data", "%s is reserved for the sandbox's own machinery", reservedTarget(m.Target))
		default:
			if j, dup := targets[m.Target]; dup {
				p.add(field+".target", "", "%s is mounted already by sandbox.mounts[%d]", m.Target, j)
			}
			targets[m.Target] = i
		}
		switch m.Mode {
		case "":
			m.Mode = MountRO
		case MountRO, MountRW:
		default:
			p.add(field+".mode", "ro (the default) or rw", "%q is not one of ro, rw", shorten(m.Mode))
		}
	}
	l := &s.Limits
	const required = "this limit cannot be turned off; set a larger value"
	if l.Memory < 4<<20 {
		p.add("sandbox.limits.memory", required, "%s is below 4M, too little to start a sandbox", l.Memory)
	}
	if l.Pids < 4 || l.Pids > 1<<22 {
		p.add("sandbox.limits.pids", required, "%d out of range 4-4194304", l.Pids)
	}
	if !(l.CPUs >= 0.01 && l.CPUs <= 1024) {
		p.add("sandbox.limits.cpus", "a number of CPUs, like 0.5 or 2", "%v out of range 0.01-1024", l.CPUs)
	}
	if l.Disk < 1<<20 {
		p.add("sandbox.limits.disk", required, "%s is below 1M", l.Disk)
	}
	if l.CommandTimeout <= 0 {
		p.add("sandbox.limits.command_timeout", required, "must be longer than 0")
	}
}

func reservedTarget(t string) string {
	for _, r := range reservedTargets {
		if t == r || r != "/" && strings.HasPrefix(t, r+"/") {
			return r
		}
	}
	return ""
}

// imageRef is the form of an image reference (registry, path, tag,
// digest); the host's image store reads it fully.
var imageRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$`)

func absPath(s string) bool {
	return strings.HasPrefix(s, "/") && !strings.ContainsRune(s, 0) && !hasCTL(s)
}

func (b *Budgets) validate(p *problems) {
	if b.MaxSteps < 1 || b.MaxSteps > 10_000 {
		p.add("budgets.max_steps", "a run needs a step budget", "%d out of range 1-10000", b.MaxSteps)
	}
	if b.MaxWallTime <= 0 {
		p.add("budgets.max_wall_time", "a run needs a time budget; set a larger value", "must be longer than 0")
	}
	for _, v := range []struct {
		field string
		v     int64
	}{{"budgets.max_tokens", b.MaxTokens}, {"budgets.max_sandbox_cpu_seconds", b.MaxSandboxCPUSeconds}, {"budgets.max_credits", b.MaxCredits}} {
		if v.v < 0 {
			p.add(v.field, "0 or leaving it out means no bound", "%d is negative", v.v)
		}
	}
}

func (a *Approvals) validate(p *problems) {
	if len(a.Approvers) > maxApprovers {
		p.add("approvals.approvers", "", "%d approvers, at most %d", len(a.Approvers), maxApprovers)
	}
	seen := map[string]bool{}
	for i, name := range a.Approvers {
		field := fmt.Sprintf("approvals.approvers[%d]", i)
		switch {
		case strings.TrimSpace(name) == "" || len(name) > 128 || hasCTL(name):
			p.add(field, "a user name of 1 to 128 printable characters", "%q is not a user name", shorten(name))
		case seen[name]:
			p.add(field, "", "%s is listed twice", name)
		}
		seen[name] = true
	}
	if a.Timeout <= 0 {
		p.add("approvals.timeout", "how long an approval waits, like 15m", "must be longer than 0")
	}
	switch a.OnTimeout {
	case Deny, Allow:
	default:
		p.add("approvals.on_timeout", "what an unanswered approval becomes: deny (the default) or allow", "%q is not one of deny, allow", shorten(string(a.OnTimeout)))
	}
}

func (v *Verify) validate(p *problems) {
	checkList(p, "verify.commands", v.Commands)
	checkList(p, "verify.changed", v.Changed)
	for i, c := range v.Changed {
		if rel, ok := WorkspacePath(c); !ok || rel == "." {
			p.add(fmt.Sprintf("verify.changed[%d]", i), "a path relative to /workspace, or absolute under it", "%q is not a path inside /workspace", shorten(c))
		}
	}
	checkGlobs(p, "verify.only_changed", v.OnlyChanged)
	if v.Timeout <= 0 {
		p.add("verify.timeout", "how long each check command may run, like 10m", "must be longer than 0")
	}
}

// checkList checks a list of non-empty strings.
func checkList(p *problems, field string, list []string) {
	if len(list) > maxChecks {
		p.add(field, "", "%d entries, at most %d", len(list), maxChecks)
	}
	for i, s := range list {
		if strings.TrimSpace(s) == "" || strings.ContainsRune(s, 0) {
			p.add(fmt.Sprintf("%s[%d]", field, i), "", "empty or contains NUL")
		}
	}
}

// checkGlobs checks a list of workspace globs.
func checkGlobs(p *problems, field string, globs []string) {
	checkList(p, field, globs)
	for i, g := range globs {
		if strings.TrimSpace(g) == "" || strings.ContainsRune(g, 0) {
			continue // reported by checkList
		}
		if _, err := WorkspaceGlob(g); err != nil {
			p.add(fmt.Sprintf("%s[%d]", field, i), `a path.Match pattern relative to /workspace, like "src/*.go" or "docs/**"`, "%s", strings.TrimPrefix(err.Error(), "glob "))
		}
	}
}

// WorkspaceGlob checks a glob of workspace files (artifacts,
// verify.only_changed, and the same lists of a run's request or command
// line): a path.Match pattern relative to /workspace, or absolute under it,
// that ends in "/**" for a whole tree. The files a glob is matched against
// are named by clean paths inside the workspace, so a glob that is
// absolute elsewhere (/etc/*) or has a ".." element (../../etc/passwd)
// could never match one: it is refused rather than accepted to collect
// nothing. It returns the glob relative to /workspace.
func WorkspaceGlob(g string) (string, error) {
	switch {
	case strings.TrimSpace(g) == "" || strings.ContainsRune(g, 0):
		return "", errors.New("glob: empty or contains NUL")
	case g == "/workspace" || g == "/workspace/":
		return "", fmt.Errorf("glob %q names the workspace itself; match its files, like /workspace/**", shorten(g))
	}
	rel := strings.TrimPrefix(g, "/workspace/")
	if strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("glob %q is outside /workspace", shorten(g))
	}
	for _, e := range strings.Split(rel, "/") {
		if e == ".." {
			return "", fmt.Errorf("glob %q is outside /workspace (it has a .. element)", shorten(g))
		}
	}
	if _, err := path.Match(rel, ""); err != nil {
		return "", fmt.Errorf("glob %q is not a valid glob", shorten(g))
	}
	return rel, nil
}

// WorkspacePath turns a path given relative to /workspace, or absolute under
// it, into a clean path relative to /workspace ("." for /workspace itself).
// ok is false for a path outside /workspace; rel is then the clean path as
// given (absolute, or starting with "../"), which names no workspace file.
func WorkspacePath(p string) (rel string, ok bool) {
	if strings.HasPrefix(p, "/") {
		c := path.Clean(p)
		if c == "/workspace" {
			return ".", true
		}
		r, in := strings.CutPrefix(c, "/workspace/")
		if !in {
			return c, false
		}
		return r, true
	}
	if p == "" {
		return ".", true
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return c, false
	}
	return c, true
}
