package linux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/executor/landlock"
	"github.com/airlockrun/airlock/internal/executor/vfork"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
)

// Check is one line of `airlock doctor`.
type Check struct {
	Layer    string
	OK       bool
	Required bool
	Detail   string
}

// Doctor reports which isolation layers this machine can enforce.
func Doctor(executor string) []Check {
	var out []Check
	add := func(layer string, ok, required bool, detail string) {
		out = append(out, Check{layer, ok, required, detail})
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	add("kernel", true, false, unix.ByteSliceToString(uts.Release[:]))
	root := os.Geteuid() == 0
	if root {
		add("mode", true, false, "root: sandbox root maps to an unprivileged host uid range, a different one per sandbox")
	} else {
		add("mode", true, false, fmt.Sprintf("rootless (euid %d): sandbox root is your own uid, without capabilities; run as root for per-sandbox uid ranges", os.Geteuid()))
	}

	if fi, err := os.Stat(executor); err == nil && fi.Mode().IsRegular() {
		add("executor", true, true, executor)
	} else {
		add("executor", false, true, executor+" not found (build with `make build`, or set AIRLOCK_EXEC)")
	}
	userns := tryUserns(executor)
	add("user-namespaces", userns == nil, true, errOr(userns, "a user namespace can be created"))

	fs, _ := os.ReadFile("/proc/filesystems")
	add("overlayfs", strings.Contains(string(fs), "\toverlay\n"), true, "copy-on-write workspaces")

	seccomp := unix.Prctl(unix.PR_GET_SECCOMP, 0, 0, 0, 0) == nil
	add("seccomp", seccomp, true, "seccomp-bpf filter with no_new_privs")

	abi, _ := landlock.ABI()
	add("landlock", abi > 0, false, landlockDetail(abi, landlock.Features(abi, landlock.Errata())))

	md, err := cgroup.Detect()
	if err != nil {
		add("cgroups", false, true, err.Error())
	} else {
		detail := fmt.Sprintf("%s, limits: %s", md.Version, strings.Join(md.Controllers, ","))
		if md.Unified != "" {
			detail += ", tracking: cgroup2 at " + md.Unified
		}
		if md.Reason != "" {
			detail += " (" + md.Reason + ")"
		}
		all := len(md.Controllers) >= 3
		if !root && !all {
			detail += "; sandboxes that require hard limits fail: " + rootlessLimitsHint
		}
		// Rootless, missing limits are allowed with --soft-limits.
		add("cgroups", all, root, detail)
		if root && len(md.V1Controllers) > 0 {
			ok, detail := v1AttachDetail(md, vfork.Supported)
			add("cgroup-v1-attach", ok, false, detail)
		}
	}
	if root {
		fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		add("mount-api", err == nil, true, errOr(err, "open_tree/move_mount/id-mapped mounts"))
		layers, err := detachedLayers()
		detail := "overlay layers by descriptor (Linux 6.13): with sandbox.Spec.StaticReadOnly, read-only directories name no host path in mountinfo"
		if err == nil && !layers {
			detail = "this kernel takes no overlay layer by descriptor (Linux 6.13 does): read-only directories stay binds, whose mountinfo names their host paths"
		}
		add("detached-layers", layers, false, errOr(err, detail))
		ok, detail := rootlessStatic(unix.ByteSliceToString(uts.Release[:]))
		add("rootless", ok, false, detail)
	} else {
		err := probeRootless(executor)
		add("rootless", err == nil, true, errOr(err, "a rootless sandbox was created and ran a command (user namespace, cow overlay, pivot_root, seccomp)"))
	}
	add("runtime:native", true, true, "namespaces, seccomp, Landlock and cgroups on the host's kernel (the lines above)")
	detail, gerr := probeGVisor(executor)
	if gerr != nil {
		detail = gerr.Error() + detail
	} else {
		detail = "a gvisor sandbox was created and ran a command: sandbox.runtime: gvisor works here" + detail
	}
	add("runtime:gvisor", gerr == nil, false, detail)
	return out
}

// v1AttachDetail is the doctor's line on what joining md's v1 hierarchies
// costs each start: a process moved into a v1 group by pid (cgroup.procs)
// waits for an RCU grace period unless a hierarchy is mounted with
// favordynmods; an executor that vforkStart starts moves itself (a
// thread through `tasks`), which does not.
func v1AttachDetail(md cgroup.Mode, vforkStart bool) (bool, string) {
	v1 := strings.Join(md.V1Controllers, ",")
	if md.FavorDynmods {
		return true, "limits in v1 hierarchies (" + v1 + "), a cgroup hierarchy mounted with favordynmods: moving a process into a v1 group waits for no RCU grace period"
	}
	where := "/sys/fs/cgroup/<hierarchy>"
	if md.Unified != "" {
		where = md.Unified
	}
	remedy := "mount one cgroup hierarchy with favordynmods (it is global, one is enough; forks and exits then cost a little more), " +
		"e.g. `mount -o remount,favordynmods " + where + "`, or boot a kernel built with CONFIG_CGROUP_FAVOR_DYNMODS; airlock does not change the host's mounts"
	if !vforkStart {
		return false, "limits in v1 hierarchies (" + v1 + ") without favordynmods: every sandbox start writes its executor's pid to cgroup.procs, which waits for an RCU grace period (5-15 ms measured on Linux 6.18); " + remedy
	}
	return true, "limits in v1 hierarchies (" + v1 + ") without favordynmods: a native sandbox's executor joins its v1 groups itself before its exec (a thread moving itself waits for nothing); " +
		"a process moved by pid (cgroup.procs) waits for an RCU grace period (5-15 ms measured on Linux 6.18): the gvisor runtime's runsc, once a start; to lift it, " + remedy
}

// probeGVisor creates a real gvisor sandbox, runs one command in it and
// destroys it. Its detail names the runsc, its version and the platform
// chosen, and why ("" when no runsc was found).
func probeGVisor(executor string) (detail string, err error) {
	if os.Geteuid() != 0 {
		return "", errors.New("the gvisor runtime needs root (runsc is run without --rootless)")
	}
	state, err := os.MkdirTemp("", "airlock-doctor-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(state)
	b, err := New(Config{Executor: executor, StateDir: state})
	if err != nil {
		return "", err
	}
	defer func() { _ = Forget(state) }()
	r, err := b.Runsc()
	if err != nil {
		return "", err
	}
	detail = fmt.Sprintf("; runsc %s (%s), platform %s: %s", r.Path, r.Version, r.Platform, r.Why)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64, DiskBytes: 16 << 20}})
	if err != nil {
		return detail, err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	res, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"true"}})
	if err != nil {
		return detail, err
	}
	if res.Outcome != sandbox.OutcomeExited || res.ExitCode != 0 {
		return detail, fmt.Errorf("a command in a gvisor sandbox failed: %s (exit %d)", res.Outcome, res.ExitCode)
	}
	return detail, nil
}

// landlockDetail is the doctor's landlock line: the kernel's ABI and, for
// each feature the executor's restriction has, whether sandboxes here get
// it and, when not, why.
func landlockDetail(abi int, features []landlock.Feature) string {
	if abi <= 0 {
		return "ABI 0: Landlock is not available (not built in, or not in the boot's lsm= list): no second file-system layer, no signal or abstract-socket scoping"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ABI %d", abi)
	if abi > landlock.MaxABI {
		fmt.Fprintf(&b, " (used as %d, the highest airlock knows)", landlock.MaxABI)
	}
	var used, unused []string
	for _, f := range features {
		if f.Used {
			used = append(used, fmt.Sprintf("%s (%d)", f.Name, f.ABI))
		} else {
			unused = append(unused, fmt.Sprintf("%s (%d, %s)", f.Name, f.ABI, f.Why))
		}
	}
	b.WriteString("; in use: " + strings.Join(used, ", "))
	if len(unused) > 0 {
		b.WriteString("; not in use: " + strings.Join(unused, ", "))
	}
	return b.String()
}

// rootlessStatic tells, as root, whether unprivileged users could run
// rootless sandboxes here. Root cannot try it without becoming another
// user, so it reads the knobs that decide it.
func rootlessStatic(release string) (bool, string) {
	var no []string
	if v, err := readSysctl("user/max_user_namespaces"); err == nil && v == "0" {
		no = append(no, "user.max_user_namespaces is 0")
	}
	if v, err := readSysctl("kernel/unprivileged_userns_clone"); err == nil && v == "0" {
		no = append(no, "kernel.unprivileged_userns_clone is 0")
	}
	if v, err := readSysctl("kernel/apparmor_restrict_unprivileged_userns"); err == nil && v == "1" {
		no = append(no, "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1; an AppArmor profile for airlock-exec with `userns,` lifts it)")
	}
	if !kernelAtLeast(release, 5, 11) {
		no = append(no, "overlayfs in a user namespace needs Linux 5.11")
	}
	if len(no) > 0 {
		return false, "unprivileged users cannot run sandboxes here: " + strings.Join(no, "; ")
	}
	return true, "unprivileged users may run sandboxes (user namespaces allowed, overlayfs in them); " +
		"hard limits need a delegated cgroup (systemd user service or a scope with Delegate=yes), else --soft-limits"
}

func readSysctl(name string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + name)
	return strings.TrimSpace(string(b)), err
}

// kernelAtLeast compares a release string such as "6.18.44-foo" with
// major.minor; an unparsable release counts as new enough.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n != 2 {
		return true
	}
	return ma > major || ma == major && mi >= minor
}

// probeRootless creates a real rootless sandbox with a copy-on-write
// workspace and no hard limits, runs one command in it and destroys it.
func probeRootless(executor string) error {
	state, err := os.MkdirTemp("", "airlock-doctor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	ws := filepath.Join(state, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return err
	}
	b, err := New(Config{Executor: executor, StateDir: filepath.Join(state, "run")})
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{Workspace: ws, Limits: sandbox.Limits{DiskBytes: 16 << 20}})
	if err != nil {
		return err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "echo ok > /workspace/probe"}})
	if err != nil {
		return err
	}
	if r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 {
		return fmt.Errorf("a command in a rootless sandbox failed: %s (exit %d)", r.Outcome, r.ExitCode)
	}
	return nil
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func tryUserns(executor string) error {
	cmd := exec.Command(executor, "version")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cannot create namespaces: %w", err)
	}
	return nil
}

// Measure implements sandbox.Measurer from the sandbox's cgroup.
func (s *Sandbox) Measure() (sandbox.Metrics, error) {
	if s.cg == nil {
		return sandbox.Metrics{}, errors.New("linux: sandbox has no cgroup to measure")
	}
	cpu, err := s.cg.CPU()
	if err != nil {
		return sandbox.Metrics{}, err
	}
	mem, err := s.cg.Memory()
	if err != nil {
		return sandbox.Metrics{}, err
	}
	return sandbox.Metrics{CPU: cpu, Memory: mem}, nil
}

// Usage reports the sandbox's current resource use.
func (s *Sandbox) Usage() sandbox.LiveUsage {
	if s.cg == nil {
		return sandbox.LiveUsage{}
	}
	st, err := s.cg.Stats()
	if err != nil {
		return sandbox.LiveUsage{}
	}
	return sandbox.LiveUsage{MemoryBytes: st.MemoryCurrent, CPU: st.CPU, Pids: st.Pids}
}
