package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// sudoUsage is the sudo command's help.
const sudoUsage = `usage: sudo [-E] [-u USER] [--] COMMAND [ARG...]
Runs COMMAND as root (or USER) of this sandbox, inside its confinement.
  -E  keep the environment (else only TERM, LANG and LC_*)
  -u  the user to run as (a name or #uid)
-n, -H, -S and -k are accepted and change nothing.
`

// sudoKept are the variables a sudo without -E passes on (sudo's
// env_reset keeps these, and the executor sets PATH, HOME, USER and
// LOGNAME for the target user).
var sudoKept = []string{"TERM", "COLORTERM", "LANG", "LANGUAGE", "DISPLAY"}

// sudoCommand is the sudo command: the executor's binary called by that
// name inside the sandbox (execproto.SudoHelper). It asks the executor to
// run its command and exits with the command's status: 1 when the
// sandbox has no sudo or the request failed, 127 for a command not found.
func sudoCommand(args []string, stderr io.Writer) int {
	req := execproto.SudoRequest{}
	keepEnv := false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		a := args[0]
		args = args[1:]
		switch {
		case a == "--":
		case a == "-E" || a == "--preserve-env":
			keepEnv = true
		case a == "-n" || a == "-H" || a == "-S" || a == "-k" || a == "--non-interactive" || a == "--set-home":
		case a == "-u" || a == "--user":
			if len(args) == 0 {
				fmt.Fprint(stderr, sudoUsage)
				return 1
			}
			req.User, args = args[0], args[1:]
		case strings.HasPrefix(a, "-u"):
			req.User = a[2:]
		case strings.HasPrefix(a, "--user="):
			req.User = strings.TrimPrefix(a, "--user=")
		case a == "-h" || a == "--help":
			fmt.Fprint(stderr, sudoUsage)
			return 0
		default:
			fmt.Fprintf(stderr, "sudo: unknown option %s\n%s", a, sudoUsage)
			return 1
		}
		if a == "--" {
			break
		}
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, sudoUsage)
		return 1
	}
	req.User = strings.TrimPrefix(req.User, "#")
	req.Argv = args
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME" || k == "USER" || k == "LOGNAME" || k == "PATH":
			// The target user's, as the executor sets them.
		case keepEnv || strings.HasPrefix(k, "LC_") || contains(sudoKept, k):
			req.Env = append(req.Env, kv)
		}
	}
	req.Dir, _ = os.Getwd()
	rep, err := sudoAsk(req)
	if err != nil {
		fmt.Fprintf(stderr, "sudo: %v\n", err)
		return 1
	}
	if rep.Error != "" {
		fmt.Fprintf(stderr, "sudo: %s\n", rep.Error)
	}
	return rep.Status
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sudoAsk sends req with this process's standard streams to the executor
// and waits for its reply.
func sudoAsk(req execproto.SudoRequest) (execproto.SudoReply, error) {
	var rep execproto.SudoReply
	line, err := json.Marshal(req)
	if err != nil {
		return rep, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return rep, err
	}
	conn := os.NewFile(uintptr(fd), "sudo")
	defer conn.Close()
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: execproto.SudoSocket}); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return rep, errors.New("this sandbox does not allow sudo (its policy's sandbox.sudo is off)")
		}
		return rep, fmt.Errorf("connect to %s: %w", execproto.SudoSocket, err)
	}
	// The streams go with the request's first byte; the rest follows.
	if err := unix.Sendmsg(fd, line[:1], unix.UnixRights(0, 1, 2), nil, 0); err != nil {
		return rep, fmt.Errorf("send the request: %w", err)
	}
	// A write the executor refused early (it answers why) is read below.
	_, werr := conn.Write(append(line[1:], '\n'))
	b, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return rep, fmt.Errorf("no answer from the sandbox's executor: %w", errors.Join(werr, err))
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("answer: %w", err)
	}
	return rep, nil
}

// listenSudo binds the sudo socket (Setup.Sudo), before listenEvents makes
// its directory read-only. Every user of the sandbox may connect: sudo
// asks no password, as E2B's does not.
func (e *executor) listenSudo() error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sudo socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: execproto.SudoSocket}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("bind sudo socket: %w", err)
	}
	if err := unix.Chmod(execproto.SudoSocket, 0o666); err != nil {
		unix.Close(fd)
		return fmt.Errorf("sudo socket: %w", err)
	}
	if err := unix.Listen(fd, 64); err != nil {
		unix.Close(fd)
		return fmt.Errorf("listen on sudo socket: %w", err)
	}
	ln := os.NewFile(uintptr(fd), "sudo")
	rc, err := ln.SyscallConn()
	if err != nil {
		ln.Close()
		return err
	}
	go acceptLoop(rc, func(nfd int) { go e.serveSudo(nfd) })
	return nil
}

// serveSudo runs one sudo request: reads it and the caller's streams,
// starts the command as the executor starts any (the process thread's
// confinement, the user's ids), and answers its status. The connection
// ending first (the sudo command killed) kills the command's tree.
func (e *executor) serveSudo(nfd int) {
	// Blocking: the caller's request comes at its pace, and this
	// goroutine has nothing else to do.
	if err := unix.SetNonblock(nfd, false); err != nil {
		unix.Close(nfd)
		return
	}
	conn := os.NewFile(uintptr(nfd), "sudo-conn")
	defer conn.Close()
	reply := func(r execproto.SudoReply) {
		b, _ := json.Marshal(r)
		_, _ = conn.Write(append(b, '\n'))
	}
	fds, req, err := readSudo(conn)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if err != nil {
		reply(execproto.SudoReply{Status: 1, Error: err.Error()})
		return
	}
	u, err := e.lookupUser(req.User)
	if req.User == "" {
		u, err = e.lookupUser("root")
	}
	if err != nil {
		reply(execproto.SudoReply{Status: 1, Error: err.Error()})
		return
	}
	env := e.commandEnv(req.Env, u, false)
	argv0, err := lookPath(req.Argv[0], env)
	if err != nil {
		reply(execproto.SudoReply{Status: 127, Error: err.Error()})
		return
	}
	dir := req.Dir
	if fi, err := os.Stat(dir); dir == "" || err != nil || !fi.IsDir() {
		dir = u.Home
	}
	sys := &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}, NoSetGroups: e.setup.NoSetGroups},
		Pdeathsig:  syscall.SIGKILL,
		PidFD:      new(int),
	}
	e.beginStart()
	pid, err := e.pt.forkExec(argv0, req.Argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])}, Sys: sys})
	if err != nil {
		e.abortStart()
		status := 126
		if errors.Is(err, syscall.ENOENT) {
			status = 127
		}
		reply(execproto.SudoReply{Status: status, Error: fmt.Sprintf("%s: %v", req.Argv[0], err)})
		return
	}
	p := e.register(pid)
	if pidfd, err := pidFile(*sys.PidFD); err == nil {
		go e.watchExit(p, pidfd)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	fds = nil
	// The caller sends nothing more: a read that ends means it is gone.
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn)
		close(gone)
	}()
	var info exitInfo
	select {
	case info = <-p.done:
	case <-gone:
		e.pt.killTree(pid)
		info = <-p.done
	}
	status := info.status.ExitStatus()
	if info.status.Signaled() {
		status = 128 + int(info.status.Signal())
	}
	reply(execproto.SudoReply{Status: status})
}

// readSudo reads a sudo request: the caller's three streams with its first
// byte, then the rest of its line.
func readSudo(conn *os.File) ([]int, execproto.SudoRequest, error) {
	var req execproto.SudoRequest
	nfd := int(conn.Fd())
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := unix.Recvmsg(nfd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, req, fmt.Errorf("read the request: %w", err)
	}
	if n != 1 {
		return nil, req, errors.New("read the request: the connection ended before it")
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if len(fds) != 3 {
		return fds, req, errors.New("the request came without its three standard streams")
	}
	rest, err := bufio.NewReader(io.LimitReader(conn, execproto.MaxSudoRequest)).ReadBytes('\n')
	if err != nil {
		return fds, req, fmt.Errorf("read the request: %w", err)
	}
	if err := json.Unmarshal(append(buf, rest...), &req); err != nil {
		return fds, req, fmt.Errorf("request: %w", err)
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return fds, req, errors.New("no command")
	}
	if req.Dir != "" && !filepath.IsAbs(req.Dir) {
		req.Dir = ""
	}
	return fds, req, nil
}
