package linux_test

// Rootless mode, tested as an unprivileged user. TestRootless re-executes
// this test binary as that user (nobody, when the tests run as root, as in
// CI) and runs in it the conformance suite, the attack tests that mean the
// same without root, and the checks below of what rootless changes. Those
// inner tests skip unless TestRootless started them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// rootlessEnv marks a process TestRootless started: "inner" runs the rootless
// tests, "kill9" is the helper of TestRootlessKill9.
const rootlessEnv = "AIRLOCK_ROOTLESS_TEST"

// rootlessUID is who TestRootless runs the inner tests as when it is root.
const rootlessUID = 65534

// rootlessUnavailableLine starts the line an inner test prints when this
// machine does not let unprivileged users create user namespaces.
const rootlessUnavailableLine = "ROOTLESS-UNAVAILABLE: "

// rootlessTests are the tests the inner process runs.
var rootlessTests = []string{
	"TestRootlessConformance", "TestRootlessView", "TestRootlessKill9", "TestRootlessImage",
	// The attacks whose probes and controls mean the same without root
	// (attackCase.rootless; the others skip).
	"TestAttacks",
}

// rootlessSkips are cases of those tests that assume root mode. Each is
// covered for rootless mode in TestRootlessView.
var rootlessSkips = []string{
	// The suite and these attacks expect the unprivileged sandbox user
	// (uid 1000, home /home/sandbox); rootless has only root.
	"TestRootlessConformance/Exec/User",
	"TestRootlessConformance/Files/Owner",
	"TestRootlessConformance/Files/RoundTrip",
	"TestRootlessConformance/Workspace/RW",
	"TestRootlessConformance/Workspace/Empty",
	"TestAttacks/native/HostFiles/Homes",
	"TestAttacks/native/CrossSandbox/SysVShm",
	// Their host controls need root (unshare -n/-m/-p, chroot); the probes
	// run with unprivileged controls in TestRootlessView/Privileged.
	"TestAttacks/native/Privileged/unshare_net_ns",
	"TestAttacks/native/Privileged/unshare_mount_ns",
	"TestAttacks/native/Privileged/unshare_pid_ns",
	"TestAttacks/native/Privileged/chroot",
}

// TestRootless runs the rootless tests as an unprivileged user: as nobody
// when the tests run as root, else as the user running them.
func TestRootless(t *testing.T) {
	if os.Getenv(rootlessEnv) != "" {
		t.Skip("the inner process of TestRootless")
	}
	t.Parallel()
	if reason := rootlessSysctlReason(); reason != "" {
		t.Skip(reason)
	}
	var wrap []string
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("setpriv (util-linux) is not installed: cannot run tests as an unprivileged user")
		}
		uid, gid = rootlessUID, rootlessUID
		wrap = []string{setpriv, "--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(gid), "--clear-groups"}
	}
	// The user must be able to run this binary and the executor, and to
	// write its temporary files.
	bin := rootlessCopySelf(t)
	work, err := os.MkdirTemp("", "airlock-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chown(work, uid, gid); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + work, "TMPDIR=" + work, "LANG=C.UTF-8",
		rootlessEnv + "=inner", prebuiltExecutorEnv + "=" + executorPath,
	}
	run := "^(" + strings.Join(rootlessTests, "|") + ")$"
	skip := "^" + strings.Join(rootlessSkips, "$|^") + "$"
	if os.Geteuid() == 0 {
		// Like systemd's user delegation: a cgroup the user owns, so the
		// rootless backend's delegated-cgroup path runs too.
		if fd, where := rootlessDelegate(t, uid, gid); fd >= 0 {
			t.Logf("inner tests run in the delegated cgroup %s", where)
			rootlessRunInner(t, uid, work, env, fd, append(wrap, bin, "-test.run="+run, "-test.skip="+skip))
			// And a few without any cgroup of their own.
			run = "^TestRootlessView$/^(Identity|Limits)$"
		}
	}
	rootlessRunInner(t, uid, work, env, -1, append(wrap, bin, "-test.run="+run, "-test.skip="+skip))
}

// rootlessRunInner runs argv (the test binary and its selection, wrapped to
// change user) in cgroup cgfd if it is not -1, and fails the test if the
// inner tests fail.
func rootlessRunInner(t *testing.T, uid int, dir string, env []string, cgfd int, argv []string) {
	t.Helper()
	argv = append(argv, "-test.v", "-test.short", "-test.count=1", "-test.timeout=4m")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	if cgfd >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cgfd}
	}
	out, err := cmd.CombinedOutput()
	var summary []string
	for _, l := range strings.Split(string(out), "\n") {
		if reason, ok := strings.CutPrefix(l, rootlessUnavailableLine); ok && err == nil {
			t.Skip(reason)
		}
		if strings.HasPrefix(l, "--- ") {
			summary = append(summary, l)
		}
	}
	if err != nil {
		t.Fatalf("rootless tests as uid %d failed: %v\n%s", uid, err, out)
	}
	t.Logf("rootless tests as uid %d (cgroup fd %d):\n%s", uid, cgfd, strings.Join(summary, "\n"))
}

// TestDoctorRootless: as root, doctor tells whether unprivileged users
// could run sandboxes, without requiring it.
func TestDoctorRootless(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("as another user, TestRootlessView/Doctor checks the probe")
	}
	t.Parallel()
	var found bool
	for _, c := range linux.Doctor(executorPath) {
		if c.Layer != "rootless" {
			continue
		}
		found = true
		if c.Required {
			t.Errorf("doctor's rootless line as root is required: %+v", c)
		}
		if want := rootlessSysctlReason() == ""; c.OK != want {
			t.Errorf("doctor's rootless line = %+v, want OK %v (%s)", c, want, rootlessSysctlReason())
		}
		t.Logf("%+v", c)
	}
	if !found {
		t.Errorf("doctor has no rootless line")
	}
}

// rootlessSysctlReason says why unprivileged user namespaces are off on
// this machine, or "" when the knobs allow them.
func rootlessSysctlReason() string {
	read := func(name string) string {
		b, _ := os.ReadFile("/proc/sys/" + name)
		return strings.TrimSpace(string(b))
	}
	switch {
	case read("user/max_user_namespaces") == "0":
		return "user.max_user_namespaces is 0: no user namespaces for unprivileged users"
	case read("kernel/unprivileged_userns_clone") == "0":
		return "kernel.unprivileged_userns_clone is 0: no user namespaces for unprivileged users"
	case read("kernel/apparmor_restrict_unprivileged_userns") == "1":
		return "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)"
	}
	return ""
}

// rootlessCopySelf copies this test binary where any user may run it.
func rootlessCopySelf(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "airlock-rootless-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "linux.test")
	// No fork while the copy is open for writing: a child forked by a
	// parallel test would hold the descriptor until its exec, and running
	// the copy in that window fails with ETXTBSY ("text file busy").
	syscall.ForkLock.RLock()
	err = copyExecutable(bin, src)
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(executorPath); err != nil || fi.Mode().Perm()&0o005 != 0o005 {
		t.Fatalf("the executor %s must be world-readable and -executable for the rootless tests (%v)", executorPath, err)
	}
	return bin
}

// copyExecutable writes src to a new file at path, mode 0755.
func copyExecutable(path string, src io.Reader) error {
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// rootlessDelegate makes a cgroup2 directory under this process's own
// cgroup and hands it to uid:gid the way systemd delegates a subtree (the
// directory and its cgroup.procs, cgroup.threads and cgroup.subtree_control
// change owner). It returns an O_PATH descriptor for CLONE_INTO_CGROUP, or
// -1 where there is no cgroup2 tree. The directory and whatever the inner
// tests left in it are removed at cleanup; a left group with processes is an
// error.
func rootlessDelegate(t *testing.T, uid, gid int) (int, string) {
	t.Helper()
	md, err := cgroup.Detect()
	if err != nil || md.Unified == "" {
		return -1, ""
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return -1, ""
	}
	own := ""
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "0::"); ok {
			own = rest
		}
	}
	if own == "" {
		return -1, ""
	}
	dir := filepath.Join(md.Unified, own, "airlock-rootless-test-"+attackToken())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("no delegated cgroup for the inner tests: %v", err)
		return -1, ""
	}
	t.Cleanup(func() {
		if err := rootlessRemoveCgroup(dir); err != nil {
			t.Errorf("remove the delegated cgroup: %v", err)
		}
	})
	for _, p := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		if err := os.Chown(filepath.Join(dir, p), uid, gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("delegate %s: %v", dir, err)
		}
	}
	fd, err := syscall.Open(dir, unix.O_PATH|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	return fd, dir
}

// rootlessRemoveCgroup removes a cgroup tree bottom-up. rmdir fails on a
// cgroup with processes, so nothing running is touched.
func rootlessRemoveCgroup(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, rootlessRemoveCgroup(filepath.Join(dir, e.Name())))
		}
	}
	if err := syscall.Rmdir(dir); err != nil {
		procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		errs = append(errs, fmt.Errorf("rmdir %s (processes: %q): %w", dir, strings.TrimSpace(string(procs)), err))
	}
	return errors.Join(errs...)
}

// rootlessInner skips unless this is the inner process of TestRootless on a
// machine that lets it create user namespaces.
func rootlessInner(t *testing.T) {
	t.Helper()
	if os.Getenv(rootlessEnv) != "inner" {
		t.Skip("runs as an unprivileged user, started by TestRootless")
	}
	if os.Geteuid() == 0 {
		t.Fatal("the rootless tests run as root: TestRootless must start them as an unprivileged user")
	}
	if reason := usernsUnavailable(); reason != "" {
		fmt.Println(rootlessUnavailableLine + reason) //nolint:forbidigo // the child process answers its parent on stdout
		t.Skip(reason)
	}
}

// usernsUnavailable tries what a rootless Create does first: start the
// executor in new user and mount namespaces with the caller's id as root.
var usernsUnavailable = sync.OnceValue(func() string {
	cmd := exec.Command(executorPath, "version")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("an unprivileged user cannot create user namespaces here: %v %s", err, out)
	}
	return ""
})

// rootlessBackend returns a backend for this (unprivileged) user.
func rootlessBackend(t *testing.T) *linux.Backend {
	t.Helper()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// softBackend creates sandboxes whose limits are not required: without a
// delegated cgroup, a rootless sandbox cannot enforce them.
type softBackend struct{ *linux.Backend }

func (b softBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if spec.Limits == (sandbox.Limits{}) {
		spec.Limits = sandbox.DefaultLimits
	}
	spec.Limits.RequireHard = false
	return b.Backend.Create(ctx, spec)
}

// rootlessCreate makes a sandbox whose limits (DefaultLimits unless spec
// has some) are not required, destroyed at cleanup.
func rootlessCreate(t *testing.T, b *linux.Backend, spec sandbox.Spec) sandbox.Sandbox {
	t.Helper()
	if spec.Limits == (sandbox.Limits{}) {
		spec.Limits = sandbox.DefaultLimits
	}
	spec.Limits.RequireHard = false
	return sandboxtest.Create(t, b, spec)
}

func TestRootlessConformance(t *testing.T) {
	rootlessInner(t)
	sandboxtest.Run(t, func(t *testing.T) sandbox.Backend { return softBackend{rootlessBackend(t)} })
}

// TestRootlessView shows the sandbox from inside in rootless mode: the user
// is root of the sandbox's user namespace with nothing else, owns what the
// host user owns, and can still change nothing on the host but what it was
// given to write.
func TestRootlessView(t *testing.T) {
	rootlessInner(t)
	b := rootlessBackend(t)
	hostUID, hostGID := os.Getuid(), os.Getgid()

	t.Run("Identity", func(t *testing.T) {
		t.Parallel()
		sb := rootlessCreate(t, b, sandbox.Spec{})
		out := attackMust(t, sb, "", "id -u; id -g; echo $HOME; cat /proc/self/uid_map; grep -E '^(Cap[A-Za-z]+|NoNewPrivs|Seccomp):' /proc/self/status")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 5 || lines[0] != "0" || lines[1] != "0" || lines[2] != "/root" {
			t.Fatalf("id -u, id -g, $HOME = %q, want 0, 0, /root", lines[:min(3, len(lines))])
		}
		if f := strings.Fields(lines[3]); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(hostUID) || f[2] != "1" {
			t.Errorf("uid_map = %q, want only 0 mapped to the host user %d", lines[3], hostUID)
		}
		fields := map[string]string{}
		for _, l := range lines[4:] {
			k, v, _ := strings.Cut(l, ":")
			fields[k] = strings.TrimSpace(v)
		}
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			if v, ok := fields[k]; !ok || strings.Trim(v, "0") != "" {
				t.Errorf("%s = %q, want all zero", k, v)
			}
		}
		if fields["NoNewPrivs"] != "1" || fields["Seccomp"] != "2" {
			t.Errorf("NoNewPrivs = %q, Seccomp = %q; want 1 and 2 (filter)", fields["NoNewPrivs"], fields["Seccomp"])
		}
		// Home is root's, writable, and in the sandbox's own scratch.
		data := strings.Repeat("rootless home\n", 1<<16)
		if err := sb.WriteFile(context.Background(), "/root/blob", strings.NewReader(data), 0o600); err != nil {
			t.Errorf("WriteFile(/root/blob) = %v", err)
		} else if got, err := sb.ReadFile(context.Background(), "/root/blob", 0); err != nil || string(got) != data {
			t.Errorf("ReadFile(/root/blob) = %d bytes, %v; want the %d written", len(got), err, len(data))
		}
		if out := attackMust(t, sb, "", "stat -c %u:%g:%a /root /root/blob /workspace; ls -A /home 2>/dev/null; true"); out != "0:0:700\n0:0:600\n0:0:755\n" {
			t.Errorf("owners of /root, /root/blob, /workspace and /home's content = %q, want root's, and /home empty", out)
		}
		layers := sb.Info().Layers
		for _, want := range []string{"seccomp", "no_new_privs", "capabilities:dropped-for-children", "namespaces:user,mnt,pid,net,ipc,uts,cgroup"} {
			if !slices.Contains(layers, want) {
				t.Errorf("layers %q lack %s", layers, want)
			}
		}
		t.Logf("layers: %q", layers)
	})

	t.Run("Users", func(t *testing.T) {
		t.Parallel()
		sb := rootlessCreate(t, b, sandbox.Spec{})
		for _, user := range []string{"1000", "65534", "nobody"} {
			var errb sandboxtest.SyncBuffer
			r, err := sandbox.Run(context.Background(), sb, sandbox.Command{Argv: []string{"true"}, User: user, Stderr: &errb})
			if err == nil && r.Outcome == sandbox.OutcomeExited && r.ExitCode == 0 {
				t.Errorf("a command as user %s ran, but only root is mapped", user)
			} else if msg := fmt.Sprint(err) + r.Message + errb.String(); !strings.Contains(msg, "does not exist in this sandbox") {
				t.Errorf("a command as user %s: %v %+v %q, want an error saying the user does not exist in this sandbox", user, err, r, errb.String())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
		defer cancel()
		if sb, err := b.Create(ctx, sandbox.Spec{User: "sandbox"}); err == nil {
			_ = sb.Destroy(ctx)
			t.Errorf("Create with User sandbox succeeded rootless, want an error")
		} else if !strings.Contains(err.Error(), "rootless") {
			t.Errorf("Create with User sandbox = %v, want an error that names rootless mode", err)
		}
	})

	t.Run("Workspace", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		if err := os.WriteFile(filepath.Join(ws, "f"), []byte("host\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Given through a symbolic link: the host resolves it.
		link := filepath.Join(t.TempDir(), "ws-link")
		if err := os.Symlink(ws, link); err != nil {
			t.Fatal(err)
		}
		cow := rootlessCreate(t, b, sandbox.Spec{Workspace: link})
		if out := attackMust(t, cow, "", "stat -c %u:%g:%a /workspace/f; cat /workspace/f; echo cow > /workspace/f; cat /workspace/f"); out != "0:0:600\nhost\ncow\n" {
			t.Errorf("cow workspace inside = %q, want the host user's 0600 file owned by root, then changed", out)
		}
		if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != "host\n" {
			t.Errorf("host file after a cow write = %q, want it unchanged", b)
		}
		rw := rootlessCreate(t, b, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceRW})
		attackMust(t, rw, "", "echo new > /workspace/new && mkdir /workspace/d && test \"$(stat -c %u /workspace)\" = 0")
		if err := rw.WriteFile(context.Background(), "/workspace/api", strings.NewReader("x"), 0o644); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		for _, name := range []string{"new", "d", "api"} {
			fi, err := os.Stat(filepath.Join(ws, name))
			if err != nil {
				t.Errorf("host %s: %v", name, err)
				continue
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != hostUID || int(st.Gid) != hostGID {
				t.Errorf("host %s made inside is owned by %d:%d, want the user %d:%d", name, st.Uid, st.Gid, hostUID, hostGID)
			}
		}
	})

	t.Run("HostReadOnly", func(t *testing.T) {
		t.Parallel()
		// A directory the user owns, mounted read-only: root inside owns
		// it too, and still cannot write it.
		data := t.TempDir()
		if err := os.WriteFile(filepath.Join(data, "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		sb := rootlessCreate(t, b, sandbox.Spec{Mounts: []sandbox.Mount{{Source: data, Target: "/data", ReadOnly: true}}})
		if out := attackMust(t, sb, "", "stat -c %u /data/f"); out != "0\n" {
			t.Errorf("owner of the user's file inside = %q, want root (0)", out)
		}
		name := "airlock-rootless-" + attackToken()
		for _, p := range []string{"/data/f", "/data/" + name, "/usr/bin/" + name, "/etc/" + name, "/" + name, "/etc/passwd", "/proc/sys/kernel/hostname"} {
			res := attackRun(t, sb, "", "echo pwned >> "+p)
			if res.ok() {
				t.Errorf("root inside wrote %s", p)
			} else if !strings.Contains(res.stderr, "Read-only file system") && !strings.Contains(res.stderr, "Permission denied") {
				t.Errorf("writing %s failed with %q, want EROFS or EACCES", p, res.stderr)
			}
		}
		if err := sb.WriteFile(context.Background(), "/data/api", strings.NewReader("x"), 0o644); err == nil {
			t.Errorf("WriteFile(/data/api) on a read-only mount = nil, want an error")
		}
		if _, err := os.Stat(filepath.Join(data, name)); err == nil {
			t.Errorf("a file appeared in the user's read-only mount")
		}
		// System directories are read-only, nosuid and nodev.
		info := attackMust(t, sb, "", "grep -E ' /(usr|data) ' /proc/self/mountinfo")
		for _, l := range strings.Split(strings.TrimSpace(info), "\n") {
			f := strings.Fields(l)
			if len(f) < 6 {
				continue
			}
			opts := strings.Split(f[5], ",")
			for _, want := range []string{"ro", "nosuid", "nodev"} {
				if !slices.Contains(opts, want) {
					t.Errorf("mount %s has options %s, want %s", f[4], f[5], want)
				}
			}
		}
	})

	t.Run("Privileged", func(t *testing.T) {
		t.Parallel()
		sb := rootlessCreate(t, b, sandbox.Spec{})
		for _, c := range []struct{ probe, host string }{
			{"unshare -rn true", "unshare -rn true"},
			{"unshare -rm true", "unshare -rm true"},
			{"unshare -rpf true", "unshare -rpf true"},
			{"unshare -U true", "unshare -U true"},
			{"chroot / true", ""},
			{"mkdir -p /tmp/m && mount -t tmpfs none /tmp/m", ""},
			{"nsenter -t 1 -U -m true", ""},
			{"chown 1000 /tmp", ""},
		} {
			if c.host != "" {
				if out, code := attackHost(t, c.host); code != 0 {
					t.Errorf("control: %q fails on the host for this user too (%d): %s", c.host, code, out)
					continue
				}
			}
			if res := attackRun(t, sb, "", c.probe); res.ok() {
				t.Errorf("%q as root inside a rootless sandbox succeeded: %v", c.probe, res)
			}
		}
	})

	t.Run("Limits", func(t *testing.T) {
		t.Parallel()
		md, err := cgroup.Detect()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cgroups for this user: %+v", md)
		ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
		defer cancel()
		hard, err := b.Create(ctx, sandbox.Spec{Limits: sandbox.DefaultLimits})
		if len(md.Controllers) == 3 {
			// A delegated cgroup with every controller: limits hold.
			if err != nil {
				t.Fatalf("Create with required limits in a delegated cgroup = %v", err)
			}
			defer hard.Destroy(ctx)
			if l := strings.Join(hard.Info().Layers, " "); !strings.Contains(l, ":memory") || !strings.Contains(l, ":pids") {
				t.Errorf("layers %s, want the memory and pids limits", l)
			}
		} else {
			if err == nil {
				_ = hard.Destroy(ctx)
				t.Fatalf("Create with required limits succeeded without the controllers (%v)", md.Controllers)
			}
			if !strings.Contains(err.Error(), "resource limits required but") || !strings.Contains(err.Error(), "cgroup") {
				t.Errorf("Create with required limits = %v, want an error naming cgroups", err)
			}
			t.Logf("Create with required limits: %v", err)
		}
		soft := rootlessCreate(t, b, sandbox.Spec{})
		if md.Unified == "" && len(md.Controllers) == 0 && !slices.Contains(soft.Info().Layers, "cgroup:none") {
			t.Errorf("layers %q of a sandbox with no cgroup lack cgroup:none", soft.Info().Layers)
		}
	})

	t.Run("TemplateRoot", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		// The executor is static: a root file system of one binary.
		exe, err := os.ReadFile(executorPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "bin", "tool"), exe, 0o755); err != nil {
			t.Fatal(err)
		}
		sb := rootlessCreate(t, b, sandbox.Spec{RootFS: root})
		res := attackExec(t, sb, sandbox.Command{Argv: []string{"/bin/tool", "version"}})
		if !res.ok() || !strings.Contains(res.stdout, "airlock-exec protocol") {
			t.Errorf("/bin/tool version in the template root: %v", res)
		}
		if res := attackExec(t, sb, sandbox.Command{Argv: []string{"sh", "-c", "true"}}); res.r.ExitCode != 127 {
			t.Errorf("sh in a template root without it: %v, want exit 127 (the host's /usr is not there)", res)
		}
		// Landlock keeps the template's own files read-only, as in root
		// mode; and nothing written inside reaches the host's copy.
		if err := sb.WriteFile(context.Background(), "/bin/new", strings.NewReader("x"), 0o644); err == nil {
			t.Errorf("WriteFile(/bin/new) in the template root = nil, want it refused")
		}
		if err := sb.WriteFile(context.Background(), "/tmp/new", strings.NewReader("x"), 0o644); err != nil {
			t.Errorf("WriteFile(/tmp/new) = %v", err)
		}
		if ents, _ := os.ReadDir(filepath.Join(root, "bin")); len(ents) != 1 {
			t.Errorf("the template root on the host changed: bin holds %v", ents)
		}
	})

	t.Run("Doctor", func(t *testing.T) {
		t.Parallel()
		checks := map[string]linux.Check{}
		for _, c := range linux.Doctor(executorPath) {
			checks[c.Layer] = c
		}
		if c := checks["rootless"]; !c.OK || !c.Required {
			t.Errorf("doctor's rootless line as an unprivileged user = %+v, want ok and required (it is the mode in use)", c)
		}
		if c := checks["mode"]; !strings.Contains(c.Detail, "rootless") {
			t.Errorf("doctor's mode line = %+v, want it to say rootless", c)
		}
		if c, ok := checks["cgroups"]; !ok || c.Required {
			t.Errorf("doctor's cgroups line = %+v, want it present and not required rootless (--soft-limits)", c)
		}
		if _, ok := checks["mount-api"]; ok {
			t.Errorf("doctor checks the host's mount API rootless, where only the executor uses it")
		}
	})

	t.Run("LiveAndGC", func(t *testing.T) {
		t.Parallel()
		state := t.TempDir()
		gb, err := linux.New(linux.Config{Executor: executorPath, StateDir: state})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = gb.Close() })
		sb := rootlessCreate(t, gb, sandbox.Spec{})
		if live, err := gb.Live(); err != nil || !live[sb.ID()] {
			t.Errorf("Live() = %v, %v; want it to hold %s", live, err, sb.ID())
		}
		// What a killed airlock process leaves: a lock file nobody holds.
		stale := "sb-rootlessstale"
		if err := os.WriteFile(filepath.Join(state, "ids", stale), []byte(stale), 0o600); err != nil {
			t.Fatal(err)
		}
		if live, _ := gb.Live(); live[stale] {
			t.Errorf("Live() holds the stale %s", stale)
		}
		if _, err := gb.GC(); err != nil {
			t.Errorf("GC() = %v", err)
		}
		if _, err := os.Stat(filepath.Join(state, "ids", stale)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("GC left the stale lock file (stat: %v)", err)
		}
		if live, _ := gb.Live(); !live[sb.ID()] {
			t.Errorf("GC released the live sandbox %s", sb.ID())
		}
		if err := sb.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
		if live, _ := gb.Live(); live[sb.ID()] {
			t.Errorf("Live() still holds %s after Destroy", sb.ID())
		}
		if ents, _ := os.ReadDir(filepath.Join(state, "ids")); len(ents) != 0 {
			t.Errorf("lock files left after Destroy: %v", ents)
		}
	})
}

// TestRootlessKill9: when the unprivileged process that owns a rootless
// sandbox is killed with SIGKILL, nothing of the sandbox keeps running, and
// GC finds what is left.
func TestRootlessKill9(t *testing.T) {
	rootlessInner(t)
	t.Parallel()
	marker := attackMarker(1005)
	attackKillLeftovers(t, marker)
	state := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(state) })
	cmd, lines := attackStartHelper(t, nil, "TestRootlessHelperKill9",
		rootlessEnv+"=kill9", attackStateEnv+"="+state, attackMarkerEnv+"="+marker)
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	var id string
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("helper ended before it was ready")
		}
		id = strings.TrimPrefix(l, "ready id=")
	case <-time.After(2 * time.Minute):
		t.Fatal("helper did not get ready within 2 minutes")
	}
	if !attackPoll(time.Minute, func() bool { return len(attackHostProcs(marker)) > 0 }) {
		t.Fatalf("control: the sandboxed sleep %s is not visible on the host", marker)
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if live, _ := b.Live(); !live[id] {
		t.Errorf("control: Live() of the helper's state lacks its sandbox %s", id)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waited = true
	if !attackPoll(time.Minute, func() bool { return len(attackHostProcs(marker)) == 0 }) {
		t.Errorf("sleep %s (pids %v) still runs a minute after its unprivileged owner was killed with SIGKILL", marker, attackHostProcs(marker))
	}
	if live, _ := b.Live(); live[id] {
		t.Errorf("Live() holds %s after its owner died", id)
	}
	cleaned, err := b.GC()
	if err != nil {
		t.Errorf("GC() = %v", err)
	}
	t.Logf("GC cleaned %v", cleaned)
	if ents, _ := os.ReadDir(filepath.Join(state, "ids")); len(ents) != 0 {
		t.Errorf("GC left lock files: %v", ents)
	}
	_ = b.Close()
}

// TestRootlessHelperKill9 is the helper process of TestRootlessKill9.
func TestRootlessHelperKill9(t *testing.T) {
	if os.Getenv(rootlessEnv) != "kill9" {
		t.Skip("helper process of TestRootlessKill9")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: os.Getenv(attackStateEnv)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
	defer cancel()
	limits := sandbox.DefaultLimits
	limits.RequireHard = false
	sb, err := b.Create(ctx, sandbox.Spec{Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"sleep", os.Getenv(attackMarkerEnv)}}); err != nil {
		t.Fatal(err)
	}
	attackHelperSay("ready id=%s", sb.ID())
	// The parent kills this process; end on our own only if it does not.
	time.Sleep(50 * time.Second)
}
