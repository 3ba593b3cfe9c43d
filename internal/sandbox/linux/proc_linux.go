package linux

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/executor/vfork"
)

// procSpec is a process of the executor binary for the backend to start:
// an executor or an id-map helper.
type procSpec struct {
	args  []string   // argv
	stdin *os.File   // descriptor 0; nil for /dev/null
	extra []*os.File // descriptors 3, 4, ...
	// sys says which namespaces to make, with what id maps, credentials
	// and cgroup. The parent-death signal is always SIGKILL.
	sys *syscall.SysProcAttr
	// lateIDs: the process is an executor that takes its ids itself
	// (execproto.LateIDs), so a fork of this process may exec it before
	// writing its id maps, sharing this process's memory (vfork.Exec).
	// sys.Credential is then uid and gid 0 and sys's maps are root mode's.
	lateIDs bool
	// tasks are cgroup v1 `tasks` files (cgroup.Group.OpenV1Tasks) that a
	// lateIDs child writes itself into before its exec, where the starter
	// can (proc.joined says it did).
	tasks []int
	// lateMaps (with lateIDs and the direct vfork start): the id maps
	// are not written at the start; the caller writes them with
	// proc.writeMaps before its hello. sys's maps are then not used.
	lateMaps bool
	// tr marks the start's steps (AIRLOCK_TRACE); nil: none.
	tr *tracer
}

// proc is a process the backend started.
type proc struct {
	pid int
	// joined: the process wrote itself into procSpec.tasks before its
	// exec; nothing the process ran was outside those groups.
	joined bool
	kill   func() error
	// done is closed once the process has exited.
	done chan struct{}
	// close frees what watching the process holds; call it after done.
	close func()
	rc    syscall.RawConn // the pidfd
	// writeMaps writes the id maps of a process started with
	// procSpec.lateMaps; nil for any other.
	writeMaps func(idMaps) error
}

// startProc starts ps: through the spawner when Config.Spawner says so,
// else by forking this process.
//
// It forks with syscall.ForkExec rather than os/exec: the first
// exec.Cmd.Start of a process checks that pidfds work by starting a child
// that exits at once (os.checkPidfd), one more process in every
// `sandbox run`; os/exec also opens /dev/null once for each standard
// stream, and parks a thread in wait4 until the child exits, where the
// runtime's poller watches the child's pidfd here (watchPidfd).
func (b *Backend) startProc(ps procSpec) (*proc, error) {
	if b.cfg.Spawner {
		return b.spawnProc(ps)
	}
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", b.cfg.Executor, err)
	}
	defer unix.Close(null)
	stdin := uintptr(null)
	if ps.stdin != nil {
		stdin = ps.stdin.Fd()
	}
	files := []uintptr{stdin, uintptr(null), uintptr(null)}
	for _, f := range ps.extra {
		files = append(files, f.Fd())
	}
	sys := *ps.sys
	sys.Pdeathsig = syscall.SIGKILL
	pidfd := -1
	sys.PidFD = &pidfd
	env := execproto.ExecutorEnv
	if traceOn {
		// The executor traces its start (executor.execTrace) to this
		// process's stderr, its phases timed from here.
		files[2] = os.Stderr.Fd()
		env = append(append([]string(nil), env...), "AIRLOCK_TRACE="+strconv.FormatInt(monoNS(), 10))
	}
	attr := &syscall.ProcAttr{Dir: "/", Env: env, Files: files, Sys: &sys}
	var pid int
	joined := false
	if ps.lateIDs && vfork.Supported && !b.forkOnly {
		cg := -1
		if sys.UseCgroupFD {
			cg = sys.CgroupFD
		}
		maps := idMaps{uid: sys.UidMappings, gid: sys.GidMappings, setgroups: sys.GidMappingsEnableSetgroups}
		write := maps.write
		if b.writeMaps != nil {
			write = func(pid, pidfd int) error { return b.writeMaps(pid, pidfd, maps) }
		}
		args := append(append([]string(nil), ps.args...), execproto.LateIDs)
		ps.tr.mark("pre")
		err = onParentThread(func() error {
			ps.tr.mark("tothread")
			ps.tr.at("cloneat")
			var err error
			pid, pidfd, err = vfork.Exec(b.cfg.Executor, args, attr.Env, files, sys.Cloneflags, cg, ps.tasks, func(pid, pidfd int) error {
				ps.tr.mark("clone+exec")
				if ps.lateMaps {
					return nil // the caller's, later (proc.writeMaps)
				}
				return write(pid, pidfd)
			})
			ps.tr.mark("afterexec")
			return err
		})
		joined = err == nil && len(ps.tasks) > 0
	} else {
		if ps.lateMaps {
			// A fork writes sys's maps, which are not the process's yet.
			return nil, errors.New("start executor: late id maps need the vfork start")
		}
		err = onParentThread(func() error {
			var err error
			pid, err = syscall.ForkExec(b.cfg.Executor, ps.args, attr)
			return err
		})
	}
	runtime.KeepAlive(ps.stdin)
	runtime.KeepAlive(ps.extra)
	if err != nil {
		return nil, &os.PathError{Op: "fork/exec", Path: b.cfg.Executor, Err: err}
	}
	p, err := watchPidfd(pid, pidfd, true)
	if p != nil {
		p.joined = joined
		if ps.lateMaps && ps.lateIDs && vfork.Supported && !b.forkOnly {
			p.writeMaps = func(m idMaps) error {
				write := m.write
				if b.writeMaps != nil {
					write = func(pid, pidfd int) error { return b.writeMaps(pid, pidfd, m) }
				}
				var werr error
				if cerr := p.rc.Control(func(fd uintptr) { werr = write(p.pid, int(fd)) }); cerr != nil {
					return cerr
				}
				return werr
			}
		}
	}
	ps.tr.mark("watch")
	return p, err
}

// parentThread is the OS thread that starts every process the backend
// starts itself. A parent-death signal is sent when the thread that forked
// the child exits, not the process, and the runtime ends a thread whose
// goroutine exits while locked to it: this one is locked and never exits.
var parentThread struct {
	once sync.Once
	run  chan func()
}

// startOnParentThread starts cmd on parentThread.
func startOnParentThread(cmd *exec.Cmd) error { return onParentThread(cmd.Start) }

// onParentThread runs start, which starts a process, on parentThread.
func onParentThread(start func() error) error {
	parentThread.once.Do(func() {
		parentThread.run = make(chan func())
		go func() {
			runtime.LockOSThread() // for good
			for f := range parentThread.run {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	parentThread.run <- func() {
		if err := noInheritance(); err != nil {
			errc <- err
			return
		}
		errc <- start()
	}
	return <-errc
}

// noInheritance marks every descriptor above stderr close-on-exec before a
// start: a child inherits only what its start lists. This process may hold
// descriptors it inherited itself without close-on-exec (a shell's, a
// supervisor's); Go opens none so, and a start passes its own by number,
// which the child's dup or fcntl makes inheritable again. Without it such a
// descriptor reached the executor and, through it, every command of the
// sandbox (a pipe, a socket or a directory of the host's). It fails the
// start if it cannot be done.
func noInheritance() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || (!errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL)) {
		if err != nil {
			return fmt.Errorf("close-on-exec: %w", err)
		}
		return nil
	}
	// Before Linux 5.11: one by one.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("close-on-exec: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The directory's own descriptor is gone by now: EBADF is fine.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("close-on-exec: %w", err)
		}
	}
	return nil
}

// spawner is the backend's connection to its spawner process (`airlock-exec
// spawn`; see execproto.Spawn), started on first use.
type spawner struct {
	mu  sync.Mutex
	fd  int // SOCK_SEQPACKET; -1 when no spawner runs
	cmd *exec.Cmd
}

// spawnProc starts ps through the spawner, starting the spawner first if
// none runs (or the last one died: its children died with it).
func (b *Backend) spawnProc(ps procSpec) (*proc, error) {
	req := execproto.Spawn{
		Path: b.cfg.Executor, Args: ps.args, CgroupFile: -1,
		Cloneflags: ps.sys.Cloneflags, Setgroups: ps.sys.GidMappingsEnableSetgroups, Setsid: ps.sys.Setsid,
		// The spawner clones sharing its memory and writes the maps after
		// the exec (vfork.Exec), as startProc does here.
		LateIDs: ps.lateIDs && !b.forkOnly,
	}
	for _, m := range ps.sys.UidMappings {
		req.UIDMap = append(req.UIDMap, execproto.IDMap{Inside: m.ContainerID, Outside: m.HostID, Size: m.Size})
	}
	for _, m := range ps.sys.GidMappings {
		req.GIDMap = append(req.GIDMap, execproto.IDMap{Inside: m.ContainerID, Outside: m.HostID, Size: m.Size})
	}
	if c := ps.sys.Credential; c != nil {
		req.Cred = &execproto.Cred{UID: c.Uid, GID: c.Gid, NoSetGroups: c.NoSetGroups}
	}
	var fds []int
	if ps.stdin != nil {
		fds = append(fds, int(ps.stdin.Fd()))
		req.Files = append(req.Files, 0)
	}
	for i, f := range ps.extra {
		fds = append(fds, int(f.Fd()))
		req.Files = append(req.Files, 3+i)
	}
	if req.LateIDs && b.editSpawn != nil {
		b.editSpawn(&req)
	}
	if ps.sys.UseCgroupFD {
		req.CgroupFile = len(fds)
		fds = append(fds, ps.sys.CgroupFD)
	}
	if req.LateIDs {
		for _, fd := range ps.tasks {
			req.TasksFiles = append(req.TasksFiles, len(fds))
			fds = append(fds, fd)
		}
	}
	msg, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	sp := &b.spawner
	sp.mu.Lock()
	defer sp.mu.Unlock()
	pid, pidfd, joined, err := sp.request(b.cfg.Executor, msg, fds)
	if errors.Is(err, errSpawnerGone) {
		sp.stop()
		pid, pidfd, joined, err = sp.request(b.cfg.Executor, msg, fds)
	}
	if err != nil {
		return nil, err
	}
	p, err := watchPidfd(pid, pidfd, false)
	if p != nil {
		// Only what was asked for: a spawner's word alone adds nothing.
		p.joined = joined && len(req.TasksFiles) > 0
	}
	return p, err
}

// errSpawnerGone: the spawner exited; a new one may serve the request.
var errSpawnerGone = errors.New("spawner gone")

// request sends one request and reads its reply: the child's pid and
// pidfd, and whether it joined the request's v1 tasks files. Guarded by
// sp.mu.
func (sp *spawner) request(executor string, msg []byte, fds []int) (int, int, bool, error) {
	if sp.cmd == nil {
		if err := sp.start(executor); err != nil {
			return 0, -1, false, err
		}
	}
	if err := unix.Sendmsg(sp.fd, msg, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
			return 0, -1, false, errSpawnerGone
		}
		return 0, -1, false, fmt.Errorf("spawner: %w", err)
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(sp.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return 0, -1, false, fmt.Errorf("spawner: %w", err)
	}
	if n == 0 && oobn == 0 {
		return 0, -1, false, errSpawnerGone
	}
	pidfd := -1
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				for _, fd := range got {
					if pidfd < 0 {
						pidfd = fd
					} else {
						unix.Close(fd)
					}
				}
			}
		}
	}
	var reply execproto.Spawned
	if err := json.Unmarshal(buf[:n], &reply); err != nil || reply.Error != "" || reply.PID <= 0 || pidfd < 0 {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		if err == nil {
			err = errors.New(reply.Error)
		}
		return 0, -1, false, fmt.Errorf("spawner: %w", err)
	}
	return reply.PID, pidfd, reply.Joined, nil
}

// start starts the spawner. Guarded by sp.mu.
func (sp *spawner) start(executor string) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("spawner: %w", err)
	}
	child := os.NewFile(uintptr(fds[1]), "spawner")
	defer child.Close()
	cmd := exec.Command(executor)
	cmd.Args = []string{"airlock-exec", "spawn"}
	cmd.Env = execproto.ExecutorEnv
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{child} // fd 3: execproto.ControlFD
	// It dies with this process, and its children with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startOnParentThread(cmd); err != nil {
		unix.Close(fds[0])
		return fmt.Errorf("start spawner: %w", err)
	}
	sp.fd, sp.cmd = fds[0], cmd
	return nil
}

// stop ends the spawner, and with it every process it started. Guarded by
// sp.mu.
func (sp *spawner) stop() {
	if sp.cmd == nil {
		return
	}
	unix.Close(sp.fd) // the spawner reads EOF and exits
	_ = sp.cmd.Wait()
	sp.fd, sp.cmd = -1, nil
}

// watchPidfd returns the proc of the process of pid and pidfd: its exit
// makes pidfd readable, which the runtime's poller reports without holding
// a thread per process. reap says the process is this one's child, to be
// waited for (collected) once it has exited; a child of the spawner is the
// spawner's to collect.
func watchPidfd(pid, pidfd int, reap bool) (*proc, error) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	f := os.NewFile(uintptr(pidfd), fmt.Sprintf("pidfd %d", pid))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	p := &proc{pid: pid, done: make(chan struct{}), rc: rc}
	p.kill = func() error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) }); cerr != nil {
			return cerr
		}
		return err
	}
	exited := func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err == nil && n > 0
	}
	var once sync.Once
	p.close = func() { once.Do(func() { f.Close() }) }
	go func() {
		defer close(p.done)
		if reap {
			// After the wait below: the zombie holds its pid until then.
			defer func() {
				_ = rc.Control(func(fd uintptr) {
					var info unix.Siginfo
					var err error = unix.EINTR
					for errors.Is(err, unix.EINTR) {
						err = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED, nil)
					}
				})
			}()
		}
		if err := rc.Read(exited); err == nil {
			return
		}
		// Not pollable here: wait on a thread of its own.
		_ = rc.Control(func(fd uintptr) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			for {
				if _, err := unix.Poll(pfd, -1); !errors.Is(err, unix.EINTR) {
					return
				}
			}
		})
	}()
	return p, nil
}
