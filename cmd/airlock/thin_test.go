package main

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
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

	"github.com/airlockrun/airlock/internal/deptest"
	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// thinBin is the front end built by scripts/build-thin.sh, beside the
// plain one in bins' directory (the front end finds airlock-exec and
// airlock-host beside itself, whatever its own name), once per test
// binary; the test is skipped where the script cannot build it.
var (
	thinOnce sync.Once
	thinPath string
	thinSkip string
	thinErr  string
)

func thinBin(t *testing.T) string {
	t.Helper()
	dir := bins(t)
	thinOnce.Do(func() {
		out, err := os.MkdirTemp("", "airlock-thin")
		if err != nil {
			thinErr = err.Error()
			return
		}
		defer os.RemoveAll(out)
		build := exec.Command("../../scripts/build-thin.sh", out)
		build.Env = append(os.Environ(), "GO="+deptest.GoTool(t))
		msg, err := build.CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == 3:
			thinSkip = strings.TrimSpace(string(msg))
			return
		case err != nil:
			thinErr = "scripts/build-thin.sh: " + err.Error() + "\n" + string(msg)
			return
		}
		p := filepath.Join(dir, "airlock-thin")
		if err := os.Rename(filepath.Join(out, "airlock"), p); err != nil {
			thinErr = err.Error()
			return
		}
		thinPath = p
	})
	switch {
	case thinSkip != "":
		t.Skipf("no thin front end on this machine: %s", thinSkip)
	case thinErr != "":
		t.Fatal(thinErr)
	}
	return thinPath
}

// TestThinEntry: the thin front end's ELF entry is airlock_thin_entry, and
// what it does not serve itself runs as in the plain front end.
func TestThinEntry(t *testing.T) {
	thin := thinBin(t)
	plain := filepath.Join(bins(t), "airlock")
	f, err := elf.Open(thin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	entry := ""
	for _, s := range syms {
		if s.Value == f.Entry && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			entry = s.Name
		}
	}
	if entry != "airlock_thin_entry" {
		t.Errorf("the thin front end's entry %#x is %q, want airlock_thin_entry", f.Entry, entry)
	}

	home := t.TempDir()
	env := []string{"AIRLOCK_HOME=" + home}
	for _, args := range [][]string{
		{"version"},
		{"sandbox", "run", "--help"},
		{"sandbox", "ls"},
		{"sandbox", "run"},
		{"sandbox", "run", "--"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			want := run(t, plain, env, args...)
			if got := run(t, thin, env, args...); got != want {
				t.Errorf("thin airlock %q = %+v, want the plain front end's %+v", args, got, want)
			}
		})
	}
}

// A standIn listens where a sandbox daemon would, as the test's uid, and
// records every connection's request and descriptors; serve answers each.
type standIn struct {
	ln    *net.UnixListener
	serve func(t *testing.T, h *handed)
	done  chan struct{}

	// mu guards conns.
	mu    sync.Mutex
	conns []*handed
}

// handed is one connection's request: its bytes as sent (framed), and the
// descriptors that came with them.
type handed struct {
	conn  *net.UnixConn
	req   []byte
	files []*os.File
}

// thin reports whether the request is the thin client's: Words (field 7)
// is its first field, or its second after Stdin (5), where the Go front
// end's begins with its Spec.
func (h *handed) thin() bool {
	return len(h.req) > 6 && (h.req[5] == 7 || h.req[5] == 5 && h.req[6] == 7)
}

func newStandIn(t *testing.T, home string, serve func(t *testing.T, h *handed)) *standIn {
	t.Helper()
	path := filepath.Join(home, handoff.SocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	s := &standIn{ln: ln, serve: serve, done: make(chan struct{})}
	go s.accept(t)
	t.Cleanup(func() { s.close() })
	return s
}

func (s *standIn) accept(t *testing.T) {
	defer close(s.done)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		h, err := readRequest(c)
		if err != nil {
			t.Errorf("stand-in: %v", err)
			c.Close()
			continue
		}
		s.mu.Lock()
		s.conns = append(s.conns, h)
		s.mu.Unlock()
		s.serve(t, h)
		c.Close()
		for _, f := range h.files {
			f.Close()
		}
	}
}

// close stops the stand-in and returns every connection it had.
func (s *standIn) close() []*handed {
	s.ln.Close()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// readRequest reads one framed request with the descriptors that came with
// its first bytes.
func readRequest(c *net.UnixConn) (*handed, error) {
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	h := &handed{conn: c, req: bytes.Clone(buf[:n])}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, err
		}
		for _, fd := range fds {
			h.files = append(h.files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	for len(h.req) < 4 || len(h.req) < 4+int(binary.BigEndian.Uint32(h.req)) {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		h.req = append(h.req, buf[:n]...)
	}
	return h, nil
}

// frameOf is a framed message of fields, as package handoff sends one.
func frameOf(t *testing.T, fields func(e *execproto.Encoder)) []byte {
	p, err := execproto.EncodeFields(fields)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...)
}

func started(t *testing.T) []byte {
	return frameOf(t, func(e *execproto.Encoder) { e.Flag(1, true) })
}

func reported(t *testing.T, status int) []byte {
	return frameOf(t, func(e *execproto.Encoder) { e.Flag(4, true); e.Int(5, int64(status)) })
}

func errorReply(t *testing.T, text string) []byte {
	return frameOf(t, func(e *execproto.Encoder) { e.Str(3, text) })
}

// goRefused is the stand-in's answer to the Go front end's own request,
// which shows that the Go front end ran: an error it prints.
const goRefused = "stand-in: the Go front end's request"

func send(t *testing.T, h *handed, b []byte) {
	if _, err := h.conn.Write(b); err != nil {
		t.Errorf("stand-in: write a reply: %v", err)
	}
}

// refuseGo answers the Go front end's request with goRefused; it reports
// whether the request was the Go front end's.
func refuseGo(t *testing.T, h *handed) bool {
	if h.thin() {
		return false
	}
	send(t, h, errorReply(t, goRefused))
	return true
}

// start runs the thin front end with args in home, its output into
// buffers; wait returns its result.
func start(t *testing.T, bin, home string, env []string, args ...string) (cmd *exec.Cmd, wait func() result) {
	t.Helper()
	return startCmd(t, bin, append([]string{"AIRLOCK_HOME=" + home}, env...), args...)
}

// TestThinRequest: the thin client sends exactly handoff.EncodeRequest's
// bytes for the command line, with its stdout and stderr, and exits with
// the status the host reported.
func TestThinRequest(t *testing.T) {
	thin := thinBin(t)
	// The client's working directory, this test's, goes with the words.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	many := []string{"--", "echo"}
	for i := range 2000 {
		many = append(many, strings.Repeat("w", i%7))
	}
	for _, tt := range []struct {
		name   string
		words  []string
		status int
	}{
		{"true", []string{"--", "true"}, 0},
		{"empty words", []string{"--", "echo", "", "x", ""}, 3},
		{"spaces and newlines", []string{"--", "sh", "-c", "echo a  b\nexit 3", "x y"}, 137},
		{"non-ASCII", []string{"--", "echo", "héllo", "日本語", "\x7f\x01"}, 255},
		{"many words", many, 1},
		// Two words of 100 KiB: a request that fits the 256 KiB buffer (a
		// word may not be over 128 KiB, MAX_ARG_STRLEN).
		{"long words", []string{"--", "echo", strings.Repeat("x", 100<<10), strings.Repeat("y", 100<<10)}, 0},
		{"a word that looks like a flag", []string{"--", "--memory", "1G"}, 2},
		{"flags", []string{"--memory", "1G", "-e", "A=b", "--json", "--", "true"}, 0},
		{"no --", []string{"true"}, 0},
		{"no command", []string{"--"}, 2},
		{"-i, with stdin's pipe", []string{"-i", "--", "cat"}, 0},
		{"--interactive, with stdin's pipe", []string{"-e", "A=b", "--interactive", "cat"}, 0},
		{"-i of the command, with a pipe the host closes", []string{"cat", "-i"}, 0},
		{"-i after --, without a pipe", []string{"--", "cat", "-i"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			// The thin client sends a pipe with words that may ask for
			// stdin: -i or --interactive before any --.
			flags := tt.words
			if i := slices.Index(flags, "--"); i >= 0 {
				flags = flags[:i]
			}
			stdin := slices.Contains(flags, "-i") || slices.Contains(flags, "--interactive")
			want, err := handoff.EncodeRequest(&handoff.Request{Words: tt.words, Stdin: stdin, Dir: wd})
			if err != nil {
				t.Fatal(err)
			}
			s := newStandIn(t, home, func(t *testing.T, h *handed) {
				if refuseGo(t, h) {
					return
				}
				if !bytes.Equal(h.req, want) {
					t.Errorf("the thin request is %d bytes %.80q, want handoff.EncodeRequest's %d bytes %.80q", len(h.req), h.req, len(want), want)
				}
				nfd := 2
				if stdin {
					nfd = 3
				}
				if len(h.files) != nfd {
					t.Errorf("the thin request came with %d descriptors, want %d (stdout, stderr, stdin's pipe with -i)", len(h.files), nfd)
				} else {
					_, _ = io.WriteString(h.files[0], "to stdout\n")
					_, _ = io.WriteString(h.files[1], "to stderr\n")
				}
				send(t, h, started(t))
				send(t, h, reported(t, tt.status))
			})
			_, wait := start(t, thin, home, nil, append([]string{"sandbox", "run"}, tt.words...)...)
			got := wait()
			if want := (result{stdout: "to stdout\n", stderr: "to stderr\n", code: tt.status}); got != want {
				t.Errorf("thin airlock sandbox run = %+v, want %+v", got, want)
			}
			if conns := s.close(); len(conns) != 1 {
				t.Errorf("the stand-in had %d connections, want 1", len(conns))
			}
		})
	}
}

// TestThinReplies: the thin client's answers to what the host says, before
// and after the command started.
func TestThinReplies(t *testing.T) {
	thin := thinBin(t)
	const ended = "airlock: sandbox host: the connection ended before the command's result: EOF\n"
	const unexpected = "airlock: sandbox host: unexpected answer instead of the command's result\n"
	for _, tt := range []struct {
		name    string
		replies func(t *testing.T) [][]byte
		want    result
	}{
		{"reported at once", func(t *testing.T) [][]byte { return [][]byte{reported(t, 7)} }, result{code: 7}},
		{
			"an error at once", func(t *testing.T) [][]byte { return [][]byte{errorReply(t, "no such template")} },
			result{stderr: "airlock: no such template\n", code: 125},
		},
		{"EOF after started", func(t *testing.T) [][]byte { return [][]byte{started(t)} }, result{stderr: ended, code: 125}},
		{
			"an error after started", func(t *testing.T) [][]byte { return [][]byte{started(t), errorReply(t, "the sandbox died")} },
			result{stderr: "airlock: the sandbox died\n", code: 125},
		},
		{"started twice", func(t *testing.T) [][]byte { return [][]byte{started(t), started(t)} }, result{stderr: unexpected, code: 125}},
		{"an unknown field after started", func(t *testing.T) [][]byte {
			return [][]byte{started(t), frameOf(t, func(e *execproto.Encoder) { e.Flag(9, true) })}
		}, result{stderr: unexpected, code: 125}},
		{
			"another form after started", func(t *testing.T) [][]byte { return [][]byte{started(t), {0, 0, 0, 2, 2, 4}} },
			result{stderr: unexpected, code: 125},
		},
		{
			"cut short after started", func(t *testing.T) [][]byte { return [][]byte{started(t), {0, 0, 0, 9, 1, 4}} },
			result{stderr: "airlock: sandbox host: the connection ended before the command's result: malformed handoff message: cut short after 2 of 9 bytes: unexpected EOF\n", code: 125},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			s := newStandIn(t, home, func(t *testing.T, h *handed) {
				if refuseGo(t, h) {
					return
				}
				for _, b := range tt.replies(t) {
					send(t, h, b)
				}
			})
			_, wait := start(t, thin, home, nil, "sandbox", "run", "--", "true")
			if got := wait(); got != tt.want {
				t.Errorf("thin airlock sandbox run = %+v, want %+v", got, tt.want)
			}
			if conns := s.close(); len(conns) != 1 {
				t.Errorf("the stand-in had %d connections, want 1 (the thin client's)", len(conns))
			}
		})
	}
}

// TestThinStdin: the thin client copies its stdin into the pipe it sent
// with the words when the host says the command reads it, and only then;
// a reader that goes away ends the copy, not the client (SIGPIPE is
// blocked, and left pending); and without a stdin of its own it sends no
// pipe.
func TestThinStdin(t *testing.T) {
	thin := thinBin(t)
	words := []string{"sandbox", "run", "-i", "--", "cat"}
	stdinStarted := frameOf(t, func(e *execproto.Encoder) { e.Flag(1, true); e.Flag(6, true) })
	check := func(t *testing.T, h *handed, pipe bool) bool {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		want, err := handoff.EncodeRequest(&handoff.Request{Words: words[2:], Stdin: pipe, Dir: wd})
		if err != nil {
			t.Fatal(err)
		}
		nfd := 2
		if pipe {
			nfd = 3
		}
		if !bytes.Equal(h.req, want) || len(h.files) != nfd {
			t.Errorf("request %q with %d descriptors, want %q with %d", h.req, len(h.files), want, nfd)
			send(t, h, reported(t, 99))
			return false
		}
		return true
	}

	// client is the thin client's command line, for the stand-in of home.
	client := func(home string) *exec.Cmd {
		cmd := exec.Command(thin, words...)
		cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
		return cmd
	}

	t.Run("copied", func(t *testing.T) {
		data := make([]byte, 2<<20)
		for i := range data {
			data[i] = byte(i * 13 / 7)
		}
		home := t.TempDir()
		s := newStandIn(t, home, func(t *testing.T, h *handed) {
			if refuseGo(t, h) || !check(t, h, true) {
				return
			}
			send(t, h, stdinStarted)
			got, err := io.ReadAll(h.files[2])
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("the pipe gave %d bytes (%v), want the %d of stdin", len(got), err, len(data))
			}
			send(t, h, reported(t, 3))
		})
		cmd := client(home)
		cmd.Stdin = bytes.NewReader(data)
		if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 3 {
			t.Errorf("thin airlock: %v, want exit status 3", err)
		}
		s.close()
	})

	t.Run("not asked for", func(t *testing.T) {
		home := t.TempDir()
		s := newStandIn(t, home, func(t *testing.T, h *handed) {
			if refuseGo(t, h) || !check(t, h, true) {
				return
			}
			send(t, h, started(t))
			// The client closes its end at once: the end of the pipe, empty.
			if got, err := io.ReadAll(h.files[2]); err != nil || len(got) != 0 {
				t.Errorf("the pipe gave %q (%v), want nothing", got, err)
			}
			send(t, h, reported(t, 0))
		})
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := w.WriteString("not for the command"); err != nil {
			t.Fatal(err)
		}
		w.Close()
		cmd := client(home)
		cmd.Stdin = r
		if err := cmd.Run(); err != nil {
			t.Errorf("thin airlock: %v", err)
		}
		if left, _ := io.ReadAll(r); string(left) != "not for the command" {
			t.Errorf("the client read its stdin: %q left of it", left)
		}
		s.close()
	})

	t.Run("reader gone", func(t *testing.T) {
		home := t.TempDir()
		zero, err := os.Open("/dev/zero")
		if err != nil {
			t.Fatal(err)
		}
		defer zero.Close()
		cmd := client(home)
		cmd.Stdin = zero // never ends
		pid := make(chan int, 1)
		s := newStandIn(t, home, func(t *testing.T, h *handed) {
			if refuseGo(t, h) || !check(t, h, true) {
				return
			}
			send(t, h, stdinStarted)
			if _, err := io.ReadFull(h.files[2], make([]byte, 1)); err != nil {
				t.Errorf("read the pipe: %v", err)
			}
			h.files[2].Close()
			// The client's next write fails: SIGPIPE, blocked, is left
			// pending on its thread (SigPnd, bit 13).
			p := <-pid
			waitFor(t, "SIGPIPE pending in the client", func() bool {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
				for l := range strings.Lines(string(b)) {
					if v, ok := strings.CutPrefix(l, "SigPnd:"); ok {
						n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
						return n&(1<<(syscall.SIGPIPE-1)) != 0
					}
				}
				return false
			})
			send(t, h, reported(t, 5))
		})
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid <- cmd.Process.Pid
		if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 5 {
			t.Errorf("thin airlock: %v, want exit status 5", err)
		}
		s.close()
	})

	t.Run("no stdin", func(t *testing.T) {
		home := t.TempDir()
		s := newStandIn(t, home, func(t *testing.T, h *handed) {
			if refuseGo(t, h) || !check(t, h, false) {
				return
			}
			send(t, h, reported(t, 0))
		})
		// sh closes fd 0 and execs the client.
		cmd := exec.Command("sh", append([]string{"-c", `exec 0<&-; exec "$@"`, "sh", thin}, words...)...)
		cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("thin airlock with fd 0 closed: %v: %s", err, out)
		}
		s.close()
	})
}

// TestThinSignal: a signal to the thin client after the command started
// reaches the host as the control frame the Go client sends.
func TestThinSignal(t *testing.T) {
	thin := thinBin(t)
	for _, tt := range []struct {
		sig   syscall.Signal
		frame []byte
	}{
		{syscall.SIGTERM, []byte{0, 0, 0, 3, 1, 1, 0x1e}},
		{syscall.SIGINT, []byte{0, 0, 0, 3, 1, 1, 4}},
		{syscall.SIGHUP, []byte{0, 0, 0, 3, 1, 1, 2}},
		{syscall.SIGQUIT, []byte{0, 0, 0, 3, 1, 1, 6}},
	} {
		t.Run(tt.sig.String(), func(t *testing.T) {
			home := t.TempDir()
			procs := make(chan *os.Process, 1)
			s := newStandIn(t, home, func(t *testing.T, h *handed) {
				if refuseGo(t, h) {
					return
				}
				// The client blocked the signals before its request: sent
				// now, it waits for the signalfd.
				if err := (<-procs).Signal(tt.sig); err != nil {
					t.Error(err)
				}
				send(t, h, started(t))
				got := make([]byte, len(tt.frame))
				if _, err := io.ReadFull(h.conn, got); err != nil {
					t.Errorf("stand-in: read the control frame: %v", err)
				} else if !bytes.Equal(got, tt.frame) {
					t.Errorf("the control frame for %v is % x, want % x", tt.sig, got, tt.frame)
				}
				send(t, h, reported(t, 128+int(tt.sig)))
			})
			cmd, wait := start(t, thin, home, nil, "sandbox", "run", "--", "sleep", "1000")
			procs <- cmd.Process
			if got, want := wait(), (result{code: 128 + int(tt.sig)}); got != want {
				t.Errorf("thin airlock sandbox run = %+v, want %+v", got, want)
			}
			s.close()
		})
	}
}

// TestGoSignalWhileStarting: a signal that reaches the Go front end while
// its hand-off starts the command (here: before the host's Started) is
// forwarded to the command once it runs, as the thin entry's is, instead
// of ending the front end with the signal's default action; a signal at a
// command that never started acts as it would have.
func TestGoSignalWhileStarting(t *testing.T) {
	dir := bins(t)
	plain := filepath.Join(dir, "airlock")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			home := t.TempDir()
			procs := make(chan *os.Process, 1)
			frame := []byte{0, 0, 0, 3, 1, 1, byte(sig) << 1}
			s := newStandIn(t, home, func(t *testing.T, h *handed) {
				if h.thin() {
					t.Errorf("the plain front end sent a request in words")
					return
				}
				if err := (<-procs).Signal(sig); err != nil {
					t.Error(err)
				}
				send(t, h, started(t))
				got := make([]byte, len(frame))
				if _, err := io.ReadFull(h.conn, got); err != nil {
					t.Errorf("stand-in: read the control frame: %v", err)
				} else if !bytes.Equal(got, frame) {
					t.Errorf("the control frame for %v is % x, want % x", sig, got, frame)
				}
				send(t, h, frameOf(t, func(e *execproto.Encoder) {
					e.Msg(2, true, func(e *execproto.Encoder) {
						e.Str(1, "exited")
						e.Int(2, 128+int64(sig))
					})
				}))
			})
			cmd, wait := start(t, plain, home, nil, "sandbox", "run", "--", "sleep", "1000")
			procs <- cmd.Process
			if got, want := wait(), (result{code: 128 + int(sig)}); got != want {
				t.Errorf("airlock sandbox run = %+v, want %+v", got, want)
			}
			s.close()
		})
	}
	t.Run("not started", func(t *testing.T) {
		home := t.TempDir()
		procs := make(chan *os.Process, 1)
		s := newStandIn(t, home, func(t *testing.T, h *handed) {
			// The answer goes once the front end has taken the signal
			// (caught, not only pending): otherwise it could exit on the
			// answer before the kernel delivered it.
			p := <-procs
			if err := p.Signal(syscall.SIGTERM); err != nil {
				t.Error(err)
			}
			for deadline := time.Now().Add(time.Minute); pending(p.Pid, syscall.SIGTERM); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the front end left its SIGTERM pending for a minute")
					break
				}
			}
			send(t, h, errorReply(t, "no sandbox"))
		})
		cmd, _ := start(t, plain, home, nil, "sandbox", "run", "--", "sleep", "1000")
		procs <- cmd.Process
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("airlock sandbox run whose command never started, after SIGTERM: %v, want killed by SIGTERM", err)
		}
		s.close()
	})
}

// pending reports whether sig, sent to process pid, is still pending
// there (its status's ShdPnd), not yet taken by one of its threads.
func pending(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(sig-1)) != 0
		}
	}
	return false
}

// TestThinFallback: where the thin client must not serve the command, the
// Go front end runs it as before: the stand-in sees the Go front end's
// request after the thin client's (or alone), or nothing where the Go
// front end does not hand off either.
func TestThinFallback(t *testing.T) {
	thin := thinBin(t)
	root := os.Geteuid() == 0
	for _, tt := range []struct {
		name string
		// args after "sandbox"; env added; home is AIRLOCK_HOME's value
		// relative to the stand-in's directory dir ("" is dir itself), and
		// the client runs in dir's parent.
		args  []string
		env   []string
		home  string
		setup func(t *testing.T, dir string)
		// thinFirst: the stand-in answers the thin request with reply.
		thinFirst []byte
		// want: the connections seen, "thin" or "go"; code: the exit status.
		want []string
		code int
		// sandbox: the Go front end starts a sandbox itself (root only).
		sandbox bool
	}{
		{name: "closed unanswered", thinFirst: []byte{}, want: []string{"thin", "go"}, code: 125},
		{name: "a malformed first reply", thinFirst: []byte{0, 0, 0, 2, 1, 9}, want: []string{"thin", "go"}, code: 125},
		{name: "a first reply of another form", thinFirst: []byte{0, 0, 0, 2, 2, 1}, want: []string{"thin", "go"}, code: 125},
		{name: "AIRLOCK_NO_HANDOFF", env: []string{"AIRLOCK_NO_HANDOFF=1"}, sandbox: true},
		{name: "AIRLOCK_NO_HANDOFF first", env: []string{"AIRLOCK_NO_HANDOFF=1", "AIRLOCK_NO_HANDOFF="}, sandbox: true},
		{name: "AIRLOCK_TRACE", env: []string{"AIRLOCK_TRACE=1"}, want: []string{"go"}, code: 125},
		{name: "a socket of another uid", setup: func(t *testing.T, dir string) {
			if err := os.Chown(filepath.Join(dir, handoff.SocketName), 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, sandbox: true},
		{name: "a home with ..", home: "sub/..", setup: func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"go"}, code: 125},
		{name: "a home with .", home: "./", want: []string{"go"}, code: 125},
		{name: "a relative home", home: "rel", want: []string{"go"}, code: 125},
		{name: "stdin, which the host leaves to the Go front end", args: []string{"run", "-i", "--", "true"}, thinFirst: []byte{}, want: []string{"thin", "go"}, code: 125},
		{name: "no words", args: []string{"run"}, code: 2},
		{name: "a request too large", args: []string{"run", "--", "echo", strings.Repeat("x", 100<<10), strings.Repeat("y", 100<<10), strings.Repeat("z", 100<<10)}, want: []string{"go"}, code: 125},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.sandbox && !root {
				t.Skip("the Go front end starts a sandbox itself: needs root")
			}
			parent := t.TempDir()
			dir := filepath.Join(parent, "rel")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = linux.Forget(filepath.Join(dir, sandboxcli.RunStateDir)) })
			s := newStandIn(t, dir, func(t *testing.T, h *handed) {
				if refuseGo(t, h) {
					return
				}
				if tt.thinFirst != nil {
					send(t, h, tt.thinFirst)
					return
				}
				t.Errorf("the thin client served %s", tt.name)
				send(t, h, reported(t, 99))
			})
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			home := dir
			switch {
			case tt.home == "rel":
				home = "rel"
			case tt.home != "":
				home = dir + "/" + tt.home
			}
			args := tt.args
			if args == nil {
				args = []string{"run", "--", "true"}
			}
			r := runRaw(t, thin, parent, append([]string{"AIRLOCK_HOME=" + home}, tt.env...), append([]string{"sandbox"}, args...)...)
			var got []string
			for _, h := range s.close() {
				if h.thin() {
					got = append(got, "thin")
				} else {
					got = append(got, "go")
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("the stand-in saw %q, want %q (stderr %q)", got, tt.want, r.stderr)
			}
			if r.code != tt.code {
				t.Errorf("exit status %d, want %d (stderr %q)", r.code, tt.code, r.stderr)
			}
			if tt.code == 125 && len(tt.want) > 0 && !strings.Contains(r.stderr, "airlock: "+goRefused+"\n") {
				t.Errorf("stderr %q, want the Go front end's print of the stand-in's refusal", r.stderr)
			}
		})
	}
}

// runRaw runs bin in dir with the environment as given after the test's
// own (less its AIRLOCK_ variables): os/exec would keep only the last of
// a name given twice, and the thin client, like os.Getenv, reads the
// first.
func runRaw(t *testing.T, bin, dir string, env []string, args ...string) result {
	t.Helper()
	var full []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_") {
			full = append(full, kv)
		}
	}
	full = append(full, env...)
	outs := make([]*os.File, 2)
	for i := range outs {
		f, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		outs[i] = f
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	p, err := os.StartProcess(bin, append([]string{bin}, args...), &os.ProcAttr{Dir: dir, Env: full, Files: []*os.File{devnull, outs[0], outs[1]}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	stdout, _ := os.ReadFile(outs[0].Name())
	stderr, _ := os.ReadFile(outs[1].Name())
	return result{stdout: string(stdout), stderr: string(stderr), code: st.ExitCode()}
}

// TestThinDaemon: with a real `airlock sandbox daemon`, the thin and the
// plain front end give the same output and status, the thin one through a
// request in words (the daemon's in_words count), and a SIGTERM to either
// reaches the waiting command.
func TestThinDaemon(t *testing.T) {
	thin := thinBin(t)
	dir := bins(t)
	needSandboxes(t, dir)
	plain := filepath.Join(dir, "airlock")
	home := shortHome(t)
	env := []string{"AIRLOCK_HOME=" + home}
	d := exec.Command(plain, "sandbox", "daemon")
	d.Env = append(os.Environ(), env...)
	var dlog bytes.Buffer
	d.Stderr = &dlog
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = d.Process.Kill()
			_ = d.Wait()
		}
	})
	waitFor(t, "the daemon's socket", func() bool {
		_, err := os.Stat(filepath.Join(home, handoff.SocketName))
		return err == nil
	})

	// Traversable: the sandbox's user is not the directory's owner.
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "in-the-workspace"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	relWS, err := filepath.Rel(wd, ws)
	if err != nil {
		t.Fatal(err)
	}
	thinRuns := 0
	for _, tt := range []struct {
		args []string
		// words: the daemon runs the thin client's command in words (it
		// reports a usage error, or leaves the words to the Go front end,
		// otherwise).
		words bool
		// out: what stdout must hold, beyond being the same for both.
		out string
	}{
		{[]string{"--", "true"}, true, ""},
		{[]string{"--", "sh", "-c", "echo out; echo err >&2; exit 3"}, true, "out"},
		{[]string{"--", "airlock-no-such-command"}, true, ""},
		{[]string{"--", "sh", "-c", "kill -KILL $$"}, true, ""},
		{[]string{"--", "echo", "", "a  b", "héllo"}, true, "héllo"},
		{[]string{"-e", "A=b", "--timeout", "5s", "--max-output", "1K", "--memory", "256M", "--", "sh", "-c", "echo $A"}, true, "b\n"},
		{[]string{"--timeout", "300ms", "--", "sleep", "30"}, true, ""},
		{[]string{"--workspace", ws, "--workspace-mode", "ro", "--", "ls", "/workspace"}, true, "in-the-workspace"},
		{[]string{"--workspace", relWS, "--workspace-mode", "ro", "--", "ls", "/workspace"}, true, "in-the-workspace"},
		{[]string{"--mount", relWS + ":/m", "--", "ls", "/m"}, false, ""},
		{[]string{"echo", "no", "--"}, true, "no --"},
		{[]string{"--memory", "lots", "--", "true"}, false, ""},
		{[]string{"--"}, false, ""},
		{[]string{"--workspace", "no-such-relative-dir", "--", "true"}, false, ""},
		{[]string{"-i", "--", "cat"}, true, ""},
		{[]string{"--help"}, false, "Usage"},
		{[]string{"echo", "--help"}, false, "Usage"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			words := append([]string{"sandbox", "run"}, tt.args...)
			want := run(t, plain, env, words...)
			got := run(t, thin, env, words...)
			if tt.words {
				thinRuns++
			}
			if !strings.Contains(got.stdout, tt.out) {
				t.Errorf("thin airlock %q wrote %q, want it to hold %q", words, got.stdout, tt.out)
			}
			if got != want {
				t.Errorf("thin airlock %q = %+v, want the plain front end's %+v", words, got, want)
			}
		})
	}
	// -i: the same input reaches the command through either front end,
	// the thin one in words; 3 MiB is well over a pipe's 64 KiB.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 7 / 5)
	}
	sum := sha256.Sum256(big)
	for _, in := range []struct {
		name  string
		data  []byte
		words []string
		out   string
	}{
		{"typed", []byte("typed\n"), []string{"-i", "--", "sh", "-c", "cat; echo end"}, "typed\nend\n"},
		{"3 MiB", big, []string{"--interactive", "--", "sha256sum"}, hex.EncodeToString(sum[:]) + "  -\n"},
		{"not asked for", []byte("typed\n"), []string{"--", "sh", "-c", "cat; echo end"}, "end\n"},
	} {
		for _, bin := range []string{plain, thin} {
			t.Run("stdin/"+in.name+"/"+filepath.Base(bin), func(t *testing.T) {
				cmd := exec.Command(bin, append([]string{"sandbox", "run"}, in.words...)...)
				cmd.Env = append(os.Environ(), env...)
				cmd.Stdin = bytes.NewReader(in.data)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil || string(out) != in.out {
					t.Errorf("%s sandbox run %q with %d bytes on stdin: %v, stdout %.80q, stderr %q; want %.80q", filepath.Base(bin), in.words, len(in.data), err, out, stderr.String(), in.out)
				}
				if bin == thin {
					thinRuns++
				}
			})
		}
	}
	for _, bin := range []string{plain, thin} {
		t.Run("SIGTERM/"+filepath.Base(bin), func(t *testing.T) {
			// The command says it started, then waits; were the signal not
			// forwarded, it would end with 0 after the sleep.
			cmd := exec.Command(bin, "sandbox", "run", "--", "sh", "-c", "echo started; exec sleep 60")
			cmd.Env = append(os.Environ(), env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line := make([]byte, len("started\n"))
			if _, err := io.ReadFull(out, line); err != nil || string(line) != "started\n" {
				t.Fatalf("the command said %q (%v), want started", line, err)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			if bin == thin {
				thinRuns++
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 143 {
				t.Errorf("%s sandbox run after SIGTERM: %v, want exit status 143 (stderr %q)", filepath.Base(bin), err, stderr.String())
			}
		})
	}

	if err := d.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = d.Wait()
	stopped = true
	if want := "in_words=" + strconv.Itoa(thinRuns) + " "; !strings.Contains(dlog.String(), want) {
		t.Errorf("the daemon's log does not say %q (every thin run in words):\n%s", want, dlog.String())
	}
}
