package executor

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"golang.org/x/sys/unix"
)

// stream is one request and everything that flows on it.
type stream struct {
	e   *executor
	id  uint32
	req execproto.Request

	out, errc *execproto.Credit // send windows of stdout and stderr

	// stdin receives host data; its consumer acknowledges what it consumed.
	stdin *execproto.Inbox

	mu        sync.Mutex
	stdinDone bool          // guarded by mu: Close(stdin) received
	p         *proc         // guarded by mu: the running process, if any
	pty       *os.File      // guarded by mu: terminal master, if any
	cancelled bool          // guarded by mu
	signals   []unix.Signal // guarded by mu: signals that arrived before the process started
	size      *unix.Winsize // guarded by mu: the latest resize that arrived before the terminal was open
	killedFor string        // guarded by mu: outcome forced by a limit

	// stop is closed (once, by kill) when the host cancels the stream; a
	// watch, which has no process to kill, ends on it.
	stop     chan struct{}
	stopOnce sync.Once
}

func newStream(e *executor, id uint32, req execproto.Request) *stream {
	return &stream{
		e: e, id: id, req: req,
		out: execproto.NewCredit(execproto.Window), errc: execproto.NewCredit(execproto.Window),
		stdin: execproto.NewInbox(),
		stop:  make(chan struct{}),
	}
}

func (s *stream) handle(f execproto.Frame) error {
	switch f.Type {
	case execproto.TData:
		if f.Payload[0] != execproto.Stdin {
			return fmt.Errorf("%w: data for channel %d from host", execproto.ErrFrame, f.Payload[0])
		}
		s.mu.Lock()
		done := s.stdinDone
		s.mu.Unlock()
		if done {
			return fmt.Errorf("%w: stdin data after close", execproto.ErrFrame)
		}
		if err := s.stdin.Put(execproto.Stdin, f.Payload[1:]); err != nil {
			return fmt.Errorf("%w: stdin: %w", execproto.ErrFrame, err)
		}
	case execproto.TClose:
		if f.Payload[0] == execproto.Stdin {
			s.mu.Lock()
			if !s.stdinDone {
				s.stdinDone = true
				s.stdin.Close()
			}
			s.mu.Unlock()
		}
	case execproto.TAck:
		c, n := execproto.AckCredit(f)
		var err error
		switch c {
		case execproto.Stdout:
			err = s.out.Add(n)
		case execproto.Stderr:
			err = s.errc.Add(n)
		}
		return err
	case execproto.TSignal:
		s.mu.Lock()
		p := s.p
		if p == nil {
			s.signals = append(s.signals, unix.Signal(f.Payload[0]))
		}
		s.mu.Unlock()
		if p != nil {
			s.e.pt.kill(p.pid, unix.Signal(f.Payload[0]))
		}
	case execproto.TResize:
		rows, cols := execproto.ResizeSize(f)
		s.mu.Lock()
		pty := s.pty
		if pty == nil {
			// Not open yet: the terminal opens with this size.
			s.size = &unix.Winsize{Row: rows, Col: cols}
		}
		s.mu.Unlock()
		if pty != nil {
			_ = unix.IoctlSetWinsize(int(pty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
		}
	case execproto.TCancel:
		s.kill("")
	default:
		return fmt.Errorf("%w: unexpected %s on stream %d", execproto.ErrFrame, f.Type, f.Stream)
	}
	return nil
}

// kill ends the stream's process tree; reason, if set, becomes the outcome.
func (s *stream) kill(reason string) {
	s.mu.Lock()
	s.cancelled = true
	if reason != "" && s.killedFor == "" {
		s.killedFor = reason
	}
	p := s.p
	s.mu.Unlock()
	s.stopOnce.Do(func() { close(s.stop) })
	if p != nil {
		s.e.pt.killTree(p.pid)
	}
}

func (s *stream) run() {
	defer s.e.endStream(s.id)
	var res execproto.Result
	if err := s.req.Validate(); err != nil {
		res = errResult(err)
	} else {
		switch s.req.Op {
		case execproto.OpExec:
			res = s.exec()
		case execproto.OpWatch:
			res = s.watch()
		case execproto.OpDiskUsage:
			res = diskUsage(s.e.setup.User.Home)
		default:
			res = s.file()
		}
	}
	s.out.Close()
	s.errc.Close()
	s.stdin.Close()
	f, err := execproto.JSONFrame(execproto.TResult, s.id, res)
	if err != nil {
		f, _ = execproto.JSONFrame(execproto.TResult, s.id, errResult(err))
	}
	_ = s.e.w.Write(f)
}

func errResult(err error) execproto.Result {
	r := execproto.Result{Outcome: "", ExitCode: -1, Error: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		r.Errno = unix.ErrnoName(errno)
	}
	return r
}

// outputGrace is how long output is still collected after the command's main
// process exited, for background children that keep its pipes open.
const outputGrace = 100 * time.Millisecond

func (s *stream) exec() execproto.Result {
	req := &s.req
	u, err := s.e.lookupUser(req.User)
	if err != nil {
		return errResult(err)
	}
	env := s.e.commandEnv(req.Env, u, req.TTY)
	dir := req.Dir
	if dir == "" {
		dir = workspacePath
	}
	argv0, err := lookPath(req.Argv[0], env)
	if err != nil {
		r := errResult(err)
		r.Outcome, r.ExitCode, r.NotStarted = execproto.OutcomeExited, 127, execproto.CommandNotFound
		return r
	}

	var files [3]*os.File // child's stdin, stdout, stderr
	var parents []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	sys := &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}, NoSetGroups: s.e.setup.NoSetGroups},
		Pdeathsig:  syscall.SIGKILL,
		PidFD:      new(int),
	}
	var outR, errR *os.File
	if req.TTY {
		master, slave, err := openPTY(req.Rows, req.Cols)
		if err != nil {
			return errResult(fmt.Errorf("open terminal: %w", err))
		}
		files = [3]*os.File{slave, slave, slave}
		outR = master
		s.mu.Lock()
		s.pty = master
		if s.size != nil {
			_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, s.size)
		}
		s.mu.Unlock()
		sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
		defer slave.Close()
	} else {
		sys.Setpgid = true
		var outW, errW *os.File
		if outR, outW, err = pipe(); err != nil {
			return errResult(err)
		}
		if errR, errW, err = pipe(); err != nil {
			closeAll([]*os.File{outR, outW})
			return errResult(err)
		}
		files[1], files[2] = outW, errW
		defer closeAll([]*os.File{outW, errW})
		if req.Stdin {
			w, r, err := stdinPipe()
			if err != nil {
				closeAll([]*os.File{outR, errR})
				return errResult(err)
			}
			files[0] = r
			defer r.Close()
			parents = append(parents, w)
			go s.pumpStdin(w)
		} else {
			null, err := s.e.devNull()
			if err != nil {
				return errResult(err)
			}
			files[0] = null
		}
	}
	if req.TTY {
		if req.Stdin {
			go s.pumpStdin(outR)
		}
	}

	start := time.Now()
	s.e.beginStart()
	pid, err := s.e.pt.forkExec(argv0, req.Argv, &syscall.ProcAttr{
		Dir: dir, Env: env,
		Files: []uintptr{files[0].Fd(), files[1].Fd(), files[2].Fd()},
		Sys:   sys,
	})
	if err != nil {
		s.e.abortStart()
		closeAll(append(parents, outR, errR))
		r := errResult(fmt.Errorf("start %s: %w", req.Argv[0], err))
		r.Outcome, r.ExitCode, r.NotStarted = execproto.OutcomeExited, 126, execproto.CommandNotExecutable
		if errors.Is(err, syscall.ENOENT) {
			r.ExitCode, r.NotStarted = 127, execproto.CommandNotFound
		}
		return r
	}
	p := s.e.register(pid)
	if pidfd, err := pidFile(*sys.PidFD); err == nil {
		go s.e.watchExit(p, pidfd)
	} // else the reaper delivers the status, after SIGCHLD
	s.mu.Lock()
	s.p = p
	cancelled := s.cancelled
	early := s.signals
	s.signals = nil
	s.mu.Unlock()
	if cancelled {
		s.e.pt.killTree(pid)
	}
	for _, sig := range early {
		s.e.pt.kill(pid, sig)
	}
	// The child has its own copies now; close ours so EOF arrives when the
	// child and its descendants are done with them.
	if !req.TTY {
		files[1].Close()
		files[2].Close()
	}

	var written atomic.Int64
	var pumps sync.WaitGroup
	pump := func(r *os.File, c byte, credit *execproto.Credit) {
		defer pumps.Done()
		s.pumpOutput(r, c, credit, &written)
	}
	pumps.Add(1)
	go pump(outR, execproto.Stdout, s.out)
	if errR != nil {
		pumps.Add(1)
		go pump(errR, execproto.Stderr, s.errc)
	}

	var timeout <-chan time.Time
	if req.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var info exitInfo
	select {
	case info = <-p.done:
	case <-timeout:
		s.kill(execproto.OutcomeTimeout)
		info = <-p.done
	}
	wall := time.Since(start)

	// Collect the rest of the output, but do not wait for background
	// processes that hold the pipes forever.
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputGrace):
		outR.Close()
		if errR != nil {
			errR.Close()
		}
		<-drained
	}
	outR.Close()
	if errR != nil {
		errR.Close()
	}
	closeAll(parents)
	s.mu.Lock()
	s.pty = nil
	forced := s.killedFor
	s.mu.Unlock()

	res := execproto.Result{
		WallMS:   wall.Milliseconds(),
		UserMS:   info.rusage.Utime.Sec*1000 + info.rusage.Utime.Usec/1000,
		SystemMS: info.rusage.Stime.Sec*1000 + info.rusage.Stime.Usec/1000,
		MaxRSSKB: info.rusage.Maxrss,
	}
	ws := info.status
	switch {
	case ws.Exited():
		res.Outcome, res.ExitCode = execproto.OutcomeExited, ws.ExitStatus()
	case ws.Signaled():
		res.Outcome, res.Signal, res.ExitCode = execproto.OutcomeSignaled, int(ws.Signal()), 128+int(ws.Signal())
	}
	if forced != "" {
		res.Outcome = forced
	} else if res.ExitCode != 0 && diskFull(u.Home) {
		res.Outcome = execproto.OutcomeDiskFull
	}
	if s.req.Fingerprint != "" {
		res.Fingerprint = fingerprint(s.req.Fingerprint)
	}
	return res
}

// pumpStdin copies host stdin data to the process and returns credit.
func (s *stream) pumpStdin(w *os.File) {
	defer func() {
		if !s.req.TTY {
			w.Close()
		}
	}()
	broken := false
	for {
		c, ok := s.stdin.Get()
		if !ok {
			break
		}
		p := c.Data
		if !broken {
			if _, err := w.Write(p); err != nil {
				broken = true // keep acknowledging so the host is never stuck
			}
		}
		_ = s.e.w.Write(execproto.AckFrame(s.id, execproto.Stdin, uint32(len(p))))
	}
	if s.req.TTY && !broken {
		// End of input on a terminal is the EOF character.
		_, _ = w.Write([]byte{4})
	}
}

func (s *stream) pumpOutput(r *os.File, c byte, credit *execproto.Credit, written *atomic.Int64) {
	buf := make([]byte, execproto.ChunkSize)
	max := s.req.MaxOutput
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p := buf[:n]
			if max > 0 {
				total := written.Add(int64(n))
				if total > max {
					keep := int64(n) - (total - max)
					if keep < 0 {
						keep = 0
					}
					p = p[:keep]
					_ = s.e.w.SendData(s.id, c, credit, p)
					s.kill(execproto.OutcomeOutputLimit)
					return
				}
			}
			if err := s.e.w.SendData(s.id, c, credit, p); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// pidFile wraps a pidfd for the runtime poller, which reports it readable
// once the process has exited.
func pidFile(fd int) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}

// pipe returns the executor's end (non-blocking, so Close interrupts a
// blocked Read or Write) and the command's end (blocking, as programs expect).
// For output pipes the executor's end reads; for stdin it writes.
func pipe() (mine, theirs *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return ends(fds[0], fds[1])
}

// stdinPipe is pipe for the command's stdin: the executor writes.
func stdinPipe() (mine, theirs *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return ends(fds[1], fds[0])
}

func ends(mine, theirs int) (*os.File, *os.File, error) {
	if err := unix.SetNonblock(mine, true); err != nil {
		unix.Close(mine)
		unix.Close(theirs)
		return nil, nil, err
	}
	return os.NewFile(uintptr(mine), "pipe"), os.NewFile(uintptr(theirs), "pipe"), nil
}

func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		return nil, nil, err
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		unix.Close(m)
		return nil, nil, err
	}
	sl, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(m)
		return nil, nil, err
	}
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	_ = unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	return os.NewFile(uintptr(m), "ptmx"), os.NewFile(uintptr(sl), "pts"), nil
}

// diskFull reports whether a writable layer has no space left.
func diskFull(home string) bool {
	for _, p := range append(append([]string{}, writable...), home) {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Blocks > 0 && st.Bavail == 0 {
			return true
		}
	}
	return false
}

// lookPath resolves a command name against the command's own PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", name)
}
