package sandboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/supervisor"
)

// ExecCmd is `airlock sandbox exec`.
type ExecCmd struct {
	Interactive bool     `short:"i" help:"Pass stdin to the command."`
	TTY         bool     `short:"t" help:"Give the command a terminal."`
	Env         []string `short:"e" sep:"none" help:"Environment variable K=V (repeatable)." placeholder:"K=V"`
	User        string   `help:"User inside the sandbox." placeholder:"NAME|UID"`
	Workdir     string   `short:"w" help:"Working directory inside the sandbox." placeholder:"DIR"`
	ExecFlags
	ID      string   `arg:"" help:"Sandbox id."`
	Command []string `arg:"" passthrough:"" name:"cmd" help:"Command and arguments, after --."`
}

// Run runs one command in a live sandbox.
func (c *ExecCmd) Run(env *Env) error {
	argv, err := commandArgs(c.Command, "airlock sandbox exec ID -- CMD [ARG...]")
	if err != nil {
		return err
	}
	if err := checkID(c.ID); err != nil {
		return UsageError{err}
	}
	var maxOut int64 // 0: the supervisor's 16M
	if c.MaxOutput != "" {
		maxOut, err = sandbox.ParseSize(c.MaxOutput)
	}
	if err != nil {
		return UsageError{fmt.Errorf("--max-output: %w", err)}
	}
	if err := sandbox.CheckEnv(c.Env); err != nil {
		return UsageError{fmt.Errorf("--env: %w", err)}
	}
	cl := supervisor.Client{Path: filepath.Join(env.StateDir(c.ID), "sock")}
	req := supervisor.ExecRequest{Argv: argv, Env: c.Env, User: c.User, Dir: c.Workdir, TTY: c.TTY, Timeout: c.Timeout, MaxOut: maxOut}
	var restore func()
	if c.TTY {
		if f, ok := env.Stdin.(*os.File); ok {
			if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
				req.Rows, req.Cols = ws.Row, ws.Col
			}
			restore = makeRaw(int(f.Fd()))
		}
	}
	if restore != nil {
		defer restore()
	}
	stdin := env.Stdin
	if !c.Interactive {
		stdin = nil
	}
	sigs := catchSignals()
	s, err := cl.Exec(req, stdin)
	if err != nil {
		sigs.release()
		return sandboxError(c.ID, err)
	}
	stop := sigs.forward(s.Signal)
	defer stop()
	if c.TTY {
		defer watchResize(env, s)()
	}
	res, err := s.Wait(env.Stdout, env.Stderr)
	if err != nil {
		return err
	}
	if restore != nil {
		restore()
		restore = nil
	}
	return finish(env, res, c.JSON)
}

func watchResize(env *Env, s *supervisor.Session) func() {
	f, ok := env.Stdin.(*os.File)
	if !ok {
		return func() {}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil {
					_ = s.Resize(ws.Row, ws.Col)
				}
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

// makeRaw puts a terminal in raw mode and returns the restore function, or
// nil when fd is not a terminal.
func makeRaw(fd int) func() {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }
}

// sandboxError is err of a request to live sandbox id's supervisor: a
// usage error when none answers, for then id names no live sandbox (one
// never created, removed, or gone at its TTL).
func sandboxError(id string, err error) error {
	if errors.Is(err, supervisor.ErrGone) {
		return UsageError{fmt.Errorf("no sandbox named %s (airlock sandbox ls lists the live ones)", id)}
	}
	return fmt.Errorf("sandbox %s: %w", id, err)
}

// CheckID refuses what cannot be a sandbox's id (a path, say).
func CheckID(id string) error { return checkID(id) }

func checkID(id string) error {
	if !strings.HasPrefix(id, "sb-") || len(id) > 64 || strings.ContainsAny(id, "/.\x00") {
		return fmt.Errorf("%q is not a sandbox id", id)
	}
	return nil
}

// LsCmd is `airlock sandbox ls`.
type LsCmd struct {
	JSON bool `name:"json" help:"One JSON object per sandbox: id, backend, created, workspace, layers, usage."`
}

// Run lists live sandboxes.
func (c *LsCmd) Run(env *Env) error {
	ents, err := os.ReadDir(filepath.Join(env.Home, "sandboxes"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var infos []supervisor.Info
	for _, e := range ents {
		info, err := supervisor.Client{Path: filepath.Join(env.StateDir(e.Name()), "sock")}.Info()
		if err != nil {
			continue // gone, or not ours
		}
		infos = append(infos, info)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Created.Before(infos[j].Created) })
	if c.JSON {
		return WriteJSON(env.Stdout, infos...)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGE\tMEMORY\tCPU\tPIDS\tWORKSPACE")
	for _, in := range infos {
		ws := in.Workspace
		if ws == "" {
			ws = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", in.ID, time.Since(in.Created).Round(time.Second),
			sandbox.FormatSize(in.Usage.MemoryBytes), in.Usage.CPU.Round(time.Millisecond), in.Usage.Pids, ws)
	}
	return tw.Flush()
}

// RmCmd is `airlock sandbox rm`.
type RmCmd struct {
	IDs []string `arg:"" name:"id" help:"Sandbox ids."`
}

// Run destroys sandboxes.
func (c *RmCmd) Run(env *Env) error {
	var errs []error
	for _, id := range c.IDs {
		if err := checkID(id); err != nil {
			errs = append(errs, UsageError{err})
			continue
		}
		if err := (supervisor.Client{Path: filepath.Join(env.StateDir(id), "sock")}).Destroy(); err != nil {
			errs = append(errs, sandboxError(id, err))
			continue
		}
		fmt.Fprintln(env.Stdout, id)
	}
	return errors.Join(errs...)
}

// GcCmd is `airlock sandbox gc`.
type GcCmd struct {
	Forget bool `help:"Also remove what this AIRLOCK_HOME keeps on the machine between sandboxes (its cgroup parents and lock files). Only when no airlock process uses this home: uninstalling, or a throwaway home in a script."`
}

// Run cleans what crashed airlock processes (or a crashed machine) left.
func (c GcCmd) Run(env *Env) error {
	b, err := env.Backend()
	if err != nil {
		return err
	}
	cleaned, err := b.GC()
	for _, id := range cleaned {
		fmt.Fprintf(env.Stdout, "removed cgroup of %s\n", id)
	}
	env.cleanStateDirs()
	if c.Forget && err == nil {
		var errs []error
		for _, dir := range stateDirs {
			if ferr := linux.Forget(filepath.Join(env.Home, dir)); ferr != nil {
				errs = append(errs, fmt.Errorf("forget %s: %w", dir, ferr))
			}
		}
		err = errors.Join(errs...)
	}
	return err
}

// The state directories of a home's sandbox backends, below AIRLOCK_HOME:
// the sandbox commands' and runs' (Env.Backend), and the E2B API's.
const (
	RunStateDir = "run"
	E2BStateDir = "e2b"
)

// stateDirs are all of them, for gc --forget.
var stateDirs = []string{RunStateDir, E2BStateDir}

// Supervise creates a sandbox of spec with b and holds it for `airlock
// sandbox create`: its state (info.json, the socket sandbox exec talks to)
// lives in env.StateDir(ID) while it lives. prepare, when not nil, runs
// on the new sandbox first (a template's start command and readiness
// check); ready is told the sandbox's id once it is up; Supervise then serves its socket until ctx ends (rm, the
// TTL, a signal), and destroys the sandbox.
func Supervise(ctx context.Context, env *Env, b sandbox.Backend, spec sandbox.Spec, prepare Prepare, ready func(id string)) error {
	sb, err := b.Create(ctx, spec)
	if err != nil {
		return err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		_ = sb.Destroy(dctx)
		_ = os.RemoveAll(env.StateDir(sb.ID()))
	}()
	if prepare != nil {
		if err := prepare(ctx, sb); err != nil {
			return err
		}
	}
	dir := env.StateDir(sb.ID())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	info, _ := json.Marshal(sb.Info())
	if err := os.WriteFile(filepath.Join(dir, "info.json"), info, 0o600); err != nil {
		return err
	}
	if env.EventLog != nil {
		sink, end, err := env.EventLog(dir, sb.ID())
		if err != nil {
			return err
		}
		stop := sandbox.WatchEvents(ctx, sb, sink)
		// Before the sandbox is destroyed (deferred above): what its
		// ended commands reported is kept.
		defer func() {
			stop()
			end()
		}()
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "sock"), Net: "unix"})
	if err != nil {
		return err
	}
	ready(sb.ID())
	srv := &supervisor.Server{SB: sb, Owner: os.Getuid(), Timeout: 10 * time.Minute, MaxOutput: 16 << 20}
	if u, ok := sb.(interface{ Usage() sandbox.LiveUsage }); ok {
		srv.Usage = u.Usage
	}
	return srv.Serve(ctx, ln)
}
