package handoff_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// serve runs a Server of uid over a real backend until the test ends, and
// returns it with its socket.
func serve(t *testing.T, uid int) (*handoff.Server, string) {
	t.Helper()
	return serveWith(t, &handoff.Server{UID: uid})
}

// serveWith is serve with s (its Backend set here) as the Server.
func serveWith(t *testing.T, s *handoff.Server) (*handoff.Server, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	dir := t.TempDir()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run")})
	if err != nil {
		t.Fatal(err)
	}
	sock := handoff.SocketPath(dir)
	ln, err := handoff.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Backend = b
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if live, err := b.Live(); err != nil || len(live) != 0 {
			t.Errorf("after Serve: live sandboxes %v (%v), want none", live, err)
		}
		_ = b.Close()
	})
	return s, sock
}

// stdio returns files for a command's output, read back by the returned
// function.
func stdio(t *testing.T) (handoff.Stdio, func() string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return handoff.Stdio{Stdout: f, Stderr: f}, func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

func request(argv ...string) handoff.Request {
	return handoff.Request{Spec: sandbox.Spec{Limits: sandbox.DefaultLimits}, Argv: argv}
}

// TestSocketMode: the socket is its owner's alone from its creation.
func TestSocketMode(t *testing.T) {
	_, sock := serve(t, os.Geteuid())
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("socket mode %v, want 0600", m)
	}
	if _, err := handoff.Listen(sock); err == nil {
		t.Errorf("Listen over a live host's socket = nil, want an error")
	}
}

// TestRefusedUID: a host serves only its uid. A caller of another uid (the
// server's uid set to one the caller is not, which the peer credentials
// check compares with) gets no answer, so ErrNoHost: nothing ran.
func TestRefusedUID(t *testing.T) {
	s, sock := serve(t, 4242)
	io, out := stdio(t)
	_, err := handoff.Start(context.Background(), sock, request("sh", "-c", "echo ran"), io)
	if !errors.Is(err, handoff.ErrNoHost) {
		t.Fatalf("Start as another uid = %v, want ErrNoHost", err)
	}
	if st := s.Stats(); st.Refused != 1 || st.Served != 0 {
		t.Errorf("stats %+v, want one refused and none served", st)
	}
	if o := out(); o != "" {
		t.Errorf("a refused command wrote %q", o)
	}
}

// TestForeignRequests: requests a host cannot read (a JSON request of a
// front end of an older build, a frame over the bound, a cut one, bytes
// that are no message) get no answer and run nothing, and the host keeps
// none of the descriptors that came with them: the caller's pipe sees its
// end once the host closed the connection.
func TestForeignRequests(t *testing.T) {
	s, sock := serve(t, os.Geteuid())
	cases := []struct {
		name string
		b    []byte
	}{
		{"a JSON request", []byte(`{"spec":{},"argv":["sh","-c","echo ran"]}` + "\n")},
		{"over the bound", []byte{0x7f, 0xff, 0xff, 0xff, 1}},
		{"cut short", []byte{0, 0, 0, 40, 1, 2}},
		{"not a message", []byte{0, 0, 0, 3, 1, 0x7f, 0}},
		{"another form", []byte{0, 0, 0, 1, 9}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conn := c.(*net.UnixConn)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if _, _, err := conn.WriteMsgUnix(tc.b[:1], unix.UnixRights(int(w.Fd()), int(w.Fd())), nil); err != nil {
				t.Fatal(err)
			}
			w.Close()
			_, _ = conn.Write(tc.b[1:]) // the host may have closed already
			if tc.name == "cut short" {
				_ = conn.CloseWrite()
			}
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			// A close with our bytes unread is ECONNRESET on a unix socket.
			if b, err := io.ReadAll(conn); len(b) != 0 || err != nil && !errors.Is(err, unix.ECONNRESET) {
				t.Errorf("host answered %q (%v), want the connection closed unanswered", b, err)
			}
			// The host's copies of w are closed: the pipe ends.
			_ = r.SetReadDeadline(time.Now().Add(30 * time.Second))
			if b, err := io.ReadAll(r); err != nil || len(b) != 0 {
				t.Errorf("the caller's pipe: %q, %v; want its end (the host closed its copies)", b, err)
			}
		})
	}
	if st := s.Stats(); st.Served != 0 {
		t.Errorf("stats %+v, want nothing served", st)
	}
}

// TestNoHost: no socket, and a stale one, are ErrNoHost at once.
func TestNoHost(t *testing.T) {
	dir := t.TempDir()
	sock := handoff.SocketPath(dir)
	io, _ := stdio(t)
	if _, err := handoff.Start(context.Background(), sock, request("true"), io); !errors.Is(err, handoff.ErrNoHost) {
		t.Errorf("Start without a socket = %v, want ErrNoHost", err)
	}
	ln, err := handoff.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := handoff.Start(context.Background(), sock, request("true"), io); !errors.Is(err, handoff.ErrNoHost) {
		t.Errorf("Start on a stale socket = %v, want ErrNoHost", err)
	}
	// A new host replaces the stale socket.
	ln, err = handoff.Listen(sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln.Close()
}

// TestSignal: a signal the caller sends reaches the command.
func TestSignal(t *testing.T) {
	_, sock := serve(t, os.Geteuid())
	io, out := stdio(t)
	ctx := context.Background()
	p, err := handoff.Start(ctx, sock, request("sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"), io)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out(), "ready"); {
		if time.Now().After(deadline) {
			t.Fatalf("the command never got ready: %q", out())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 7 || !strings.Contains(out(), "got TERM") {
		t.Errorf("after SIGTERM: %+v, output %q; want exit 7 from the trap", res, out())
	}
}

// TestCallerGone: the caller's end of the connection kills the command, and
// the sandbox is destroyed (serve's cleanup checks that none is live).
func TestCallerGone(t *testing.T) {
	s, sock := serve(t, os.Geteuid())
	io, _ := stdio(t)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := handoff.Start(ctx, sock, request("sleep", "600"), io)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := p.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait after cancel = %v, want context.Canceled", err)
	}
	if s.Stats().Served != 1 {
		t.Errorf("stats %+v, want one served", s.Stats())
	}
}

// prepareHost runs a Server over a pool of a real backend, whose Prepare
// runs the words of its request's How (a JSON list) in the sandbox, as a
// template's start command would, until the test ends.
func prepareHost(t *testing.T) (*handoff.Server, *pool.Pool, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	dir := t.TempDir()
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run")})
	if err != nil {
		t.Fatal(err)
	}
	p := pool.New(b, pool.Options{})
	sock := handoff.SocketPath(dir)
	ln, err := handoff.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	s := &handoff.Server{Backend: p, UID: os.Geteuid(), Prepare: func(ctx context.Context, sb sandbox.Sandbox, how json.RawMessage) error {
		var argv []string
		if err := json.Unmarshal(how, &argv); err != nil {
			return err
		}
		var out strings.Builder
		proc, err := sb.Start(ctx, sandbox.Command{Argv: argv, Stdout: &out, Stderr: &out})
		if err != nil {
			return err
		}
		res, err := proc.Wait(ctx)
		if err != nil {
			return err
		}
		if res.ExitStatus() != 0 {
			return fmt.Errorf("not ready: exit %d: %s", res.ExitStatus(), out.String())
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
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
		if live, err := b.Live(); err != nil || len(live) != 0 {
			t.Errorf("after Serve: live sandboxes %v (%v), want none", live, err)
		}
		_ = b.Close()
	})
	return s, p, sock
}

// TestPrepare: a request that asks for a prepared sandbox runs its command
// after the host's Prepare, from the warm pool its Prepare names once the
// pool made one (Pool.Warm, Take), else in one made and prepared for it;
// either way the command sees what Prepare did. A failing Prepare is the
// caller's error, and nothing ran; a host without Prepare takes no such
// request (ErrNoHost: the caller prepares its own).
func TestPrepare(t *testing.T) {
	s, p, sock := prepareHost(t)
	how := func(argv ...string) json.RawMessage {
		b, err := json.Marshal(argv)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ready := how("sh", "-c", "echo prepared > /tmp/ready")
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		prep     handoff.Prepare
		waitWarm bool // wait until the pool has a prepared sandbox
		wantWarm bool
		wantOut  string
		wantErr  string
	}{
		{"no pool", handoff.Prepare{How: ready}, false, false, "prepared\n", ""},
		{"pool, first", handoff.Prepare{How: ready, Pool: "local/web@v1", Size: 1}, false, false, "prepared\n", ""},
		{"pool, warm", handoff.Prepare{How: ready, Pool: "local/web@v1", Size: 1}, true, true, "prepared\n", ""},
		{"pool, another version", handoff.Prepare{How: ready, Pool: "local/web@v2", Size: 1}, false, false, "prepared\n", ""},
		{"not ready", handoff.Prepare{How: how("sh", "-c", "echo no; exit 3"), Pool: "local/bad@v1", Size: 1}, false, false, "", "not ready: exit 3: no"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.waitWarm {
				for deadline := time.Now().Add(2 * time.Minute); p.Stats().Prepared == 0; {
					if time.Now().After(deadline) {
						t.Fatalf("the pool made no prepared sandbox: %+v", p.Stats())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			before := s.Stats()
			io, out := stdio(t)
			req := request("cat", "/tmp/ready")
			prep := tt.prep
			req.Prepare = &prep
			proc, err := handoff.Start(ctx, sock, req, io)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Start = %v, want an error with %q", err, tt.wantErr)
				}
				if st := s.Stats(); st.Served != before.Served || out() != "" {
					t.Errorf("after a failed prepare: stats %+v, output %q; want nothing run", st, out())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			res, err := proc.Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitStatus() != 0 || out() != tt.wantOut {
				t.Errorf("the command: %+v, output %q; want exit 0, %q", res, out(), tt.wantOut)
			}
			if warm := s.Stats().Warm - before.Warm; warm != map[bool]int64{true: 1}[tt.wantWarm] {
				t.Errorf("served %d from the warm pool, want warm %v", warm, tt.wantWarm)
			}
		})
	}

	// A host without Prepare: not taken, nothing ran.
	_, sock2 := serve(t, os.Geteuid())
	io, out := stdio(t)
	req := request("echo", "ran")
	req.Prepare = &handoff.Prepare{How: ready}
	if _, err := handoff.Start(ctx, sock2, req, io); !errors.Is(err, handoff.ErrNoHost) {
		t.Errorf("Start with a prepare, to a host without Prepare = %v, want ErrNoHost", err)
	}
	if out() != "" {
		t.Errorf("the refused command wrote %q", out())
	}
}

// sendWords sends a request in Words, as the front end's entry before the
// Go runtime does, with out as standard output and error, and returns the
// connection.
func sendWords(t *testing.T, sock string, req handoff.Request, out *os.File) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.UnixConn)
	t.Cleanup(func() { conn.Close() })
	b, err := handoff.EncodeRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	fd := int(out.Fd())
	if _, _, err := conn.WriteMsgUnix(b, unix.UnixRights(fd, fd), nil); err != nil {
		t.Fatal(err)
	}
	return conn
}

// front is the tests' Server.Front: words are the command, but for a
// first word that asks for one of its answers (declined, a usage error,
// stdin, a workspace that is missing, the caller's directory echoed);
// Report writes "reported: " and the error or the exit status.
func front(words []string, dir string) (handoff.Words, bool) {
	w := handoff.Words{Report: func(stderr io.Writer, res sandbox.Result, err error) int {
		if err != nil {
			fmt.Fprintf(stderr, "reported: %v\n", err)
			return 125
		}
		fmt.Fprintf(stderr, "reported: %d\n", res.ExitStatus())
		return res.ExitStatus()
	}}
	switch words[0] {
	case "decline":
		return w, false
	case "usage":
		w.Err = errors.New("bad usage")
		return w, true
	case "stdin":
		w.Request = request(words[1:]...)
		w.Request.Stdin = true
		return w, true
	case "missing":
		w.Request = request("true")
		w.Request.Spec.Workspace = "/nonexistent-workspace"
		return w, true
	case "dir":
		w.Request = request("echo", dir)
		return w, true
	}
	w.Request = request(words...)
	return w, true
}

// TestWords: a request in Words is read by the Server's Front and ends with
// the status Front's Report gives, after Report wrote on the caller's
// standard error; its usage error is reported without a sandbox, a
// failed start through Report, and signals reach the command as from
// Start's caller. A host without Front, words Front leaves to the caller,
// and words with other fields or descriptors get no answer: the caller
// reads its words itself.
func TestWords(t *testing.T) {
	s, sock := serveWith(t, &handoff.Server{UID: os.Geteuid(), Front: front})
	_, bare := serve(t, os.Geteuid())
	trap := "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"
	cases := []struct {
		name    string
		sock    string
		req     handoff.Request
		signal  bool
		started bool
		status  int
		out     string // what the output must hold; "" for no answer
	}{
		{name: "exit status", sock: sock, req: handoff.Request{Words: []string{"sh", "-c", "echo err >&2; exit 3"}}, started: true, status: 3, out: "err\nreported: 3\n"},
		{name: "signal", sock: sock, req: handoff.Request{Words: []string{"sh", "-c", trap}}, signal: true, started: true, status: 7, out: "got TERM\nreported: 7\n"},
		{name: "usage error", sock: sock, req: handoff.Request{Words: []string{"usage"}}, status: 125, out: "reported: bad usage\n"},
		{name: "start fails", sock: sock, req: handoff.Request{Words: []string{"missing"}}, status: 125, out: "reported: "},
		{name: "declined", sock: sock, req: handoff.Request{Words: []string{"decline"}}},
		{name: "no Front", sock: bare, req: handoff.Request{Words: []string{"true"}}},
		{name: "words and a command", sock: sock, req: handoff.Request{Words: []string{"true"}, Argv: []string{"true"}}},
		{name: "words and a spec", sock: sock, req: handoff.Request{Words: []string{"true"}, Spec: sandbox.Spec{User: "root"}}},
		{name: "read as one with stdin, without its pipe", sock: sock, req: handoff.Request{Words: []string{"stdin", "true"}}},
		{name: "the caller's working directory", sock: sock, req: handoff.Request{Words: []string{"dir"}, Dir: "/the/caller's/dir"}, started: true, out: "/the/caller's/dir\nreported: 0\n"},
		{name: "a working directory without words", sock: sock, req: handoff.Request{Spec: sandbox.Spec{Limits: sandbox.DefaultLimits}, Argv: []string{"true"}, Dir: "/x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			io, out := stdio(t)
			conn := sendWords(t, tc.sock, tc.req, io.Stdout)
			started, reported, status, errText, err := handoff.ReadReply(conn)
			if tc.out == "" {
				if err == nil {
					t.Fatalf("answered (started %v, reported %v, status %d, error %q), want the connection closed unanswered", started, reported, status, errText)
				}
				if o := out(); o != "" {
					t.Errorf("unanswered words wrote %q", o)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if started != tc.started {
				t.Fatalf("first reply: started %v, reported %v, error %q; want started %v", started, reported, errText, tc.started)
			}
			if started {
				if tc.signal {
					for deadline := time.Now().Add(time.Minute); !strings.Contains(out(), "ready"); {
						if time.Now().After(deadline) {
							t.Fatalf("the command never got ready: %q", out())
						}
						time.Sleep(10 * time.Millisecond)
					}
					b, err := handoff.EncodeControl(int(unix.SIGTERM))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := conn.Write(b); err != nil {
						t.Fatal(err)
					}
				}
				if started, reported, status, errText, err = handoff.ReadReply(conn); err != nil {
					t.Fatal(err)
				}
			}
			if started || !reported || status != tc.status || errText != "" {
				t.Errorf("last reply: started %v, reported %v, status %d, error %q; want reported %d", started, reported, status, errText, tc.status)
			}
			if o := strings.TrimPrefix(out(), "ready\n"); !strings.HasPrefix(o, tc.out) {
				t.Errorf("output %q, want it to begin %q", o, tc.out)
			}
		})
	}
	if st := s.Stats(); st.Words != 3 || st.Served != 3 {
		t.Errorf("stats %+v, want three served, all in words", st)
	}
}

// TestWordsStdin: a caller in words that sends a pipe with them (Stdin)
// has its stdin copied into it when the words ask for it, and only then:
// the command reads the caller's input, whole and in order; without -i the
// host closes the pipe unread and the command reads nothing of it; a caller
// without a pipe gets -i left to its own front end; and a command that
// ends without reading the input ends the caller's run, whose stdin is
// still open.
func TestWordsStdin(t *testing.T) {
	s, sock := serveWith(t, &handoff.Server{UID: os.Geteuid(), Front: front})
	big := make([]byte, 3<<20) // well over a pipe's 64 KiB
	for i := range big {
		big[i] = byte(i * 7 / 5)
	}
	sum := sha256.Sum256(big)
	file := func(t *testing.T, data []byte) *os.File {
		t.Helper()
		f, err := os.CreateTemp(t.TempDir(), "in")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// A pipe whose write end stays open: an input that never ends.
	never, neverW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { never.Close(); neverW.Close() })
	cases := []struct {
		name   string
		words  []string
		stdin  *os.File
		status int
		out    string
	}{
		{"-i", []string{"stdin", "cat"}, file(t, []byte("typed\n")), 0, "typed\nreported: 0\n"},
		{"-i, 3 MiB", []string{"stdin", "sha256sum"}, file(t, big), 0, hex.EncodeToString(sum[:]) + "  -\nreported: 0\n"},
		{"without -i", []string{"sh", "-c", "cat; echo end"}, file(t, []byte("typed\n")), 0, "end\nreported: 0\n"},
		{"-i, input never read", []string{"stdin", "sh", "-c", "exit 4"}, never, 4, "reported: 4\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Stats().Words
			std, out := stdio(t)
			status, err := handoff.RunWords(context.Background(), sock, tc.words, "", tc.stdin, std.Stdout, std.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.status || out() != tc.out {
				t.Errorf("status %d, output %q; want %d, %q", status, out(), tc.status, tc.out)
			}
			if s.Stats().Words != before+1 {
				t.Errorf("served %d in words, want %d", s.Stats().Words, before+1)
			}
		})
	}
	std, _ := stdio(t)
	if _, err := handoff.RunWords(context.Background(), sock, []string{"stdin", "cat"}, "", nil, std.Stdout, std.Stderr); !errors.Is(err, handoff.ErrNoHost) {
		t.Errorf("-i without a pipe: %v, want ErrNoHost (left to the caller's front end)", err)
	}
}
