package linux_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
)

// The gvisor runtime's benchmarks, each beside its reference in one run
// (bench/gvisor.sh prints the ratios):
//
//	go test -run=NONE -bench='GVisor' -benchtime=10x ./internal/sandbox/linux/

// BenchmarkGVisorStart is a gvisor sandbox's cold start to the executor's
// handshake (Create), beside runsc=true: `runsc run` of the same bundle with
// /bin/true as its process, the floor gVisor sets. Each also reports the
// CPU time its processes took (cpu-ms/op: the sandbox's cgroup up to the
// handshake; for runsc run, a cgroup of its own that runsc starts in, its
// own teardown included), which a loaded machine moves less than the wall
// time. The references also report runsc's rusage with its children
// (rusage-cpu-ms/op), which misses what runsc did not wait for (measured
// 2026-12-07: 3-8 ms of /bin/true's start, 13 ms of the executor's).
func BenchmarkGVisorStart(b *testing.B) {
	needGVisor(b)
	be := benchBackend(b)
	ctx := context.Background()
	spec := sandbox.Spec{Runtime: sandbox.RuntimeGVisor, Limits: sandbox.DefaultLimits}
	// Found once per backend (runsc --version, help platforms: two starts
	// of runsc), outside the timing, as the references below find it.
	if _, err := be.Runsc(); err != nil {
		b.Fatal(err)
	}
	b.Run("runtime=gvisor", func(b *testing.B) {
		var cpu time.Duration
		for b.Loop() {
			sb, err := be.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			// The sandbox's cgroup holds runsc, its gofer and sandbox.
			m, err := sb.(sandbox.Measurer).Measure()
			if err != nil {
				b.Fatal(err)
			}
			cpu += m.CPU
			_ = sb.Destroy(ctx)
			b.StartTimer()
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	})
	// The floor, then rungs up to Create, each `runsc run` of the same
	// bundle to its end (runsc's own teardown included):
	//   runsc=true      /bin/true: gVisor's boot and exit
	//   runsc=go        the executor binary started only to print its
	//                   version: a Go program of the executor's size,
	//                   its runtime's start inside the sentry
	//   runsc=executor  the executor as Create runs it: its setup and
	//                   the handshake to Ready, then the control
	//                   socket's end, on which it exits
	// so runsc=executor to runtime=gvisor is the host's side of Create
	// (lock, cgroup, bundle) less runsc's teardown (docs/gvisor.md,
	// "Cold start").
	for _, c := range []struct {
		name string
		args []string
	}{
		{"runsc=true", []string{"/bin/true"}},
		{"runsc=go", []string{linux.GVisorExecutor, "version"}},
		{"runsc=executor", nil},
	} {
		b.Run(c.name, func(b *testing.B) { benchRunscRun(b, be, spec, c.args) })
	}
}

// benchRunscRun is `runsc run` of a gvisor sandbox's bundle for spec with
// argv as its process, to its end; with argv nil, the bundle's own process
// (the executor) through its handshake (linux.RunscExecutor).
func benchRunscRun(b *testing.B, be *linux.Backend, spec sandbox.Spec, argv []string) {
	dir := b.TempDir()
	b.Cleanup(func() {
		// The empty network namespace a current runsc pins in its root.
		for unix.Unmount(filepath.Join(dir, "state", "null-netns"), unix.MNT_DETACH) == nil {
		}
	})
	bundle := filepath.Join(dir, "bundle")
	flags, err := linux.GVisorBundle(be, bundle, spec)
	if err != nil {
		b.Fatal(err)
	}
	cfgPath := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		b.Fatal(err)
	}
	if argv != nil {
		cfg["process"].(map[string]any)["args"] = argv
		if data, err = json.Marshal(cfg); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	r, err := be.Runsc()
	if err != nil {
		b.Fatal(err)
	}
	// A cgroup per run, as Create's sandbox has, so that both sides count
	// every process of the tree, whoever waits for it.
	cgm, err := cgroup.NewManager("airlock-bench-runsc")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cgm.RemoveParent() })
	i := 0
	var cpu, ruCPU time.Duration
	for b.Loop() {
		i++
		args := append([]string{"--root", filepath.Join(dir, "state")}, flags...)
		args = append(args, "run", "--bundle", bundle, "bench-"+strconv.Itoa(i))
		b.StopTimer()
		g, err := cgm.New(fmt.Sprintf("run-%d-%d", os.Getpid(), i), cgroup.Limits{}, false)
		if err != nil {
			b.Fatal(err)
		}
		if g.CgroupFD() < 0 {
			b.Skip("no cgroup2 group to start runsc in (CLONE_INTO_CGROUP): its whole tree's CPU cannot be counted")
		}
		sys := &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.CgroupFD()}
		b.StartTimer()
		if argv == nil {
			_, _, c, err := linux.RunscExecutor(be, spec, args, sys)
			if err != nil {
				b.Fatal(err)
			}
			ruCPU += c
		} else {
			cmd := exec.Command(r.Path, args...)
			cmd.SysProcAttr = sys
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("runsc run: %v: %s", err, out)
			}
			// runsc's and what it waited for: its gofer and sandbox.
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			ruCPU += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		b.StopTimer()
		c, err := g.CPU()
		if err != nil {
			b.Fatal(err)
		}
		cpu += c
		if err := g.Destroy(); err != nil {
			b.Fatal(err)
		}
		g.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(ruCPU.Microseconds())/1000/float64(b.N), "rusage-cpu-ms/op")
}

// BenchmarkGVisorExec is BenchmarkExec per runtime: one command through
// the protocol into a running sandbox.
func BenchmarkGVisorExec(b *testing.B) {
	needGVisor(b)
	ctx := context.Background()
	for _, rt := range benchRuntimes(b) {
		b.Run("runtime="+rt.name, func(b *testing.B) {
			sb, err := rt.be.Create(ctx, sandbox.Spec{Runtime: rt.runtime, Limits: sandbox.DefaultLimits})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			for b.Loop() {
				if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || r.ExitCode != 0 {
					b.Fatalf("run: %+v %v", r, err)
				}
			}
		})
	}
}

// BenchmarkGVisorSyscall is the cost of one system call inside a sandbox of
// each runtime (and platform): Python's loop of getppid, timed by Python
// inside, reported as ns/syscall (the loop's own cost included; the same
// in every runtime).
func BenchmarkGVisorSyscall(b *testing.B) {
	needGVisor(b)
	ctx := context.Background()
	const probe = `import os, time
n = 100000
t = time.perf_counter_ns()
for _ in range(n):
    os.getppid()
print((time.perf_counter_ns() - t) / n)`
	for _, rt := range benchRuntimes(b) {
		b.Run("runtime="+rt.name, func(b *testing.B) {
			sb, err := rt.be.Create(ctx, sandbox.Spec{Runtime: rt.runtime, Limits: sandbox.DefaultLimits})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			var total float64
			n := 0
			for b.Loop() {
				var out bytes.Buffer
				if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"python3", "-c", probe}, Stdout: &out}); err != nil || r.ExitCode != 0 {
					b.Fatalf("run: %+v %v", r, err)
				}
				v, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
				if err != nil {
					b.Fatalf("probe printed %q: %v", out.String(), err)
				}
				total += v
				n++
			}
			b.ReportMetric(total/float64(n), "ns/syscall")
		})
	}
}

// benchRuntime is one runtime the gvisor benchmarks compare, on its own
// backend.
type benchRuntime struct {
	name, runtime string
	be            *linux.Backend
}

// benchRuntimes are native, gvisor on the runsc a backend finds
// ($AIRLOCK_RUNSC, else PATH's) and, when $AIRLOCK_BENCH_RUNSC_REF names
// another runsc, "gvisor,ref" on that one: bench/gvisor.sh compares a
// current runsc (systrap) with Debian's (ptrace) in one run.
func benchRuntimes(b *testing.B) []benchRuntime {
	rts := []benchRuntime{{"native", sandbox.RuntimeNative, benchBackend(b)}, {"gvisor", sandbox.RuntimeGVisor, benchBackend(b)}}
	if ref := os.Getenv("AIRLOCK_BENCH_RUNSC_REF"); ref != "" {
		be, err := linux.New(linux.Config{Executor: executorPath, StateDir: b.TempDir(), Runsc: ref})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		rts = append(rts, benchRuntime{"gvisor,ref", sandbox.RuntimeGVisor, be})
	}
	for _, rt := range rts[1:] {
		r, err := rt.be.Runsc()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("runtime=%s: runsc %s (%s), platform %s", rt.name, r.Path, r.Version, r.Platform)
	}
	return rts
}

// BenchmarkGVisorIdleMemory reports the host memory an idle sandbox of each
// runtime holds: its cgroup's charge (MiB/sandbox) after it started and ran
// one command.
func BenchmarkGVisorIdleMemory(b *testing.B) {
	needGVisor(b)
	be := benchBackend(b)
	ctx := context.Background()
	for _, rt := range []string{sandbox.RuntimeNative, sandbox.RuntimeGVisor} {
		b.Run("runtime="+rt, func(b *testing.B) {
			var total float64
			n := 0
			for b.Loop() {
				sb, err := be.Create(ctx, sandbox.Spec{Runtime: rt, Limits: sandbox.DefaultLimits})
				if err != nil {
					b.Fatal(err)
				}
				if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || r.ExitCode != 0 {
					b.Fatalf("run: %+v %v", r, err)
				}
				m, ok := sb.(sandbox.Measurer)
				if !ok {
					b.Fatal("sandbox is no Measurer")
				}
				met, err := m.Measure()
				if err != nil {
					b.Fatal(err)
				}
				total += float64(met.Memory) / (1 << 20)
				n++
				_ = sb.Destroy(ctx)
			}
			b.ReportMetric(total/float64(n), "MiB/sandbox")
		})
	}
}

// BenchmarkCheckpointDeltaGVisor is the checkpoint of a step that changed
// one file of the checkpoint benchmarks' 1 GiB tree (20k files), beside
// native's: on gvisor every mode walks /workspace with stat (a cow
// workspace's upper layer is gVisor's memory, not readable as a tree),
// and each stat crosses gVisor's kernel.
func BenchmarkCheckpointDeltaGVisor(b *testing.B) {
	needGVisor(b)
	for _, rt := range []string{sandbox.RuntimeNative, sandbox.RuntimeGVisor} {
		for _, mode := range []string{sandbox.WorkspaceCOW, sandbox.WorkspaceRW} {
			b.Run("runtime="+rt+"/"+mode, func(b *testing.B) {
				dir, _ := benchTree(b)
				if mode == sandbox.WorkspaceRW {
					// The steps write to the shared tree: put the file back.
					path := filepath.Join(dir, benchTreeChanged)
					content, err := os.ReadFile(path)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = os.WriteFile(path, content, 0o644) })
				}
				ctx := context.Background()
				sb, err := benchBackend(b).Create(ctx, sandbox.Spec{Runtime: rt, Workspace: dir, WorkspaceMode: mode, Limits: sandbox.DefaultLimits})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = sb.Destroy(ctx) })
				benchDelta(b, sb, sb.(sandbox.Checkpointer), benchTreeChanged)
			})
		}
	}
}
