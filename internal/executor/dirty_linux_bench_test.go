package executor

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/execproto"
)

// BenchmarkDirtyDelta is a delta after one appended file in a tree of the
// checkpoint benchmarks' shape (18.7k entries: 560 directories of small
// files; empty files here, the walk only stats them), in this process (no
// sandbox): with the dirty set (tracked) and walking the whole tree
// (whole), as an rw workspace's executor did before. walked/op is the
// entries stat'ed.
func BenchmarkDirtyDelta(b *testing.B) {
	dir := b.TempDir()
	for _, s := range []struct {
		dir         string
		dirs, files int
	}{{"src", 200, 50}, {".git/objects", 256, 20}, {"node_modules", 100, 30}} {
		for d := range s.dirs {
			p := filepath.Join(dir, s.dir, fmt.Sprintf("d%04d", d))
			if err := os.MkdirAll(p, 0o755); err != nil {
				b.Fatal(err)
			}
			for f := range s.files {
				if err := os.WriteFile(filepath.Join(p, fmt.Sprintf("f%04d", f)), []byte("x"), 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	changed := filepath.Join(dir, "src/d0150/f0025")
	for _, tracked := range []bool{true, false} {
		name := "whole"
		if tracked {
			name = "tracked"
		}
		b.Run(name, func(b *testing.B) {
			c := newCheckpoints(dir, -1)
			if tracked {
				tr := newTracker(dir, "", ownPids)
				if tr == nil {
					b.Fatal("newTracker = nil")
				}
				defer tr.close()
				<-tr.started
				c.track = tr
			}
			res, err := c.take("", true, io.Discard, execproto.ChunkSize, nil)
			if err != nil {
				b.Fatal(err)
			}
			var walked int64
			for b.Loop() {
				b.StopTimer()
				f, err := os.OpenFile(changed, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = f.WriteString("x")
				f.Close()
				b.StartTimer()
				res, err = c.take(res.Baseline, false, io.Discard, execproto.ChunkSize, nil)
				if err != nil || res.Entries != 1 {
					b.Fatalf("take = %+v, %v; want the changed file alone", res, err)
				}
				walked += res.Walked
			}
			b.ReportMetric(float64(walked)/float64(b.N), "walked/op")
		})
	}
}
