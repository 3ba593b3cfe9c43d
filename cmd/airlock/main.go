// Command airlock is the host: it runs agents' commands in disposable
// sandboxes and keeps everything of value on the host.
package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"

	"github.com/airlockrun/airlock/internal/cli"
	"golang.org/x/sys/unix"
)

func init() {
	// Keep main on the process's first thread: the parent-death signal
	// below belongs to the thread that sets it.
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "sandbox" && os.Args[2] == "run" {
		// A foreground sandbox dies with whatever started it (like
		// bwrap --die-with-parent); the sandbox dies with airlock.
		ppid := os.Getppid()
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
		if os.Getppid() != ppid {
			os.Exit(125)
		}
	}
	os.Exit(run())
}

func run() int {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	home := os.Getenv("AIRLOCK_HOME")
	if home == "" {
		userHome, _ := os.UserHomeDir()
		home = cli.DefaultHome(os.Geteuid(), os.Getenv("XDG_DATA_HOME"), userHome)
	}
	executor := os.Getenv("AIRLOCK_EXEC")
	if executor == "" {
		executor = filepath.Join(filepath.Dir(self), "airlock-exec")
	}
	env := &cli.Env{
		Ctx: context.Background(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Home: home, Executor: executor, Self: self, Getenv: os.Getenv,
	}
	return cli.Main(env, os.Args[1:])
}
