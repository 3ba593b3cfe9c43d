package executor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// startProxy listens on the sandbox's loopback and forwards every connection
// to the host's egress socket, which was bound into the sandbox at setup.
// The socket identifies the sandbox to the host; nothing the sandbox sends
// can claim another identity. There is no other route out.
//
// Sockets are made with raw system calls rather than package net: net links
// the C resolver when cgo is on, and a cgo-linked executor cannot change the
// credentials of all its threads at once (AllThreadsSyscall refuses), so the
// executor must build without cgo whatever CGO_ENABLED says.
func (e *executor) startProxy() error {
	addr, port, ok := parseIPv4Port(e.setup.ProxyAddr)
	if !ok {
		return fmt.Errorf("proxy address %q: want an IPv4 address and port", e.setup.ProxyAddr)
	}
	// Plain TCP (protocol 0 is IPPROTO_TCP, never MPTCP, which slips past
	// Landlock's TCP rules on some kernels; seccomp refuses it anyway).
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("proxy socket: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: addr}); err != nil {
		unix.Close(fd)
		return fmt.Errorf("proxy bind %s: %w", e.setup.ProxyAddr, err)
	}
	if err := unix.Listen(fd, 256); err != nil {
		unix.Close(fd)
		return fmt.Errorf("proxy listen: %w", err)
	}
	ln := os.NewFile(uintptr(fd), "proxy")
	rc, err := ln.SyscallConn()
	if err != nil {
		ln.Close()
		return err
	}
	if e.setup.ProxyStreams {
		// Each connection waits, accepted, for an egress stream of the
		// host's to take it; while none does, the accept loop waits and
		// the next ones wait in the listener's backlog.
		e.egress = make(chan *os.File)
		go acceptLoop(rc, func(nfd int) { e.egress <- os.NewFile(uintptr(nfd), "proxy-conn") })
		return nil
	}
	go acceptLoop(rc, func(nfd int) { go forward(os.NewFile(uintptr(nfd), "proxy-conn")) })
	return nil
}

// egressStream relays the next connection accepted on the proxy address
// to the host (execproto.OpEgress): it waits for one, says it is up and
// relays it as a connect stream relays its socket. A cancel while it waits
// ends it with no connection taken.
func (s *stream) egressStream() execproto.Result {
	if s.e.egress == nil {
		return errResult(errors.New("egress: the sandbox's proxy has no egress streams"))
	}
	var sock *os.File
	select {
	case sock = <-s.e.egress:
	case <-s.stop:
		return execproto.Result{ExitCode: -1, Error: "egress: cancelled before a connection came"}
	}
	defer sock.Close()
	if !s.e.acquireConnect() {
		return execproto.Result{ExitCode: -1, Error: fmt.Sprintf("egress: %d connections already open", execproto.MaxConnects), Errno: "EMFILE"}
	}
	defer s.e.releaseConnect()
	return s.relay(sock)
}

// dialHost connects to the host's egress socket.
func dialHost() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// Blocking connect: a unix-socket connect completes or fails at once.
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: proxySocket}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "egress"), nil
}

func forward(c *os.File) {
	defer c.Close()
	up, err := dialHost()
	if err != nil {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, c)
		shutdownWrite(up)
	}()
	_, _ = io.Copy(c, up)
	shutdownWrite(c)
	wg.Wait()
}

// shutdownWrite sends EOF to the peer while still reading from it.
func shutdownWrite(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) })
	}
}

// parseIPv4Port reads "a.b.c.d:port" in decimal, as the host writes it. It
// stands in for net/netip, whose package initialisation every sandbox's
// start would pay for this one call.
func parseIPv4Port(s string) (addr [4]byte, port int, ok bool) {
	host, p, found := strings.Cut(s, ":")
	if !found {
		return addr, 0, false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || p[0] == '0' || p[0] == '+' {
		return addr, 0, false
	}
	parts := strings.Split(host, ".")
	if len(parts) != 4 {
		return addr, 0, false
	}
	for i, part := range parts {
		v, err := strconv.ParseUint(part, 10, 8)
		if err != nil || part[0] == '+' || (len(part) > 1 && part[0] == '0') {
			return addr, 0, false
		}
		addr[i] = byte(v)
	}
	return addr, int(n), true
}
