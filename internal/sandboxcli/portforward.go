package sandboxcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/supervisor"
)

// PortForwardCmd is `airlock sandbox port-forward`, kubectl port-forward's
// shape for a live sandbox: each connection accepted on a local port is one
// TCP connection to the port inside the sandbox, relayed by its supervisor.
type PortForwardCmd struct {
	Address []string `default:"127.0.0.1" help:"Local addresses to listen on (repeatable, or comma-separated): 127.0.0.1, ::1, 0.0.0.0 for every interface." placeholder:"ADDR"`
	ID      string   `arg:"" help:"Sandbox id."`
	Ports   []string `arg:"" name:"port" help:"[LOCAL:]PORT: listen on LOCAL (PORT when not given, a free port when 0 or empty) and forward to PORT inside the sandbox." placeholder:"[LOCAL:]PORT"`
}

// forward is one [LOCAL:]PORT.
type forward struct {
	local, remote int
}

// parseForward reads [LOCAL:]PORT: "8080" listens on 8080, "0:8080" and
// ":8080" on a free port, "9000:80" on 9000.
func parseForward(s string) (forward, error) {
	local, remote, found := strings.Cut(s, ":")
	if !found {
		local, remote = s, s
	}
	if local == "" {
		local = "0"
	}
	r, err := strconv.Atoi(remote)
	if err != nil || r < 1 || r > 65535 {
		return forward{}, fmt.Errorf("port %q: want [LOCAL:]PORT, PORT 1 to 65535", s)
	}
	l, err := strconv.Atoi(local)
	if err != nil || l < 0 || l > 65535 {
		return forward{}, fmt.Errorf("port %q: want [LOCAL:]PORT, LOCAL 0 to 65535", s)
	}
	return forward{local: l, remote: r}, nil
}

// goneCheck is how often port-forward asks whether the sandbox still lives.
const goneCheck = time.Second

// Run forwards until interrupted (exit 0) or the sandbox is gone.
func (c *PortForwardCmd) Run(env *Env) error {
	if err := checkID(c.ID); err != nil {
		return UsageError{err}
	}
	var fwds []forward
	for _, p := range c.Ports {
		f, err := parseForward(p)
		if err != nil {
			return UsageError{err}
		}
		fwds = append(fwds, f)
	}
	var addrs []string
	for _, a := range c.Address {
		for _, one := range strings.Split(a, ",") {
			if one = strings.TrimSpace(one); one != "" {
				if one == "localhost" {
					one = "127.0.0.1"
				}
				if net.ParseIP(one) == nil {
					return UsageError{fmt.Errorf("--address %q: want an IP address", one)}
				}
				addrs = append(addrs, one)
			}
		}
	}
	if len(addrs) == 0 {
		return UsageError{errors.New("--address: none given")}
	}
	cl := supervisor.Client{Path: filepath.Join(env.StateDir(c.ID), "sock")}
	if _, err := cl.Info(); err != nil {
		return sandboxError(c.ID, err)
	}
	ctx, stop := signal.NotifyContext(env.Ctx, os.Interrupt, unix.SIGTERM)
	defer stop()

	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	type listening struct {
		ln     net.Listener
		remote int
	}
	var all []listening
	for _, f := range fwds {
		local := f.local
		for _, a := range addrs {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(local)))
			if err != nil {
				return fmt.Errorf("port-forward: %w", err)
			}
			lns = append(lns, ln)
			// One free port for every address of the forward.
			local = ln.Addr().(*net.TCPAddr).Port
			all = append(all, listening{ln, f.remote})
			fmt.Fprintf(env.Stdout, "Forwarding from %s -> %d\n", ln.Addr(), f.remote)
		}
	}

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  = map[net.Conn]bool{} // guarded by mu: local connections being relayed
		ending bool                  // guarded by mu: no more connections are taken
	)
	// track adds or removes a local connection; it refuses one once
	// port-forward is ending.
	track := func(c net.Conn, on bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if on && ending {
			return false
		}
		if on {
			conns[c] = true
		} else {
			delete(conns, c)
		}
		return true
	}
	say := func(w io.Writer, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format, args...)
	}
	for _, l := range all {
		wg.Go(func() {
			for {
				lc, err := l.ln.Accept()
				if err != nil {
					return // closed at the end
				}
				if !track(lc, true) {
					lc.Close()
					return
				}
				wg.Go(func() {
					defer track(lc, false)
					defer lc.Close()
					say(env.Stdout, "Handling connection for %d\n", l.remote)
					up, err := cl.Connect(l.remote)
					if err != nil {
						say(env.Stderr, "airlock: port-forward: %s: %v\n", c.ID, err)
						return
					}
					defer up.Close()
					supervisor.Relay(lc, up)
				})
			}
		})
	}

	err := waitGone(ctx, cl, c.ID)
	for _, ln := range lns {
		ln.Close()
	}
	mu.Lock()
	ending = true
	for lc := range conns {
		lc.Close()
	}
	mu.Unlock()
	wg.Wait()
	return err
}

// waitGone returns nil when ctx ends, or an error once the sandbox's
// supervisor no longer answers.
func waitGone(ctx context.Context, cl supervisor.Client, id string) error {
	t := time.NewTicker(goneCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if _, err := cl.Info(); errors.Is(err, supervisor.ErrGone) {
				return fmt.Errorf("port-forward: sandbox %s is gone", id)
			}
		}
	}
}
