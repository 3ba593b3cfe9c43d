// Package sandboxcli is the part of airlock's command line that runs
// commands in sandboxes without a policy document: `airlock sandbox run`
// (when no egress flag is given), `exec`, `ls`, `rm` and `gc`. Package cli
// embeds these commands in the whole command line; cmd/airlock links only
// this package for them, so that a sandbox starts without paying for the
// initialisation of the policy engine, the stores and telemetry (a test in
// cmd/airlock keeps those out of its imports).
//
// Exit statuses: the command's own; 128+N signal N; 124 timeout; 137 limit
// kill; 127 the command was not found and 126 it could not be executed
// (said on stderr, from the executor's reason, not from the code); 125
// airlock's own error; 2 bad usage or input (a missing workspace, no
// sandbox of that id).
package sandboxcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

// Env is everything a sandbox command may use from its surroundings.
type Env struct {
	Ctx    context.Context
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Home is $AIRLOCK_HOME: all host state lives under it.
	Home string
	// Executor is the airlock-exec binary.
	Executor string
	// Self is the airlock binary that holds every command, for starting
	// supervisors.
	Self string
	// Spawner starts sandboxes through a spawner process
	// (linux.Config.Spawner): right for a large or long-running host
	// process, not for the small front end.
	Spawner bool
	// NoHandoff makes sandbox run start its sandbox itself even when a
	// sandbox host (airlock sandbox daemon) runs: the cold path, for
	// benchmarks and debugging ($AIRLOCK_NO_HANDOFF).
	NoHandoff bool
	// NoDetach makes sandbox run wait, before it exits, until its
	// sandbox's processes are gone and its cgroup removed (see
	// linux.Sandbox.DestroyDetached); set by $AIRLOCK_NO_DETACH.
	NoDetach bool
	// OneP makes a sandbox run that starts its sandbox itself, with no
	// egress proxy in this process, go on with one P (runtime.GOMAXPROCS)
	// once it knows it does: what is left is Create, the Prepare beside it
	// and a wait for the command, and with a second P every hand-off
	// between them woke another thread. Set by the small front end
	// (cmd/airlock) when $GOMAXPROCS is not; not on the handed-off path,
	// where the call cost more than it saved (docs/benchmarks.md).
	OneP bool
	// EventLog, when set, opens where Supervise keeps what its sandbox
	// id reports through its event channel, in the sandbox's state
	// directory dir; end is called once the channel is drained, before
	// the sandbox is destroyed. Nil: the channel is not read.
	EventLog func(dir, id string) (sink sandbox.EventSink, end func(), err error)

	backend *linux.Backend
}

// OSEnv is the Env of a command started from a shell: the standard
// streams; $AIRLOCK_HOME, else DefaultHome; $AIRLOCK_EXEC, else
// airlock-exec beside the running binary; self, the binary that holds
// every command; NoHandoff when $AIRLOCK_NO_HANDOFF is set.
func OSEnv(self string) Env {
	home := os.Getenv("AIRLOCK_HOME")
	if home == "" {
		userHome, _ := os.UserHomeDir()
		home = DefaultHome(os.Geteuid(), os.Getenv("XDG_DATA_HOME"), userHome)
	}
	executor := os.Getenv("AIRLOCK_EXEC")
	if executor == "" {
		if exe, err := os.Executable(); err == nil {
			executor = filepath.Join(filepath.Dir(exe), "airlock-exec")
		}
	}
	return Env{
		Ctx: context.Background(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Home: home, Executor: executor, Self: self,
		NoHandoff: os.Getenv("AIRLOCK_NO_HANDOFF") != "",
		NoDetach:  os.Getenv("AIRLOCK_NO_DETACH") != "",
	}
}

// DefaultHome is the per-user data directory: /var/lib/airlock for root,
// $XDG_DATA_HOME/airlock or ~/.local/share/airlock otherwise.
func DefaultHome(uid int, xdgData, home string) string {
	if uid == 0 {
		return "/var/lib/airlock"
	}
	if xdgData != "" {
		return filepath.Join(xdgData, "airlock")
	}
	return filepath.Join(home, ".local", "share", "airlock")
}

// Backend returns the native sandbox backend.
func (e *Env) Backend() (*linux.Backend, error) {
	if e.backend != nil {
		return e.backend, nil
	}
	b, err := linux.New(linux.Config{Executor: e.Executor, StateDir: filepath.Join(e.Home, RunStateDir), Spawner: e.Spawner})
	if err != nil {
		return nil, err
	}
	e.backend = b
	return b, nil
}

// GC cleans, best effort, what crashed airlock processes left.
func (e *Env) GC() {
	if b, err := e.Backend(); err == nil {
		_, _ = b.GC()
	}
	e.cleanStateDirs()
}

// gcInterval is how long after one `sandbox run` swept what crashed
// airlock processes left the next run sweeps again. `sandbox gc` sweeps at
// once, and `sandbox daemon` when it starts.
const gcInterval = 30 * time.Second

// gcStamp is the file below Home whose modification time is the last
// sweep's start.
var gcStamp = filepath.Join(RunStateDir, "gc-stamp")

// gcDue reports whether a sweep is due at now (none began in the
// gcInterval before it, or the clock went back) and, if so, marks one
// begun. Runs that start together may both sweep: sweeps are safe beside
// each other and beside Create.
func (e *Env) gcDue(now time.Time) bool {
	path := filepath.Join(e.Home, gcStamp)
	if st, err := os.Stat(path); err == nil {
		if age := now.Sub(st.ModTime()); age >= 0 && age < gcInterval {
			return false
		}
	}
	if err := os.Chtimes(path, now, now); err != nil {
		// None yet (or unreadable): make it; a home that cannot keep
		// it sweeps every run, as before.
		_ = os.MkdirAll(filepath.Dir(path), 0o700)
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
			_ = f.Close()
			_ = os.Chtimes(path, now, now)
		}
	}
	return true
}

// StateDir is where the supervisor of long-lived sandbox id keeps its
// socket and description.
func (e *Env) StateDir(id string) string {
	return filepath.Join(e.Home, "sandboxes", id)
}

// cleanStateDirs removes the state directories of supervisors that are
// gone.
func (e *Env) cleanStateDirs() {
	b, err := e.Backend()
	if err != nil {
		return
	}
	// Listed before the live set is read, for the reason Backend.GC gives.
	ents, _ := os.ReadDir(filepath.Join(e.Home, "sandboxes"))
	if len(ents) == 0 {
		return
	}
	live, err := b.Live()
	if err != nil {
		return
	}
	for _, ent := range ents {
		if !live[ent.Name()] {
			_ = os.RemoveAll(e.StateDir(ent.Name()))
		}
	}
}

// UsageError marks bad input: exit status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// ReportedError is an error printed as such that exits with a status of its
// own rather than 125.
type ReportedError struct {
	Err  error
	Code int
}

func (e ReportedError) Error() string { return e.Err.Error() }
func (e ReportedError) Unwrap() error { return e.Err }

// ExitCode is a command's exit status passed through airlock.
type ExitCode int

func (e ExitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// Status maps a command's error to the process exit status, printing what
// needs saying on stderr.
func Status(stderr io.Writer, err error) int {
	var code ExitCode
	var usage UsageError
	var reported ReportedError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &reported):
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return reported.Code
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "airlock: %v\n", err)
		return 125
	}
}

// Fast reports whether Main may run args: a sandbox command of Commands,
// without help asked for. Anything else belongs to the whole command line.
func Fast(args []string) bool {
	if len(args) < 2 || args[0] != "sandbox" {
		return false
	}
	switch args[1] {
	case "run", "exec", "ls", "rm", "gc":
	default:
		return false
	}
	for _, a := range args[2:] {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" {
			return false
		}
	}
	return true
}

// Main runs args, a command Fast accepted, and returns the exit status. It
// returns ok false, having done nothing, when it cannot be sure how the
// whole command line would read args (an unknown flag, an egress flag, a
// bad value, a form it does not read; see parse): the whole command line
// then runs them and says what is wrong in its own words.
func Main(env *Env, args []string) (status int, ok bool) {
	cmd := command(args[1])
	if cmd == nil || !parse(cmd, args[2:]) {
		return 0, false
	}
	Mark("parsed")
	err := cmd.Run(env)
	if errors.Is(err, errDecline) {
		return 0, false
	}
	return Status(env.Stderr, err), true
}

// Mark records that the front end finished step name, for AIRLOCK_TRACE's
// `trace front:` line (linux.FrontMark).
func Mark(name string) { linux.FrontMark(name) }

// command returns a new command struct for `airlock sandbox NAME`, or nil
// when this package does not run NAME.
func command(name string) interface{ Run(*Env) error } {
	switch name {
	case "run":
		return &ImageRunCmd{}
	case "exec":
		return &ExecCmd{}
	case "ls":
		return &LsCmd{}
	case "rm":
		return &RmCmd{}
	case "gc":
		return &GcCmd{}
	}
	return nil
}

// DieWithParent makes the process die with whatever started it (like bwrap
// --die-with-parent): a foreground sandbox dies with airlock, so it must
// die with airlock's parent too. The signal is tied to the calling thread,
// which must outlive the command (the main thread, or one Go never ends).
func DieWithParent() {
	ppid := os.Getppid()
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	if os.Getppid() != ppid {
		os.Exit(125) // the parent is already gone
	}
}

// WriteJSON is the one shape of every command's --json output, JSON lines:
// each of vs as one compact JSON object on a line of its own. A list is
// its items, so an empty one prints nothing; a single object is one line.
// Tools that read JSON lines (jq, a loop over lines) take both without a
// special case, and a long list streams.
func WriteJSON[T any](w io.Writer, vs ...T) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return nil
}
