package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/deptest"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// bins builds airlock, airlock-host and airlock-exec into one directory, as
// make build installs them, once per test binary.
var binDir string

func bins(t *testing.T) string {
	t.Helper()
	if binDir != "" {
		return binDir
	}
	if testing.Short() {
		t.Skip("builds the commands; skipped in -short mode")
	}
	// World-traversable, like an installed binary's directory: sandbox
	// root, an unmapped host uid, runs the executor from it.
	dir, err := os.MkdirTemp("", sandboxtest.ExecutorDirPrefix)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command(deptest.GoTool(t), "build", "-trimpath", "-o", dir+"/",
		self, "github.com/airlockrun/airlock/cmd/airlock-host", "github.com/airlockrun/airlock/cmd/airlock-exec")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("go build: %v\n%s", err, out)
	}
	binDir = dir
	return dir
}

// needSandboxes skips the test where the executor in dir cannot run
// sandboxes: not root, or a layer airlock doctor requires is missing.
func needSandboxes(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run sandboxes")
	}
	for _, c := range linux.Doctor(filepath.Join(dir, "airlock-exec")) {
		if c.Required && !c.OK {
			t.Skipf("sandboxes cannot run here: %s", c.Layer)
		}
	}
}

// shortHome is an airlock home for the test, removed with its sandboxes'
// cgroup parent when the test ends: a short path, as the home holds unix
// sockets (t.TempDir's path can be too long for one).
func shortHome(t *testing.T) string {
	t.Helper()
	home, err := os.MkdirTemp("", "alx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = linux.Forget(filepath.Join(home, sandboxcli.RunStateDir))
		os.RemoveAll(home)
	})
	return home
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs bin with args, env added to the test's environment, and
// returns what it wrote and its exit status.
func run(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	_, wait := startCmd(t, bin, env, args...)
	return wait()
}

// startCmd starts bin as run does; wait returns its result.
func startCmd(t *testing.T, bin string, env []string, args ...string) (cmd *exec.Cmd, wait func() result) {
	t.Helper()
	cmd = exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, func() result {
		err := cmd.Wait()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			r.code = ee.ExitCode()
		case err != nil:
			t.Fatalf("%s %v: %v", bin, args, err)
		}
		return r
	}
}

// TestFrontEnd runs the built front end: the plain sandbox commands run in
// it, everything else in airlock-host, with the same output either way.
func TestFrontEnd(t *testing.T) {
	dir := bins(t)
	home := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(filepath.Join(home, sandboxcli.RunStateDir)) })
	env := []string{"AIRLOCK_HOME=" + home}
	airlock, host := filepath.Join(dir, "airlock"), filepath.Join(dir, "airlock-host")
	sandboxes := linux.Doctor(filepath.Join(dir, "airlock-exec"))
	canRun := os.Geteuid() == 0
	for _, c := range sandboxes {
		if c.Required && !c.OK {
			canRun = false
		}
	}

	same := []struct {
		name string
		args []string
		code int
	}{
		{"version", []string{"version"}, 0},
		{"help", []string{"sandbox", "run", "--help"}, 0},
		{"unknown flag", []string{"sandbox", "run", "--bogus", "--", "true"}, 2},
		{"egress flag with a bad value", []string{"sandbox", "run", "--allow", "a b", "--", "true"}, 2},
		{"missing policy", []string{"sandbox", "run", "--policy", filepath.Join(home, "none.yaml"), "--", "true"}, 2},
		{"bad size", []string{"sandbox", "run", "--memory", "lots", "--", "true"}, 2},
		{"no command", []string{"sandbox", "run"}, 2},
		{"bad id", []string{"sandbox", "exec", "nope", "--", "true"}, 2},
		{"empty ls", []string{"sandbox", "ls"}, 0},
		{"runs", []string{"runs", "ls"}, 0},
	}
	for _, c := range same {
		t.Run(c.name, func(t *testing.T) {
			got, want := run(t, airlock, env, c.args...), run(t, host, env, c.args...)
			if got != want {
				t.Errorf("airlock %v = %+v\nairlock-host gives %+v", c.args, got, want)
			}
			if got.code != c.code {
				t.Errorf("airlock %v exited %d, want %d; stderr: %s", c.args, got.code, c.code, got.stderr)
			}
		})
	}

	// Help, asked for any way, goes to the whole command line and runs
	// nothing (internal/cli's TestHelpRunsNothing asks every command):
	// what the front end would run itself prints only help here.
	t.Run("help runs nothing", func(t *testing.T) {
		fresh := t.TempDir()
		henv := []string{"AIRLOCK_HOME=" + fresh}
		for _, args := range [][]string{
			{"sandbox", "run", "-h", "--", "true"},
			{"sandbox", "run", "--memory", "1G", "--help", "--", "true"},
			{"sandbox", "exec", "-h", "sb-0123456789ab", "--", "true"},
			{"sandbox", "rm", "sb-0123456789ab", "--help"},
			{"sandbox", "gc", "--forget", "-h"},
			{"sandbox", "ls", "--help"},
			{"help", "sandbox", "run"},
			{"sandbox", "create", "--help"},
		} {
			got, want := run(t, airlock, henv, args...), run(t, host, henv, args...)
			if got != want {
				t.Errorf("airlock %q = %+v\nairlock-host gives %+v", args, got, want)
			}
			if got.code != 0 || !strings.HasPrefix(got.stdout, "Usage: airlock sandbox") || got.stderr != "" {
				t.Errorf("airlock %q = %+v, want help and exit 0", args, got)
			}
		}
		if ents, err := os.ReadDir(fresh); err != nil || len(ents) > 0 {
			t.Errorf("asking for help left %v (%v) in AIRLOCK_HOME, want nothing", ents, err)
		}
		flag, cmd := run(t, airlock, henv, "--version"), run(t, airlock, henv, "version")
		if flag != cmd || cmd.code != 0 || !strings.HasPrefix(cmd.stdout, "airlock ") {
			t.Errorf("airlock --version = %+v, airlock version = %+v; want the same version line, exit 0", flag, cmd)
		}
	})

	t.Run("sandbox run", func(t *testing.T) {
		if !canRun {
			t.Skip("sandboxes cannot run here (not root, or a required layer is missing)")
		}
		r := run(t, airlock, env, "sandbox", "run", "--env", "A=b", "--", "/bin/sh", "-c", `echo "$A"; exit 3`)
		if r.stdout != "b\n" || r.code != 3 {
			t.Errorf("sandbox run = %+v, want stdout b and exit 3", r)
		}
	})

	t.Run("gc --forget", func(t *testing.T) {
		if !canRun {
			t.Skip("sandboxes cannot run here (not root, or a required layer is missing)")
		}
		own := filepath.Join(home, "own")
		oenv := []string{"AIRLOCK_HOME=" + own}
		if r := run(t, airlock, oenv, "sandbox", "run", "--", "true"); r.code != 0 {
			t.Fatalf("sandbox run = %+v", r)
		}
		parent := linux.CgroupParent(filepath.Join(own, sandboxcli.RunStateDir))
		if dirs := sandboxtest.CgroupDirs(parent); len(dirs) == 0 {
			t.Logf("no cgroup directories named %s (no cgroups here?)", parent)
		}
		if r := run(t, airlock, oenv, "sandbox", "gc", "--forget"); r.code != 0 {
			t.Fatalf("sandbox gc --forget = %+v", r)
		}
		if dirs := sandboxtest.CgroupDirs(parent); len(dirs) > 0 {
			t.Errorf("after gc --forget, cgroup directories %v are left", dirs)
		}
	})

	t.Run("without airlock-host", func(t *testing.T) {
		if !canRun {
			t.Skip("sandboxes cannot run here (not root, or a required layer is missing)")
		}
		// The plain sandbox commands need nothing but the front end and
		// the executor; the others say where airlock-host should be.
		lone := filepath.Join(dir, "lone")
		if err := os.Mkdir(lone, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"airlock", "airlock-exec"} {
			if err := os.Link(filepath.Join(dir, b), filepath.Join(lone, b)); err != nil {
				t.Fatal(err)
			}
		}
		a := filepath.Join(lone, "airlock")
		if r := run(t, a, env, "sandbox", "run", "--", "/bin/echo", "ok"); r.stdout != "ok\n" || r.code != 0 {
			t.Errorf("sandbox run without airlock-host = %+v", r)
		}
		r := run(t, a, env, "version")
		if r.code != 125 || !strings.Contains(r.stderr, "airlock-host") {
			t.Errorf("version without airlock-host = %+v, want exit 125 naming airlock-host", r)
		}
	})
}

// TestExitStatus drives every row of the README's table of exit statuses,
// for airlock sandbox run and airlock run where the row applies, through
// both binaries: airlock (whose front end runs the plain sandbox commands
// itself) and airlock-host. Each case runs in a fresh home; a refusal (2)
// must leave no run recorded.
func TestExitStatus(t *testing.T) {
	dir := bins(t)
	canRun := os.Geteuid() == 0
	for _, c := range linux.Doctor(filepath.Join(dir, "airlock-exec")) {
		if c.Required && !c.OK {
			canRun = false
		}
	}
	files := t.TempDir()
	script := filepath.Join(files, "done.yaml")
	if err := os.WriteFile(script, []byte("turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(files, "missing")
	tests := []struct {
		row     string // the README's row
		args    []string
		env     []string
		sandbox bool // needs a sandbox to run
		code    int
		stdout  string // a line stdout must hold
		stderr  string // what stderr must hold; "" for nothing
	}{
		{"0 success", []string{"sandbox", "run", "--", "true"}, nil, true, 0, "", ""},
		{"0 success", []string{"run", "--script", script, "--verify", "true", "the task"}, nil, true, 0, ": completed\n", ""},
		{
			"0 success, not verified",
			[]string{"run", "--script", script, "the task"},
			nil, false, 0,
			": completed (not verified: no checks configured)\n", "",
		},
		{"1 run not completed", []string{"run", "--script", script, "--verify", "false", "the task"}, nil, true, 1, ": failed_verification\n", ""},
		{"2 unknown flag", []string{"sandbox", "run", "--bogus", "--", "true"}, nil, false, 2, "", "unknown flag --bogus"},
		{"2 unknown flag", []string{"run", "--bogus", "the task"}, nil, false, 2, "", "unknown flag --bogus"},
		{
			"2 missing workspace",
			[]string{"sandbox", "run", "--workspace", missing, "--", "true"},
			nil, false, 2, "",
			"airlock: --workspace " + missing + ": stat " + missing + ": no such file or directory\n",
		},
		{
			"2 missing workspace",
			[]string{"run", "--script", script, "--workspace", missing, "the task"},
			nil, false, 2, "",
			"airlock: --workspace " + missing + ": stat " + missing + ": no such file or directory\n",
		},
		{"2 unknown model spec", []string{"run", "--model", "gpt4", "the task"}, nil, false, 2, "", `airlock: model: spec "gpt4" is not PROVIDER:MODEL`},
		{
			"2 no API key",
			[]string{"run", "--model", "anthropic:claude-sonnet-4-5", "the task"},
			[]string{"ANTHROPIC_API_KEY="},
			false, 2, "",
			"airlock: anthropic: no API key (set ANTHROPIC_API_KEY",
		},
		{
			"2 no sandbox named X",
			[]string{"sandbox", "exec", "sb-0123456789ab", "--", "true"},
			nil, false, 2, "",
			"airlock: no sandbox named sb-0123456789ab (airlock sandbox ls lists the live ones)\n",
		},
		{"2 no sandbox named X", []string{"sandbox", "rm", "sb-0123456789ab"}, nil, false, 2, "", "airlock: no sandbox named sb-0123456789ab"},
		{"124 timeout", []string{"sandbox", "run", "--timeout", "100ms", "--", "sleep", "30"}, nil, true, 124, "", "airlock: killed: command timeout exceeded\n"},
		{"125 airlock's own error", []string{"sandbox", "run", "--", "true"}, []string{"AIRLOCK_EXEC=" + missing}, false, 125, "", "airlock: linux backend: executor"},
		{"125 airlock's own error", []string{"run", "--store", "sqlite:" + filepath.Join(missing, "airlock.db"), "--script", script, "the task"}, nil, false, 125, "", "airlock: sqlite: open"},
		{"126 could not execute", []string{"sandbox", "run", "--", "/tmp"}, nil, true, 126, "", "airlock: /tmp: permission denied in the sandbox\n"},
		{"127 not found", []string{"sandbox", "run", "--", "airlock-no-such-command"}, nil, true, 127, "", "airlock: airlock-no-such-command: command not found in the sandbox\n"},
		{"137 killed at a limit", []string{"sandbox", "run", "--max-output", "1K", "--", "yes"}, nil, true, 137, "", "airlock: killed: output limit exceeded\n"},
		{"128+N killed by signal N", []string{"sandbox", "run", "--", "sh", "-c", "kill -TERM $$"}, nil, true, 143, "", ""},
		{"the command's own status", []string{"sandbox", "run", "--", "sh", "-c", "exit 3"}, nil, true, 3, "", ""},
		{"the command's own status", []string{"sandbox", "run", "--", "sh", "-c", "exit 127"}, nil, true, 127, "", ""},
		{"the command's own status", []string{"sandbox", "run", "--", "sh", "-c", "exit 126"}, nil, true, 126, "", ""},
	}
	for _, tt := range tests {
		for _, bin := range []string{"airlock", "airlock-host"} {
			t.Run(tt.row+"/"+bin+" "+strings.Join(tt.args, " "), func(t *testing.T) {
				if tt.sandbox && !canRun {
					t.Skip("sandboxes cannot run here (not root, or a required layer is missing)")
				}
				home := shortHome(t)
				env := append([]string{"AIRLOCK_HOME=" + home}, tt.env...)
				r := run(t, filepath.Join(dir, bin), env, tt.args...)
				if r.code != tt.code {
					t.Errorf("%s %q exited %d, want %d; stderr: %s", bin, tt.args, r.code, tt.code, r.stderr)
				}
				if !strings.Contains(r.stdout, tt.stdout) {
					t.Errorf("%s %q printed %q, want %q in it", bin, tt.args, r.stdout, tt.stdout)
				}
				if tt.stderr == "" && r.stderr != "" || !strings.Contains(r.stderr, tt.stderr) {
					t.Errorf("%s %q wrote %q on stderr, want %q", bin, tt.args, r.stderr, tt.stderr)
				}
				if tt.code == 2 && tt.args[0] == "run" {
					if ls := run(t, filepath.Join(dir, bin), env, "runs", "ls", "--json"); ls.code != 0 || ls.stdout != "" {
						t.Errorf("after a refused %q, runs ls --json = %+v; want no run", tt.args, ls)
					}
				}
			})
		}
	}
}

// TestDiesWithParent kills the process that started a sandbox run, and
// wants the front end and its sandbox gone with it, handed off to a
// sandbox daemon (by the Go front end or the thin one) or started cold:
// the parent-death signal is set on the main thread (the runtime never
// ends it), whichever thread the front end runs on by then.
func TestDiesWithParent(t *testing.T) {
	dir := bins(t)
	needSandboxes(t, dir)
	for _, tt := range []struct {
		name   string
		daemon bool
		// thin: the client is the thin front end (thin_test.go).
		thin bool
	}{{"cold", false, false}, {"handed off", true, false}, {"handed off, thin", true, true}} {
		t.Run(tt.name, func(t *testing.T) {
			airlock := filepath.Join(dir, "airlock")
			client := airlock
			if tt.thin {
				client = thinBin(t)
			}
			home := t.TempDir()
			t.Cleanup(func() { _ = linux.Forget(filepath.Join(home, sandboxcli.RunStateDir)) })
			env := append(os.Environ(), "AIRLOCK_HOME="+home)
			if tt.daemon {
				d := exec.Command(airlock, "sandbox", "daemon")
				d.Env = env
				if err := d.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = d.Process.Kill(); _ = d.Wait() })
				waitFor(t, "the daemon's socket", func() bool {
					_, err := os.Stat(filepath.Join(home, "sandbox.sock"))
					return err == nil
				})
			} else {
				env = append(env, "AIRLOCK_NO_HANDOFF=1")
			}
			// The shell says the front end's pid, then the command in the
			// sandbox says it started; then the shell is killed.
			sh := exec.Command("/bin/sh", "-c", `"$0" sandbox run -- /bin/sh -c 'echo started; exec sleep 1000' & echo $!; wait`, client)
			sh.Env = env
			out, err := sh.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := sh.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 2)
			go func() {
				buf := make([]byte, 256)
				var got []byte
				for {
					n, err := out.Read(buf)
					got = append(got, buf[:n]...)
					for {
						i := bytes.IndexByte(got, '\n')
						if i < 0 {
							break
						}
						lines <- string(got[:i])
						got = got[i+1:]
					}
					if err != nil {
						close(lines)
						return
					}
				}
			}()
			pid, err := strconv.Atoi(<-lines)
			if err != nil {
				t.Fatalf("the shell's first line: %v", err)
			}
			if l := <-lines; l != "started" {
				t.Fatalf("the command said %q, want started", l)
			}
			kids := children(pid)
			if err := sh.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = sh.Wait()
			waitFor(t, "the front end to die with its parent", func() bool { return gone(pid) })
			for _, k := range kids {
				waitFor(t, "the front end's child "+strconv.Itoa(k)+" to die with it", func() bool { return gone(k) })
			}
		})
	}
}

// children lists the child processes of pid, all its threads'.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, w := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(w); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// gone reports whether pid has exited (a zombie has).
func gone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// waitFor polls cond for up to a minute (a bound, not a timing claim:
// the machine may be loaded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestFrontEndImage: sandbox run --image of an image the store has
// unpacked runs in the front end itself (here from a directory without
// airlock-host, where a hand-off would fail with 125), with the image's
// environment, working directory, user and entrypoint, as airlock-host
// runs it; an image the store lacks is handed off.
func TestFrontEndImage(t *testing.T) {
	dir := bins(t)
	needSandboxes(t, dir)
	home := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(filepath.Join(home, sandboxcli.RunStateDir)) })
	env := []string{"AIRLOCK_HOME=" + home, "AIRLOCK_NO_HANDOFF=1"}
	cfg := imagetest.BusyboxConfig
	cfg.Env = append(slices.Clone(cfg.Env), "HTTP_PROXY=http://from-the-image")
	cfg.WorkingDir, cfg.User = "opt", "1000:1000"
	cfg.Entrypoint = []string{"/bin/sh", "-c", `echo "$IMAGE_ENV|$FLAG|$HTTP_PROXY|$(pwd)|$(id -u)|$*"`, "sh"}
	cfg.Cmd = []string{"from-cmd"}
	archive := imagetest.DockerArchive(t, t.TempDir(), imagetest.Image(t, "", cfg, imagetest.Layer(t, imagetest.BusyboxFiles(t)...)), "e2e/img:1")
	host := filepath.Join(dir, "airlock-host")
	if r := run(t, host, env, "image", "import", archive); r.code != 0 {
		t.Fatalf("image import = %+v", r)
	}
	lone := filepath.Join(t.TempDir(), "lone")
	if err := os.Mkdir(lone, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"airlock", "airlock-exec"} {
		// A copy where a link cannot be made (another file system): the
		// test runs either way.
		if err := os.Link(filepath.Join(dir, b), filepath.Join(lone, b)); err != nil {
			data, rerr := os.ReadFile(filepath.Join(dir, b))
			if rerr != nil {
				t.Fatal(rerr)
			}
			if err := os.WriteFile(filepath.Join(lone, b), data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Chmod(filepath.Dir(lone), 0o755); err != nil {
		t.Fatal(err)
	}
	airlock := filepath.Join(lone, "airlock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "run", "--image", "e2e/img:1", "--env", "FLAG=f", "--"}, "from-image|f||/opt|1000|from-cmd\n"},
		{[]string{"sandbox", "run", "--image", "index.docker.io/e2e/img:1", "--user", "0", "--", "/bin/sh", "-c", `echo "$IMAGE_ENV $(pwd) $(id -u)"`}, "from-image /opt 0\n"},
	} {
		got, want := run(t, airlock, env, c.args...), run(t, host, env, c.args...)
		if got != want || got.stdout != c.want || got.code != 0 {
			t.Errorf("airlock %q = %+v\nairlock-host gives %+v; want stdout %q", c.args, got, want, c.want)
		}
	}
	// Not in the store: handed off, so here (no airlock-host) an error
	// naming it.
	if r := run(t, airlock, env, "sandbox", "run", "--image", "nosuch", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "airlock-host") {
		t.Errorf("sandbox run --image nosuch without airlock-host = %+v, want exit 125 naming airlock-host (a hand-off)", r)
	}
}
