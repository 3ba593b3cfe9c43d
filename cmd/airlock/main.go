// Command airlock is the host's command line. It runs the plain sandbox
// commands (sandbox run without egress flags, exec, ls, rm, gc) itself, with
// only what they need linked in, so a sandbox starts fast; everything else
// it hands to airlock-host, installed beside it, by exec.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandboxcli"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	host := filepath.Join(filepath.Dir(self), "airlock-host")
	args := os.Args[1:]
	if sandboxcli.Fast(args) {
		if args[1] == "run" {
			// The parent-death signal belongs to this thread: keep it.
			runtime.LockOSThread()
			sandboxcli.DieWithParent()
		}
		env := sandboxcli.OSEnv(host)
		if status, ok := sandboxcli.Main(&env, args); ok {
			os.Exit(status)
		}
	}
	err = unix.Exec(host, append([]string{os.Args[0]}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "airlock: %s: %v (it is installed beside airlock)\n", host, err)
	os.Exit(125)
}
