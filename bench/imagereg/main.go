// Command imagereg serves one generated multi-layer image from an
// in-process registry on loopback, for bench/images.sh: it prints the
// image's reference (127.0.0.1:PORT/bench:1) and its size once the image
// is pushed, then serves until its standard input closes.
//
// The image is shaped like a toolchain image: each layer holds text files
// of 4–64 KiB (compressible) and binaries of 1–8 MiB (random), half the
// bytes each, gzip-compressed at the fastest level, as build tools do.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	mib := flag.Int("mib", 500, "uncompressed size of the image, MiB")
	layers := flag.Int("layers", 5, "number of layers")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		log.Fatal(http.Serve(ln, registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	}()
	img := empty.Image
	r := rand.New(rand.NewPCG(1, 2))
	per := int64(*mib) << 20 / int64(*layers)
	for i := range *layers {
		b := layerTar(r, i, per)
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			log.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			log.Fatal(err)
		}
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/usr/bin:/bin"}, Cmd: []string{"/bin/sh"}})
	if err != nil {
		log.Fatal(err)
	}
	ref, err := name.ParseReference(ln.Addr().String() + "/bench:1")
	if err != nil {
		log.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		log.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		log.Fatal(err)
	}
	var size int64
	for _, l := range ls {
		n, err := l.Size()
		if err != nil {
			log.Fatal(err)
		}
		size += n
	}
	fmt.Printf("%s %d\n", ref, size)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// addBusybox puts the host's static busybox, when it has one, at /bin/sh
// and /bin/test, so that a sandbox of the image can run a check.
func addBusybox(tw *tar.Writer) {
	b, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return
	}
	for _, h := range []*tar.Header{
		{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir},
		{Name: "bin/busybox", Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg},
		{Name: "bin/sh", Linkname: "busybox", Mode: 0o777, Typeflag: tar.TypeSymlink},
		{Name: "bin/test", Linkname: "busybox", Mode: 0o777, Typeflag: tar.TypeSymlink},
	} {
		if err := tw.WriteHeader(h); err != nil {
			log.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(b); err != nil {
				log.Fatal(err)
			}
		}
	}
}

// layerTar is a layer of about n bytes: half text files, half random ones.
func layerTar(r *rand.Rand, layer int, n int64) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	words := []string{"func", "return", "import", "package", "error", "nil", "struct", "string", "value", "context", "if", "for", "range"}
	if layer == 0 {
		addBusybox(tw)
	}
	var text, bin int64
	for f := 0; text+bin < n; f++ {
		var data []byte
		if text <= bin {
			size := 4<<10 + r.IntN(60<<10)
			var b bytes.Buffer
			for b.Len() < size {
				fmt.Fprintf(&b, "%s %s(%d) %s\n", words[r.IntN(len(words))], words[r.IntN(len(words))], r.IntN(1000), words[r.IntN(len(words))])
			}
			data = b.Bytes()
			text += int64(len(data))
		} else {
			data = make([]byte, 1<<20+r.IntN(7<<20))
			for i := 0; i+8 <= len(data); i += 8 {
				v := r.Uint64()
				for k := range 8 {
					data[i+k] = byte(v >> (8 * k))
				}
			}
			bin += int64(len(data))
		}
		h := &tar.Header{Name: fmt.Sprintf("usr/share/l%d/d%03d/f%05d", layer, f/100, f), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			log.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			log.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		log.Fatal(err)
	}
	return buf.Bytes()
}
