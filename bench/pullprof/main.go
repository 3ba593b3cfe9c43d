// Command pullprof pulls one image into an image store, as `airlock image
// pull` does (image.Store.Pull), optionally under the CPU profiler, and
// prints the pull's wall time: what docs/benchmarks.md's profile of the
// pull was taken with, against bench/imagereg.
//
//	go run ./bench/pullprof -ref 127.0.0.1:PORT/bench:1 -dir /tmp/store -cpuprofile cpu.prof
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"time"

	"github.com/airlockrun/airlock/internal/image"
)

func main() {
	ref := flag.String("ref", "", "image to pull (plain HTTP on loopback)")
	dir := flag.String("dir", "", "image store directory (empty for a full pull)")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the pull to this file")
	flag.Parse()
	if *ref == "" || *dir == "" {
		log.Fatal("usage: pullprof -ref REF -dir DIR [-cpuprofile FILE]")
	}
	s, err := image.Open(*dir, image.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	t := time.Now()
	if _, err := s.Pull(context.Background(), *ref, image.Auth{}); err != nil {
		log.Fatal(err)
	}
	fmt.Println(time.Since(t))
}
