// Command airlock-exec is the executor: PID 1 of every airlock sandbox. It is
// started by the airlock host, never by hand.
package main

import (
	"os"

	"github.com/airlockrun/airlock/internal/executor"
)

func main() {
	os.Exit(executor.Main(os.Args))
}
