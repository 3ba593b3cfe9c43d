// Command filefloor is the floor of bench/e2b-download.sh on the machine
// it runs on: a bare net/http file server (http.FileServer, nothing else:
// no sandbox, no executor, no authentication, no compression) serving a
// directory on a loopback port, so that the same client's download of the
// same file from it and from airlock serve tell the client's own cost from
// the server's. It prints its address on stdout once it listens.
//
// Under /like-airlock/ it serves the same files answered as airlock's
// E2B GET /files answers a download on loopback: the same headers
// (Content-Type application/octet-stream, Content-Disposition,
// Vary, Content-Length; no Last-Modified, no Accept-Ranges) and the body
// written in airlock's 256 KiB writes (not sendfile), so that what is
// left between it and airlock is airlock's path out of the sandbox.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "the directory to serve")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(*dir)))
	mux.HandleFunc("/like-airlock/", func(w http.ResponseWriter, r *http.Request) {
		likeAirlock(w, r, *dir)
	})
	log.Fatal(http.Serve(ln, mux))
}

// likeAirlock answers as airlock's download handler does for a client on
// loopback (internal/e2b/envd.go, handleDownload).
func likeAirlock(w http.ResponseWriter, r *http.Request, dir string) {
	name := filepath.Base(strings.TrimPrefix(r.URL.Path, "/like-airlock/"))
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": name}))
	h.Add("Vary", "Accept-Encoding")
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	buf := make([]byte, 256<<10)
	// Through a plain writer, as airlock's: no ReadFrom, so no sendfile.
	_, _ = io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{f}, buf)
}
