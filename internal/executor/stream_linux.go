package executor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// stream is one request and everything that flows on it.
type stream struct {
	e   *executor
	id  uint32
	req execproto.Request
	// opened is when the request was read, when tracing (execTrace).
	opened int64

	out, errc *execproto.Credit // send windows of stdout and stderr
	chunk     int               // the largest data payload of a frame (req.Flow)

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
	// Flow is bounded (MaxWindow) before the request is validated: the
	// stdin the host may send at once is what this stream buffers.
	window, chunk := req.Flow()
	var opened int64
	if traceBase != 0 {
		opened = monoNS()
	}
	return &stream{
		e: e, id: id, req: req, opened: opened,
		out: execproto.NewCredit(window), errc: execproto.NewCredit(window), chunk: chunk,
		stdin: execproto.NewInbox(window),
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
			if errors.Is(err, execproto.ErrClosed) {
				// The stream is ending: it closed its inbox before it
				// leaves e.streams, and the host's stdin raced its
				// result, as for a stream already gone (dispatch).
				return nil
			}
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
		case execproto.OpImport, execproto.OpEvents, execproto.OpDiskUsage, execproto.OpEgress, execproto.OpConnect:
			// They look nothing up in /workspace (a connect reaches a
			// command, which sealed it; an import seals it unless it
			// unpacks into the lower layer).
		default:
			// It may look in /workspace: no import writes under the
			// overlay from now on (lowerLayer).
			s.e.lower.seal()
		}
		switch s.req.Op {
		case execproto.OpExec:
			res = s.exec()
		case execproto.OpWatch:
			res = s.watch()
		case execproto.OpDiskUsage:
			res = diskUsage(s.e.setup.User.Home)
		case execproto.OpEvents:
			res = s.events()
		case execproto.OpCheckpoint:
			res = s.checkpoint()
		case execproto.OpSpecialFiles:
			res = s.specialFiles()
		case execproto.OpConnect:
			res = s.connect()
		case execproto.OpEgress:
			res = s.egressStream()
		default:
			res = s.file()
		}
	}
	s.out.Close()
	s.errc.Close()
	s.stdin.Close()
	f, err := execproto.MessageFrame(execproto.TResult, s.id, res)
	if err != nil {
		f, _ = execproto.MessageFrame(execproto.TResult, s.id, errResult(err))
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
// process exited, for background children that keep its pipes open. What
// the command wrote before it exited is collected whole, however long the
// host takes it.
const outputGrace = 100 * time.Millisecond

// exec runs the request's command: it resolves it, opens its standard
// streams, starts it, pumps its output to the host until it exits, and
// returns how it ended.
func (s *stream) exec() execproto.Result {
	tr := newExecTrace("cmd", s.opened)
	defer tr.done()
	c, res := s.resolve()
	if c == nil {
		return res
	}
	st, err := s.openStdio(c.sys)
	if err != nil {
		return errResult(err)
	}
	defer closeAll(st.ends...)
	if s.req.Stdin {
		go s.pumpStdin(st.stdin)
	}
	tr.mark("resolve")
	start := time.Now()
	p, res := s.start(c, st)
	tr.mark("started")
	if p == nil {
		return res
	}
	pumps := s.pumpOutputs(st)
	info := s.waitExit(p)
	tr.mark("exited")
	wall := time.Since(start)
	s.drain(st, pumps)
	tr.mark("drained")
	s.mu.Lock()
	s.pty = nil
	forced := s.killedFor
	s.mu.Unlock()
	return s.result(info, wall, forced, c.u.Home)
}

// command is an exec request resolved: who runs it, with what environment,
// where, which program, and the process attributes it starts with.
type command struct {
	u     execproto.User
	env   []string
	dir   string
	argv0 string
	sys   *syscall.SysProcAttr
}

// resolve resolves the request's user, environment, directory and program.
// A program not found is no command but a result: exit status 127.
func (s *stream) resolve() (*command, execproto.Result) {
	req := &s.req
	u, err := s.e.lookupUser(req.User)
	if err != nil {
		return nil, errResult(err)
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
		return nil, r
	}
	sys := &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}, NoSetGroups: s.e.setup.NoSetGroups},
		Pdeathsig:  syscall.SIGKILL,
		PidFD:      new(int),
	}
	return &command{u: u, env: env, dir: dir, argv0: argv0, sys: sys}, execproto.Result{}
}

// stdio are the standard streams of a command: the ends the child gets,
// and the executor's, which read its output and write its input.
type stdio struct {
	child [3]*os.File // the child's stdin, stdout, stderr
	outR  *os.File    // reads stdout (on a terminal, the terminal)
	errR  *os.File    // reads stderr; nil on a terminal
	stdin *os.File    // where pumpStdin writes the host's input, if it sends any
	// parents are the executor's ends, besides the outputs, that are
	// closed once the command is over or failed to start: the stdin pipe's
	// writer, which pumpStdin also closes once the host's input ends.
	parents []*os.File
	// ends are the executor's copies of the child's ends, in the order they
	// are closed once exec is over.
	ends []*os.File
}

// openStdio opens the command's standard streams, a terminal or pipes (see
// openTerminal and openPipes), and sets sys up for them.
func (s *stream) openStdio(sys *syscall.SysProcAttr) (*stdio, error) {
	if s.req.TTY {
		return s.openTerminal(sys)
	}
	return s.openPipes(sys)
}

// openTerminal opens a terminal of the request's size, or of the last size
// the host sent before it was open, as the stream's pty. The command gets
// it as its controlling terminal, in a session of its own, on all three
// streams.
func (s *stream) openTerminal(sys *syscall.SysProcAttr) (*stdio, error) {
	master, slave, err := openPTY(s.req.Rows, s.req.Cols)
	if err != nil {
		return nil, fmt.Errorf("open terminal: %w", err)
	}
	s.mu.Lock()
	s.pty = master
	if s.size != nil {
		_ = unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, s.size)
	}
	s.mu.Unlock()
	sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
	return &stdio{child: [3]*os.File{slave, slave, slave}, outR: master, stdin: master, ends: []*os.File{slave}}, nil
}

// openPipes opens a pipe for stdout and one for stderr, and stdin: a pipe
// when the host sends input, else /dev/null. The command gets a process
// group of its own.
func (s *stream) openPipes(sys *syscall.SysProcAttr) (*stdio, error) {
	sys.Setpgid = true
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, err
	}
	st := &stdio{child: [3]*os.File{nil, outW, errW}, outR: outR, errR: errR, ends: []*os.File{outW, errW}}
	if !s.req.Stdin {
		null, err := s.e.devNull()
		if err != nil {
			closeAll(outW, errW)
			return nil, err
		}
		st.child[0] = null
		return st, nil
	}
	w, r, err := stdinPipe()
	if err != nil {
		closeAll(outR, errR, outW, errW)
		return nil, err
	}
	st.child[0], st.stdin, st.parents = r, w, []*os.File{w}
	st.ends = append([]*os.File{r}, st.ends...)
	return st, nil
}

// start starts the command with st's child ends and makes it the stream's
// process: a cancel or signals that arrived before it existed reach it
// now. A command that does not start returns no process but its result
// (exit status 126, or 127 when not found), with the executor's ends of st
// closed.
func (s *stream) start(c *command, st *stdio) (*proc, execproto.Result) {
	req := &s.req
	s.e.beginStart()
	pid, err := s.e.pt.forkExec(c.argv0, req.Argv, &syscall.ProcAttr{
		Dir: c.dir, Env: c.env,
		Files: []uintptr{st.child[0].Fd(), st.child[1].Fd(), st.child[2].Fd()},
		Sys:   c.sys,
	})
	if err != nil {
		s.e.abortStart()
		closeAll(append(st.parents, st.outR, st.errR)...)
		r := errResult(fmt.Errorf("start %s: %w", req.Argv[0], err))
		r.Outcome, r.ExitCode, r.NotStarted = execproto.OutcomeExited, 126, execproto.CommandNotExecutable
		if errors.Is(err, syscall.ENOENT) {
			r.ExitCode, r.NotStarted = 127, execproto.CommandNotFound
		}
		return nil, r
	}
	p := s.e.register(pid)
	if pidfd, err := pidFile(*c.sys.PidFD); err == nil {
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
		st.child[1].Close()
		st.child[2].Close()
	}
	return p, execproto.Result{}
}

// pumps are the pumps of a command's outputs.
type pumps struct {
	outs    []*output
	running atomic.Int32  // pumps not yet done
	done    chan struct{} // closed by the last pump to end
}

// pumpOutputs starts a pump (pumpOutput) for each of st's outputs, which
// share the request's MaxOutput.
func (s *stream) pumpOutputs(st *stdio) *pumps {
	var written atomic.Int64
	ps := &pumps{done: make(chan struct{})}
	pump := func(o *output) {
		go func() {
			defer func() {
				if ps.running.Add(-1) == 0 {
					close(ps.done)
				}
			}()
			defer o.markCaughtUp()
			s.pumpOutput(o, &written)
		}()
	}
	ps.outs = append(ps.outs, newOutput(st.outR, execproto.Stdout, s.out))
	if st.errR != nil {
		ps.outs = append(ps.outs, newOutput(st.errR, execproto.Stderr, s.errc))
	}
	ps.running.Store(int32(len(ps.outs)))
	for _, o := range ps.outs {
		pump(o)
	}
	return ps
}

// output is one of a command's outputs, as its pump reads it.
type output struct {
	r       *os.File
	channel byte
	credit  *execproto.Credit

	// mu makes a read from r and its count in read one step, against
	// exited's look at read and at what r holds: were they two, bytes a
	// read had taken from the pipe but not yet counted would be in
	// neither, atExit would fall short by them, and the pump would be
	// caught up (and its pipe closed after outputGrace) with the
	// command's last bytes still unread.
	mu   sync.Mutex
	read atomic.Int64 // bytes read from r
	// atExit is what read is once everything the command wrote before it
	// exited is read; -1 until it exited.
	atExit atomic.Int64
	// caughtUp is closed once read reaches atExit, or the pump stops
	// reading.
	caughtUp     chan struct{}
	caughtUpOnce sync.Once
}

func newOutput(r *os.File, channel byte, credit *execproto.Credit) *output {
	o := &output{r: r, channel: channel, credit: credit, caughtUp: make(chan struct{})}
	o.atExit.Store(-1)
	return o
}

// readSome reads from r into p, as r.Read does, and counts what it read in
// the same step (see mu). It waits in the runtime's poller, so closing r
// interrupts it.
func (o *output) readSome(p []byte) (int, error) {
	rc, err := o.r.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		for {
			n, rerr = unix.Read(int(fd), p)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			return false
		}
		if rerr != nil {
			n = 0
			return true
		}
		if read, at := o.read.Add(int64(n)), o.atExit.Load(); at >= 0 && read >= at {
			o.markCaughtUp()
		}
		return true
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// exited notes that the command exited: what r holds now is the last of
// what it wrote, and once the pump has read that, it has caught up. When
// that cannot be told, the pump counts as caught up (outputGrace alone
// bounds the wait).
func (o *output) exited() {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := pending(o.r)
	if err != nil {
		o.markCaughtUp()
		return
	}
	at := o.read.Load() + int64(n)
	o.atExit.Store(at)
	if o.read.Load() >= at {
		o.markCaughtUp()
	}
}

func (o *output) markCaughtUp() { o.caughtUpOnce.Do(func() { close(o.caughtUp) }) }

// pending returns how many bytes f (a pipe or a terminal) holds unread:
// TIOCINQ, which is FIONREAD on Linux. It does not use f.Fd, which would
// make f blocking, and Close unable to interrupt its pump's Read.
func pending(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil {
		return 0, err
	}
	return n, ierr
}

// waitExit waits for process p to exit, killing it (outcome timeout) once
// the request's timeout has passed, and under gVisor (outcome pids_limit)
// once the commands hold every task of their pids group, if they did not
// when it started: a fork bomb stuck at the limit never exits by itself.
func (s *stream) waitExit(p *proc) exitInfo {
	var timeout <-chan time.Time
	if s.req.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(s.req.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var poll <-chan time.Time
	if g := s.e.pids; g != nil && !g.full() {
		t := time.NewTicker(pidsPoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case info := <-p.done:
			if poll != nil && failed(info.status) && s.e.pids.fullBut(1) {
				// Its forks failed at the limit and it gave up (a
				// shell does) between two looks: what it started
				// holds the group but for the slot its own exit
				// freed, and goes with it.
				s.kill(execproto.OutcomePidsLimit)
				s.e.pids.drain()
			}
			return info
		case <-timeout:
			s.kill(execproto.OutcomeTimeout)
			return <-p.done
		case <-poll:
			if !s.e.pids.full() {
				continue
			}
			s.kill(execproto.OutcomePidsLimit)
			info := <-p.done
			s.e.pids.drain()
			return info
		}
	}
}

// failed reports whether a command that ended with ws failed: a non-zero
// exit status or a signal.
func failed(ws unix.WaitStatus) bool {
	return ws.Exited() && ws.ExitStatus() != 0 || ws.Signaled()
}

// drain collects the rest of the output once the command has exited, but
// does not wait for background processes that hold the pipes forever: after
// outputGrace, once the pumps have read what the command wrote before it
// exited, it closes the executor's ends of st under them. It closes them,
// and st's parents, in any case.
func (s *stream) drain(st *stdio, ps *pumps) {
	for _, o := range ps.outs {
		o.exited()
	}
	select {
	case <-ps.done:
		// The pipes ended with the command: no grace timer to set
		// and stop.
	default:
		grace := time.NewTimer(outputGrace)
		select {
		case <-ps.done:
		case <-grace.C:
			// The host may be slow to take the output (a pump sends
			// only as the host returns credit): what a pipe held when
			// the command exited is not cut, however long it takes.
			for _, o := range ps.outs {
				<-o.caughtUp
			}
			st.closeOutput()
			<-ps.done
		}
		grace.Stop()
	}
	st.closeOutput()
	closeAll(st.parents...)
}

// closeOutput closes the executor's ends of the command's outputs.
func (st *stdio) closeOutput() {
	st.outR.Close()
	if st.errR != nil {
		st.errR.Close()
	}
}

// result is how the command ended: it exited with info after wall, or ended
// with forced, the outcome a limit forced when one did. A non-zero exit of a
// command whose home or another writable layer is full is disk full.
func (s *stream) result(info exitInfo, wall time.Duration, forced, home string) execproto.Result {
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
	} else if res.ExitCode != 0 && diskFull(home) {
		res.Outcome = execproto.OutcomeDiskFull
	}
	if s.req.Fingerprint != "" {
		res.Fingerprint = fingerprint(s.req.Fingerprint)
	}
	return res
}

// closeAll closes fs, skipping nil ones.
func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
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

// outputBufs are the pumps' read buffers of the default chunk size. Made
// for each command, its two were most of what the executor allocated for
// it (64 KiB, cleared, and the garbage collections they brought on),
// however little the command wrote.
var outputBufs = sync.Pool{New: func() any {
	b := make([]byte, execproto.ChunkSize)
	return &b
}}

// pumpOutput sends what o reads to the host until o ends or is closed, or
// the request's MaxOutput (counted in written, across outputs) is reached.
func (s *stream) pumpOutput(o *output, written *atomic.Int64) {
	var buf []byte
	if s.chunk == execproto.ChunkSize {
		// Nothing keeps the buffer once this returns: SendData copies.
		bp := outputBufs.Get().(*[]byte)
		defer outputBufs.Put(bp)
		buf = *bp
	} else {
		buf = make([]byte, s.chunk) // bulk: rare, and up to MaxChunkSize
	}
	limit := s.req.MaxOutput
	c, credit := o.channel, o.credit
	for {
		n, err := o.readSome(buf)
		if n > 0 {
			p := buf[:n]
			if limit > 0 {
				total := written.Add(int64(n))
				if total > limit {
					keep := int64(n) - (total - limit)
					if keep < 0 {
						keep = 0
					}
					p = p[:keep]
					_ = s.e.w.SendData(s.id, c, credit, s.chunk, p)
					s.kill(execproto.OutcomeOutputLimit)
					return
				}
			}
			if err := s.e.w.SendData(s.id, c, credit, s.chunk, p); err != nil {
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
	if err := setNonblock(fd); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}

// setNonblock makes fd, a pipe's end or a pidfd, non-blocking: its status
// flags are set to O_NONBLOCK alone, without reading them first
// (unix.SetNonblock's F_GETFL, a trapped system call under gVisor), as
// neither has another status flag that F_SETFL could change.
func setNonblock(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_NONBLOCK)
	return err
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
	if err := setNonblock(mine); err != nil {
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
