package checkpoint

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchSize is the size of the workspace the benchmarks build: 1 GiB, as
// issue 22's targets say; -checkpoint.size=64 for a quick run.
var benchSize = flag.Int64("checkpoint.size", 1024, "MiB of the workspace the checkpoint benchmarks build")

// benchTree is a workspace shaped like a repository: many small files in
// directories of 100 (a third of the bytes) and a few large ones, half of
// each compressible (text) and half not (random bytes). Built once per
// test binary, removed at its end.
var benchTree struct {
	once  sync.Once
	dir   string
	err   error
	files int
	bytes int64
	small []string // the small files, for the delta benchmarks
}

func buildBenchTree(b *testing.B) (string, []string) {
	b.Helper()
	benchTree.once.Do(func() {
		dir, err := os.MkdirTemp("", "checkpoint-bench-")
		if err != nil {
			benchTree.err = err
			return
		}
		benchTree.dir = filepath.Join(dir, "ws")
		benchTree.err = genTree(benchTree.dir, *benchSize<<20)
	})
	if benchTree.err != nil {
		b.Fatal(benchTree.err)
	}
	return benchTree.dir, benchTree.small
}

// genTree writes a workspace of about size bytes at dir.
func genTree(dir string, size int64) error {
	words := strings.Fields("func return if else for range package import type struct interface map chan go defer select case switch var const nil err error string int byte true false len make append copy")
	text := func(b []byte, seed uint64) {
		x := seed*0x9e3779b97f4a7c15 | 1
		i := 0
		for i < len(b) {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			w := words[x%uint64(len(words))]
			if x>>40%7 == 0 {
				w = fmt.Sprintf("v%d", x>>48) // identifiers: not all repeats
			}
			i += copy(b[i:], w)
			if i < len(b) {
				b[i] = " \n\t("[x>>32%4]
				i++
			}
		}
	}
	smallBytes := size / 3
	var seed uint64
	buf := make([]byte, 64<<20)
	for d := 0; smallBytes > 0; d++ {
		sub := filepath.Join(dir, fmt.Sprintf("pkg%03d", d/100), fmt.Sprintf("mod%03d", d%100))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		for f := 0; f < 100 && smallBytes > 0; f++ {
			seed++
			n := 1024 + int(seed*7919%(48<<10))
			b := buf[:n]
			if seed%2 == 0 {
				text(b, seed)
			} else {
				fill(b, seed)
			}
			name := filepath.Join(sub, fmt.Sprintf("file%03d.go", f))
			if err := os.WriteFile(name, b, 0o644); err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, name)
			benchTree.small = append(benchTree.small, rel)
			benchTree.files++
			benchTree.bytes += int64(n)
			smallBytes -= int64(n)
		}
	}
	large := size - benchTree.bytes
	if err := os.MkdirAll(filepath.Join(dir, "assets"), 0o755); err != nil {
		return err
	}
	for i := 0; large > 0; i++ {
		f, err := os.Create(filepath.Join(dir, "assets", fmt.Sprintf("blob%02d.bin", i)))
		if err != nil {
			return err
		}
		n := min(large, 64<<20)
		for w := int64(0); w < n; {
			seed++
			b := buf[:min(int64(len(buf)), n-w)]
			if i%2 == 0 {
				text(b, seed)
			} else {
				fill(b, seed)
			}
			if _, err := f.Write(b); err != nil {
				f.Close()
				return err
			}
			w += int64(len(b))
		}
		if err := f.Close(); err != nil {
			return err
		}
		benchTree.files++
		benchTree.bytes += n
		large -= n
	}
	return nil
}

// tarCmd is the command that streams the workspace as the executor does:
// names relative to it, in walk order (GNU tar's --sort=name sorts each
// directory's entries by name).
func tarCmd(dir string) *exec.Cmd {
	entries, _ := os.ReadDir(dir)
	args := []string{"-C", dir, "--sort=name", "-cf", "-"}
	for _, e := range entries {
		args = append(args, e.Name())
	}
	return exec.Command("tar", args...)
}

// writeFromTar checkpoints the workspace at dir, read by tar.
func writeFromTar(ctx context.Context, s *Store, dir, tenant, parent string, full bool) (Result, error) {
	cmd := tarCmd(dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, err
	}
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	res, err := s.Write(ctx, tenant, parent, full, out)
	if err != nil {
		io.Copy(io.Discard, out)
	}
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	return res, err
}

// tarZstd runs tar | zstd LEVEL of the workspace into a file in out, as
// the baseline a first checkpoint must not exceed: level "-1" (the
// fastest, a checkpoint's own level) or "" (zstd's default, 3: the
// issue's plain `tar | zstd`).
func tarZstd(b *testing.B, dir, out, level string) {
	b.Helper()
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sh := fmt.Sprintf("tar -C %s --sort=name -cf - %s | zstd %s -q -f -o %s", dir, strings.Join(names, " "), level, filepath.Join(out, "tree.tar.zst"))
	if b, err := exec.Command("sh", "-c", sh).CombinedOutput(); err != nil {
		panic(fmt.Sprintf("%s: %v: %s", sh, err, b))
	}
}

func needTools(b *testing.B, tools ...string) {
	b.Helper()
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			b.Skipf("%s not installed (bench/checkpoint.sh installs it)", t)
		}
	}
}

// warm reads the workspace once, so that every measurement reads it from
// the page cache.
func warm(b *testing.B, dir string) {
	b.Helper()
	cmd := tarCmd(dir)
	cmd.Stdout = io.Discard
	if err := cmd.Run(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWrite: the first checkpoint of the workspace, into an empty
// store, against tar | zstd -1 of it and tar | zstd (the default level,
// 3) in the same iteration (the order rotates; dirty pages are written
// back before each); ratio is the first's time over tar | zstd -1's
// (issue 22: at most 1.0), ratio-zstd3 over tar | zstd's.
func BenchmarkWrite(b *testing.B) {
	needTools(b, "tar", "zstd")
	dir, _ := buildBenchTree(b)
	warm(b, dir)
	b.SetBytes(benchTree.bytes)
	var wr, tz, tz3, wrCPU, tzCPU, tz3CPU time.Duration
	var last Result
	for i := 0; b.Loop(); i++ {
		tmp := b.TempDir()
		s := newTestStore(b)
		phases := []func(){
			func() {
				d, c := timed(func() { tarZstd(b, dir, tmp, "-1") })
				tz, tzCPU = tz+d, tzCPU+c
			},
			func() {
				d, c := timed(func() { tarZstd(b, dir, tmp, "") })
				tz3, tz3CPU = tz3+d, tz3CPU+c
			},
			func() {
				d, c := timed(func() {
					res, err := writeFromTar(b.Context(), s.Store, dir, "bench", "", true)
					if err != nil {
						b.Fatal(err)
					}
					last = res
				})
				wr, wrCPU = wr+d, wrCPU+c
			},
		}
		for j := range phases {
			phases[(i+j)%len(phases)]()
		}
		os.RemoveAll(tmp)
	}
	n := float64(b.N)
	b.ReportMetric(tz3.Seconds()/n, "tarzstd3-s")
	b.ReportMetric(wr.Seconds()/tz3.Seconds(), "ratio-zstd3")
	b.ReportMetric(tz3CPU.Seconds()/n, "tarzstd3-cpu-s")
	b.ReportMetric(wr.Seconds()/n, "write-s")
	b.ReportMetric(tz.Seconds()/n, "tarzstd-s")
	b.ReportMetric(wr.Seconds()/tz.Seconds(), "ratio")
	b.ReportMetric(wrCPU.Seconds()/n, "write-cpu-s")
	b.ReportMetric(tzCPU.Seconds()/n, "tarzstd-cpu-s")
	b.ReportMetric(float64(last.Stats.NewBytes)/float64(benchTree.bytes), "stored/tree")
}

// timed runs f after writing back every dirty page (so that neither side
// of a comparison pays for the other's writes) and returns the time and
// the CPU time it took. The benchmarks alternate which side goes first.
func timed(f func()) (wall, cpu time.Duration) {
	unix.Sync()
	t0, c0 := time.Now(), cpuTime()
	f()
	return time.Since(t0), cpuTime() - c0
}

// restoreInto restores digest into dir through tar -x, as BenchmarkRestore
// measures it.
func restoreInto(b *testing.B, s *testStore, digest, dir string) {
	untarFrom(b, dir, func(w io.Writer) error { return s.Restore(b.Context(), "bench", digest, w) })
}

// untarFrom runs tar -x into dir with what write writes as its input,
// through a pipe of 1 MiB, not 64 KiB: fewer switches between the writer
// and tar (the engine's stream to a sandbox is framed in MiBs too).
func untarFrom(b *testing.B, dir string, write func(io.Writer) error) {
	x := exec.Command("tar", "-xf", "-", "-C", dir)
	pr, in, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	unix.FcntlInt(in.Fd(), unix.F_SETPIPE_SZ, 1<<20)
	x.Stdin = pr
	if err := x.Start(); err != nil {
		b.Fatal(err)
	}
	pr.Close()
	err = write(in)
	in.Close()
	if werr := x.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		b.Fatal(err)
	}
}

// copyFile writes the file at path to w as WriteTar writes a restore: in
// writes of 256 KiB.
func copyFile(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{f}, make([]byte, 256<<10))
	return err
}

// stepCounts are what a step did, counted rather than timed (a count
// does not swell with the machine's load): the read and write system
// calls of this process (/proc/self/io: syscr, syscw; fsync and the
// like are not counted), the bytes they moved, the bytes the Go heap
// allocated (the garbage collector's work follows them) and the context
// switches.
type stepCounts struct {
	syscalls, ioBytes, allocBytes, switches int64
}

func readCounts() stepCounts {
	var c stepCounts
	if b, err := os.ReadFile("/proc/self/io"); err == nil {
		for line := range strings.Lines(string(b)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
			var n int64
			fmt.Sscan(v, &n)
			switch k {
			case "syscr", "syscw":
				c.syscalls += n
			case "rchar", "wchar":
				c.ioBytes += n
			}
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c.allocBytes = int64(ms.TotalAlloc)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	c.switches = ru.Nvcsw + ru.Nivcsw
	return c
}

func (c stepCounts) sub(o stepCounts) stepCounts {
	return stepCounts{c.syscalls - o.syscalls, c.ioBytes - o.ioBytes, c.allocBytes - o.allocBytes, c.switches - o.switches}
}

func (c stepCounts) add(o stepCounts) stepCounts {
	return stepCounts{c.syscalls + o.syscalls, c.ioBytes + o.ioBytes, c.allocBytes + o.allocBytes, c.switches + o.switches}
}

// report reports c over n as metrics whose units end in per.
func (c stepCounts) report(b *testing.B, n float64, per string) {
	b.ReportMetric(float64(c.syscalls)/n, "rwcalls"+per)
	b.ReportMetric(float64(c.ioBytes)/n, "ioB"+per)
	b.ReportMetric(float64(c.allocBytes)/n, "allocB"+per)
	b.ReportMetric(float64(c.switches)/n, "switches"+per)
}

// cpuTime returns the CPU time (user and system) this process and its
// children that ended have used: a measure that, unlike the time a
// benchmark takes, does not depend on what else runs on the machine.
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	d := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return d(self.Utime) + d(self.Stime) + d(children.Utime) + d(children.Stime)
}

// BenchmarkWriteAgain: a second full checkpoint of the unchanged
// workspace (a second run over the same repository): what it stores new
// over the tree's bytes (issue 22: at most 1%).
func BenchmarkWriteAgain(b *testing.B) {
	needTools(b, "tar")
	dir, _ := buildBenchTree(b)
	warm(b, dir)
	s := newTestStore(b)
	if _, err := writeFromTar(b.Context(), s.Store, dir, "bench", "", true); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchTree.bytes)
	var last Result
	for b.Loop() {
		res, err := writeFromTar(b.Context(), s.Store, dir, "bench", "", true)
		if err != nil {
			b.Fatal(err)
		}
		last = res
	}
	b.ReportMetric(float64(last.Stats.NewBytes+last.ManifestBytes)/float64(benchTree.bytes)*100, "new-%")
}

// BenchmarkWriteDelta: steps that each change one small file, as a chain
// of deltas (each on the one before, as a run's steps are) on a full
// checkpoint of the workspace (tree=big) and of a workspace of one file
// (tree=one): the library's part of issue 22's "one file changed in a
// 1 GB workspace costs at most 1.2x the same in a 1-file workspace". The
// step after a Write finds its parent's tree in the Store's cache; every
// compactDepth+1 steps (more in the larger tree) a compaction writes the
// whole tree's manifest, the one cost that grows with the tree: an op is
// such a cycle, ns/step,
// cpu-ns/step (the process's CPU time: steadier than ns/step on a busy
// machine) and stored-B/step its averages.
func BenchmarkWriteDelta(b *testing.B) {
	needTools(b, "tar")
	dir, small := buildBenchTree(b)
	warm(b, dir)
	for _, c := range []string{"one", "big"} {
		b.Run("tree="+c, func(b *testing.B) {
			s := newTestStore(b)
			var base Result
			var err error
			name := small[len(small)/2]
			if c == "big" {
				base, err = writeFromTar(b.Context(), s.Store, dir, "bench", "", true)
			} else {
				base, err = s.Write(b.Context(), "bench", "", true, bytes.NewReader(tarStream(b, reg("f.go", "package main\n"))))
				name = "f.go"
			}
			if err != nil {
				b.Fatal(err)
			}
			var stored int64
			var took, cpu, compactTook, compactCPU time.Duration
			var cnt, compactCnt stepCounts
			steps, compactions := 0, 0
			parent := base.Digest
			for b.Loop() {
				// One op is a cycle of compactDepth deltas and the
				// compaction after them.
				for range compactDepth(base.Stats.TreeEntries) + 1 {
					steps++
					stream := tarStream(b, reg(name, fmt.Sprintf("package main\n\n// step %d\n", steps)))
					n0 := readCounts()
					t0, c0 := time.Now(), cpuTime()
					res, err := s.Write(b.Context(), "bench", parent, false, bytes.NewReader(stream))
					if err != nil {
						b.Fatal(err)
					}
					d, c := time.Since(t0), cpuTime()-c0
					n := readCounts().sub(n0)
					took, cpu = took+d, cpu+c
					cnt = cnt.add(n)
					if res.Compacted {
						compactions++
						compactTook, compactCPU = compactTook+d, compactCPU+c
						compactCnt = compactCnt.add(n)
					}
					stored += res.Stats.NewBytes + res.ManifestBytes
					parent = res.Digest
				}
			}
			b.ReportMetric(float64(took.Nanoseconds())/float64(steps), "ns/step")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(steps), "cpu-ns/step")
			b.ReportMetric(float64(stored)/float64(steps), "stored-B/step")
			cnt.report(b, float64(steps), "/step")
			if compactions > 0 {
				compactCnt.report(b, float64(compactions), "/compact")
			}
			if deltas := steps - compactions; deltas > 0 && compactions > 0 {
				b.ReportMetric(float64((took-compactTook).Nanoseconds())/float64(deltas), "delta-ns/step")
				b.ReportMetric(float64((cpu-compactCPU).Nanoseconds())/float64(deltas), "delta-cpu-ns/step")
				b.ReportMetric(float64(compactTook.Nanoseconds())/float64(compactions), "compact-ns")
				b.ReportMetric(float64(compactCPU.Nanoseconds())/float64(compactions), "compact-cpu-ns")
			}
		})
	}
}

// BenchmarkRestore: restoring the workspace after a full checkpoint and
// 20 steps of one changed file each, unpacked by tar -x from a pipe,
// against extracting one full tar of the workspace: tar -xf of the plain
// tar (the baseline: ratio, at most 1.2), the same tar fed to tar -x
// as a restore feeds it, through the same pipe in the same writes (what a
// stream rather than a file costs tar: ratio-pipe) and zstd -d |
// tar -x of it compressed with zstd -1 (ratio-zstd). Every side runs in
// every iteration, the order rotating; before each, its input is read once
// (the tar, the .zst, or every chunk and manifest file of the store: so
// each side starts from its input in the page cache, whatever the others
// did) and dirty pages are written back; nothing is dropped system-wide.
// The ratios are of wall time; *-cpu-s are CPU seconds (user + system, of
// this process and its children) a restore, the measure that holds on a
// busy machine, and cpu-ratio is the restore's over tar -xf's; the
// *-median ratios are the medians of each round's own.
func BenchmarkRestore(b *testing.B) {
	needTools(b, "tar", "zstd")
	dir, _ := buildBenchTree(b)
	s, digest := restoreStore(b)
	full := filepath.Join(b.TempDir(), "full.tar")
	cmd := tarCmd(dir)
	f, err := os.Create(full)
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout = f
	if err := cmd.Run(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command("zstd", "-1", "-q", "-f", full, "-o", full+".zst").CombinedOutput(); err != nil {
		b.Fatalf("zstd: %v: %s", err, out)
	}
	b.SetBytes(benchTree.bytes)
	sh := func(cmd string) {
		if out, err := exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v: %s", cmd, err, out)
		}
	}
	type side struct {
		name      string
		input     func()
		run       func(out string)
		wall, cpu time.Duration
	}
	sides := []*side{
		{name: "restore", input: func() { readTree(b, restoreBench.dir) }, run: func(out string) { restoreInto(b, s, digest, out) }},
		{name: "untar", input: func() { readTree(b, full) }, run: func(out string) { sh(fmt.Sprintf("tar -xf %s -C %s", full, out)) }},
		{name: "untar-pipe", input: func() { readTree(b, full) }, run: func(out string) {
			untarFrom(b, out, func(w io.Writer) error { return copyFile(full, w) })
		}},
		{name: "unzstd", input: func() { readTree(b, full+".zst") }, run: func(out string) {
			sh(fmt.Sprintf("zstd -d -q -c %s | tar -xf - -C %s", full+".zst", out))
		}},
	}
	// A round's ratios, restore over tar -xf: their median is what a
	// burst of load on the machine during one round does not move.
	var rounds, roundsCPU []float64
	for i := 0; b.Loop(); i++ {
		var wall, cpu [4]time.Duration
		for j := range sides {
			k := (i + j) % len(sides)
			sd := sides[k]
			out := b.TempDir()
			sd.input()
			wall[k], cpu[k] = timed(func() { sd.run(out) })
			sd.wall, sd.cpu = sd.wall+wall[k], sd.cpu+cpu[k]
			os.RemoveAll(out)
		}
		rounds = append(rounds, wall[0].Seconds()/wall[1].Seconds())
		roundsCPU = append(roundsCPU, cpu[0].Seconds()/cpu[1].Seconds())
	}
	n := float64(b.N)
	rs, tx, tp, zx := sides[0], sides[1], sides[2], sides[3]
	b.ReportMetric(median(rounds), "ratio-median")
	b.ReportMetric(median(roundsCPU), "cpu-ratio-median")
	b.ReportMetric(rs.wall.Seconds()/n, "restore-s")
	b.ReportMetric(rs.cpu.Seconds()/n, "restore-cpu-s")
	b.ReportMetric(tx.wall.Seconds()/n, "untar-s")
	b.ReportMetric(tx.cpu.Seconds()/n, "untar-cpu-s")
	b.ReportMetric(rs.wall.Seconds()/tx.wall.Seconds(), "ratio")
	b.ReportMetric(rs.cpu.Seconds()/tx.cpu.Seconds(), "cpu-ratio")
	b.ReportMetric(tp.wall.Seconds()/n, "untar-pipe-s")
	b.ReportMetric(tp.cpu.Seconds()/n, "untar-pipe-cpu-s")
	b.ReportMetric(rs.wall.Seconds()/tp.wall.Seconds(), "ratio-pipe")
	b.ReportMetric(zx.wall.Seconds()/n, "unzstd-s")
	b.ReportMetric(zx.cpu.Seconds()/n, "unzstd-cpu-s")
	b.ReportMetric(rs.wall.Seconds()/zx.wall.Seconds(), "ratio-zstd")
}

// median returns the median of x (the mean of the middle two when even).
func median(x []float64) float64 {
	x = slices.Clone(x)
	slices.Sort(x)
	if len(x)%2 == 1 {
		return x[len(x)/2]
	}
	return (x[len(x)/2-1] + x[len(x)/2]) / 2
}

// readTree reads every file at or below path once (into nothing), so a
// measurement after it reads them from the page cache.
func readTree(b *testing.B, path string) {
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

// restoreBench is the store BenchmarkRestore and BenchmarkRestoreStream
// restore from: a full checkpoint of the workspace and 20 steps of one
// changed file each. Built once per test binary.
var restoreBench struct {
	once   sync.Once
	s      *testStore
	digest string
	err    error
	close  func()
	dir    string // the store's blob and chunk directories
}

// BenchmarkRestoreStream: the restore's own part, the tar stream of the
// workspace after 20 steps written to io.Discard (no unpacking): what a
// restore adds to the tar -x it feeds. stream-cpu-s is the process's CPU
// time a restore.
func BenchmarkRestoreStream(b *testing.B) {
	s, digest := restoreStore(b)
	b.SetBytes(benchTree.bytes)
	var cpu time.Duration
	for b.Loop() {
		c0 := cpuTime()
		if err := s.Restore(b.Context(), "bench", digest, io.Discard); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c0
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "stream-cpu-s")
}

// restoreStore returns the store and checkpoint the restore benchmarks
// restore, made on first use.
func restoreStore(b *testing.B) (*testStore, string) {
	b.Helper()
	needTools(b, "tar")
	dir, small := buildBenchTree(b)
	restoreBench.once.Do(func() {
		warm(b, dir)
		// Not b's: the store outlives the benchmark that makes it, beside
		// the workspace (TestMain removes both).
		tmp := filepath.Join(filepath.Dir(dir), "restore")
		restoreBench.dir = tmp
		s, closeStore, err := openStore(func(k string) string {
			return map[string]string{"CKPT_CHILD_BLOBS": filepath.Join(tmp, "blobs"), "CKPT_CHILD_CHUNKS": filepath.Join(tmp, "chunks")}[k]
		}, tmp)
		if err != nil {
			restoreBench.err = err
			return
		}
		restoreBench.close = closeStore
		res, err := writeFromTar(context.Background(), s.Store, dir, "bench", "", true)
		for i := 0; err == nil && i < 20; i++ {
			body := fmt.Sprintf("package main\n\n// step %d\n", i)
			res, err = s.Write(context.Background(), "bench", res.Digest, false, bytes.NewReader(tarStream(b, reg(small[i*37%len(small)], body))))
		}
		restoreBench.s, restoreBench.digest, restoreBench.err = s, res.Digest, err
	})
	if restoreBench.err != nil {
		b.Fatal(restoreBench.err)
	}
	return restoreBench.s, restoreBench.digest
}
