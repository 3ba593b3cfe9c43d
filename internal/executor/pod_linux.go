package executor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// Pod mode: the executor in a Kubernetes pod (the kubernetes sandbox
// backend, docs/kubernetes.md). The container runtime built the root (the
// image, read-only), /workspace, /tmp, /home and /run/airlock (volumes), as
// runsc does for the gvisor runtime; the executor adds its own namespaces
// inside the container, so that what runs in the sandbox has no network
// but loopback whatever the cluster's network is:
//
//   - `airlock-exec pod` is the container's command. It listens on an
//     abstract unix socket of the pod's network namespace (PodSocket) and
//     starts `airlock-exec pod-inner` in new user (its own uid mapped to
//     0, nothing else), mount, pid, network, ipc and uts namespaces, with
//     one end of a socket pair as the control connection. It relays every
//     host connection to the socket to the executor and back (podMux: the
//     first one sets the sandbox up, later ones attach to it, several at
//     once), and exits with the executor, which it ends once the last host
//     has been gone for --detached-grace (at once without it).
//   - `airlock-exec pod-connect` is what the host runs in the container
//     through the API server's exec: it connects to the socket and relays
//     its stdin and stdout, so the host's connection travels through the
//     API server (its authentication and authorization) and never through
//     the pod network, and nothing of it reaches the container's log.
//   - `airlock-exec pod-install DEST` copies the executor to DEST: an init
//     container of the executor's image puts it in a volume the sandbox's
//     image mounts, so any image can run it.
//
// The socket is abstract on purpose: abstract sockets belong to a network
// namespace, and the sandbox has its own, so nothing in it can reach the
// socket. What can reach it is what runs in the pod's network namespace:
// the relay, and the commands the API server lets a client exec in the
// container (pods/exec), which is the authorization for attaching; so the
// relay listens for the sandbox's whole life.

// podTrustDir is where a pod's sandbox keeps the CAs of its spec (the
// kubernetes backend's trust volume, a memory emptyDir of the pod's): the
// host writes them through the executor once it is up, so commands may
// write there too. It is the sandbox's own trust store, which its root
// could replace by pointing its tools elsewhere anyway.
const podTrustDir = "/etc/airlock"

// PodSocket is the abstract unix socket `airlock-exec pod` relays.
const PodSocket = "@airlock-exec-control"

// podInner is set in the executor that `airlock-exec pod` started: its
// setup is setupPod.
var podInner bool

// podCommand runs the pod mode's commands. ok is false for any other
// command, which Main then runs; for pod-inner it sets podInner first.
func podCommand(args []string) (code int, ok bool) {
	if len(args) < 2 {
		return 0, false
	}
	var err error
	switch args[1] {
	case "pod":
		var grace time.Duration
		if grace, err = podRelayArgs(args[2:]); err == nil {
			code, err = podRelay(grace)
		}
	case "pod-connect":
		err = podConnect(os.Stdin, os.Stdout)
	case "pod-install":
		if len(args) != 3 {
			err = errors.New("usage: airlock-exec pod-install DEST")
			break
		}
		err = podInstall(args[2])
	case "pod-inner":
		podInner = true
		return 0, false
	default:
		return 0, false
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-exec %s: %v\n", args[1], err)
		return 1, true
	}
	return code, true
}

// podRelay is `airlock-exec pod [--detached-grace=DURATION]`: grace is
// how long the sandbox outlives its last host (0: it ends with it).
func podRelay(grace time.Duration) (int, error) {
	ln, err := listenPodSocket()
	if err != nil {
		return 1, fmt.Errorf("listen: %w", err)
	}
	// Non-blocking, so that the relay's Close of its end interrupts its
	// Read and the executor sees the end at once.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return 1, fmt.Errorf("control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control")
	self, err := os.Executable()
	if err != nil {
		return 1, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return 1, err
	}
	p, err := os.StartProcess(self, []string{self, "pod-inner"}, &os.ProcAttr{
		Dir: "/",
		Env: execproto.ExecutorEnv,
		// fd 3 is execproto.ControlFD.
		Files: []*os.File{null, os.Stderr, os.Stderr, theirs},
		Sys: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			GidMappingsEnableSetgroups: false,
			Pdeathsig:                  syscall.SIGKILL,
		},
	})
	null.Close()
	theirs.Close()
	if err != nil {
		return 1, fmt.Errorf("start the executor in its namespaces: %w", err)
	}
	// The sandbox's root is this process's uid: nothing in the sandbox may
	// read or trace this process (ptrace and /proc/N need it dumpable for
	// the same uid). Not before the start: writing the child's id maps
	// needs its /proc files, which a non-dumpable parent's child gives to
	// root.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		_ = p.Kill()
		return 1, fmt.Errorf("set non-dumpable: %w", err)
	}
	exited := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := p.Wait()
		exited <- st
	}()
	accepted := make(chan *os.File)
	go acceptAll(ln, accepted)
	defer unix.Close(ln)
	m := newPodMux(ours)
	er := bufio.NewReaderSize(ours, execproto.ChunkSize+execproto.HeaderSize)
	var first *os.File
	select {
	case st := <-exited:
		return exitCode(st), errors.New("the executor exited before the host connected")
	case first = <-accepted:
	}
	fr := bufio.NewReaderSize(first, execproto.ChunkSize+execproto.HeaderSize)
	if err := m.handshake(first, fr, er); err != nil {
		first.Close()
		_ = p.Kill()
		st := <-exited
		return exitCode(st), fmt.Errorf("handshake: %w", err)
	}
	go m.readExecutor(er)
	go m.serveSession(m.addSession(first), fr)
	// The sandbox lives while a host is attached, and for grace after the
	// last one left (another may attach meanwhile); with no grace, the
	// last host's leaving ends it, as it always did before hosts could
	// attach.
	var idle <-chan time.Time
	var timer *time.Timer
	for {
		select {
		case st := <-exited:
			return exitCode(st), nil
		case c := <-accepted:
			go func() {
				cr := bufio.NewReaderSize(c, execproto.ChunkSize+execproto.HeaderSize)
				_ = c.SetDeadline(time.Now().Add(sessionWriteTimeout))
				if err := m.attach(c, cr); err != nil {
					fmt.Fprintf(os.Stderr, "airlock-exec pod: a host's attach: %v\n", err)
					c.Close()
					return
				}
				_ = c.SetDeadline(time.Time{})
				go m.serveSession(m.addSession(c), cr)
			}()
		case <-m.changed:
			if timer != nil {
				timer.Stop()
				timer, idle = nil, nil
			}
			if m.live() == 0 {
				if grace <= 0 {
					_ = p.Kill()
					return exitCode(<-exited), nil
				}
				timer = time.NewTimer(grace)
				idle = timer.C
			}
		case <-idle:
			if m.live() == 0 {
				// No host came back: the sandbox is over.
				_ = p.Kill()
				return exitCode(<-exited), nil
			}
			timer, idle = nil, nil
		}
	}
}

// podRelayArgs parses pod's arguments.
func podRelayArgs(args []string) (time.Duration, error) {
	var grace time.Duration
	for _, a := range args {
		v, ok := strings.CutPrefix(a, "--detached-grace=")
		if !ok {
			return 0, fmt.Errorf("usage: airlock-exec pod [--detached-grace=DURATION]: unknown %q", a)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("--detached-grace=%s: not a duration of zero or more", v)
		}
		grace = d
	}
	return grace, nil
}

func exitCode(st *os.ProcessState) int {
	if st == nil {
		return 1
	}
	if c := st.ExitCode(); c >= 0 {
		return c
	}
	return 128 + int(st.Sys().(syscall.WaitStatus).Signal())
}

// podConnectWait bounds how long pod-connect waits for the relay's socket
// (the container may have just started).
const podConnectWait = 30 * time.Second

// podConnect is `airlock-exec pod-connect`: stdin to the relay's socket,
// the socket to stdout.
func podConnect(in io.Reader, out io.Writer) error {
	var c *os.File
	var err error
	for deadline := time.Now().Add(podConnectWait); ; {
		c, err = dialPodSocket()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("connect to the executor: %w", err)
	}
	defer c.Close()
	go func() {
		_, _ = io.Copy(c, in)
		// The host closed its side: the relay ends, and with it the
		// sandbox.
		if rc, err := c.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) })
		}
	}()
	_, err = io.Copy(out, c)
	return err
}

// The socket is made with system calls, not package net: net links the
// C resolver when cgo is enabled, and the executor must build without C.

// listenPodSocket listens on PodSocket.
func listenPodSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: PodSocket}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// acceptAll sends each connection accepted on ln to out, until ln fails
// (it is closed when the relay ends).
func acceptAll(ln int, out chan<- *os.File) {
	for {
		fd, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
			continue
		}
		if err != nil {
			return
		}
		out <- os.NewFile(uintptr(fd), "host")
	}
}

// dialPodSocket connects to PodSocket.
func dialPodSocket() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: PodSocket}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "executor"), nil
}

// podInstall copies this executable to dest, read-only and executable.
func podInstall(dest string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	f, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, self); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// setupPod is setup in a pod (podInner): the container runtime built the
// root and the volumes, as runsc does, so setupBuiltRoot does what is left
// (PID 1 of the pod mode's own PID namespace is out of its commands' kill
// reach as natively);
// the executor's own network namespace has only loopback, brought up here.
// As in the native runtime, /run/airlock is a tmpfs of the executor's
// with the airlock-event command (listenEvents makes it read-only), and
// the sandbox has a boot id of its own, kept there. An empty workspace (the
// volume) becomes the overlay a native empty workspace is
// (setupBuiltRoot), so a restored tree is its lower layer.
func setupPod(s *execproto.Setup) ([]string, uppers, error) {
	if err := loopbackUp(); err != nil {
		return nil, uppers{-1, -1, -1}, fmt.Errorf("loopback: %w", err)
	}
	// The executor's volume is mounted read-only in the container (and
	// its mount's flags are locked here: a read-only remount of the bind
	// is refused), so the helper's bind is read-only as it is.
	if err := setupRunDirIn("/", false); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	// Not read-only: the container's /proc has locked mount flags, and a
	// read-only remount of a bind on it is refused. The id is the
	// sandbox's own, so a command that rewrites it (its root owns the
	// file) changes nothing but what it reads back.
	if err := ownBootIDIn("/proc", runDir, false); err != nil {
		return nil, uppers{-1, -1, -1}, err
	}
	layers, up, err := setupBuiltRoot(s)
	if err != nil {
		return nil, up, err
	}
	for i, l := range layers {
		switch {
		case l == "runtime:gvisor":
			layers[i] = "runtime:kubernetes"
		case strings.HasPrefix(l, "namespaces:"):
			layers[i] = "namespaces:user,mnt,pid,net,ipc,uts"
		}
	}
	return layers, up, nil
}
