package sandboxcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
)

// RunCmd is `airlock sandbox run`.
type RunCmd struct {
	SpecFlags
	ExecFlags
	Interactive bool     `short:"i" help:"Pass stdin to the command."`
	Command     []string `arg:"" optional:"" passthrough:"" help:"Command and arguments, after -- (with --image, default: the image's entrypoint and cmd)." name:"cmd"`
}

// Egress starts an egress proxy for the sandbox spec describes and points
// spec at it; stop ends the proxy once the sandbox is gone.
type Egress func(ctx context.Context, spec *sandbox.Spec) (stop func(), err error)

// Run creates a sandbox with the built-in defaults and no egress proxy,
// runs the command, destroys the sandbox.
func (c *RunCmd) Run(env *Env) error {
	spec, err := c.Spec(BuiltinDefaults, false)
	if err != nil {
		return UsageError{err}
	}
	return c.Start(env, spec, BuiltinDefaults, nil)
}

// Prepare brings a new sandbox to readiness before a command runs in it
// or it is handed over (a template's start command and readiness check).
// Its error ends the sandbox.
type Prepare func(ctx context.Context, sb sandbox.Sandbox) error

// Start creates a sandbox from spec (egress, when not nil, starts its
// proxy first), runs the command in it with d's bounds where no flag sets
// them, and destroys it.
func (c *RunCmd) Start(env *Env, spec sandbox.Spec, d Defaults, egress Egress) error {
	return c.StartPrepared(env, spec, d, egress, nil)
}

// Preparation brings a new sandbox to readiness before its command (a
// template's start command and readiness check).
type Preparation struct {
	// Run prepares a sandbox this process made.
	Run Prepare
	// Handoff says the same to a sandbox host, which may serve the command
	// from sandboxes it prepared ahead; nil: the command is not handed off.
	Handoff *handoff.Prepare
}

// StartPrepared is Start with prep, when not nil, bringing the sandbox to
// readiness before the command.
func (c *RunCmd) StartPrepared(env *Env, spec sandbox.Spec, d Defaults, egress Egress, prep *Preparation) error {
	bounded, err := c.command(d)
	if err != nil {
		return err
	}
	argv, timeout, maxOut := bounded.Argv, bounded.Timeout, bounded.MaxOutput
	if egress == nil && !env.NoHandoff && (prep == nil || prep.Handoff != nil) {
		// The proxy of an egress policy lives in this process: such a run
		// always starts its sandbox itself, as does one whose preparation
		// a host cannot be told.
		var hp *handoff.Prepare
		if prep != nil {
			hp = prep.Handoff
		}
		if handed, err := c.handOff(env, spec, bounded, hp); handed {
			return err
		}
		Mark("handoff")
	}
	if env.OneP && egress == nil {
		// Before Create, not once its executor has started (Backend.OnStart)
		// where the stop of the world would be off the critical path: with
		// a second P until then the goroutine below ran on a thread of its
		// own, 26-32 more page faults and 14 more context switches a run,
		// and the start was no sooner (docs/benchmarks.md, front29).
		runtime.GOMAXPROCS(1)
		Mark("onep")
	}
	b, err := env.Backend()
	if err != nil {
		return err
	}
	Mark("backend")
	// The reap of what earlier runs left need not come before the
	// executor's start: it runs once the executor has started, beside its
	// Go start (Backend.OnStart), or when Create ends without one.
	started := make(chan struct{})
	var startOnce sync.Once
	begun := func() { startOnce.Do(func() { close(started) }) }
	b.OnStart(begun)
	ctx, cancel := context.WithCancel(env.Ctx)
	defer cancel()
	// Collect what crashed runs left while this one starts, not after it
	// (GC is safe beside Create, see Backend.GC), and only when the last
	// run's sweep is gcInterval old: a run that ended normally leaves
	// nothing, and the sweep was a tenth of the front end's CPU and page
	// faults in every run.
	// Without a sweep, the backend's one-time setup (Detect) runs beside
	// Create's id lock, and the reap once the executor has started.
	sweep := env.gcDue(time.Now())
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		if sweep {
			env.GC()
			return
		}
		b.Detect()
		<-started
		b.Reap()
	}()
	defer func() { <-gcDone }()
	defer begun() // first: the reap may not wait for a start that never comes
	defer b.OnStart(nil)
	Mark("gcdue")
	if egress != nil {
		stop, err := egress(ctx, &spec)
		if err != nil {
			return err
		}
		defer stop()
	}
	sb, err := b.Create(ctx, spec)
	begun()
	if err != nil {
		return err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		// This process exits next: it kills the sandbox and leaves the
		// rest of its teardown to the kernel and the next run.
		if d, ok := sb.(interface{ DestroyDetached(context.Context) error }); ok && !env.NoDetach {
			_ = d.DestroyDetached(dctx)
			return
		}
		_ = sb.Destroy(dctx)
	}()
	if prep != nil && prep.Run != nil {
		if err := prep.Run(ctx, sb); err != nil {
			return err
		}
	}
	cmd := sandbox.Command{Argv: argv, Stdout: env.Stdout, Stderr: env.Stderr, Timeout: timeout, MaxOutput: maxOut}
	if c.Interactive {
		cmd.Stdin = env.Stdin
	}
	sigs := catchSignals()
	p, err := sb.Start(ctx, cmd)
	if err != nil {
		sigs.release()
		return err
	}
	stop := sigs.forward(p.Signal)
	res, err := p.Wait(ctx)
	stop()
	if err != nil {
		return err
	}
	return finish(env, res, c.JSON)
}

// command is the run's command line with its bounds (d's where no flag
// sets them), without streams.
func (c *RunCmd) command(d Defaults) (sandbox.Command, error) {
	maxOut, timeout := d.Output, d.CommandTimeout
	if maxOut == 0 {
		maxOut = defaultOutput
	}
	var err error
	if c.MaxOutput != "" {
		if maxOut, err = sandbox.ParseSize(c.MaxOutput); err != nil {
			return sandbox.Command{}, UsageError{fmt.Errorf("--max-output: %w", err)}
		}
	}
	if c.Timeout > 0 {
		timeout = c.Timeout
	}
	argv, err := commandArgs(c.Command, "airlock sandbox run [flags] -- CMD [ARG...]")
	if err != nil {
		return sandbox.Command{}, err
	}
	return sandbox.Command{Argv: argv, Timeout: timeout, MaxOutput: maxOut}, nil
}

// handOff runs cmd in a sandbox of spec made by the sandbox host of
// env.Home (airlock sandbox daemon) when one runs, with the same streams,
// bounds, signals, result and exit status as a sandbox of this process's
// own; prep, when not nil, is how the host prepares the sandbox. handed
// is false when no host took it (none, a stale socket, another user's, one
// that prepares no sandboxes) or the streams are not files it could pass:
// nothing ran, and the caller starts the sandbox itself.
func (c *RunCmd) handOff(env *Env, spec sandbox.Spec, cmd sandbox.Command, prep *handoff.Prepare) (handed bool, err error) {
	stdout, ok := env.Stdout.(*os.File)
	stderr, ok2 := env.Stderr.(*os.File)
	if !ok || !ok2 {
		return false, nil
	}
	req, err := handoffRequest(spec, cmd, prep)
	if err != nil {
		return false, nil
	}
	stdio := handoff.Stdio{Stdout: stdout, Stderr: stderr}
	if c.Interactive && env.Stdin != nil {
		stdio.Stdin = env.Stdin
	}
	sigs := catchSignals()
	p, err := handoff.Start(env.Ctx, handoff.SocketPath(env.Home), req, stdio)
	if err != nil {
		sigs.release()
		if errors.Is(err, handoff.ErrNoHost) {
			return false, nil
		}
		return true, err
	}
	stop := sigs.forward(p.Signal)
	res, err := p.Wait(env.Ctx)
	stop()
	if err != nil {
		return true, err
	}
	return true, finish(env, res, c.JSON)
}

// handoffRequest is the request that hands cmd (its command line and
// bounds) to a sandbox host, in a sandbox of spec prepared by prep (nil:
// none). An error means spec's host paths cannot be made absolute: the
// command is not handed off.
func handoffRequest(spec sandbox.Spec, cmd sandbox.Command, prep *handoff.Prepare) (handoff.Request, error) {
	if err := absPaths(&spec); err != nil {
		return handoff.Request{}, err
	}
	return handoff.Request{Spec: spec, Argv: cmd.Argv, Timeout: cmd.Timeout, MaxOutput: cmd.MaxOutput, Prepare: prep}, nil
}

// FrontWords reads words, the command line of `airlock sandbox run` after
// "run" as a client handed it over unread (handoff.Request.Words, from the
// front end's entry before the Go runtime), as this front end reads it in
// the caller's working directory dir (handoff.Request.Dir), and reports as
// it would (finish, Status): a sandbox host (airlock sandbox daemon)
// serves such a request with it. ok is false for a command line whose
// reading depends on the caller's surroundings beyond dir (a path under
// /proc or /dev/fd: its own process; --image: its image store; a relative
// host path without dir, or with a usage error: the error is worded with
// the path as typed) or that the front end leaves to airlock-host: the
// caller's own front end then reads it. With -i the request's Stdin is
// set: the command reads the caller's stdin, which the caller copies into
// the pipe it sent with the words.
func FrontWords(words []string, dir string) (w handoff.Words, ok bool) {
	c, req, err := wordsRequest(words, dir)
	if c == nil {
		return handoff.Words{}, false
	}
	w.Request, w.Err = req, err
	w.Report = func(stderr io.Writer, res sandbox.Result, err error) int {
		if err == nil {
			err = finish(&Env{Stderr: stderr}, res, c.JSON)
		}
		return Status(stderr, err)
	}
	return w, true
}

// wordsRequest reads args, a command line of `airlock sandbox run` after
// "run", as the front end does in the working directory dir (parse, then
// RunCmd.Run's and StartPrepared's Spec, command and handoffRequest, with
// their errors), into the request that hands it to a sandbox host (with
// -i, Stdin set, as handoff.Start sets it for the front end's stdin). c is
// nil when the front end leaves args to airlock-host (Fast, parse), when
// they name an image, when a host path in them cannot be read from dir
// (hostPaths), or when they hold a relative host path and a usage error;
// err is the usage error the front end reports for them.
func wordsRequest(args []string, dir string) (c *ImageRunCmd, req handoff.Request, err error) {
	c = &ImageRunCmd{}
	if !Fast(append([]string{"sandbox", "run"}, args...)) || !parse(c, args) || c.Image != "" {
		return nil, req, nil
	}
	relative, ok := hostPaths(&c.SpecFlags, dir)
	if !ok {
		return nil, req, nil
	}
	spec, err := c.Spec(BuiltinDefaults, false)
	if err != nil && relative {
		// Worded with the absolute path here, and with the path as typed
		// by the caller's front end: left to it.
		return nil, req, nil
	}
	if err != nil {
		return c, req, UsageError{err}
	}
	cmd, err := c.command(BuiltinDefaults)
	if err != nil {
		return c, req, err
	}
	if req, err = handoffRequest(spec, cmd, nil); err != nil {
		return nil, req, nil
	}
	req.Stdin = c.Interactive
	return c, req, nil
}

// hostPaths makes the relative host paths f names absolute from dir, the
// caller's working directory, as filepath.Abs makes them in the caller's
// own front end, and reports whether there were any (a mount's source must
// be absolute already). ok is false when one cannot be read the same in
// this process: relative with dir empty or not absolute, or under /proc or
// /dev/fd, or /dev/stdin, /dev/stdout or /dev/stderr, which name the
// reading process's own.
func hostPaths(f *SpecFlags, dir string) (relative, ok bool) {
	abs := func(p *string) bool {
		if *p == "" {
			return true
		}
		if !filepath.IsAbs(*p) {
			if !filepath.IsAbs(dir) {
				return false
			}
			relative = true
			*p = filepath.Join(dir, *p)
		}
		c := filepath.Clean(*p)
		return c != "/proc" && !strings.HasPrefix(c, "/proc/") && c != "/dev/fd" && !strings.HasPrefix(c, "/dev/fd/") && !strings.HasPrefix(c, "/dev/std")
	}
	ok = abs(&f.Workspace) && abs(&f.Rootfs) && abs(&f.ProxySocket)
	for _, m := range f.Mount {
		// Left as typed: a relative source is the front end's usage
		// error (parseMount), the same here.
		src, _, _ := strings.Cut(m, ":")
		ok = ok && (!filepath.IsAbs(src) || abs(&src))
	}
	return relative, ok
}

// absPaths makes spec's host paths absolute, from this process's working
// directory: the host that makes the sandbox has its own.
func absPaths(spec *sandbox.Spec) error {
	var errs []error
	abs := func(p *string) {
		if *p == "" {
			return
		}
		a, err := filepath.Abs(*p)
		errs = append(errs, err)
		*p = a
	}
	abs(&spec.Workspace)
	abs(&spec.RootFS)
	abs(&spec.ProxySocket)
	spec.Layers = slices.Clone(spec.Layers)
	for i := range spec.Layers {
		abs(&spec.Layers[i])
	}
	spec.Mounts = slices.Clone(spec.Mounts)
	for i := range spec.Mounts {
		abs(&spec.Mounts[i].Source)
	}
	return errors.Join(errs...)
}

// finish reports a result and turns it into the process exit status.
func finish(env *Env, res sandbox.Result, asJSON bool) error {
	// A command's own exit status, 127 included, goes without a word.
	airlocks := res.NotStarted != "" || res.Outcome != sandbox.OutcomeExited && res.Outcome != sandbox.OutcomeSignaled
	if res.Message != "" && airlocks {
		fmt.Fprintf(env.Stderr, "airlock: %s\n", res.Message)
	}
	if asJSON {
		_ = WriteJSON(env.Stderr, res) // the command's status matters more
	}
	if code := res.ExitStatus(); code != 0 {
		return ExitCode(code)
	}
	return nil
}

// caught are the signals a command's caller forwards to it, caught from
// before the command starts: one sent while it starts (a command that
// says it runs, and its caller signalled at once) reaches the command
// rather than ending the caller with its default action. The thin entry
// blocks them from its request on for the same reason.
type caught struct {
	ch   chan os.Signal
	done chan struct{}
}

// catchSignals catches SIGINT, SIGTERM, SIGHUP and SIGQUIT from now on.
func catchSignals() *caught {
	c := &caught{ch: make(chan os.Signal, 4), done: make(chan struct{})}
	signal.Notify(c.ch, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT)
	return c
}

// forward passes the signals caught, before and from now on, to send
// until stop.
func (c *caught) forward(send func(unix.Signal) error) (stop func()) {
	go func() {
		for {
			select {
			case s := <-c.ch:
				_ = send(s.(unix.Signal))
			case <-c.done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(c.ch)
		close(c.done)
	}
}

// release, for a command that did not start, stops catching and raises
// again what was caught, which then acts as it would have had nothing
// caught it. The signal goes to this thread, which takes it on the way
// out of the system call: sent to the process, another thread could take
// it only after this one went on to exit with a status of its own.
func (c *caught) release() {
	signal.Stop(c.ch)
	for {
		select {
		case s := <-c.ch:
			runtime.LockOSThread()
			_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), s.(unix.Signal))
			runtime.UnlockOSThread()
		default:
			return
		}
	}
}

// commandArgs returns the command after "--". A first word that looks like
// a flag is an unknown flag, not a command.
func commandArgs(args []string, usage string) ([]string, error) {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	} else if len(args) > 0 && strings.HasPrefix(args[0], "-") {
		return nil, UsageError{fmt.Errorf("unknown flag %s", args[0])}
	}
	if len(args) == 0 {
		return nil, UsageError{errors.New("no command given: " + usage)}
	}
	return args, nil
}
