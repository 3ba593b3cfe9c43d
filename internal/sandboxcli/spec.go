package sandboxcli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Defaults are what a sandbox gets where no flag says otherwise: the
// sandbox section of a policy document (--policy's, else the built-in
// default's).
type Defaults struct {
	RootFS        string
	Workspace     string // a host directory; "" for an empty workspace
	WorkspaceMode string
	Mounts        []sandbox.Mount
	Limits        sandbox.Limits
	// Runtime isolates the sandbox (sandbox.RuntimeNative or
	// sandbox.RuntimeGVisor; empty is native).
	Runtime string
	// StaticReadOnly: the host leaves the read-only directories unchanged
	// (sandbox.Spec.StaticReadOnly).
	StaticReadOnly bool
	// CommandTimeout and Output bound one command (Output 0: 16M).
	CommandTimeout time.Duration
	Output         int64
}

// BuiltinDefaults are the built-in default policy's sandbox section (a test
// in package cli keeps the two equal).
var BuiltinDefaults = Defaults{
	WorkspaceMode:  sandbox.WorkspaceCOW,
	Limits:         sandbox.DefaultLimits,
	CommandTimeout: 10 * time.Minute,
}

// defaultOutput caps a command's output when the policy does not.
const defaultOutput = 16 << 20

// SpecFlags are the flags that describe a sandbox, shared by run and create.
type SpecFlags struct {
	Workspace      string   `help:"Host directory shown at /workspace (default: an empty workspace)." placeholder:"DIR"`
	WorkspaceMode  string   `help:"How the workspace is shown: cow (changes stay in the sandbox; the default), ro or rw." enum:",cow,ro,rw" default:""`
	Mount          []string `sep:"none" help:"Extra bind mount SRC:DST[:ro|rw] (repeatable; read-only unless :rw)." placeholder:"SRC:DST[:MODE]"`
	Env            []string `short:"e" sep:"none" help:"Environment variable K=V for the command (repeatable). Nothing of the host's environment passes in unless named." placeholder:"K=V"`
	Memory         string   `help:"Memory limit, swap included (default: the policy's sandbox.limits.memory, 1G)."`
	Pids           int64    `help:"Process limit (default: the policy's, 512)."`
	CPUs           float64  `name:"cpus" help:"CPU limit, in CPUs (default: the policy's, 1)."`
	Disk           string   `help:"Size of each writable layer: workspace changes and home, /tmp (default: the policy's, 1G)."`
	Network        string   `help:"Network mode: none (loopback only) or proxy (egress through airlock's proxy with --policy/--allow, or through --proxy-socket). Default: proxy when a policy or --allow is given, else none." enum:",none,proxy" default:""`
	ProxySocket    string   `help:"Host unix socket that proxy-mode connections are forwarded to." placeholder:"PATH"`
	Rootfs         string   `help:"Template root filesystem (unpacked image) instead of the host's system directories." placeholder:"DIR"`
	User           string   `help:"User inside the sandbox, name or uid (default: the unprivileged sandbox user)." placeholder:"NAME|UID"`
	SoftLimits     bool     `help:"Run even where memory, pids and CPU limits cannot be enforced (never the default)."`
	StaticReadOnly bool     `name:"static-read-only" help:"The read-only workspace and mounts stay unchanged on the host while the sandbox runs: their host paths are then hidden from mountinfo (Linux 6.13), and changes made to them anyway may not be seen. Default: the policy's sandbox.static_read_only."`
	Runtime        string   `help:"What isolates the sandbox: native (namespaces, seccomp, Landlock on the host's kernel) or gvisor (gVisor's kernel, runsc; airlock doctor says whether it works here). Default: the policy's sandbox.runtime, native." enum:",native,gvisor" default:""`
}

// Spec turns the flags into a sandbox spec, reporting every bad value. The
// flags are shorthand for the policy document's fields: what a flag leaves
// unset comes from d. egress says whether airlock runs an egress proxy for
// the sandbox (a policy or --allow was given), which the network flags must
// not contradict.
func (f *SpecFlags) Spec(d Defaults, egress bool) (sandbox.Spec, error) {
	var errs []error
	if egress {
		switch {
		case f.Network == sandbox.NetworkNone:
			errs = append(errs, errors.New("--network none conflicts with --policy, --allow and --resolve"))
		case f.ProxySocket != "":
			errs = append(errs, errors.New("--proxy-socket conflicts with --policy, --allow and --resolve: airlock runs the proxy"))
		}
	} else if f.Network == sandbox.NetworkProxy && f.ProxySocket == "" {
		errs = append(errs, errors.New("--network proxy needs --policy, --allow or --proxy-socket"))
	}
	s := sandbox.Spec{Workspace: f.Workspace, Env: f.Env, Network: f.Network, ProxySocket: f.ProxySocket, RootFS: f.Rootfs, User: f.User}
	if s.RootFS == "" {
		s.RootFS = d.RootFS
	}
	if s.Workspace == "" {
		s.Workspace = d.Workspace
	}
	if s.Workspace != "" {
		s.WorkspaceMode = f.WorkspaceMode
		if s.WorkspaceMode == "" {
			s.WorkspaceMode = d.WorkspaceMode
		}
	} else if f.WorkspaceMode != "" && f.WorkspaceMode != sandbox.WorkspaceCOW {
		errs = append(errs, fmt.Errorf("--workspace-mode %s needs --workspace", f.WorkspaceMode))
	}
	s.StaticReadOnly = f.StaticReadOnly || d.StaticReadOnly
	s.Runtime = f.Runtime
	if s.Runtime == "" {
		s.Runtime = d.Runtime
	}
	if s.Network == "" && f.ProxySocket != "" {
		s.Network = sandbox.NetworkProxy
	}
	s.Limits = d.Limits
	s.Limits.RequireHard = d.Limits.RequireHard && !f.SoftLimits
	var err error
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
	if err := sandbox.CheckEnv(f.Env); err != nil {
		errs = append(errs, fmt.Errorf("--env: %w", err))
	}
	s.Mounts = append(s.Mounts, d.Mounts...)
	for _, m := range f.Mount {
		mt, err := parseMount(m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.Mounts = append(s.Mounts, mt)
	}
	errs = append(errs, checkSources(s, f, d)...)
	if len(errs) == 0 {
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errors.Join(errs...)
}

// checkSources checks that the host paths spec s shows in the sandbox
// exist: the workspace and root file system as directories, the mounts'
// sources. A missing one is bad input, refused before a sandbox is made.
// Each is named by the flag that gave it, or by its field of the policy
// document when it came from there (the first len(d.Mounts) mounts).
func checkSources(s sandbox.Spec, f *SpecFlags, d Defaults) []error {
	var errs []error
	check := func(name, path string, dir bool) {
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		case dir && !fi.IsDir():
			errs = append(errs, fmt.Errorf("%s: not a directory", name))
		}
	}
	for _, p := range []struct{ path, flag, value, field string }{
		{s.Workspace, "--workspace", f.Workspace, "sandbox.workspace.source"},
		{s.RootFS, "--rootfs", f.Rootfs, "sandbox.rootfs"},
	} {
		switch {
		case p.path == "":
		case p.value != "":
			check(p.flag+" "+p.value, p.path, true)
		default:
			check(p.field+" "+p.path, p.path, true)
		}
	}
	for i, m := range s.Mounts {
		name := fmt.Sprintf("sandbox.mounts[%d] %s", i, m.Source)
		if i >= len(d.Mounts) {
			name = fmt.Sprintf("--mount %s:%s", m.Source, m.Target)
		}
		check(name, m.Source, false)
	}
	return errs
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
