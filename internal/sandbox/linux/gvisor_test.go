package linux_test

import (
	"context"
	"os"
	"os/exec"
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
