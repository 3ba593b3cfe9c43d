package executor

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkImport: the executor's unpacking of a tar (what a restore
// into a sandbox and an upload end in) against GNU tar -xf of the same
// tar, in the same iteration, the order alternating, the tar read once
// and dirty pages written back before each side. The tree is shaped like
// a repository: 1,500 files of 1–48 KiB in directories of 100 and 4 files
// of 16 MiB (about 100 MiB). ratio and cpu-ratio are the importer's wall
// and CPU time (user + system) over tar's; the -median ratios are the
// medians of each round's own.
func BenchmarkImport(b *testing.B) {
	if _, err := exec.LookPath("tar"); err != nil {
		b.Skip("tar not installed")
	}
	tmp := b.TempDir()
	src := filepath.Join(tmp, "src")
	writeRepoTree(b, src)
	tarFile := filepath.Join(tmp, "tree.tar")
	if out, err := exec.Command("tar", "-C", src, "--sort=name", "-cf", tarFile, ".").CombinedOutput(); err != nil {
		b.Fatalf("tar -c: %v: %s", err, out)
	}
	sides := []func(out string) error{
		func(out string) error { return importFile(tarFile, out) },
		func(out string) error {
			if o, err := exec.Command("tar", "-xf", tarFile, "-C", out).CombinedOutput(); err != nil {
				return fmt.Errorf("tar -x: %w: %s", err, o)
			}
			return nil
		},
	}
	var wall, cpu [2]time.Duration
	var rounds, roundsCPU []float64
	for i := 0; b.Loop(); i++ {
		var w, c [2]time.Duration
		for j := range sides {
			k := (i + j) % 2
			out := filepath.Join(tmp, fmt.Sprintf("out%d", k))
			if err := os.Mkdir(out, 0o755); err != nil {
				b.Fatal(err)
			}
			f, err := os.Open(tarFile)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, f)
			f.Close()
			unix.Sync()
			t0, c0 := time.Now(), cpuTime()
			if err := sides[k](out); err != nil {
				b.Fatal(err)
			}
			w[k], c[k] = time.Since(t0), cpuTime()-c0
			wall[k], cpu[k] = wall[k]+w[k], cpu[k]+c[k]
			if err := os.RemoveAll(out); err != nil {
				b.Fatal(err)
			}
		}
		rounds = append(rounds, w[0].Seconds()/w[1].Seconds())
		roundsCPU = append(roundsCPU, c[0].Seconds()/c[1].Seconds())
	}
	n := float64(b.N)
	b.ReportMetric(wall[0].Seconds()/n, "import-s")
	b.ReportMetric(cpu[0].Seconds()/n, "import-cpu-s")
	b.ReportMetric(wall[1].Seconds()/n, "untar-s")
	b.ReportMetric(cpu[1].Seconds()/n, "untar-cpu-s")
	b.ReportMetric(wall[0].Seconds()/wall[1].Seconds(), "ratio")
	b.ReportMetric(cpu[0].Seconds()/cpu[1].Seconds(), "cpu-ratio")
	b.ReportMetric(median(rounds), "ratio-median")
	b.ReportMetric(median(roundsCPU), "cpu-ratio-median")
}

// importFile unpacks the tar at path into dir as importTar does.
func importFile(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	return unpack(rfd, struct{ io.Reader }{f})
}

// cpuTime returns the CPU time (user and system) this process and its
// children that ended have used.
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	d := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return d(self.Utime) + d(self.Stime) + d(children.Utime) + d(children.Stime)
}

// median returns the median of x.
func median(x []float64) float64 {
	x = slices.Clone(x)
	slices.Sort(x)
	if len(x)%2 == 1 {
		return x[len(x)/2]
	}
	return (x[len(x)/2-1] + x[len(x)/2]) / 2
}

// BenchmarkImportFrames: the importer fed the same tar in frames of
// execproto.BulkChunkSize as the stream's inbox holds them, bodies written
// from the frames (peek) against the same frames read through a copy into
// the importer's buffer (read), alternating in each iteration: CPU time
// (user + system) of each, and their ratio.
func BenchmarkImportFrames(b *testing.B) {
	tmp := b.TempDir()
	src := filepath.Join(tmp, "src")
	writeRepoTree(b, src)
	stream, err := exec.Command("tar", "-C", src, "--sort=name", "-cf", "-", ".").Output()
	if err != nil {
		b.Skipf("tar -c: %v", err)
	}
	sides := []func() io.Reader{
		func() io.Reader { return &framedInput{rest: stream, sizes: []int{256 << 10}} },
		func() io.Reader { return struct{ io.Reader }{&framedInput{rest: stream, sizes: []int{256 << 10}}} },
	}
	var cpu [2]time.Duration
	for i := 0; b.Loop(); i++ {
		for j := range sides {
			k := (i + j) % 2
			out := filepath.Join(tmp, fmt.Sprintf("out%d", k))
			if err := os.Mkdir(out, 0o755); err != nil {
				b.Fatal(err)
			}
			rfd, err := unix.Open(out, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				b.Fatal(err)
			}
			unix.Sync()
			c0 := cpuTime()
			err = unpack(rfd, sides[k]())
			cpu[k] += cpuTime() - c0
			unix.Close(rfd)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.RemoveAll(out); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(cpu[0].Seconds()/n, "peek-cpu-s")
	b.ReportMetric(cpu[1].Seconds()/n, "read-cpu-s")
	b.ReportMetric(cpu[0].Seconds()/cpu[1].Seconds(), "cpu-ratio")
}

// writeRepoTree writes the benchmarks' tree under src, shaped like a
// repository: 1,500 files of 1–48 KiB in directories of 100 and 4 files
// of 16 MiB (about 100 MiB).
func writeRepoTree(b *testing.B, src string) {
	b.Helper()
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>9)
	}
	for i := range 1500 {
		d := filepath.Join(src, fmt.Sprintf("pkg%02d", i/100))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d.go", i%100)), buf[:1024+i*7919%(47<<10)], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("blob%d.bin", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
