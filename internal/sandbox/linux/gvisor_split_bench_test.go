package linux_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// BenchmarkGVisorExecSplit splits a command in a running sandbox into its
// parts, per runtime (docs/gvisor.md, "Where a command's time goes"). Each
// probe reports the wall time (ms/op) and the sandbox's CPU (cpu-ms/op,
// its cgroup: under gvisor the sentry, its stubs and the gofer too) of one
// operation:
//
//	proto        one protocol round trip with no process (Stat of a file)
//	cmd-true     one command through the executor, /bin/true (dynamic)
//	cmd-strue    the same with strue, a static ELF without libc
//	spawn-true   vfork, exec of /bin/true, exit and wait, inside (C, no executor)
//	spawn-strue  the same with strue
//	fork         fork, exit and wait, no exec
//	chain-static an exec alone (a static glibc program execs itself)
//	chain-dyn    the same with a dynamic program: ld.so and libc each time
//	syscall      one system call (getppid)
//
// The probes inside run n operations in one command; the command's own
// cost is taken out by running it with 0 operations in the same
// iteration. The C probes (testdata/execsplit) are built with gcc: the
// benchmark skips without it.
func BenchmarkGVisorExecSplit(b *testing.B) {
	needGVisor(b)
	if _, err := exec.LookPath("gcc"); err != nil {
		b.Skip("needs gcc to build the probes")
	}
	ctx := context.Background()
	dir := b.TempDir()
	for _, c := range [][]string{
		{"-O2", "-static", "-o", "probe-static", "probe.c"},
		{"-O2", "-o", "probe-dyn", "probe.c"},
		{"-O2", "-static", "-nostdlib", "-o", "strue", "strue.c"},
	} {
		for i, a := range c {
			if filepath.Ext(a) == ".c" {
				c[i], _ = filepath.Abs(filepath.Join("testdata", "execsplit", a))
			} else if i > 0 && c[i-1] == "-o" {
				c[i] = filepath.Join(dir, a)
			}
		}
		if out, err := exec.Command("gcc", c...).CombinedOutput(); err != nil {
			b.Fatalf("gcc %v: %v\n%s", c, err, out)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	const n = 100
	ws := "/workspace/"
	probes := []struct {
		name string
		argv func(n int) []string // a command of n operations; nil: one command per operation
		argc []string             // the command of one operation, when argv is nil
		per  int                  // operations per command of argv
	}{
		{name: "proto"},
		{name: "cmd-true", argc: []string{"/bin/true"}},
		{name: "cmd-strue", argc: []string{ws + "strue"}},
		{name: "spawn-true", argv: func(n int) []string { return []string{ws + "probe-static", "spawn", strconv.Itoa(n), "/bin/true"} }, per: n},
		{name: "spawn-strue", argv: func(n int) []string { return []string{ws + "probe-static", "spawn", strconv.Itoa(n), ws + "strue"} }, per: n},
		{name: "fork", argv: func(n int) []string { return []string{ws + "probe-static", "fork", strconv.Itoa(n)} }, per: n},
		{name: "chain-static", argv: func(n int) []string { return []string{ws + "probe-static", "chain", strconv.Itoa(n)} }, per: n},
		{name: "chain-dyn", argv: func(n int) []string { return []string{ws + "probe-dyn", "chain", strconv.Itoa(n)} }, per: n},
		{name: "syscall", argv: func(n int) []string { return []string{ws + "probe-static", "getppid", strconv.Itoa(n)} }, per: 100 * n},
	}
	for _, rt := range benchRuntimes(b) {
		for _, p := range probes {
			b.Run("runtime="+rt.name+"/probe="+p.name, func(b *testing.B) {
				sb, err := rt.be.Create(ctx, sandbox.Spec{
					Runtime: rt.runtime, Limits: sandbox.DefaultLimits,
					Workspace: dir, WorkspaceMode: sandbox.WorkspaceRO,
				})
				if err != nil {
					b.Fatal(err)
				}
				defer sb.Destroy(ctx)
				run := func(argv []string) {
					if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: argv}); err != nil || r.ExitCode != 0 {
						b.Fatalf("%v: %+v %v", argv, r, err)
					}
				}
				// measure runs f and returns the wall time it took and the
				// CPU time the sandbox's cgroup counted meanwhile.
				measure := func(f func()) (time.Duration, time.Duration) {
					c0, t0 := sandboxtest.Measured(b, sb).CPU, time.Now()
					f()
					return time.Since(t0), sandboxtest.Measured(b, sb).CPU - c0
				}
				// op is one measure of the probe: ops operations.
				var op func() (time.Duration, time.Duration)
				ops := 1
				switch {
				case p.name == "proto":
					ops = n
					op = func() (time.Duration, time.Duration) {
						return measure(func() {
							for range n {
								if _, err := sb.Stat(ctx, ws+"strue"); err != nil {
									b.Fatal(err)
								}
							}
						})
					}
				case p.argv == nil:
					op = func() (time.Duration, time.Duration) { return measure(func() { run(p.argc) }) }
				default:
					ops = p.per
					op = func() (time.Duration, time.Duration) {
						w0, c0 := measure(func() { run(p.argv(0)) })
						w, c := measure(func() { run(p.argv(p.per)) })
						return w - w0, c - c0
					}
				}
				// Warm the binaries and let gVisor's clock calibrate
				// (BenchmarkGVisorExec's execSettle).
				op()
				time.Sleep(execSettle)
				var wall, cpu time.Duration
				for b.Loop() {
					w, c := op()
					wall += w
					cpu += c
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(wall.Microseconds())/1000/float64(b.N*ops), "ms/op")
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N*ops), "cpu-ms/op")
			})
		}
	}
}
