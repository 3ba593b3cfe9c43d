// Command airlock-exec is the executor: PID 1 of every airlock sandbox. It is
// started by the airlock host, never by hand. Started on the host as
// `airlock-exec spawn`, it is the host's spawner instead (package spawn).
//
// The runtime names none of its memory mappings (decoratemappings=0, Go
// 1.25's prctl PR_SET_VMA on every mapping it makes): each is a system
// call more at every start, and under gVisor every system call is trapped
// (docs/gvisor.md, "Cold start").
//
//go:debug decoratemappings=0
package main

import (
	"fmt"
	"os"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/executor"
	"github.com/airlockrun/airlock/internal/executor/spawn"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "spawn" {
		if err := spawn.Serve(execproto.ControlFD); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-exec:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(executor.Main(os.Args))
}
