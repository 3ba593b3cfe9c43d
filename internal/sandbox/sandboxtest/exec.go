package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// testEnv checks which environment a command sees: the spec's and the
// command's, never the host's. It uses t.Setenv, so it runs alone.
func (s *suite) testEnv(t *testing.T) {
	name := "AIRLOCK_HOST_CANARY_" + strings.ToUpper(unique())
	value := "host-secret-" + unique()
	t.Setenv(name, value)
	// Created after the canary is set: it must not leak at creation either.
	sb := s.create(t, sandbox.Spec{Env: []string{"SPEC_VAR=from-spec"}})
	out, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"env"}, Env: []string{"CMD_VAR=from-command"}})
	wantExit(t, "env", r, 0, errOut)
	lines := strings.Split(out, "\n")
	for _, want := range []string{"SPEC_VAR=from-spec", "CMD_VAR=from-command"} {
		found := false
		for _, l := range lines {
			if l == want {
				found = true
			}
		}
		if !found {
			t.Errorf("env output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, name) || strings.Contains(out, value) {
		t.Errorf("host environment variable %s leaked into the sandbox:\n%s", name, out)
	}
	// The command's environment is its own: another command without Env
	// does not see CMD_VAR.
	out, _, _ = run(t, sb, "env")
	if strings.Contains(out, "CMD_VAR") {
		t.Errorf("Command.Env of an earlier command is visible to a later one:\n%s", out)
	}
}

func (s *suite) testExec(t *testing.T) {
	sb := s.create(t, sandbox.Spec{})

	t.Run("StdoutStderr", func(t *testing.T) {
		t.Parallel()
		out, errOut, r := sh(t, sb, "echo out; echo err >&2; echo out2")
		wantExit(t, "echo", r, 0, errOut)
		if out != "out\nout2\n" || errOut != "err\n" {
			t.Errorf("stdout = %q, stderr = %q; want %q, %q", out, errOut, "out\nout2\n", "err\n")
		}
	})

	t.Run("Streaming", func(t *testing.T) {
		t.Parallel()
		w := newFirstWriter()
		p, err := sb.Start(opCtx(t), sandbox.Command{
			Argv:   []string{"sh", "-c", "echo first; sleep 0.2; echo second"},
			Stdout: w,
		})
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		type waited struct {
			r   sandbox.Result
			err error
		}
		res := make(chan waited, 1)
		ctx := opCtx(t)
		go func() {
			r, err := p.Wait(ctx)
			res <- waited{r, err}
		}()
		select {
		case first := <-w.first:
			if string(first) != "first\n" {
				t.Errorf("first chunk = %q, want %q: output was held back until later output", first, "first\n")
			}
		case wr := <-res:
			t.Fatalf("command ended (%+v, %v) before any output reached the writer", wr.r, wr.err)
		case <-time.After(30 * time.Second):
			t.Fatal("no output reached the writer within 30s")
		}
		wr := <-res
		if wr.err != nil {
			t.Fatalf("Wait = %v", wr.err)
		}
		wantExit(t, "echo; sleep; echo", wr.r, 0, "")
		if got := w.String(); got != "first\nsecond\n" {
			t.Errorf("stdout = %q, want %q", got, "first\nsecond\n")
		}
	})

	t.Run("StreamingBeforeExit", func(t *testing.T) {
		// The command cannot end before the test answers on stdin, and the
		// test answers only once the first line arrived: output must
		// stream while the command runs.
		t.Parallel()
		w := newFirstWriter()
		pr, pw := io.Pipe()
		defer pw.Close()
		p, err := sb.Start(opCtx(t), sandbox.Command{
			Argv:    []string{"sh", "-c", "echo first; read x; echo got $x"},
			Stdin:   pr,
			Stdout:  w,
			Timeout: 30 * time.Second,
		})
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		select {
		case first := <-w.first:
			if string(first) != "first\n" {
				t.Errorf("first chunk = %q, want %q", first, "first\n")
			}
		case <-time.After(20 * time.Second):
			t.Error("output of a running command did not reach the writer within 20s")
		}
		go func() {
			_, _ = io.WriteString(pw, "go\n")
			pw.Close()
		}()
		r, err := p.Wait(opCtx(t))
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
		wantExit(t, "echo; read; echo", r, 0, "")
		if got := w.String(); got != "first\ngot go\n" {
			t.Errorf("stdout = %q, want %q", got, "first\ngot go\n")
		}
	})

	t.Run("ExitCodes", func(t *testing.T) {
		t.Parallel()
		for _, code := range []int{0, 1, 7, 255} {
			_, errOut, r := sh(t, sb, fmt.Sprintf("exit %d", code))
			wantExit(t, fmt.Sprintf("exit %d", code), r, code, errOut)
			if got := r.ExitStatus(); got != code {
				t.Errorf("exit %d: ExitStatus() = %d, want %d", code, got, code)
			}
		}
	})

	t.Run("KilledBySignal", func(t *testing.T) {
		t.Parallel()
		_, _, r := sh(t, sb, "kill -TERM $$")
		if r.Outcome != sandbox.OutcomeSignaled || r.Signal != int(unix.SIGTERM) {
			t.Errorf("kill -TERM $$: Outcome = %q, Signal = %d (result %+v), want %q, %d",
				r.Outcome, r.Signal, r, sandbox.OutcomeSignaled, unix.SIGTERM)
		}
		if got := r.ExitStatus(); got != 143 {
			t.Errorf("kill -TERM $$: ExitStatus() = %d, want 143", got)
		}
	})

	t.Run("DefaultSignalDispositions", func(t *testing.T) {
		// Commands start with no signal ignored or blocked, whatever PID 1
		// does to protect itself: `yes | head` and Ctrl-C must work.
		t.Parallel()
		out, _, r := sh(t, sb, "grep -E '^Sig(Ign|Blk):' /proc/self/status")
		if r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 {
			t.Fatalf("grep: %+v", r)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) != 2 || strings.Trim(f[1], "0") != "" {
				t.Errorf("/proc/self/status %q: want no ignored or blocked signal", line)
			}
		}
	})

	t.Run("ProcessSignal", func(t *testing.T) {
		t.Parallel()
		w := newFirstWriter()
		p, err := sb.Start(opCtx(t), sandbox.Command{
			Argv:    []string{"sh", "-c", "echo ready; exec sleep 30"},
			Stdout:  w,
			Timeout: 20 * time.Second,
		})
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		select {
		case <-w.first:
		case <-time.After(20 * time.Second):
			t.Fatal("command did not start within 20s")
		}
		if err := p.Signal(unix.SIGTERM); err != nil {
			t.Fatalf("Signal(SIGTERM) = %v", err)
		}
		r, err := p.Wait(opCtx(t))
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if r.Outcome != sandbox.OutcomeSignaled || r.Signal != int(unix.SIGTERM) {
			t.Errorf("sleep after Signal(SIGTERM): Outcome = %q, Signal = %d (result %+v), want %q, %d",
				r.Outcome, r.Signal, r, sandbox.OutcomeSignaled, unix.SIGTERM)
		}
	})

	t.Run("ProcessSignalRightAfterStart", func(t *testing.T) {
		// A signal sent as soon as Start returns must not be lost while
		// the command is still being set up.
		t.Parallel()
		p, err := sb.Start(opCtx(t), sandbox.Command{Argv: []string{"sleep", "30"}, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		if err := p.Signal(unix.SIGTERM); err != nil {
			t.Fatalf("Signal(SIGTERM) = %v", err)
		}
		r, err := p.Wait(opCtx(t))
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if r.Outcome != sandbox.OutcomeSignaled || r.Signal != int(unix.SIGTERM) {
			t.Errorf("Signal(SIGTERM) right after Start returned nil, but the command ended with Outcome = %q, Signal = %d (result %+v), want %q, %d",
				r.Outcome, r.Signal, r, sandbox.OutcomeSignaled, unix.SIGTERM)
		}
	})

	t.Run("Stdin", func(t *testing.T) {
		t.Parallel()
		out, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("hello\nworld\n")})
		wantExit(t, "cat", r, 0, errOut)
		if out != "hello\nworld\n" {
			t.Errorf("cat stdout = %q, want %q", out, "hello\nworld\n")
		}
	})

	t.Run("LargeStdin", func(t *testing.T) {
		t.Parallel()
		in := make([]byte, 5<<20)
		_, _ = rand.Read(in)
		var out SyncBuffer
		_, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"cat"}, Stdin: bytes.NewReader(in), Stdout: &out})
		wantExit(t, "cat of 5 MiB", r, 0, errOut)
		got := out.Bytes()
		if sha256.Sum256(got) != sha256.Sum256(in) {
			t.Errorf("cat of 5 MiB random stdin: got %d bytes with a different sha256, want the %d bytes sent", len(got), len(in))
		}
		// The command reads stdin itself, too.
		sum, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"sha256sum"}, Stdin: bytes.NewReader(in)})
		wantExit(t, "sha256sum", r, 0, errOut)
		if want := fmt.Sprintf("%x", sha256.Sum256(in)); !strings.HasPrefix(sum, want) {
			t.Errorf("sha256sum of stdin inside = %q, want %s", sum, want)
		}
	})

	t.Run("BulkStdinStdout", func(t *testing.T) {
		t.Parallel()
		// A bulk command's streams (larger window and frames) carry the
		// same bytes both ways, and its stderr and exit status as any.
		in := make([]byte, 5<<20+123)
		_, _ = rand.Read(in)
		var out SyncBuffer
		_, errOut, r := runCmd(t, sb, sandbox.Command{
			Argv: []string{"sh", "-c", "cat; echo done >&2"}, Stdin: bytes.NewReader(in), Stdout: &out, Bulk: true,
		})
		wantExit(t, "bulk cat", r, 0, errOut)
		if got := out.Bytes(); sha256.Sum256(got) != sha256.Sum256(in) {
			t.Errorf("bulk cat of %d random bytes: got %d bytes with a different sha256", len(in), len(got))
		}
		if errOut != "done\n" {
			t.Errorf("bulk command's stderr = %q, want %q", errOut, "done\n")
		}
	})

	t.Run("LargeStdout", func(t *testing.T) {
		t.Parallel()
		const n = 20 << 20
		var w countWriter
		_, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"head", "-c", strconv.Itoa(n), "/dev/zero"}, Stdout: &w})
		wantExit(t, "head -c 20M", r, 0, errOut)
		if got := w.count(); got != n {
			t.Errorf("head -c %d /dev/zero delivered %d bytes, want %d", n, got, n)
		}
	})

	t.Run("SlowConsumer", func(t *testing.T) {
		t.Parallel()
		// 300 kB fits in what output may hold on its way to the host (the
		// executor's send window and read buffer, and the pipe), so head
		// exits long before the host takes the first chunk: all of it
		// still arrives. A background process that keeps the pipe open
		// does not hold the command up, nor cut what came before it.
		sb := s.create(t, sandbox.Spec{})
		const n = 300000
		for _, script := range []string{"head -c 300000 /dev/zero", "head -c 300000 /dev/zero; sleep 1000 &"} {
			w := &stallWriter{stall: time.Second}
			_, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: w})
			wantExit(t, script, r, 0, errOut)
			if got := w.count(); got != n {
				t.Errorf("%s, read by a host that takes a second to take the first chunk, delivered %d bytes, want %d", script, got, n)
			}
		}
	})

	t.Run("Cwd", func(t *testing.T) {
		t.Parallel()
		out, errOut, r := run(t, sb, "pwd")
		wantExit(t, "pwd", r, 0, errOut)
		if out != "/workspace\n" {
			t.Errorf("pwd = %q, want /workspace", out)
		}
		out, errOut, r = runCmd(t, sb, sandbox.Command{Argv: []string{"pwd"}, Dir: "/tmp"})
		wantExit(t, "pwd in /tmp", r, 0, errOut)
		if out != "/tmp\n" {
			t.Errorf("pwd with Dir /tmp = %q, want /tmp", out)
		}
	})

	t.Run("User", func(t *testing.T) {
		t.Parallel()
		out, errOut, r := run(t, sb, "id", "-u")
		wantExit(t, "id -u", r, 0, errOut)
		if out != "1000\n" {
			t.Errorf("default user: id -u = %q, want 1000", out)
		}
		out, errOut, r = runCmd(t, sb, sandbox.Command{Argv: []string{"id", "-u"}, User: "root"})
		wantExit(t, "id -u as root", r, 0, errOut)
		if out != "0\n" {
			t.Errorf("User root: id -u = %q, want 0", out)
		}
		for _, user := range []string{"", "root"} {
			out, errOut, r = runCmd(t, sb, sandbox.Command{Argv: []string{"grep", "^Cap", "/proc/self/status"}, User: user})
			wantExit(t, "grep Cap", r, 0, errOut)
			checkNoCaps(t, "user "+strconv.Quote(user), out)
		}
	})

	t.Run("SpecUser", func(t *testing.T) {
		t.Parallel()
		root := s.create(t, sandbox.Spec{User: "root"})
		out, errOut, r := run(t, root, "id", "-u")
		wantExit(t, "id -u", r, 0, errOut)
		if out != "0\n" {
			t.Errorf("Spec.User root: id -u = %q, want 0", out)
		}
	})

	t.Run("Account", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{Account: sandbox.Account{Name: "user", Home: "/home/user", HomeIsWorkspace: true, RootHome: true}, Dir: "/home/user"})
		want := "user\n/home/user\n/home/user\nhi\nd\nf\n"
		switch id := mustSh(t, sb, `id -u; echo "$USER"`); id {
		case "0\nroot\n":
			// Rootless sandboxes have only root, in /root; the workspace
			// is at /home/user all the same.
			want = "root\n/root\n/home/user\nhi\nd\nf\n"
		case "0\nuser\n":
			// A sandbox of one id (a pod's) whose default user is the
			// account: root's id under the account's name, in its home
			// (the image's passwd still names uid 0 root).
			want = "root\n/home/user\n/home/user\nhi\nd\nf\n"
		case "1000\nuser\n":
		default:
			t.Fatalf("the default user: id -u and USER %q, want uid 1000 (or 0 where the sandbox has one id) and user (or root)", id)
		}
		out := mustSh(t, sb, `id -un; echo "$HOME"; pwd; echo hi > f; cat /workspace/f; mkdir d && ls /workspace`)
		if out != want {
			t.Errorf("an account user in /home/user that is the workspace: got %q, want %q", out, want)
		}
		if b, err := sb.ReadFile(opCtx(t), "/workspace/d/../f", 0); err != nil || string(b) != "hi\n" {
			t.Errorf("ReadFile(/workspace/f) of a file written at home = %q, %v; want hi", b, err)
		}
		if out, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", `echo "$HOME"; cd && echo x > f && cat f`}, User: "root"}); r.ExitCode != 0 || out != "/root\nx\n" {
			t.Errorf("root writes in its home: %q (%s), want its HOME /root, writable", out, errOut)
		}
		// File operations act as the user the context names.
		if err := sb.WriteFile(sandbox.WithFileUser(opCtx(t), "root"), "/root/g", strings.NewReader("as root\n"), 0o600); err != nil {
			t.Errorf("WriteFile(/root/g) as root: %v", err)
		}
		if fi, err := sb.Stat(sandbox.WithFileUser(opCtx(t), "root"), "/root/g"); err != nil || fi.Owner != "root" || fi.Group != "root" {
			t.Errorf("Stat(/root/g) as root = %+v, %v; want it root's", fi, err)
		}
		if fi, err := sb.Stat(opCtx(t), "/workspace/f"); err != nil || fi.Owner+"\n" != mustSh(t, sb, "id -un") {
			t.Errorf("Stat(/workspace/f) = %+v, %v; want the default user's name as its owner", fi, err)
		}
		if mustSh(t, sb, "id -u") != "0\n" {
			if _, err := sb.Stat(opCtx(t), "/root/g"); !errors.Is(err, fs.ErrPermission) {
				t.Errorf("Stat(/root/g) as the default user = %v, want fs.ErrPermission", err)
			}
		}
		for _, spec := range []sandbox.Spec{
			{Account: sandbox.Account{Name: "root"}},
			{Account: sandbox.Account{Name: "Bad"}},
			{Account: sandbox.Account{Home: "/run/airlock"}},
			{Account: sandbox.Account{Home: "/home/../etc"}},
		} {
			if err := spec.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", spec.Account)
			}
		}
	})

	t.Run("BootID", func(t *testing.T) {
		// Each sandbox is a boot of its own; the host's id stays out.
		t.Parallel()
		host, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		a := mustSh(t, sb, "cat /proc/sys/kernel/random/boot_id")
		b := mustSh(t, s.create(t, sandbox.Spec{}), "cat /proc/sys/kernel/random/boot_id")
		if len(a) != 37 || a == b || a == string(host) || b == string(host) {
			t.Errorf("boot ids: %q and %q, host's %q; want two of their own", a, b, host)
		}
	})

	t.Run("CommandNotFound", func(t *testing.T) {
		t.Parallel()
		_, _, r := run(t, sb, "airlock-no-such-command")
		wantExit(t, "airlock-no-such-command", r, 127, "")
		if r.NotStarted != sandbox.CommandNotFound || !strings.Contains(r.Message, "airlock-no-such-command: command not found") {
			t.Errorf("airlock-no-such-command: NotStarted %q, Message %q; want %q and a message naming it", r.NotStarted, r.Message, sandbox.CommandNotFound)
		}
		// A command that exits 127 itself started: no reason, no message.
		_, _, r = sh(t, sb, "airlock-no-such-command")
		wantExit(t, "sh -c airlock-no-such-command", r, 127, "")
		if got := r.ExitStatus(); got != 127 {
			t.Errorf("command not found: ExitStatus() = %d, want 127", got)
		}
		if r.NotStarted != "" || r.Message != "" {
			t.Errorf("sh -c airlock-no-such-command: NotStarted %q, Message %q; want neither (sh started)", r.NotStarted, r.Message)
		}
	})

	t.Run("CommandNotExecutable", func(t *testing.T) {
		t.Parallel()
		_, errOut, r := sh(t, sb, "printf '#!/bin/sh\\ntrue\\n' > /tmp/not-executable && chmod 644 /tmp/not-executable")
		wantExit(t, "write /tmp/not-executable", r, 0, errOut)
		for _, path := range []string{"/tmp/not-executable", "/tmp"} {
			_, _, r = run(t, sb, path)
			wantExit(t, path, r, 126, "")
			if r.NotStarted != sandbox.CommandNotExecutable || r.Message != path+": permission denied in the sandbox" {
				t.Errorf("%s: NotStarted %q, Message %q; want %q, permission denied", path, r.NotStarted, r.Message, sandbox.CommandNotExecutable)
			}
		}
		_, _, r = sh(t, sb, "exit 126")
		if r.ExitStatus() != 126 || r.NotStarted != "" || r.Message != "" {
			t.Errorf("sh -c 'exit 126': result %+v, want exit 126 with no reason and no message", r)
		}
	})

	t.Run("TTY", func(t *testing.T) {
		t.Parallel()
		out, _, r := runCmd(t, sb, sandbox.Command{Argv: []string{"tty"}, TTY: true, Rows: 30, Cols: 100})
		wantExit(t, "tty", r, 0, "")
		if !regexp.MustCompile(`^/dev/pts/[0-9]+\r?\n$`).MatchString(out) {
			t.Errorf("tty with TTY set printed %q, want /dev/pts/N", out)
		}
		_, _, r = runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", "test -t 0 && test -t 1"}, TTY: true})
		wantExit(t, "test -t 0 && test -t 1 with TTY", r, 0, "")
		out, _, r = runCmd(t, sb, sandbox.Command{Argv: []string{"stty", "size"}, TTY: true, Rows: 30, Cols: 100})
		wantExit(t, "stty size", r, 0, "")
		if strings.TrimSpace(out) != "30 100" {
			t.Errorf("stty size with Rows 30, Cols 100 = %q, want \"30 100\"", out)
		}
		// Without TTY, stdin is not a terminal.
		_, _, r = sh(t, sb, "test -t 0")
		wantExit(t, "test -t 0 without TTY", r, 1, "")
	})
}

// checkNoCaps fails unless every Cap line of /proc/self/status is zero.
func checkNoCaps(t *testing.T, who, status string) {
	t.Helper()
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(status), "\n") {
		name, val, ok := strings.Cut(l, ":")
		if !ok || !strings.HasPrefix(name, "Cap") {
			continue
		}
		n++
		if strings.Trim(strings.TrimSpace(val), "0") != "" {
			t.Errorf("%s: %s = %s, want all zero", who, name, strings.TrimSpace(val))
		}
	}
	if n < 4 {
		t.Errorf("%s: found %d Cap lines in /proc/self/status, want at least 4:\n%s", who, n, status)
	}
}

// testConcurrent runs several commands at once in one sandbox.
func (s *suite) testConcurrent(t *testing.T) {
	sb := s.create(t, sandbox.Spec{})
	const n = 10
	type result struct {
		out string
		r   sandbox.Result
		err error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var out SyncBuffer
			r, err := sandbox.Run(opCtx(t), sb, sandbox.Command{
				Argv:   []string{"sh", "-c", "sleep 0.2; echo $I"},
				Env:    []string{"I=" + strconv.Itoa(i)},
				Stdout: &out,
			})
			results[i] = result{out.String(), r, err}
		})
	}
	wg.Wait()
	for i, res := range results {
		if res.err != nil {
			t.Errorf("command %d: Run = %v", i, res.err)
			continue
		}
		wantExit(t, fmt.Sprintf("command %d", i), res.r, 0, "")
		if want := strconv.Itoa(i) + "\n"; res.out != want {
			t.Errorf("command %d: stdout = %q, want %q", i, res.out, want)
		}
	}
}
