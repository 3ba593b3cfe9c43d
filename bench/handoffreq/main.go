// Command handoffreq writes to a file the framed request that `airlock
// sandbox run ARGS...` hands to a running sandbox daemon (package handoff),
// with the built-in defaults, built and encoded by the front end's own
// functions (sandboxcli.HandoffRequest). bench/handoffc, a measuring
// prototype of a client written in C, sends these bytes as they are, so
// that bench/compare.sh can time the warm path without a Go process's
// start on the client's side.
//
// Usage: handoffreq FILE [FLAGS] -- CMD [ARG...]
//
// The request holds the command line and the spec's host paths made
// absolute from this process's working directory; record it again when
// either changes.
package main

import (
	"fmt"
	"os"

	"github.com/airlockrun/airlock/internal/sandboxcli"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: handoffreq FILE [FLAGS] -- CMD [ARG...]")
		os.Exit(2)
	}
	b, err := sandboxcli.HandoffRequest(os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "handoffreq: %v\n", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], b, 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "handoffreq: %v\n", err)
		os.Exit(1)
	}
}
