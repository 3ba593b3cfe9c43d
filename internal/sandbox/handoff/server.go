package handoff

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Server runs handed-off commands in sandboxes of Backend (a pool, for the
// point of it). The zero value is not usable: Backend is required.
type Server struct {
	// Backend makes the sandboxes; each is destroyed after its one
	// command.
	Backend sandbox.Backend
	// UID is the only uid served: the socket's owner, which Listen makes
	// the process's own. Connections of any other uid are closed unanswered.
	UID int
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Prepare brings a sandbox to readiness as a request's Prepare.How
	// says; it runs in the sandbox only. Nil: requests with a Prepare are
	// not taken (the caller makes its own sandbox).
	Prepare func(ctx context.Context, sb sandbox.Sandbox, how json.RawMessage) error
	// Front reads a request in Words as the front end would (package
	// sandboxcli), relative host paths from dir (Request.Dir); ok false
	// leaves the words to the caller's own front end (the connection is
	// closed unanswered). Nil: requests in Words are not taken.
	Front func(words []string, dir string) (w Words, ok bool)

	served  atomic.Int64
	refused atomic.Int64
	warm    atomic.Int64
	inWords atomic.Int64
}

// Words is a request in Words as the front end reads it (Server.Front).
type Words struct {
	// Request is what the words ask for, with Words, Stdin and Prepare
	// absent; Err, when not nil, is what is wrong with them, reported
	// before any sandbox is made.
	Request Request
	Err     error
	// Report writes on the caller's standard error what the front end
	// would print for the command's result, or for err when not nil (res
	// is then zero), and returns the front end's exit status.
	Report func(stderr io.Writer, res sandbox.Result, err error) int
}

// Stats count what a Server did.
type Stats struct {
	// Served are commands started in a sandbox; Refused connections of
	// another uid; Warm the served commands whose sandbox was made and
	// prepared ahead (Request.Prepare's pool); Words the served commands
	// whose request came in Words.
	Served, Refused, Warm, Words int64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{Served: s.served.Load(), Refused: s.refused.Load(), Warm: s.warm.Load(), Words: s.inWords.Load()}
}

// warmer is a Backend that keeps prepared sandboxes (pool.Pool).
type warmer interface {
	Warm(name string, spec sandbox.Spec, n int, prepare func(context.Context, sandbox.Sandbox) error) error
	Take(name string) (sandbox.Sandbox, bool)
}

// prepared returns a sandbox of req's spec brought to readiness as
// req.Prepare says: one made and prepared ahead under its pool's name
// when the Backend keeps them (warm true), else one made and prepared now.
func (s *Server) prepared(ctx context.Context, req Request) (sb sandbox.Sandbox, warm bool, err error) {
	how := req.Prepare.How
	prepare := func(ctx context.Context, sb sandbox.Sandbox) error { return s.Prepare(ctx, sb, how) }
	if w, ok := s.Backend.(warmer); ok && req.Prepare.Size > 0 && req.Prepare.Pool != "" {
		// Sandboxes of one template but other specs (--env, limits) are
		// pools of their own: Warm would empty the name's on each change.
		// The spec's binary form: one encoding per spec.
		spec, err := frame(func(e *execproto.Encoder) { appendSpec(e, &req.Spec) })
		if err != nil {
			return nil, false, err
		}
		sum := sha256.Sum256(spec)
		name := req.Prepare.Pool + " " + hex.EncodeToString(sum[:8])
		if err := w.Warm(name, req.Spec, req.Prepare.Size, prepare); err != nil {
			// A spec the pool cannot hold: made and prepared cold.
			s.log().Debug("handoff: no warm pool", "pool", req.Prepare.Pool, "err", err)
		} else if sb, ok := w.Take(name); ok {
			return sb, true, nil
		}
	}
	if sb, err = s.Backend.Create(ctx, req.Spec); err != nil {
		return nil, false, err
	}
	if err := prepare(ctx, sb); err != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sb.Destroy(dctx)
		return nil, false, err
	}
	return sb, false, nil
}

func (s *Server) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

// Listen binds the socket at path, mode 0600, replacing a stale one (a
// socket nobody listens on). A live host already there is an error.
func Listen(path string) (*net.UnixListener, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: a sandbox host already listens there", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen on %s: remove the stale socket: %w", path, err)
	}
	// The umask makes the socket 0600 from its creation: a chmod after
	// bind would leave a moment in which another user could connect.
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return ln, nil
}

// Serve answers connections on ln until ctx ends, then closes ln and waits
// for the commands in flight (which ctx's end kills).
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			log.Warn("handoff: accept", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		wg.Go(func() {
			defer conn.Close()
			if err := s.serve(ctx, conn); err != nil {
				log.Warn("handoff: command", "err", err)
			}
		})
	}
}

// serve runs one connection's command.
func (s *Server) serve(ctx context.Context, conn *net.UnixConn) error {
	uid, err := peerUID(conn)
	if err != nil {
		return fmt.Errorf("read the caller's credentials: %w", err)
	}
	if uid != s.UID {
		// Why: the caller's streams and sandbox would run under this
		// host's user; only that user may use it.
		s.refused.Add(1)
		return fmt.Errorf("refused a caller of uid %d", uid)
	}
	req, files, r, err := readRequest(conn)
	for _, f := range files {
		defer f.Close()
	}
	if err != nil {
		return err
	}
	answer := func(rep reply) error {
		b, err := encodeReply(&rep)
		if err == nil {
			_, err = conn.Write(b)
		}
		return err
	}
	fail := func(err error) error {
		_ = answer(reply{Error: err.Error()})
		return nil // the caller reports it
	}
	// report ends a request in Words with its result, or its error, as
	// the front end would have reported them; nil for any other request.
	var report func(res sandbox.Result, err error)
	if req.Words == nil && req.Dir != "" {
		return errors.New("bad request: a working directory without words")
	}
	if req.Words != nil {
		w, err := s.words(req, len(files))
		if err != nil {
			return err // closed unanswered: the caller's front end reads them
		}
		report = func(res sandbox.Result, err error) {
			_ = answer(reply{Reported: true, Status: w.Report(files[1], res, err)})
		}
		if w.Err != nil {
			report(sandbox.Result{}, w.Err)
			return nil
		}
		if len(files) == 3 && !w.Request.Stdin {
			// The pipe of a caller that could not tell whether the words
			// ask for stdin: closed unread, as the command reads none.
			files[2].Close()
			files = files[:2]
		}
		req = w.Request
		fail = func(err error) error {
			// In the words of the caller's own hand-off: the text alone,
			// as Error carries it.
			report(sandbox.Result{}, errors.New(err.Error()))
			return nil
		}
	}
	want := 2
	if req.Stdin {
		want = 3
	}
	if len(files) != want || len(req.Argv) == 0 {
		return fmt.Errorf("bad request: %d descriptors, %d words of command", len(files), len(req.Argv))
	}
	if req.Prepare != nil && s.Prepare == nil {
		// Closed unanswered: the caller prepares a sandbox of its own.
		return errors.New("a request to prepare its sandbox: this host prepares none")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sb sandbox.Sandbox
	warm := false
	if req.Prepare != nil {
		sb, warm, err = s.prepared(ctx, req)
	} else {
		sb, err = s.Backend.Create(ctx, req.Spec)
	}
	if err != nil {
		return fail(err)
	}
	// After the answer, off the caller's critical path; never reused.
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		_ = sb.Destroy(dctx)
	}()
	cmd := sandbox.Command{Argv: req.Argv, Stdout: files[0], Stderr: files[1], Timeout: req.Timeout, MaxOutput: req.MaxOutput}
	if req.Stdin {
		cmd.Stdin = files[2]
	}
	p, err := sb.Start(ctx, cmd)
	if err != nil {
		return fail(err)
	}
	s.served.Add(1)
	if warm {
		s.warm.Add(1)
	}
	if report != nil {
		s.inWords.Add(1)
	}
	if err := answer(reply{Started: true, Stdin: report != nil && req.Stdin}); err != nil {
		return nil // the caller is gone: cancel kills the command
	}
	// The caller's signals; its connection's end kills the command. The
	// connection is closed once the answer is out, which ends the reader,
	// before the sandbox is destroyed.
	signalsDone := make(chan struct{})
	defer func() {
		conn.Close()
		<-signalsDone
	}()
	go func() {
		defer close(signalsDone)
		defer cancel()
		for {
			var c control
			b, err := readFrame(r, maxControl)
			if err != nil || decodeControl(b, &c) != nil {
				return
			}
			if c.Signal > 0 && c.Signal < 65 {
				_ = p.Signal(unix.Signal(c.Signal))
			}
		}
	}()
	res, err := p.Wait(ctx)
	if err != nil {
		return fail(err)
	}
	if report != nil {
		report(res, nil)
		return nil
	}
	_ = answer(reply{Result: &res})
	return nil
}

// words reads req, a request in Words with n descriptors, through Front.
// An error leaves the words to the caller's own front end.
func (s *Server) words(req Request, n int) (Words, error) {
	switch {
	case s.Front == nil:
		return Words{}, errors.New("a request in words: this host reads none")
	case len(req.Words) == 0 || n != 2 && !(n == 3 && req.Stdin) || req.Argv != nil || req.Prepare != nil || req.Timeout != 0 || req.MaxOutput != 0 || !reflect.ValueOf(req.Spec).IsZero():
		// Words are the whole request, with standard output and error
		// and, with Stdin, the pipe of the caller's stdin.
		return Words{}, fmt.Errorf("bad request in words: %d descriptors, other fields set", n)
	}
	w, ok := s.Front(req.Words, req.Dir)
	switch {
	case !ok:
		return Words{}, errors.New("a request in words that the caller's front end reads itself")
	case w.Request.Words != nil || w.Request.Dir != "" || w.Request.Prepare != nil:
		return Words{}, errors.New("a request in words read as one the host cannot take")
	case w.Request.Stdin && !req.Stdin:
		// -i from a caller that sent no pipe (one that predates them,
		// or whose stdin is closed): its own front end reads the words.
		return Words{}, errors.New("a request in words for stdin, without its pipe")
	}
	return w, nil
}

// readRequest reads the request and the descriptors that came with its
// first byte; r reads what follows it on conn.
func readRequest(conn *net.UnixConn) (req Request, files []*os.File, r *bufio.Reader, err error) {
	first := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(first, oob)
	if err != nil || n != 1 {
		return req, nil, nil, fmt.Errorf("read a request: %w", errors.Join(err, io.ErrUnexpectedEOF))
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return req, nil, nil, fmt.Errorf("read a request's descriptors: %w", err)
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			if len(files) == 2 {
				// The third is stdin, a pipe the caller made for this
				// command alone: non-blocking, so that its reads end when
				// it is closed after the command (os.NewFile polls it).
				_ = unix.SetNonblock(fd, true)
			}
			files = append(files, os.NewFile(uintptr(fd), "caller"))
		}
	}
	if first[0] == '{' {
		// Closed unanswered: the caller starts its own sandbox.
		return req, files, nil, errors.New("read a request: a JSON request, from a front end older than this host (restart the host after an upgrade)")
	}
	r = bufio.NewReader(io.MultiReader(bytes.NewReader(first), conn))
	b, err := readFrame(r, maxRequest)
	if err == nil {
		err = decodeRequest(b, &req)
	}
	if err != nil {
		return req, files, nil, fmt.Errorf("read a request: %w", err)
	}
	return req, files, r, nil
}
