package sandboxcli

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// sandboxHost runs a sandbox host for home, as airlock sandbox daemon does
// (a pool primed with the default spec), until the test ends.
func sandboxHost(t *testing.T, home string) *handoff.Server {
	t.Helper()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(home, RunStateDir), Spawner: true})
	if err != nil {
		t.Fatal(err)
	}
	p := pool.New(b, pool.Options{})
	spec, err := (&SpecFlags{}).Spec(BuiltinDefaults, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Prime(spec); err != nil {
		t.Fatal(err)
	}
	ln, err := handoff.Listen(handoff.SocketPath(home))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &handoff.Server{Backend: p, UID: os.Geteuid(), Front: FrontWords}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = p.Close(cctx)
		_ = b.Close()
	})
	return s
}

// sandboxHome is an airlock home for the test whose sandboxes' cgroup
// parent goes when the test ends (linux.Forget), with the directory.
func sandboxHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(filepath.Join(home, RunStateDir)) })
	return home
}

// run runs `airlock sandbox ARGS` in env with stdin's text, and returns the
// exit status and what went to stdout and stderr (through files, as from a
// shell).
func run(t *testing.T, env Env, stdin string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, []byte(stdin), 0o600); err != nil {
		t.Fatal(err)
	}
	files := make([]*os.File, 3)
	for i, name := range []string{"in", "out", "err"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	env.Stdin, env.Stdout, env.Stderr = files[0], files[1], files[2]
	status, ok := Main(&env, append([]string{"sandbox"}, args...))
	if !ok {
		t.Fatalf("Main(%q) declined", args)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "out"))
	errOut, _ := os.ReadFile(filepath.Join(dir, "err"))
	return status, string(out), string(errOut)
}

// anyOutput is a case's stdout that is not checked but for being the
// same on both paths.
const anyOutput = "\x00any"

// TestHandoffSameAsCold: with a sandbox host running, sandbox run hands its
// command over (the host counts it), and what the caller sees, its output,
// its errors, its exit status, is what the same command gives when the
// caller starts the sandbox itself (AIRLOCK_NO_HANDOFF).
func TestHandoffSameAsCold(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	home := t.TempDir()
	host := sandboxHost(t, home)
	warm := Env{Ctx: context.Background(), Home: home, Executor: executorPath}
	cold := warm
	cold.NoHandoff = true
	tests := []struct {
		name       string
		stdin      string
		args       []string
		wantStatus int
		wantOut    string
		wantErr    string // a part of stderr
	}{
		{"stdout", "", []string{"run", "--", "echo", "hello"}, 0, "hello\n", ""},
		{"stderr", "", []string{"run", "--", "sh", "-c", "echo oops >&2"}, 0, "", "oops"},
		{"stdin", "typed\n", []string{"run", "-i", "--", "cat"}, 0, "typed\n", ""},
		{"no stdin without -i", "typed\n", []string{"run", "--", "cat"}, 0, "", ""},
		{"exit 3", "", []string{"run", "--", "sh", "-c", "exit 3"}, 3, "", ""},
		{"timeout", "", []string{"run", "--timeout", "300ms", "--", "sleep", "30"}, 124, "", "timeout"},
		{"output cap", "", []string{"run", "--max-output", "1K", "--", "sh", "-c", "yes | head -c 100000"}, 137, anyOutput, "output limit"},
		{"memory limit", "", []string{"run", "--memory", "64M", "--", "tail", "/dev/zero"}, 137, "", ""},
		{"signal", "", []string{"run", "--", "sh", "-c", "kill -TERM $$"}, 143, "", ""},
		{"not found", "", []string{"run", "--", "no-such-command"}, 127, "", "not found"},
		{"environment", "", []string{"run", "-e", "GREETING=hi", "--", "sh", "-c", "echo $GREETING"}, 0, "hi\n", ""},
		{"relative workspace", "", []string{"run", "--workspace", "testdata", "--workspace-mode", "ro", "--", "test", "-d", "/workspace/fuzz"}, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, words := host.Stats().Served, host.Stats().Words
			st, out, errOut := run(t, warm, tt.stdin, tt.args...)
			if host.Stats().Served != before+1 {
				t.Errorf("the host served %d commands, want %d: sandbox run did not hand off", host.Stats().Served, before+1)
			}
			if st != tt.wantStatus || (out != tt.wantOut && tt.wantOut != anyOutput) || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("handed off: status %d, stdout %q, stderr %q; want %d, %q, stderr with %q", st, out, errOut, tt.wantStatus, tt.wantOut, tt.wantErr)
			}
			cst, cout, cerrOut := run(t, cold, tt.stdin, tt.args...)
			if host.Stats().Served != before+1 {
				t.Errorf("AIRLOCK_NO_HANDOFF: the host served the command")
			}
			if cst != st || cout != out || cerrOut != errOut {
				t.Errorf("handed off: %d %q %q; started here: %d %q %q", st, out, errOut, cst, cout, cerrOut)
			}
			wst, wout, werrOut := runWords(t, home, tt.stdin, tt.args[1:]...)
			if host.Stats().Words != words+1 {
				t.Errorf("the host served %d commands in words, want %d", host.Stats().Words, words+1)
			}
			if wst != st || (wout != out && tt.wantOut != anyOutput) || werrOut != errOut {
				t.Errorf("handed off: %d %q %q; in words: %d %q %q", st, out, errOut, wst, wout, werrOut)
			}
		})
	}
}

// runWords hands words (a command line after "run") to the sandbox host of
// home in words (handoff.RunWords, as the front end's entry before the Go
// runtime does), from the test's working directory, with stdin's text on
// its stdin (a pipe with the words when not empty), and returns the exit
// status and what went to stdout and stderr.
func runWords(t *testing.T, home, stdin string, words ...string) (status int, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	files := make([]*os.File, 3)
	for i, name := range []string{"out", "err", "in"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	if _, err := files[2].WriteString(stdin); err != nil {
		t.Fatal(err)
	}
	if _, err := files[2].Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	in := files[2]
	if stdin == "" {
		in = nil
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	status, err = handoff.RunWords(context.Background(), handoff.SocketPath(home), words, wd, in, files[0], files[1])
	if err != nil {
		t.Fatalf("RunWords(%q): %v", words, err)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "out"))
	errOut, _ := os.ReadFile(filepath.Join(dir, "err"))
	return status, string(out), string(errOut)
}

// TestHandoffFallback: a stale socket (its host gone) and a socket of
// another user are not a host: sandbox run starts the sandbox itself.
func TestHandoffFallback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, sock string)
	}{
		{"stale socket", func(t *testing.T, sock string) {
			ln, err := handoff.Listen(sock)
			if err != nil {
				t.Fatal(err)
			}
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}},
		{"another user's socket", func(t *testing.T, sock string) {
			ln, err := handoff.Listen(sock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			if err := os.Chown(sock, 4242, 4242); err != nil {
				t.Fatal(err)
			}
			// Accepts, and would answer nothing: the caller must not even
			// connect.
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					t.Errorf("the caller connected to another user's socket")
					c.Close()
				}
			}()
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := sandboxHome(t)
			tt.setup(t, handoff.SocketPath(home))
			env := Env{Ctx: context.Background(), Home: home, Executor: executorPath}
			st, out, errOut := run(t, env, "", "run", "--", "sh", "-c", "echo fine; exit 5")
			if st != 5 || out != "fine\n" || errOut != "" {
				t.Errorf("sandbox run = %d, %q, %q; want 5, %q, nothing on stderr", st, out, errOut, "fine\n")
			}
		})
	}
}

// TestRunGCInterval: sandbox run sweeps what crashed airlock processes left
// (a supervisor's state directory, an id lock nobody holds) when no run
// swept in the last gcInterval, and leaves the sweep out otherwise.
func TestRunGCInterval(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	now := time.Now()
	tests := []struct {
		name      string
		stamp     time.Time // zero: no stamp
		wantSwept bool
	}{
		{"first run", time.Time{}, true},
		{"swept just now", now.Add(-time.Second), false},
		{"swept within the interval", now.Add(-gcInterval + 5*time.Second), false},
		{"swept before the interval", now.Add(-gcInterval - time.Second), true},
		{"stamp in the future (the clock went back)", now.Add(time.Hour), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := sandboxHome(t)
			env := Env{Ctx: context.Background(), Home: home, Executor: executorPath, NoHandoff: true}
			// A first run makes the state directories; its sweep is not
			// the one tested.
			if st, _, errOut := run(t, env, "", "run", "--", "true"); st != 0 {
				t.Fatalf("first sandbox run = %d, %q", st, errOut)
			}
			stamp := filepath.Join(home, gcStamp)
			if _, err := os.Stat(stamp); err != nil {
				t.Fatalf("a run left no sweep stamp: %v", err)
			}
			if tt.stamp.IsZero() {
				if err := os.Remove(stamp); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Chtimes(stamp, tt.stamp, tt.stamp); err != nil {
				t.Fatal(err)
			}
			// What a killed supervisor and a killed run leave.
			stateDir := env.StateDir("sb-deadbeef")
			lock := filepath.Join(home, RunStateDir, "ids", "sb-deadbeef")
			for _, p := range []string{stateDir, filepath.Dir(lock)} {
				if err := os.MkdirAll(p, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(lock, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if st, _, errOut := run(t, env, "", "run", "--", "true"); st != 0 {
				t.Fatalf("sandbox run = %d, %q", st, errOut)
			}
			for _, p := range []string{stateDir, lock} {
				_, err := os.Stat(p)
				if swept := errors.Is(err, os.ErrNotExist); swept != tt.wantSwept {
					t.Errorf("%s removed: %v, want %v (stat: %v)", p, swept, tt.wantSwept, err)
				}
			}
			st, err := os.Stat(stamp)
			if err != nil {
				t.Fatalf("no sweep stamp after the run: %v", err)
			}
			if moved := !st.ModTime().Before(start.Truncate(time.Second)); moved != tt.wantSwept {
				t.Errorf("stamp moved to %v (run began %v): %v, want %v", st.ModTime(), start, moved, tt.wantSwept)
			}
		})
	}
}

// TestDaemonStopReport: airlock sandbox daemon, stopped, says what it
// served and how many of those found an idle sandbox (bench/compare.sh
// prints it beside the warm row: a miss is a sandbox made while its caller
// waited).
func TestDaemonStopReport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	home := sandboxHome(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logPath := filepath.Join(t.TempDir(), "daemon.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	denv := Env{Ctx: ctx, Home: home, Executor: executorPath, Stdout: io.Discard, Stderr: logFile}
	done := make(chan error, 1)
	go func() { done <- (&DaemonCmd{PerSpec: 1}).Run(&denv) }()
	sock := handoff.SocketPath(home)
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon's socket never appeared")
		}
		time.Sleep(20 * time.Millisecond)
	}
	env := Env{Ctx: context.Background(), Home: home, Executor: executorPath}
	if st, out, errOut := run(t, env, "", "run", "--", "echo", "served"); st != 0 || out != "served\n" {
		t.Fatalf("sandbox run = %d, %q, %q", st, out, errOut)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the daemon: %v", err)
	}
	b, _ := os.ReadFile(logPath)
	m := regexp.MustCompile(`sandbox host stopped" served=(\d+) in_words=0 refused=0 pool_hits=(\d+) pool_misses=(\d+)`).FindStringSubmatch(string(b))
	if m == nil || m[1] != "1" || atoi(m[2])+atoi(m[3]) != 1 {
		t.Errorf("the daemon's log:\n%s\nwant a stop line with served=1 and one pool hit or miss", b)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestOneP: Env.OneP drops the process to one P only when sandbox run
// starts its sandbox itself; a run handed to a host leaves the runtime's
// Ps as they were (the call cost the handed-off client more than it
// saved). Not parallel: it sets the test binary's GOMAXPROCS.
func TestOneP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	was := runtime.GOMAXPROCS(2)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	home := t.TempDir()
	host := sandboxHost(t, home)
	warm := Env{Ctx: context.Background(), Home: home, Executor: executorPath, OneP: true}
	if st, out, errOut := run(t, warm, "", "run", "--", "echo", "warm"); st != 0 || out != "warm\n" {
		t.Fatalf("handed off: %d %q %q", st, out, errOut)
	}
	if host.Stats().Served != 1 {
		t.Fatalf("the host served %d commands, want 1", host.Stats().Served)
	}
	if n := runtime.GOMAXPROCS(0); n != 2 {
		t.Errorf("GOMAXPROCS after a handed-off run = %d, want 2 (as it was)", n)
	}
	cold := warm
	cold.NoHandoff = true
	if st, out, errOut := run(t, cold, "", "run", "--", "echo", "cold"); st != 0 || out != "cold\n" {
		t.Fatalf("cold: %d %q %q", st, out, errOut)
	}
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("GOMAXPROCS after a run that started its sandbox itself = %d, want 1", n)
	}
}

// TestFrontWordsRequest: the request a sandbox host makes of a command line
// in words (FrontWords, for the front end's thin entry) is, byte for byte,
// the request the Go front end sends for the same command line, with its
// standard output and error as the two descriptors: the two paths cannot
// drift apart. The host here is a stand-in that records the request and
// answers with an error, so no sandbox is made.
func TestFrontWordsRequest(t *testing.T) {
	workspace, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--", "/bin/true"},
		{"--", "sh", "-c", "", "words with spaces", "ünïcode"},
		{"--timeout", "5s", "--max-output", "1K", "-e", "A=b", "--workspace", workspace, "--workspace-mode", "ro", "--json", "--", "sh", "-c", "exit 3"},
		{"--memory", "64M", "--pids", "7", "--cpus", "0.5", "--mount", workspace + ":/m:rw", "--", "true"},
		{"-i", "--", "cat"},
		{"--workspace", "./testdata/../testdata", "--rootfs", "/", "--", "true"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			home := t.TempDir()
			ln, err := handoff.Listen(handoff.SocketPath(home))
			if err != nil {
				t.Fatal(err)
			}
			type recorded struct {
				req []byte
				fds int
				err error
			}
			got := make(chan recorded, 1)
			go func() {
				req, fds, err := recordRequest(ln)
				got <- recorded{req, fds, err}
			}()
			env := Env{Ctx: context.Background(), Home: home, Executor: executorPath}
			st, _, errOut := run(t, env, "", append([]string{"run"}, args...)...)
			// A host that answered was accepted by now; one never
			// reached ends the recorder's wait.
			ln.Close()
			if st == 0 || !strings.Contains(errOut, "recorded") {
				t.Fatalf("sandbox run = %d, stderr %q; want the stand-in host's error", st, errOut)
			}
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			nfd := 2
			if slices.Contains(args, "-i") {
				nfd = 3
			}
			if r.fds != nfd {
				t.Errorf("the front end sent %d descriptors, want %d (stdout, stderr, and stdin's pipe with -i)", r.fds, nfd)
			}
			wd, err := os.Getwd()
			if err != nil {
				t.Fatal(err)
			}
			w, ok := FrontWords(args, wd)
			if !ok || w.Err != nil {
				t.Fatalf("FrontWords(%q) = %v, %v; want a request", args, ok, w.Err)
			}
			want, err := handoff.EncodeRequest(&w.Request)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(want, r.req) {
				t.Errorf("FrontWords(%q) made %x\nthe front end sent %x", args, want, r.req)
			}
		})
	}
}

// recordRequest accepts one connection on ln, reads one framed request and
// the descriptors sent with it, and answers with an error reply (package
// handoff's reply: field 3, its text).
func recordRequest(ln *net.UnixListener) (req []byte, fds int, err error) {
	c, err := ln.AcceptUnix()
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	buf := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, 0, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, 0, err
	}
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, 0, err
		}
		for _, fd := range got {
			unix.Close(fd)
		}
		fds += len(got)
	}
	req = append([]byte(nil), buf[:n]...)
	for len(req) < 4 || len(req) < 4+int(binary.BigEndian.Uint32(req)) {
		m, err := c.Read(buf)
		if err != nil {
			return nil, 0, err
		}
		req = append(req, buf[:m]...)
	}
	p, err := execproto.EncodeFields(func(e *execproto.Encoder) { e.Str(3, "stand-in host: request recorded") })
	if err != nil {
		return nil, 0, err
	}
	_, err = c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(p))))
	if err == nil {
		_, err = c.Write(p)
	}
	return req, fds, err
}

// TestFrontWords: FrontWords leaves to the caller's own front end the
// command lines whose reading depends on the caller's surroundings or that
// the front end leaves to airlock-host, and reports the usage errors of the
// others in the front end's words and status, before any sandbox.
func TestFrontWords(t *testing.T) {
	for _, words := range [][]string{
		{"--image", "x", "--", "true"},
		{"--workspace", "testdata", "--", "true"},
		{"--rootfs", "rel", "--", "true"},
		{"--proxy-socket", "rel.sock", "--", "true"},
		{"--workspace", "/proc/self/cwd", "--", "true"},
		{"--mount", "/proc//self/root:/r", "--", "true"},
		{"--rootfs", "/dev/fd/3", "--", "true"},
		{"--mount", "/dev/stdin:/in", "--", "true"},
		{"--no-such-flag", "--", "true"},
		{"--allow", "example.com", "--", "true"},
		{"--help", "--", "true"},
		{"-h"},
		{"echo", "--help"},
		{"-e", "A=b", "sh", "-h", "--", "x"},
		{"--", "printf", "\xff"},
	} {
		if _, ok := FrontWords(words, ""); ok {
			t.Errorf("FrontWords(%q) read them, want them left to the caller", words)
		}
	}
	// Relative host paths are read from the caller's working directory,
	// but not into /proc, nor with a usage error: the caller's front end
	// words it with the path as typed.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir   string
		words []string
		ok    bool
	}{
		{wd, []string{"--workspace", "testdata", "--", "true"}, true},
		{wd, []string{"--workspace", "./testdata/", "--mount", wd + "/testdata:/x", "--", "true"}, true},
		{"relative/dir", []string{"--workspace", "testdata", "--", "true"}, false},
		{wd, []string{"--workspace", "no-such-relative-dir", "--", "true"}, false},
		{"/proc", []string{"--workspace", "self/cwd", "--", "true"}, false},
		{"/dev", []string{"--rootfs", "fd/0", "--", "true"}, false},
	} {
		w, ok := FrontWords(tt.words, tt.dir)
		if ok != tt.ok || ok && w.Err != nil {
			t.Errorf("FrontWords(%q, %q) = %v, %v; want %v", tt.words, tt.dir, ok, w.Err, tt.ok)
		}
		if !ok {
			continue
		}
		paths := []string{w.Request.Spec.Workspace}
		for _, m := range w.Request.Spec.Mounts {
			paths = append(paths, m.Source)
		}
		for _, p := range paths {
			if p != "" && p != filepath.Join(wd, "testdata") {
				t.Errorf("FrontWords(%q, %q): host path %q, want %s", tt.words, tt.dir, p, filepath.Join(wd, "testdata"))
			}
		}
	}
	env := Env{Ctx: context.Background(), Home: t.TempDir(), Executor: executorPath, NoHandoff: true}
	for _, words := range [][]string{
		{"--memory", "lots", "--", "true"},
		{"--workspace", "/nonexistent-workspace", "--", "true"},
		{"--workspace-mode", "rw", "--", "true"},
		{"--mount", "rel:/x", "--", "true"},
		{"--"},
	} {
		w, ok := FrontWords(words, "")
		if !ok || w.Err == nil {
			t.Errorf("FrontWords(%q) = %v, %v; want a usage error", words, ok, w.Err)
			continue
		}
		var stderr bytes.Buffer
		st := w.Report(&stderr, sandbox.Result{}, w.Err)
		wst, _, wantErr := run(t, env, "", append([]string{"run"}, words...)...)
		if st != wst || stderr.String() != wantErr {
			t.Errorf("FrontWords(%q) reported %d %q; the front end %d %q", words, st, stderr.String(), wst, wantErr)
		}
	}
	for _, words := range [][]string{{"-i", "--", "cat"}, {"--interactive", "cat"}} {
		if w, ok := FrontWords(words, ""); !ok || w.Err != nil || !w.Request.Stdin {
			t.Errorf("FrontWords(%q) = %v, %v, stdin %v; want a request for stdin", words, ok, w.Err, w.Request.Stdin)
		}
	}
	if w, ok := FrontWords([]string{"--", "cat", "-i"}, ""); !ok || w.Request.Stdin {
		t.Errorf("FrontWords(-- cat -i) = %v, stdin %v; want a request without stdin", ok, w.Request.Stdin)
	}
	w, ok := FrontWords([]string{"--json", "--", "true"}, "")
	if !ok || w.Err != nil {
		t.Fatalf("FrontWords(--json -- true) = %v, %v", ok, w.Err)
	}
	var stderr bytes.Buffer
	if st := w.Report(&stderr, sandbox.Result{Outcome: sandbox.OutcomeExited, ExitCode: 4}, nil); st != 4 || !strings.Contains(stderr.String(), `"exit_code":4`) {
		t.Errorf("--json: reported %d %q, want 4 and the result's JSON", st, stderr.String())
	}
}
