package egress

import (
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func pairs(b *testing.B) (sbClient, sbProxy, upProxy, upServer net.Conn) {
	dir := b.TempDir()
	ul, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		b.Fatal(err)
	}
	defer ul.Close()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer tl.Close()
	sbClient, _ = net.Dial("unix", ul.Addr().String())
	sbProxy, _ = ul.Accept()
	upProxy, _ = net.Dial("tcp", tl.Addr().String())
	upServer, _ = tl.Accept()
	return
}

func BenchmarkHalfCopy(b *testing.B) {
	for _, dir := range []string{"out", "in"} {
		b.Run(dir, func(b *testing.B) {
			c, sp, up, srv := pairs(b)
			defer c.Close()
			defer sp.Close()
			defer up.Close()
			defer srv.Close()
			it := newIdleTimer(time.Hour, func() {})
			defer it.stop()
			left := func() (int64, error) { return math.MaxInt64, nil }
			var h *tunnelHalf
			var w, r net.Conn
			if dir == "out" {
				h = &tunnelHalf{dst: up, src: sp, idle: it, left: left, countRead: func(int) {}}
				w, r = c, srv
			} else {
				h = &tunnelHalf{dst: sp, src: up, idle: it, left: left, countWrite: func(int) {}}
				w, r = srv, c
			}
			done := make(chan struct{})
			go func() { defer close(done); copyHalf(h, func() { sp.Close(); up.Close() }) }()
			rdone := make(chan int64)
			go func() { n, _ := io.Copy(io.Discard, r); rdone <- n }()
			block := make([]byte, 16<<10)
			b.SetBytes(1 << 20)
			t0 := cpu()
			for b.Loop() {
				for i := 0; i < 64; i++ {
					if _, err := w.Write(block); err != nil {
						b.Fatal(err)
					}
				}
			}
			w.(interface{ CloseWrite() error }).CloseWrite()
			<-rdone
			b.ReportMetric(float64(cpu()-t0)/float64(b.N), "cpu-ns/op")
			<-done
		})
	}
}

func cpu() time.Duration {
	var ru = new(rusage)
	getrusage(ru)
	return ru.total()
}

var _ = os.Getenv
