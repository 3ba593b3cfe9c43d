package chunk_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// cpuNow returns the process's CPU time (user and system) in ns: the
// measure that holds on a busy machine.
func cpuNow() int64 {
	var u syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return u.Utime.Nano() + u.Stime.Nano()
}

// BenchmarkGet: reading one chunk of 1 MiB as a restore does (read from
// the directory, decompressed, checked against its ID), of random bytes
// (stored raw: the check is most of it) and of text. Each Get's CPU is
// what a restore stream spends per MiB besides writing it.
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	rnd := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range rnd {
		rnd[i] = byte(r.Uint32())
	}
	var text strings.Builder
	for i := 0; text.Len() < 1<<20; i++ {
		fmt.Fprintf(&text, "func f%d() error { return nil } // %d\n", i, r.Uint32()%1000)
	}
	for _, c := range []struct {
		name string
		data []byte
	}{{"random", rnd}, {"text", []byte(text.String()[:1<<20])}} {
		b.Run(c.name, func(b *testing.B) {
			s, err := chunk.NewStore(newDir(b))
			if err != nil {
				b.Fatal(err)
			}
			key := chunk.TenantKey("bench")
			id := key.Hasher().Sum(c.data)
			if _, err := s.Put(ctx, id, c.data); err != nil {
				b.Fatal(err)
			}
			h := key.Hasher()
			b.SetBytes(int64(len(c.data)))
			buf := make([]byte, 0, len(c.data))
			c0 := cpuNow()
			for b.Loop() {
				if buf, err = s.GetWith(ctx, h, id, buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuNow()-c0)/float64(b.N), "cpu-ns/op")
		})
	}
}
