package linux_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// needGVisor skips a test where the gvisor runtime cannot run: it needs
// root (runsc without --rootless) and runsc.
func needGVisor(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("gvisor runtime: needs root")
	}
	if os.Getenv(linux.RunscEnv) != "" {
		return
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("gvisor runtime: runsc is not installed (scripts/ci-deps.sh installs it)")
	}
}

// newGVisorBackend returns a backend for gvisor sandboxes, closed when the
// test ends.
func newGVisorBackend(t testing.TB) *linux.Backend {
	t.Helper()
	needGVisor(t)
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestGVisorExec(t *testing.T) {
	b := newGVisorBackend(t)
	ws := t.TempDir()
	if err := os.WriteFile(ws+"/in.txt", []byte("from host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := sandboxtest.Create(t, b, sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Workspace: ws})
	info := sb.Info()
	if info.Backend != "gvisor" || !slices.Contains(info.Layers, "runtime:gvisor") {
		t.Errorf("Info() = %+v, want backend gvisor with layer runtime:gvisor", info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb sandboxtest.SyncBuffer
	r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "cat /workspace/in.txt; echo new > /workspace/new.txt; cat /workspace/new.txt; hostname; uname -r"}, Stdout: &out, Stderr: &errb})
	if err != nil || r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v; stderr %q", r, err, errb.String())
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(uts.Release[:])
	got := out.String()
	if !strings.HasPrefix(got, "from host\nnew\nairlock\n") || strings.Contains(got, hostRelease) {
		t.Errorf("output %q: want the workspace, its new file, hostname airlock and a kernel release other than the host's %s (gVisor's)", got, hostRelease)
	}
	// A cow workspace: the new file never reaches the host.
	if _, err := os.Stat(ws + "/new.txt"); err == nil {
		t.Errorf("a cow workspace's write reached the host")
	}
}

// gvisorProcs returns the pids of the host's processes of the gvisor
// sandboxes of state directory state: runsc and every process it starts
// (gofer, sentry) are given runsc's state directory below it.
func gvisorProcs(state string) []int {
	return attackProcs(func(dir string) bool {
		b, err := os.ReadFile(dir + "/cmdline")
		return err == nil && strings.Contains(string(b), state+"/gvisor/")
	})
}

// TestGVisorHostKill9: when the process that owns a gvisor sandbox is
// killed with SIGKILL, runsc, its gofer and the sandbox end, and the
// sandbox's cgroup is empty.
func TestGVisorHostKill9(t *testing.T) {
	needGVisor(t)
	state := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(state) })
	t.Cleanup(func() {
		for _, pid := range gvisorProcs(state) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	})
	cmd, lines := attackStartHelper(t, nil, "TestGVisorHelperKill9", attackHelperEnv+"=gvkill9", attackStateEnv+"="+state)
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
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "id="); ok {
				id = v
			}
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("helper did not get ready within 2 minutes")
	}
	if got := gvisorProcs(state); len(got) < 2 {
		t.Fatalf("control: want runsc's processes of sandbox %s on the host, found pids %v", id, got)
	}
	groups := sandboxtest.CgroupDirs(filepath.Join(linux.CgroupParent(state), id))
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatalf("kill helper: %v", err)
	}
	_ = cmd.Wait()
	waited = true
	if !attackPoll(time.Minute, func() bool { return len(gvisorProcs(state)) == 0 }) {
		t.Errorf("runsc processes %v of sandbox %s still run a minute after their owner was killed with SIGKILL", gvisorProcs(state), id)
	}
	// What runsc kept on disk for the sandbox is collected by GC.
	gb, err := linux.New(linux.Config{Executor: executorPath, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gb.GC(); err != nil {
		t.Errorf("GC = %v", err)
	}
	if _, err := os.Stat(filepath.Join(state, "gvisor", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("GC left the runsc state of sandbox %s (stat: %v)", id, err)
	}
	for _, g := range groups {
		var procs []byte
		attackPoll(time.Minute, func() bool {
			var err error
			procs, err = os.ReadFile(filepath.Join(g, "cgroup.procs"))
			return err != nil || len(bytes.TrimSpace(procs)) == 0
		})
		if len(bytes.TrimSpace(procs)) > 0 {
			t.Errorf("cgroup %s still has processes after its owner was killed: %q", g, procs)
		}
		t.Cleanup(func() { _ = unix.Rmdir(g) })
	}
}

// TestGVisorHelperKill9 is the helper process of TestGVisorHostKill9.
func TestGVisorHelperKill9(t *testing.T) {
	if os.Getenv(attackHelperEnv) != "gvkill9" {
		t.Skip("helper process of TestGVisorHostKill9")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: os.Getenv(attackStateEnv)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Limits: sandbox.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	attackHelperSay("ready id=%s", sb.ID())
	time.Sleep(50 * time.Second)
}

// TestGVisorDestroy: Destroy ends runsc's processes and removes the
// sandbox's state directory, and a memory limit holds from the host's
// cgroup around runsc's processes.
func TestGVisorDestroy(t *testing.T) {
	needGVisor(t)
	state := t.TempDir()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Limits: sandbox.Limits{MemoryBytes: 128 << 20, Pids: 64, CPUs: 1, RequireHard: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sb.Info().Layers, "cgroup:hybrid:memory") && !slices.Contains(sb.Info().Layers, "cgroup:v2:memory") {
		t.Errorf("Info().Layers = %v, want a memory cgroup", sb.Info().Layers)
	}
	// Allocate past the limit: the host's cgroup ends it.
	// At the limit the host's OOM killer ends the sentry, and with it the
	// whole sandbox (docs/gvisor.md): the command's outcome is oom.
	r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"python3", "-c", "b = bytearray(300 << 20); print(len(b))"}, Timeout: 20 * time.Second})
	if err != nil || r.Outcome != sandbox.OutcomeOOM || r.ExitStatus() != 137 {
		t.Errorf("allocating 300 MiB under a 128 MiB limit: %+v, %v; want outcome oom, exit status 137", r, err)
	}
	t.Logf("over the memory limit: %+v, %v", r, err)
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if got := gvisorProcs(state); len(got) > 0 {
		t.Errorf("runsc processes %v left after Destroy", got)
	}
	if _, err := os.Stat(filepath.Join(state, "gvisor", sb.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state of sandbox %s left after Destroy (stat: %v)", sb.ID(), err)
	}
}

// TestDoctorGVisor: doctor's runtime:gvisor line says whether a gvisor
// sandbox runs here, and why not: it is never required.
func TestDoctorGVisor(t *testing.T) {
	needGVisor(t)
	line := func() linux.Check {
		for _, c := range linux.Doctor(executorPath) {
			if c.Layer == "runtime:gvisor" {
				return c
			}
		}
		t.Fatal("doctor has no runtime:gvisor line")
		return linux.Check{}
	}
	b := newGVisorBackend(t)
	r, err := b.Runsc()
	if err != nil {
		t.Fatal(err)
	}
	c := line()
	if !c.OK || c.Required {
		t.Errorf("runtime:gvisor = %+v, want ok and not required where runsc runs", c)
	}
	if want := "runsc " + r.Path + " (" + r.Version + "), platform " + r.Platform + ": "; !strings.Contains(c.Detail, want) {
		t.Errorf("runtime:gvisor's detail %q does not say %q", c.Detail, want)
	}
	t.Setenv(linux.RunscEnv, "")
	t.Setenv("PATH", t.TempDir()) // no runsc
	if c := line(); c.OK || !strings.Contains(c.Detail, "runsc is not installed") {
		t.Errorf("runtime:gvisor without runsc = %+v, want not ok, saying runsc is missing", c)
	}
}

// TestGVisorCheckpointTimes checks that a checkpoint carries a time
// before 1970 as it was set, though gVisor reports its nanoseconds
// wrapped (the executor reads them back).
func TestGVisorCheckpointTimes(t *testing.T) {
	b := newGVisorBackend(t)
	sb := sandboxtest.Create(t, b, sandbox.Spec{Runtime: sandbox.RuntimeGVisor})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errb sandboxtest.SyncBuffer
	r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "touch -d @-315619199.5 /workspace/old && ln -s old /workspace/link && touch -h -d @-1.25 /workspace/link"}, Stderr: &errb})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("Run = %+v, %v; stderr %q", r, err, errb.String())
	}
	cp, ok := sb.(sandbox.Checkpointer)
	if !ok {
		t.Fatal("a gvisor sandbox is no sandbox.Checkpointer")
	}
	var buf bytes.Buffer
	if _, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{}, &buf); err != nil {
		t.Fatalf("Checkpoint = %v", err)
	}
	want := map[string]time.Time{"old": time.Unix(-315619200, 500_000_000), "link": time.Unix(-2, 750_000_000)}
	for _, e := range sandboxtest.ReadDelta(t, buf.Bytes(), true) {
		if w, ok := want[e.Name]; ok {
			if !e.ModTime.Equal(w) {
				t.Errorf("%s: mtime %v in the checkpoint, want %v", e.Name, e.ModTime.UTC(), w.UTC())
			}
			delete(want, e.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("the checkpoint lacks %v", want)
	}
}

// TestCOWDiskBomb: a disk bomb in a cow workspace stops at the disk limit
// on each runtime, with disk_full and a message that names the limit, the
// host's workspace untouched; the space comes back when the file goes. The
// probe stops itself at 1.5 GiB. On gvisor the upper layer is the host's
// tmpfs in the bundle (docs/gvisor.md): its use is read from the host, and
// must not pass the limit.
func TestCOWDiskBomb(t *testing.T) {
	const disk = 256 << 20
	for _, rt := range []string{sandbox.RuntimeNative, sandbox.RuntimeGVisor} {
		t.Run(rt, func(t *testing.T) {
			if os.Geteuid() != 0 {
				t.Skip("needs root")
			}
			if rt == sandbox.RuntimeGVisor {
				needGVisor(t)
			}
			state := t.TempDir()
			b, err := linux.New(linux.Config{Executor: executorPath, StateDir: state})
			if err != nil {
				t.Fatalf("linux.New = %v", err)
			}
			t.Cleanup(func() { _ = b.Close() })
			ws := t.TempDir()
			if err := os.WriteFile(ws+"/seed", []byte("seed\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			limits := sandbox.DefaultLimits
			limits.DiskBytes = disk
			sb := sandboxtest.Create(t, b, sandbox.Spec{Runtime: rt, Workspace: ws, WorkspaceMode: sandbox.WorkspaceCOW, Limits: limits})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			run := func(cmd string) (sandbox.Result, string, string) {
				t.Helper()
				var out, errb sandboxtest.SyncBuffer
				r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", cmd}, Stdout: &out, Stderr: &errb})
				if err != nil {
					t.Fatalf("%s: %v", cmd, err)
				}
				return r, out.String(), errb.String()
			}
			r, _, stderr := run("dd if=/dev/zero of=/workspace/bomb bs=1M count=1536")
			if r.Outcome != sandbox.OutcomeDiskFull {
				t.Errorf("1.5 GiB into a cow workspace under a 256 MiB disk limit: outcome %q (exit %d), want %q; stderr %q", r.Outcome, r.ExitCode, sandbox.OutcomeDiskFull, stderr)
			}
			if !strings.Contains(r.Message, "disk limit 256M reached") || !strings.Contains(stderr, "No space left on device") {
				t.Errorf("message %q, stderr %q: want the disk limit named and ENOSPC's", r.Message, stderr)
			}
			if rt == sandbox.RuntimeGVisor {
				var st unix.Statfs_t
				if err := unix.Statfs(filepath.Join(state, "gvisor", sb.ID(), "bundle", "cow"), &st); err != nil {
					t.Fatalf("the host's upper layer: %v", err)
				}
				if size, used := st.Blocks*uint64(st.Bsize), (st.Blocks-st.Bfree)*uint64(st.Bsize); size != disk || used > disk {
					t.Errorf("the host's upper layer: %d bytes of %d used, want a tmpfs of %d", used, size, disk)
				}
			}
			if _, err := os.Stat(ws + "/bomb"); err == nil {
				t.Errorf("the bomb reached the host's workspace")
			}
			// The space comes back.
			if r, out, stderr := run("rm /workspace/bomb && dd if=/dev/zero of=/workspace/after bs=1M count=64 2>/dev/null && cat /workspace/seed"); r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 || out != "seed\n" {
				t.Errorf("after removing the bomb: %+v, %q, %q", r, out, stderr)
			}
			if err := sb.Destroy(context.Background()); err != nil {
				t.Fatalf("Destroy = %v", err)
			}
			if data, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(data), state+"/") {
				t.Errorf("after Destroy, the host still mounts below the state directory %s (%v)", state, err)
			}
		})
	}
}

// TestGVisorPlatform: Config.RunscPlatform picks runsc's platform. ptrace
// (this runsc's default) runs; kvm, without /dev/kvm, fails the Create
// with runsc's reason rather than fall back; a name that is no platform's
// is refused by New.
func TestGVisorPlatform(t *testing.T) {
	needGVisor(t)
	cases := []struct {
		platform string
		newErr   bool
		runs     bool
	}{
		{"ptrace", false, true},
		{"systrap", false, true},
		{"kvm", false, false},
		{"ptrace --debug", true, false},
		{"--overlay2=none", true, false},
	}
	for _, c := range cases {
		t.Run(c.platform, func(t *testing.T) {
			b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir(), RunscPlatform: c.platform})
			if c.newErr {
				if err == nil {
					b.Close()
					t.Fatalf("New with platform %q succeeded, want it refused", c.platform)
				}
				return
			}
			if err != nil {
				t.Fatalf("New = %v", err)
			}
			t.Cleanup(func() { _ = b.Close() })
			r, err := b.Runsc()
			if err != nil {
				t.Fatal(err)
			}
			if r.Platform != c.platform || r.Why != "configured" {
				t.Errorf("Runsc() = %+v, want the configured platform %s", r, c.platform)
			}
			if c.platform == "kvm" {
				if _, err := os.Stat("/dev/kvm"); err == nil {
					t.Skip("this machine has /dev/kvm: the failing case needs none")
				}
			}
			if c.runs && !slices.Contains(r.Platforms, c.platform) {
				t.Skipf("runsc %s (%s) offers %v, not %s (scripts/runsc.sh builds one with systrap)", r.Path, r.Version, r.Platforms, c.platform)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sb, err := b.Create(ctx, sandbox.Spec{Runtime: sandbox.RuntimeGVisor})
			if !c.runs {
				if err == nil {
					_ = sb.Destroy(ctx)
					t.Fatalf("Create on platform %s without /dev/kvm succeeded", c.platform)
				}
				if !strings.Contains(err.Error(), "kvm") {
					t.Errorf("Create on platform %s: %v, want runsc's reason naming kvm", c.platform, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Create = %v", err)
			}
			defer sb.Destroy(ctx)
			if out := attackMust(t, sb, "", "echo ok"); out != "ok\n" {
				t.Errorf("echo ok = %q", out)
			}
			if l := sb.Info().Layers; !slices.Contains(l, "gvisor-platform:"+c.platform) {
				t.Errorf("Info().Layers = %v, want gvisor-platform:%s", l, c.platform)
			}
		})
	}
}

// TestChoosePlatform: with no platform configured, a gvisor sandbox runs on
// systrap where the runsc offers it, on kvm where it has no systrap and
// /dev/kvm opens, else on ptrace, saying why.
// TestRunscNoFastPath: on systrap, a runsc that takes
// --systrap-disable-fast-path gets it in every sandbox's flags; one that
// does not, and another platform, do not (a fake runsc answers the
// backend's questions).
func TestRunscNoFastPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a gvisor bundle: needs root")
	}
	cases := []struct {
		name, platform, flags string
		want                  bool
	}{
		{"systrap", "", "  -platform string\n  -systrap-disable-fast-path\n    \tdisable...", true},
		{"systrap, an older runsc", "", "  -platform string\n  -systrap-disable-syscall-patching\n", false},
		{"ptrace", "ptrace", "  -systrap-disable-fast-path\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			fake := filepath.Join(dir, "runsc")
			script := "#!/bin/sh\ncase \"$*\" in\n" +
				"--version) echo 'runsc version fake' ;;\n" +
				"'help platforms') printf 'ptrace\\nsystrap\\n' ;;\n" +
				"flags) printf '" + c.flags + "' >&2 ;;\n" +
				"*) exit 1 ;;\nesac\n"
			if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "state"), Runsc: fake, RunscPlatform: c.platform})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			r, err := b.Runsc()
			if err != nil {
				t.Fatal(err)
			}
			if r.NoFastPath != c.want {
				t.Errorf("NoFastPath = %v, want %v (platform %s)", r.NoFastPath, c.want, r.Platform)
			}
			flags, err := linux.GVisorBundle(b, filepath.Join(dir, "bundle"), sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Limits: sandbox.DefaultLimits})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(flags, "--systrap-disable-fast-path"); got != c.want {
				t.Errorf("runsc flags %q: --systrap-disable-fast-path %v, want %v", flags, got, c.want)
			}
		})
	}
}

func TestChoosePlatform(t *testing.T) {
	cases := []struct {
		configured string
		platforms  []string
		kvm        bool
		want, why  string
	}{
		{"", []string{"kvm", "ptrace"}, false, "ptrace", "offers only kvm, ptrace and no /dev/kvm with hardware virtualization"},
		{"", []string{"kvm", "ptrace"}, true, "kvm", "/dev/kvm opens and the CPU has vmx or svm"},
		{"", []string{"kvm", "ptrace", "systrap"}, false, "systrap", "offers systrap"},
		{"", []string{"kvm", "ptrace", "systrap"}, true, "systrap", "offers systrap"},
		{"", nil, false, "ptrace", "no /dev/kvm"},
		{"ptrace", []string{"kvm", "ptrace", "systrap"}, true, "ptrace", "configured"},
		{"kvm", []string{"ptrace"}, false, "kvm", "configured"},
	}
	for _, c := range cases {
		got, why := linux.ChoosePlatform(c.configured, c.platforms, c.kvm)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("choosePlatform(%q, %v, kvm %v) = %s (%s), want %s (%s)", c.configured, c.platforms, c.kvm, got, why, c.want, c.why)
		}
	}
	for cpuinfo, want := range map[string]bool{
		"processor\t: 0\nflags\t\t: fpu vme de pse vmx sse\n":     true,
		"processor\t: 0\nflags\t\t: fpu svm\nbugs\t\t: spectre\n": true,
		// kvm-pvm's guests: /dev/kvm, and neither flag.
		"processor\t: 0\nflags\t\t: fpu vme hypervisor\nvmx flags\t: x\n": false,
		"processor\t: 0\nflags\t\t: fpu vmxx\n":                           false,
		"":                                                                false,
	} {
		if got := linux.HardwareVirt(cpuinfo); got != want {
			t.Errorf("hardwareVirt(%q) = %v, want %v", cpuinfo, got, want)
		}
	}
	for out, want := range map[string]string{
		"runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n": "0.0~20221219.0",
		"runsc version release-20260901.0\nspec: 1.1.0\n": "release-20260901.0",
		"something else\n": "something else",
		"":                 "",
	} {
		if got := linux.RunscVersion(out); got != want {
			t.Errorf("runscVersion(%q) = %q, want %q", out, got, want)
		}
	}
}

// TestGVisorCOWWorkspacePath: a cow workspace whose path holds a comma and
// a colon (which a mount option string would read as another option or
// layer) is the overlay of that directory, and its root shows the
// directory's mode, sticky bit included.
func TestGVisorCOWWorkspacePath(t *testing.T) {
	b := newGVisorBackend(t)
	ws := filepath.Join(t.TempDir(), "a,upperdir=x:b")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ws, 0o1777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/seed", []byte("seed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := sandboxtest.Create(t, b, sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Workspace: ws, WorkspaceMode: sandbox.WorkspaceCOW})
	out := attackMust(t, sb, "", `python3 -c 'import os, stat; print(oct(stat.S_IMODE(os.stat("/workspace").st_mode)))' && cat /workspace/seed && echo new > /workspace/new && cat /workspace/new`)
	if out != "0o1777\nseed\nnew\n" {
		t.Errorf("cow workspace %q: %q, want mode 0o1777, its seed and the new file", ws, out)
	}
	if _, err := os.Stat(ws + "/new"); err == nil {
		t.Errorf("the cow workspace's write reached the host")
	}
}
