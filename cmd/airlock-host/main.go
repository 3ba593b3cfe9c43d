// Command airlock-host is the whole airlock command line: agent runs, the
// run store, airlock serve, policies, secrets, and the sandbox commands with
// egress. Users run cmd/airlock, which runs the plain sandbox commands itself
// and hands everything else to this binary, installed beside it.
package main

import (
	"os"
	"runtime"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

func init() {
	// Keep main on the process's first thread: the parent-death signal
	// set for sandbox run belongs to the thread that sets it.
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "sandbox" && os.Args[2] == "run" {
		sandboxcli.DieWithParent()
	}
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	env := &cli.Env{Env: sandboxcli.OSEnv(self), Getenv: os.Getenv}
	// This binary is large and serves for long: a fork of it would stall
	// it (see linux.Config.Spawner).
	env.Spawner = true
	os.Exit(cli.Main(env, os.Args[1:]))
}
