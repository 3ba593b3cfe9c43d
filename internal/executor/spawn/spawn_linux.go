// Package spawn is the spawner: airlock-exec run on the host as
// `airlock-exec spawn` to start the host's sandbox processes in new
// namespaces on its behalf (see execproto's Spawn for why and how). It
// holds no secret and trusts only the socket its host gave it.
//
// Unlike the rest of internal/executor it runs on the host, outside any
// sandbox, as a child of airlock-host. It lives here because it is linked
// into the executor's binary, and so it is held to the executor's rules:
// the standard library, golang.org/x/sys/unix and execproto only, named in
// cmd/airlock-exec's deps test.
//
// Importers: cmd/airlock-exec only.
package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/executor/vfork"
)

// Serve answers the Spawn requests that arrive on conn, a SOCK_SEQPACKET
// socket, until the host closes it. The children get SIGKILL when the
// spawner exits (their parent-death signal is tied to the thread that
// forks them all, which this locks).
func Serve(conn int) error {
	runtime.LockOSThread() // never unlocked: the children's parent thread
	unix.CloseOnExec(conn) // inherited: no child may talk to the spawner
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("spawner: parent-death signal: %w", err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("spawner: %w", err)
	}
	defer null.Close()
	go reap()
	buf := make([]byte, execproto.MaxSpawn)
	oob := make([]byte, unix.CmsgSpace(4*execproto.MaxSpawnFiles))
	for {
		n, oobn, flags, _, err := unix.Recvmsg(conn, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("spawner: read request: %w", err)
		}
		fds, ferr := rights(oob[:oobn])
		if n == 0 && oobn == 0 {
			return nil // the host closed its end
		}
		var reply execproto.Spawned
		pidfd := -1
		switch {
		case ferr != nil:
			reply.Error = ferr.Error()
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
			reply.Error = "spawner: request or descriptors truncated"
		default:
			reply.PID, pidfd, reply.Joined, err = start(buf[:n], fds, null)
			if err != nil {
				reply.Error = err.Error()
			}
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		msg, _ := json.Marshal(reply)
		var rights []byte
		if pidfd >= 0 {
			rights = unix.UnixRights(pidfd)
		}
		err = unix.Sendmsg(conn, msg, rights, nil, unix.MSG_NOSIGNAL)
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		if err != nil {
			return fmt.Errorf("spawner: reply: %w", err)
		}
	}
}

// rights returns the descriptors passed in a message's control data.
func rights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("spawner: control message: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// start starts the process a Spawn asks for and returns its pid and pidfd,
// and whether the child wrote itself into req's v1 tasks files.
func start(msg []byte, fds []int, null *os.File) (int, int, bool, error) {
	var req execproto.Spawn
	if err := json.Unmarshal(msg, &req); err != nil {
		return 0, -1, false, fmt.Errorf("spawner: request: %w", err)
	}
	if err := req.Validate(len(fds)); err != nil {
		return 0, -1, false, err
	}
	files := []uintptr{null.Fd(), null.Fd(), null.Fd()}
	cgroupFD := -1
	var tasks []int
	k := 0
	for i, fd := range fds {
		if i == req.CgroupFile {
			cgroupFD = fd
			continue
		}
		if slices.Contains(req.TasksFiles, i) {
			tasks = append(tasks, fd)
			continue
		}
		to := req.Files[k]
		k++
		for len(files) <= to {
			files = append(files, ^uintptr(0)) // closed in the child
		}
		files[to] = uintptr(fd)
	}
	if req.LateIDs && vfork.Supported {
		pid, pidfd, err := startLate(&req, files, cgroupFD, tasks)
		return pid, pidfd, len(tasks) > 0, err
	}
	pidfd := -1
	sys := &syscall.SysProcAttr{
		Cloneflags:                 req.Cloneflags,
		GidMappingsEnableSetgroups: req.Setgroups,
		Setsid:                     req.Setsid,
		Pdeathsig:                  syscall.SIGKILL,
		PidFD:                      &pidfd,
	}
	for _, m := range req.UIDMap {
		sys.UidMappings = append(sys.UidMappings, syscall.SysProcIDMap{ContainerID: m.Inside, HostID: m.Outside, Size: m.Size})
	}
	for _, m := range req.GIDMap {
		sys.GidMappings = append(sys.GidMappings, syscall.SysProcIDMap{ContainerID: m.Inside, HostID: m.Outside, Size: m.Size})
	}
	if c := req.Cred; c != nil {
		sys.Credential = &syscall.Credential{Uid: c.UID, Gid: c.GID, NoSetGroups: c.NoSetGroups}
	}
	if cgroupFD >= 0 {
		sys.UseCgroupFD, sys.CgroupFD = true, cgroupFD
	}
	pid, err := syscall.ForkExec(req.Path, req.Args, &syscall.ProcAttr{Dir: "/", Env: execproto.ExecutorEnv, Files: files, Sys: sys})
	if err != nil {
		return 0, -1, false, fmt.Errorf("start %s: %w", req.Path, err)
	}
	if pidfd < 0 {
		// The kernel has no pidfds (before 5.3): the host could not
		// signal the child safely.
		_ = unix.Kill(pid, unix.SIGKILL)
		return 0, -1, false, errors.New("spawner: no pidfd for the child (Linux 5.3 or later is needed)")
	}
	return pid, pidfd, false, nil
}

// startLate starts the executor of req (LateIDs) with vfork.Exec: the
// clone shares the spawner's memory, the child execs before its id maps
// exist, and the spawner writes them once the exec is done, before its
// reply; the host says hello only after the reply, so the executor takes
// its ids from maps already written.
func startLate(req *execproto.Spawn, files []uintptr, cgroupFD int, tasks []int) (int, int, error) {
	argv := append(append([]string(nil), req.Args...), execproto.LateIDs)
	uid, gid := formatMap(req.UIDMap), formatMap(req.GIDMap)
	pid, pidfd, err := vfork.Exec(req.Path, argv, execproto.ExecutorEnv, files, req.Cloneflags, cgroupFD, tasks, func(pid, pidfd int) error {
		return vfork.WriteIDMaps(pid, pidfd, uid, gid, req.Setgroups)
	})
	if err != nil {
		return 0, -1, fmt.Errorf("start %s: %w", req.Path, err)
	}
	return pid, pidfd, nil
}

// formatMap is ms as the lines of a uid_map or gid_map.
func formatMap(ms []execproto.IDMap) string {
	var b []byte
	for _, m := range ms {
		b = strconv.AppendInt(b, int64(m.Inside), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(m.Outside), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(m.Size), 10)
		b = append(b, '\n')
	}
	return string(b)
}

// reap collects the children that exited; the host learns of their exit
// from its pidfds.
func reap() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, unix.SIGCHLD)
	for range c {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
