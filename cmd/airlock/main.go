// Command airlock is the host's command line. It runs the plain sandbox
// commands (sandbox run without egress flags, with --image when the image is
// unpacked in the store, exec, ls, rm, gc) itself, with
// only what they need linked in, so a sandbox starts fast; everything else
// it hands to airlock-host, installed beside it, by exec.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// init sets a sandbox run's parent-death signal. An init function runs on
// the main thread, with the main goroutine locked to it, and the runtime
// never ends the main thread: the signal stays with the process for its
// life without keeping main locked to it afterwards. A locked main
// goroutine costs the handed-off path a thread of the runtime's (its
// template thread) and a P handed off each time it waits.
func init() {
	if args := os.Args[1:]; sandboxcli.Fast(args) && args[1] == "run" {
		sandboxcli.DieWithParent()
	}
	sandboxcli.Mark("init")
}

func main() {
	sandboxcli.Mark("main")
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	host := filepath.Join(filepath.Dir(self), "airlock-host")
	args := os.Args[1:]
	if sandboxcli.Fast(args) {
		env := sandboxcli.OSEnv(host)
		sandboxcli.Mark("osenv")
		env.OneP = os.Getenv("GOMAXPROCS") == ""
		if status, ok := sandboxcli.Main(&env, args); ok {
			os.Exit(status)
		}
	}
	err = unix.Exec(host, append([]string{os.Args[0]}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "airlock: %s: %v (it is installed beside airlock)\n", host, err)
	os.Exit(125)
}
