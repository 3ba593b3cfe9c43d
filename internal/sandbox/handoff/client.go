package handoff

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Stdio are the caller's streams for the command. Stdout and Stderr are
// passed to the host as they are; Stdin, when not nil, is copied into a
// pipe whose read end is passed (so the host never reads the caller's
// terminal itself, and stops reading with the command).
type Stdio struct {
	Stdin          io.Reader
	Stdout, Stderr *os.File
}

// Process is a command running in a host's sandbox.
type Process struct {
	conn *net.UnixConn
	r    *bufio.Reader

	// mu orders the signals' writes: they may come from any goroutine.
	mu sync.Mutex
}

// Start hands req to the host listening at socket and returns once the
// command runs. ErrNoHost (nothing ran) means: no socket, a stale one, a
// socket or host of another uid, or a host that closed the connection
// without an answer. Any other error is the host's failure to make the
// sandbox or start the command, in the words the caller's own start would
// have used.
func Start(ctx context.Context, socket string, req Request, stdio Stdio) (*Process, error) {
	req.Stdin = stdio.Stdin != nil
	conn, err := dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	p := &Process{conn: conn, r: bufio.NewReaderSize(conn, 512)}
	started := false
	defer func() {
		if !started {
			conn.Close()
		}
	}()
	fds, stdinR, stdinW, err := withStdin([]int{int(stdio.Stdout.Fd()), int(stdio.Stderr.Fd())}, stdio.Stdin != nil)
	if err != nil {
		return nil, err
	}
	defer stdinR.Close() // the host holds its own copy
	defer func() {
		if !started {
			stdinW.Close()
		}
	}()
	b, err := EncodeRequest(&req)
	if err != nil {
		return nil, fmt.Errorf("hand off to the sandbox host: %w", err)
	}
	if err := sendRequest(conn, b, fds); err != nil {
		return nil, ErrNoHost
	}
	var rep reply
	if err := p.read(&rep); err != nil {
		// Refused, or gone before it did anything.
		return nil, ErrNoHost
	}
	switch {
	case rep.Error != "":
		return nil, errors.New(rep.Error)
	case !rep.Started:
		return nil, errors.New("sandbox host: unexpected answer to a command")
	}
	started = true
	if stdinW != nil {
		copyIn(stdinW, stdio.Stdin)
	}
	return p, nil
}

// withStdin returns fds with, when stdin is set, the read end of a new pipe
// appended for the command's stdin, and the pipe's ends (nil without
// stdin; closing a nil *os.File does nothing). The caller closes r once
// the request is sent (the host holds its own copy) and w unless it hands
// it to copyIn.
func withStdin(fds []int, stdin bool) (_ []int, r, w *os.File, err error) {
	if !stdin {
		return fds, nil, nil, nil
	}
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, nil, fmt.Errorf("hand off to the sandbox host: %w", err)
	}
	return append(fds, int(r.Fd())), r, w, nil
}

// copyIn copies from into w, the write end of the command's stdin, in the
// background, and closes w: it ends with the caller's input or with the
// command (the host closes the read end); a caller that exits first ends
// it too.
func copyIn(w *os.File, from io.Reader) {
	go func() {
		_, _ = io.Copy(w, from)
		w.Close()
	}()
}

// sendRequest writes the framed request b on conn with fds, in one
// message: the host reads them with its first byte before decoding the
// rest, and is woken once (a second write cost the host a second wake-up
// while the caller waited). What one sendmsg left of b follows it.
func sendRequest(conn *net.UnixConn, b []byte, fds []int) error {
	n, _, err := conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	if err == nil && n < len(b) {
		_, err = conn.Write(b[n:])
	}
	return err
}

// dial connects to the host at socket, after checking that the socket and
// the process behind it are this user's.
func dial(ctx context.Context, socket string) (*net.UnixConn, error) {
	var st unix.Stat_t
	if err := unix.Stat(socket, &st); err != nil || int(st.Uid) != os.Geteuid() {
		return nil, ErrNoHost
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, ErrNoHost
	}
	conn := c.(*net.UnixConn)
	uid, err := peerUID(conn)
	if err != nil || uid != os.Geteuid() {
		conn.Close()
		return nil, ErrNoHost
	}
	return conn, nil
}

// peerUID returns the uid of the process at the other end of conn, as the
// kernel recorded it when the connection was made.
func peerUID(conn *net.UnixConn) (int, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Uid), nil
}

// Signal forwards sig to the command.
func (p *Process) Signal(sig unix.Signal) error {
	b, err := encodeControl(control{Signal: int(sig)})
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err = p.conn.Write(b)
	return err
}

// read reads the host's next reply.
func (p *Process) read(rep *reply) error {
	b, err := readFrame(p.r, maxReply)
	if err != nil {
		return err
	}
	return decodeReply(b, rep)
}

// Wait waits for the command's result and closes the connection;
// cancelling ctx closes it at once, which kills the command.
func (p *Process) Wait(ctx context.Context) (sandbox.Result, error) {
	defer p.conn.Close()
	stop := context.AfterFunc(ctx, func() { p.conn.Close() })
	defer stop()
	var rep reply
	if err := p.read(&rep); err != nil {
		if ctx.Err() != nil {
			return sandbox.Result{}, ctx.Err()
		}
		return sandbox.Result{}, fmt.Errorf("sandbox host: the connection ended before the command's result: %w", err)
	}
	switch {
	case rep.Error != "":
		return sandbox.Result{}, errors.New(rep.Error)
	case rep.Result == nil:
		return sandbox.Result{}, errors.New("sandbox host: unexpected answer instead of the command's result")
	}
	return *rep.Result, nil
}

// RunWords hands words, a command line of `airlock sandbox run` after
// "run", to the host at socket unread (Request.Words), as the front end's
// entry before the Go runtime does (internal/thinentry, which is not Go):
// the host reads them as the front end would, runs the command with stdout
// and stderr as its streams, writes what the front end would print on
// stderr, and answers with the exit status, returned here. Relative host
// paths in words are read from dir (Request.Dir; "" leaves such words to
// the caller). With stdin not nil, a pipe goes with the words, and stdin
// is copied into it if the host says the command reads it (-i). ErrNoHost means that nothing ran: no
// host, or one that left the words to the caller. It is the Go form of
// that client, which the host's side is tested with; it forwards no
// signals.
func RunWords(ctx context.Context, socket string, words []string, dir string, stdin, stdout, stderr *os.File) (int, error) {
	conn, err := dial(ctx, socket)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := Request{Words: words, Dir: dir, Stdin: stdin != nil}
	fds, stdinR, stdinW, err := withStdin([]int{int(stdout.Fd()), int(stderr.Fd())}, stdin != nil)
	if err != nil {
		return 0, err
	}
	defer stdinR.Close()              // the host holds its own copy
	defer func() { stdinW.Close() }() // nil once handed to copyIn
	b, err := EncodeRequest(&req)
	if err != nil {
		return 0, fmt.Errorf("hand off to the sandbox host: %w", err)
	}
	if err := sendRequest(conn, b, fds); err != nil {
		return 0, ErrNoHost
	}
	p := &Process{conn: conn, r: bufio.NewReaderSize(conn, 512)}
	for started := false; ; started = true {
		var rep reply
		err := p.read(&rep)
		switch {
		case err != nil && !started:
			return 0, ErrNoHost
		case err != nil:
			return 0, fmt.Errorf("sandbox host: the connection ended before the command's result: %w", err)
		case rep.Reported:
			return rep.Status, nil
		case !rep.Started || started || rep.Stdin && stdinW == nil:
			return 0, errors.New("sandbox host: unexpected answer to a command in words")
		}
		if rep.Stdin {
			copyIn(stdinW, stdin)
			stdinW = nil
		}
	}
}
