// Package supervisor keeps a long-lived sandbox (airlock sandbox create)
// alive in a background host process and serves `airlock sandbox exec`, `ls`
// and `rm` over a unix socket that only the sandbox's creator (or root) may
// use. Each connection carries one request, framed with execproto frames on
// stream 1: the client opens with a JSON Request, streams stdin, resize and
// signals; the server streams stdout and stderr and ends with a JSON reply.
// Flow control is the socket's own: a slow client blocks the server's writes,
// which stops acknowledging the executor, which pauses the command.
//
// A connect request (`airlock sandbox port-forward`) is the exception to the
// framing: the server connects to the TCP port inside the sandbox
// (sandbox.Connector) and answers with the reply frame, and from then on the
// unix connection carries the TCP connection's bytes raw, both ways, with
// half-closes passed on (shutdown(SHUT_WR) on either side); a reply with an
// error ends the connection instead.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Request is what a client asks.
type Request struct {
	Op      string          `json:"op"` // exec, info, destroy, connect
	Exec    *ExecRequest    `json:"exec,omitempty"`
	Connect *ConnectRequest `json:"connect,omitempty"`
}

// ConnectRequest asks for a TCP connection to a port inside the sandbox.
type ConnectRequest struct {
	Port int `json:"port"`
}

// ExecRequest is a command to run.
type ExecRequest struct {
	Argv    []string      `json:"argv"`
	Env     []string      `json:"env,omitempty"`
	Dir     string        `json:"dir,omitempty"`
	User    string        `json:"user,omitempty"`
	Stdin   bool          `json:"stdin,omitempty"`
	TTY     bool          `json:"tty,omitempty"`
	Rows    uint16        `json:"rows,omitempty"`
	Cols    uint16        `json:"cols,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	MaxOut  int64         `json:"max_output,omitempty"`
}

// Info is what `sandbox ls` shows.
type Info struct {
	sandbox.Info
	Usage sandbox.LiveUsage `json:"usage"`
}

// Reply ends a request.
type Reply struct {
	Result *sandbox.Result `json:"result,omitempty"`
	Info   *Info           `json:"info,omitempty"`
	Error  string          `json:"error,omitempty"`
	// PortClosed is set, with Error, when a connect found nothing
	// listening on the port (sandbox.ErrPortClosed).
	PortClosed bool `json:"port_closed,omitempty"`
}

// UsageFunc reports a sandbox's current usage; nil reports nothing.
type UsageFunc func() sandbox.LiveUsage

// Server serves one sandbox.
type Server struct {
	SB    sandbox.Sandbox
	Owner int // uid allowed besides root
	Usage UsageFunc
	Log   *slog.Logger
	// Defaults applied to exec requests that do not set them.
	Timeout   time.Duration
	MaxOutput int64

	conns sync.WaitGroup
}

const stream = 1

// Serve accepts connections until ctx ends, the sandbox is gone, or a client
// asks to destroy it. It returns after every connection has finished.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.SB.Done():
		}
		ln.Close()
	}()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			break
		}
		if !s.allowed(c) {
			c.Close()
			continue
		}
		s.conns.Add(1)
		go func() {
			defer s.conns.Done()
			defer c.Close()
			if s.handle(ctx, c) {
				cancel()
			}
		}()
	}
	s.conns.Wait()
	return nil
}

// allowed checks the peer's credentials: the socket's directory permissions
// already keep others out; this is the second check.
func (s *Server) allowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	return err == nil && cred != nil && (cred.Uid == 0 || int(cred.Uid) == s.Owner)
}

// handle serves one connection; it reports whether the client destroyed the sandbox.
func (s *Server) handle(ctx context.Context, c *net.UnixConn) bool {
	w := execproto.NewWriter(c)
	f, err := execproto.ReadFrame(c)
	if err != nil || f.Type != execproto.TOpen {
		return false
	}
	var req Request
	if err := execproto.Decode(f.Payload, &req); err != nil {
		reply(w, Reply{Error: err.Error()})
		return false
	}
	switch req.Op {
	case "info":
		info := Info{Info: s.SB.Info()}
		if s.Usage != nil {
			info.Usage = s.Usage()
		}
		reply(w, Reply{Info: &info})
	case "destroy":
		err := s.SB.Destroy(context.WithoutCancel(ctx))
		r := Reply{}
		if err != nil {
			r.Error = err.Error()
		}
		reply(w, r)
		return true
	case "exec":
		if req.Exec == nil {
			reply(w, Reply{Error: "exec: missing command"})
			return false
		}
		res, err := s.exec(ctx, c, w, req.Exec)
		if err != nil {
			reply(w, Reply{Error: err.Error()})
			return false
		}
		reply(w, Reply{Result: &res})
	case "connect":
		s.connect(ctx, c, w, req.Connect)
	default:
		reply(w, Reply{Error: fmt.Sprintf("unknown op %q", req.Op)})
	}
	return false
}

func reply(w *execproto.Writer, r Reply) {
	f, err := execproto.JSONFrame(execproto.TResult, stream, r)
	if err == nil {
		_ = w.Write(f)
	}
}

type chanWriter struct {
	w  *execproto.Writer
	ch byte
}

func (cw chanWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += execproto.ChunkSize {
		end := min(off+execproto.ChunkSize, len(p))
		if err := cw.w.Write(execproto.DataFrame(stream, cw.ch, p[off:end])); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

func (s *Server) exec(ctx context.Context, c *net.UnixConn, w *execproto.Writer, e *ExecRequest) (sandbox.Result, error) {
	cmd := sandbox.Command{
		Argv: e.Argv, Env: e.Env, Dir: e.Dir, User: e.User, TTY: e.TTY, Rows: e.Rows, Cols: e.Cols,
		Timeout: e.Timeout, MaxOutput: e.MaxOut,
		Stdout: chanWriter{w, execproto.Stdout}, Stderr: chanWriter{w, execproto.Stderr},
	}
	if cmd.Timeout == 0 {
		cmd.Timeout = s.Timeout
	}
	if cmd.MaxOutput == 0 {
		cmd.MaxOutput = s.MaxOutput
	}
	var stdinW *io.PipeWriter
	if e.Stdin {
		var r *io.PipeReader
		r, stdinW = io.Pipe()
		cmd.Stdin = r
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := s.SB.Start(ctx, cmd)
	if err != nil {
		return sandbox.Result{}, err
	}
	// Client frames: stdin, resize, signals. A client that goes away
	// cancels the command.
	go func() {
		defer func() {
			if stdinW != nil {
				stdinW.Close()
			}
		}()
		for {
			f, err := execproto.ReadFrame(c)
			if err != nil {
				cancel()
				return
			}
			switch f.Type {
			case execproto.TData:
				if stdinW != nil && f.Payload[0] == execproto.Stdin {
					if _, err := stdinW.Write(f.Payload[1:]); err != nil {
						stdinW = nil
					}
				}
			case execproto.TClose:
				if stdinW != nil {
					stdinW.Close()
					stdinW = nil
				}
			case execproto.TResize:
				rows, cols := execproto.ResizeSize(f)
				_ = p.Resize(rows, cols)
			case execproto.TSignal:
				_ = p.Signal(unix.Signal(f.Payload[0]))
			}
		}
	}()
	return p.Wait(ctx)
}

// connectTimeout bounds the dial of a connect request.
const connectTimeout = 30 * time.Second

// connect serves a connect request: it dials the port in the sandbox,
// replies, and relays bytes between c and the sandbox's connection until
// both directions are done or either side breaks.
func (s *Server) connect(ctx context.Context, c *net.UnixConn, w *execproto.Writer, req *ConnectRequest) {
	if req == nil {
		reply(w, Reply{Error: "connect: missing port"})
		return
	}
	cn, ok := s.SB.(sandbox.Connector)
	if !ok {
		reply(w, Reply{Error: "connect: this sandbox's backend cannot reach its ports"})
		return
	}
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	conn, err := cn.Connect(dctx, req.Port)
	cancel()
	if err != nil {
		reply(w, Reply{Error: err.Error(), PortClosed: errors.Is(err, sandbox.ErrPortClosed)})
		return
	}
	defer conn.Close()
	reply(w, Reply{})
	Relay(c, conn)
}

// relayBuffer is the size of Relay's copies: a sandbox connection's bulk
// chunk (execproto.BulkChunkSize), so a write is one frame.
const relayBuffer = execproto.BulkChunkSize

// halfCloser is a connection whose write side closes alone.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// Relay copies between a and b, both ways, until both directions have
// ended: the EOF of one side's reads becomes a half-close of the other's
// writes. When a copy fails (a reset, a sandbox gone), both connections are
// closed, which ends the other copy. a and b should support CloseWrite (a
// *net.UnixConn, a *net.TCPConn, a sandbox.Connector's conn); one that does
// not is closed whole at its EOF.
func Relay(a, b net.Conn) {
	var wg sync.WaitGroup
	var once sync.Once
	abort := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	pass := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.CopyBuffer(dst, src, make([]byte, relayBuffer)); err != nil {
			abort()
			return
		}
		if hc, ok := dst.(halfCloser); ok {
			if hc.CloseWrite() == nil {
				return
			}
		}
		abort()
	}
	wg.Add(2)
	go pass(a, b)
	go pass(b, a)
	wg.Wait()
}

// Client talks to a supervisor.
type Client struct {
	Path string
}

// ErrGone reports that no supervisor answers: the sandbox is gone.
var ErrGone = errors.New("sandbox is not running")

func (cl Client) dial(req Request) (*net.UnixConn, *execproto.Writer, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: cl.Path, Net: "unix"})
	if err != nil {
		return nil, nil, fmt.Errorf("%w (%w)", ErrGone, err)
	}
	w := execproto.NewWriter(c)
	f, err := execproto.JSONFrame(execproto.TOpen, stream, req)
	if err == nil {
		err = w.Write(f)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, w, nil
}

func readReply(c *net.UnixConn, stdout, stderr io.Writer) (Reply, error) {
	for {
		f, err := execproto.ReadFrame(c)
		if err != nil {
			return Reply{}, fmt.Errorf("supervisor: %w", err)
		}
		switch f.Type {
		case execproto.TData:
			out := stdout
			if f.Payload[0] == execproto.Stderr {
				out = stderr
			}
			if out != nil {
				_, _ = out.Write(f.Payload[1:])
			}
		case execproto.TResult:
			var r Reply
			if err := json.Unmarshal(f.Payload, &r); err != nil {
				return Reply{}, fmt.Errorf("supervisor: %w", err)
			}
			if r.Error != "" {
				return r, errors.New(r.Error)
			}
			return r, nil
		}
	}
}

// Info asks for the sandbox's description and usage.
func (cl Client) Info() (Info, error) {
	c, _, err := cl.dial(Request{Op: "info"})
	if err != nil {
		return Info{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r, err := readReply(c, nil, nil)
	if err != nil || r.Info == nil {
		return Info{}, errors.Join(err, errors.New("no info in reply"))
	}
	return *r.Info, nil
}

// Destroy asks the supervisor to destroy the sandbox and exit.
func (cl Client) Destroy() error {
	c, _, err := cl.dial(Request{Op: "destroy"})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	_, err = readReply(c, nil, nil)
	return err
}

// ErrPortClosed reports a connect to a port nothing in the sandbox
// listens on.
var ErrPortClosed = errors.New("nothing listens on the port")

// Connect opens a TCP connection to port inside the sandbox and returns it:
// the unix connection to the supervisor, which relays it (it supports
// CloseWrite and deadlines). A port nothing listens on matches
// ErrPortClosed.
func (cl Client) Connect(port int) (*net.UnixConn, error) {
	c, _, err := cl.dial(Request{Op: "connect", Connect: &ConnectRequest{Port: port}})
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(connectTimeout + 5*time.Second))
	f, err := execproto.ReadFrame(c)
	if err == nil && f.Type != execproto.TResult {
		err = fmt.Errorf("%w: got %s, want result", execproto.ErrFrame, f.Type)
	}
	var r Reply
	if err == nil {
		err = json.Unmarshal(f.Payload, &r)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	if r.Error != "" {
		c.Close()
		if r.PortClosed {
			return nil, fmt.Errorf("port %d: %w", port, ErrPortClosed)
		}
		return nil, errors.New(r.Error)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// Session is an exec in progress.
type Session struct {
	c *net.UnixConn
	w *execproto.Writer
}

// Exec starts a command. Stdin, if not nil, is copied to it.
func (cl Client) Exec(e ExecRequest, stdin io.Reader) (*Session, error) {
	e.Stdin = stdin != nil
	c, w, err := cl.dial(Request{Op: "exec", Exec: &e})
	if err != nil {
		return nil, err
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(chanWriter{w, execproto.Stdin}, stdin)
			_ = w.Write(execproto.CloseFrame(stream, execproto.Stdin))
		}()
	}
	return &Session{c: c, w: w}, nil
}

// Resize changes the terminal size.
func (s *Session) Resize(rows, cols uint16) error {
	return s.w.Write(execproto.ResizeFrame(stream, rows, cols))
}

// Signal forwards a signal to the command.
func (s *Session) Signal(sig unix.Signal) error {
	return s.w.Write(execproto.Frame{Type: execproto.TSignal, Stream: stream, Payload: []byte{byte(sig)}})
}

// Wait copies output until the command ends and returns its result.
func (s *Session) Wait(stdout, stderr io.Writer) (sandbox.Result, error) {
	defer s.c.Close()
	r, err := readReply(s.c, stdout, stderr)
	if err != nil {
		return sandbox.Result{}, err
	}
	if r.Result == nil {
		return sandbox.Result{}, errors.New("supervisor: no result in reply")
	}
	return *r.Result, nil
}
