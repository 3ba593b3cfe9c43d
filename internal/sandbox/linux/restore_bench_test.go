package linux_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
)

// BenchmarkRestoreInto is a restore as a run's recovery makes one: the
// 1 GiB workspace after a full checkpoint and 20 steps of one changed file,
// streamed from the store into a fresh sandbox's empty /workspace and
// unpacked there by the executor (Tree.TarStream into checkpoint.Untar, as
// RestoreInto sends it; RestoreInto's mark of
// the tree after it is not timed), against extracting one full tar of the
// same tree into another fresh sandbox the same way: the restore's own tar
// stream, written to a file once, streamed from the file. So the ratio is
// what the store (chunk reads, decompression, ID checks) adds to the
// extraction. The sides alternate, each input read once and dirty pages
// written back before each; CPU is the host process's and the sandbox's
// (its cgroup), user + system.
func BenchmarkRestoreInto(b *testing.B) {
	ws, size := benchTree(b)
	ctx := context.Background()
	dir := b.TempDir()
	blobs, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cd, err := chunk.NewDir(filepath.Join(dir, "chunks"))
	if err != nil {
		b.Fatal(err)
	}
	cs, err := chunk.NewStore(cd)
	if err != nil {
		b.Fatal(err)
	}
	st, err := checkpoint.New(blobs, cs)
	if err != nil {
		b.Fatal(err)
	}
	src, _ := benchCheckpointer(b, ws, sandbox.WorkspaceCOW)
	res, cr, err := st.Take(ctx, src, checkpoint.TakeRequest{Tenant: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		step := sandbox.Command{Argv: []string{"sh", "-c", fmt.Sprintf("echo step >> /workspace/src/d%04d/f0001", i*7)}}
		if r, err := sandbox.Run(ctx, src, step); err != nil || r.ExitCode != 0 {
			b.Fatalf("run: %+v %v", r, err)
		}
		if res, cr, err = st.Take(ctx, src, checkpoint.TakeRequest{Tenant: "bench", Parent: res.Digest, Since: cr.Baseline}); err != nil {
			b.Fatal(err)
		}
	}
	tree, err := st.Resolve(ctx, "bench", res.Digest)
	if err != nil {
		b.Fatal(err)
	}
	full := filepath.Join(dir, "full.tar")
	f, err := os.Create(full)
	if err != nil {
		b.Fatal(err)
	}
	if err := tree.WriteTar(ctx, f); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	be := benchBackend(b)
	limits := sandbox.Limits{MemoryBytes: 2 << 30, Pids: 512, CPUs: 2, DiskBytes: 4 << 30}
	fresh := func() sandbox.Sandbox {
		sb, err := be.Create(ctx, sandbox.Spec{Limits: limits})
		if err != nil {
			b.Fatal(err)
		}
		return sb
	}
	sides := []struct {
		input []string
		run   func(sb sandbox.Sandbox) error
	}{
		{[]string{filepath.Join(dir, "blobs"), filepath.Join(dir, "chunks")}, func(sb sandbox.Sandbox) error {
			// As RestoreInto sends it.
			src := tree.TarStream(ctx)
			defer src.Close()
			if err := checkpoint.Untar(ctx, sb, src, false); err != nil {
				return err
			}
			return src.Err()
		}},
		{[]string{full}, func(sb sandbox.Sandbox) error {
			f, err := os.Open(full)
			if err != nil {
				return err
			}
			defer f.Close()
			return checkpoint.Untar(ctx, sb, struct{ io.Reader }{f}, false)
		}},
	}
	b.SetBytes(size)
	var wall, cpu [2]time.Duration
	var rounds, roundsCPU []float64
	for i := 0; b.Loop(); i++ {
		var w, c [2]time.Duration
		for j := range sides {
			k := (i + j) % 2
			sb := fresh()
			for _, p := range sides[k].input {
				readAll(b, p)
			}
			unix.Sync()
			t0, c0, s0 := time.Now(), selfCPU(), sb.(*linux.Sandbox).Usage().CPU
			if err := sides[k].run(sb); err != nil {
				b.Fatal(err)
			}
			w[k], c[k] = time.Since(t0), selfCPU()-c0+sb.(*linux.Sandbox).Usage().CPU-s0
			wall[k], cpu[k] = wall[k]+w[k], cpu[k]+c[k]
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
		}
		rounds = append(rounds, w[0].Seconds()/w[1].Seconds())
		roundsCPU = append(roundsCPU, c[0].Seconds()/c[1].Seconds())
	}
	n := float64(b.N)
	b.ReportMetric(wall[0].Seconds()/n, "restore-s")
	b.ReportMetric(cpu[0].Seconds()/n, "restore-cpu-s")
	b.ReportMetric(wall[1].Seconds()/n, "untar-s")
	b.ReportMetric(cpu[1].Seconds()/n, "untar-cpu-s")
	b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "ratio")
	b.ReportMetric(cpu[0].Seconds()/cpu[1].Seconds(), "cpu-ratio")
	b.ReportMetric(median(rounds), "ratio-median")
	b.ReportMetric(median(roundsCPU), "cpu-ratio-median")
}

// readAll reads every file at or below path once, so a measurement after
// it reads them from the page cache.
func readAll(b *testing.B, path string) {
	b.Helper()
	err := filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, f)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// selfCPU is the CPU time (user + system) of this process.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median is the middle of x (the mean of the middle two for an even
// count, 0 for none); the benchmarks of this package share it.
func median[T ~int64 | ~float64](x []T) T {
	if len(x) == 0 {
		return 0
	}
	x = slices.Clone(x)
	slices.Sort(x)
	if len(x)%2 == 1 {
		return x[len(x)/2]
	}
	return (x[len(x)/2-1] + x[len(x)/2]) / 2
}
