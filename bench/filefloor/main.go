// Command filefloor is the floor of bench/e2b-download.sh on the machine
// it runs on: a bare net/http file server (http.FileServer, nothing else:
// no sandbox, no executor, no authentication, no compression) serving a
// directory on a loopback port, so that the same client's download of the
// same file from it and from airlock serve tell the client's own cost from
// the server's. It prints its address on stdout once it listens.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
)

func main() {
	dir := flag.String("dir", ".", "the directory to serve")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr())
	log.Fatal(http.Serve(ln, http.FileServer(http.Dir(*dir))))
}
