package linux

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/airlockrun/airlock/internal/executor/landlock"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
	"github.com/airlockrun/airlock/internal/supervisor"
	"golang.org/x/sys/unix"
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
	add("root", os.Geteuid() == 0, true, fmt.Sprintf("euid %d (this build needs root; sandbox root maps to an unprivileged uid range)", os.Geteuid()))

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
	add("landlock", abi > 0, false, fmt.Sprintf("ABI %d (file-system second layer; signal/abstract-socket scoping needs ABI 6)", abi))

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
		add("cgroups", all, true, detail)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err == nil {
		unix.Close(fd)
	}
	add("mount-api", err == nil, true, errOr(err, "open_tree/move_mount/id-mapped mounts"))
	return out
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

// Usage reports the sandbox's current resource use.
func (s *Sandbox) Usage() supervisor.Usage {
	if s.cg == nil {
		return supervisor.Usage{}
	}
	st, err := s.cg.Stats()
	if err != nil {
		return supervisor.Usage{}
	}
	return supervisor.Usage{MemoryBytes: st.MemoryCurrent, CPU: st.CPU, Pids: st.Pids}
}
