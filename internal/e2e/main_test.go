package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

var (
	// skipReason is why this machine cannot run sandboxes; empty when it can.
	skipReason string
	// airlockBin is the airlock binary built by TestMain; airlock-exec is
	// beside it, where airlock looks for it.
	airlockBin string
	// up are the shared local upstreams, started by TestMain.
	up *upstreams
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if skipReason = sandboxUnavailable(); skipReason != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "ale-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	// The executor is run by sandbox root, an unmapped host uid: the
	// directory must be traversable by it, like an installed binary's.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := buildAirlock(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	airlockBin = filepath.Join(dir, "airlock")
	if up, err = startUpstreams(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: upstreams:", err)
		return 1
	}
	defer up.close()
	return m.Run()
}

// sandboxUnavailable says why sandboxes cannot run here, or "".
func sandboxUnavailable() string {
	if os.Geteuid() != 0 {
		return "e2e tests need root: the native sandbox backend maps each sandbox to its own host uid range"
	}
	probe := exec.Command("/bin/true")
	probe.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if err := probe.Run(); err != nil {
		return "e2e tests need user namespaces, which this kernel refuses: " + err.Error()
	}
	return ""
}

// buildAirlock builds every command of the module into dir.
func buildAirlock(dir string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("go env GOMOD: not inside the airlock module")
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/...")
	build.Dir = filepath.Dir(gomod)
	var stderr bytes.Buffer
	build.Stderr = &stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/...: %w\n%s", err, stderr.Bytes())
	}
	return nil
}

// home is one test's $AIRLOCK_HOME, and the way to run airlock with it.
type home struct {
	dir string
}

// newHome skips t when sandboxes cannot run here, and returns a fresh
// $AIRLOCK_HOME that is removed when t ends. The path is short: the egress
// socket under it must fit a unix socket address (108 bytes).
func newHome(t *testing.T) *home {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	dir, err := os.MkdirTemp("", "ale-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Each home has its own cgroup parent, which airlock leaves for
		// the next run of that home; this home has none.
		if b, err := linux.New(linux.Config{Executor: filepath.Join(filepath.Dir(airlockBin), "airlock-exec"), StateDir: filepath.Join(dir, "run")}); err == nil {
			if err := b.Close(); err != nil {
				t.Logf("remove the home's cgroup parent: %v", err)
			}
		}
		os.RemoveAll(dir)
	})
	return &home{dir: dir}
}

// result is what one airlock command did.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("airlock %s\nexit status %d\n--- stdout\n%s--- stderr\n%s",
		strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// commandWait bounds one airlock command, so that a hang fails the test with
// the command's output instead of stalling the whole package. It is not a
// speed requirement.
const commandWait = 3 * time.Minute

// airlock runs the airlock binary with stdin and args. Nothing of the test's
// environment reaches it but PATH and this home.
func (h *home) airlock(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), commandWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "AIRLOCK_HOME=" + h.dir}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		r.code = exit.ExitCode()
	default:
		t.Fatalf("airlock %s: %v\n%s", strings.Join(args, " "), err, r)
	}
	return r
}

// sandbox runs script with sh -c in a fresh sandbox: airlock sandbox run
// FLAGS -- sh -c SCRIPT.
func (h *home) sandbox(t *testing.T, flags []string, script string) result {
	t.Helper()
	args := append([]string{"sandbox", "run", "--timeout", "2m"}, flags...)
	return h.airlock(t, "", append(args, "--", "sh", "-c", script)...)
}

// writePolicy writes a policy document into this home and returns its path.
func (h *home) writePolicy(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(h.dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sandboxPath is the PATH commands get inside a sandbox; the host's system
// directories are shown there read-only, so a client the host has under them
// is the client the sandbox runs.
var sandboxPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// needTool skips t unless the sandbox will find name, and returns the host
// path of what it will run.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p := sandboxTool(name)
	if p == "" {
		t.Skipf("%s is not installed under the host's system directories, so a sandbox has none", name)
	}
	return p
}

// sandboxTool returns the host path of the program a sandbox runs for
// name, or "".
func sandboxTool(name string) string {
	for _, dir := range sandboxPath {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// check is one command in a sandbox and what it must show.
type check struct {
	name   string
	script string
	// code is the script's exit status, passed through airlock.
	code int
	// stdout and stderr must contain each of these.
	stdout, stderr []string
}

// runChecks runs every check in its own sandbox with flags, in parallel.
func (h *home) runChecks(t *testing.T, flags []string, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := h.sandbox(t, flags, c.script)
			if r.code != c.code {
				t.Fatalf("exit status %d, want %d\n%s", r.code, c.code, r)
			}
			for _, want := range c.stdout {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q\n%s", want, r)
				}
			}
			for _, want := range c.stderr {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q\n%s", want, r)
				}
			}
		})
	}
}

// shq quotes s for sh.
func shq(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
