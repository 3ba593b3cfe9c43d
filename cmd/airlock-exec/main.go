// Command airlock-exec is the executor: PID 1 of every airlock sandbox. It is
// started by the airlock host, never by hand. Started on the host as
// `airlock-exec spawn`, it is the host's spawner instead (package spawn).
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
