package engine_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestLifecycleGVisor runs the tests of a run's sandbox lifecycle again
// with every sandbox on the gvisor runtime: checkpoints after each step,
// pause and resume (a sandbox restored from a checkpoint), a fork from a
// step, recovery after the host is killed at each point. It runs them in
// a process of its own, with testRuntimeEnv set; each checks that its
// sandboxes were gvisor's.
func TestLifecycleGVisor(t *testing.T) {
	if os.Getenv(testRuntimeEnv) != "" {
		t.Skip("running the lifecycle tests themselves")
	}
	if os.Geteuid() != 0 {
		t.Skip("gvisor runtime: needs root")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("gvisor runtime: runsc is not installed (scripts/ci-deps.sh installs it)")
	}
	args := []string{"-test.run=^(TestPauseAndResume|TestForkFromAStep|TestForkScriptResumed|TestRecoveryAfterKill9)$", "-test.timeout=15m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), testRuntimeEnv+"=gvisor")
	out, err := cmd.CombinedOutput()
	t.Logf("the lifecycle tests on gvisor:\n%s", out)
	if err != nil {
		t.Fatalf("the lifecycle tests failed on gvisor: %v", err)
	}
}
