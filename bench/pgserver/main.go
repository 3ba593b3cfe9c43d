// Command pgserver runs a throwaway PostgreSQL server for benchmarks: it
// prints the server's URL for database "postgres" on stdout, then serves
// until stdin is closed or it is signalled, and removes the cluster.
// Benchmarks only (bench/workers.sh STORE=postgres).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

func main() {
	srv, err := pgtest.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		os.Exit(1)
	}
	fmt.Println(srv.URL("postgres"))
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-done:
	case <-sig:
	}
	if err := srv.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgserver:", err)
		os.Exit(1)
	}
}
