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
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
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
	create := func(b *testing.B, be *linux.Backend) {
		var cpu time.Duration
		for b.Loop() {
			sb, err := be.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			// The sandbox's cgroup holds runsc, its gofer and sandbox.
			cpu += sandboxtest.Measured(b, sb).CPU
			_ = sb.Destroy(ctx)
			b.StartTimer()
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}
	b.Run("runtime=gvisor", func(b *testing.B) { create(b, be) })
	// Create with the sandbox's CPU limit (DefaultLimits: 1 CPU) on
	// gVisor's boot too, as before the limit waited for Ready.
	b.Run("runtime=gvisor,boot=capped", func(b *testing.B) {
		capped := benchBackend(b)
		linux.SetCPUAtBoot(capped)
		if _, err := capped.Runsc(); err != nil {
			b.Fatal(err)
		}
		create(b, capped)
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
// the protocol into a running sandbox. The sandbox first runs one command
// and settles for execSettle, untimed: gVisor calibrates its clock a
// second after boot, and until then every clock read inside is a trapped
// system call (docs/gvisor.md, "Cold start"), which a sandbox that has
// been running does not pay. Beside the wall time it reports the
// sandbox's CPU per command (its cgroup: the executor and the command,
// and under gvisor the sentry, its stubs and gofer), which the load moves
// less.
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
			run := func() {
				if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}}); err != nil || r.ExitCode != 0 {
					b.Fatalf("run: %+v %v", r, err)
				}
			}
			run()
			time.Sleep(execSettle)
			cpu0 := sandboxtest.Measured(b, sb).CPU
			for b.Loop() {
				run()
			}
			b.ReportMetric(float64((sandboxtest.Measured(b, sb).CPU-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// execSettle is how long BenchmarkGVisorExec's sandbox runs before its
// commands are timed: past gVisor's clock calibration (1 s after boot).
var execSettle = 1500 * time.Millisecond

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
				total += float64(sandboxtest.Measured(b, sb).Memory) / (1 << 20)
				n++
				_ = sb.Destroy(ctx)
			}
			b.ReportMetric(total/float64(n), "MiB/sandbox")
		})
	}
}

// BenchmarkCheckpointDeltaGVisor is the checkpoint of a step that changed
// one file of the checkpoint benchmarks' 1 GiB tree (20k files), beside
// native's: on gvisor a cow or rw workspace is walked on the host (docs/gvisor.md),
// and a restored tree (imported into an empty workspace) is gVisor's own
// overlay's lower layer where the runsc's overlay serves (the step walks
// the upper layer), else gVisor's tmpfs, walked whole with a stat that
// crosses gVisor's kernel for each entry.
func BenchmarkCheckpointDeltaGVisor(b *testing.B) {
	needGVisor(b)
	b.Run("runtime=gvisor/restored", func(b *testing.B) {
		sb := benchRestored(b, sandbox.RuntimeGVisor)
		b.Logf("layers: %q", sb.Info().Layers)
		benchDelta(b, sb, sb.(sandbox.Checkpointer), benchTreeChanged)
	})
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

// BenchmarkGVisorFirstExec is a sandbox's first command (`echo hi`, its
// output read), per runtime, after the sandbox has waited `pause` since
// its Create, as a pool's idle sandbox waits for its caller; only the
// command is timed (ns/op), and a second `echo hi` right after it is
// reported beside (second-ms/op). gVisor calibrates its clock a second
// after boot (until then every clock read inside is a trapped call), so
// pause=0 and pause=1.5s tell that apart from the first command's own
// costs (its binaries paged in through the gofer).
func BenchmarkGVisorFirstExec(b *testing.B) {
	needGVisor(b)
	ctx := context.Background()
	echo := func(b *testing.B, sb sandbox.Sandbox) {
		var out bytes.Buffer
		if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"echo", "hi"}, Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "hi\n" {
			b.Fatalf("echo: %+v %v %q", r, err, out.String())
		}
	}
	for _, rt := range benchRuntimes(b) {
		for _, pause := range []time.Duration{0, 1500 * time.Millisecond} {
			b.Run(fmt.Sprintf("runtime=%s/pause=%v", rt.name, pause), func(b *testing.B) {
				var second time.Duration
				for b.Loop() {
					b.StopTimer()
					sb, err := rt.be.Create(ctx, sandbox.Spec{Runtime: rt.runtime, Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}})
					if err != nil {
						b.Fatal(err)
					}
					if o, ok := sb.(interface{ Preopen() }); ok {
						o.Preopen()
					}
					time.Sleep(pause)
					b.StartTimer()
					echo(b, sb)
					b.StopTimer()
					t := time.Now()
					echo(b, sb)
					second += time.Since(t)
					_ = sb.Destroy(ctx)
					b.StartTimer()
				}
				b.ReportMetric(float64(second.Microseconds())/1000/float64(b.N), "second-ms/op")
			})
		}
	}
}

// BenchmarkGVisorSpawnFloor is what a process inside a sandbox pays to
// start /bin/true and wait for it, per runtime, without the executor's
// protocol: 200 spawns in one command, by a shell's fork (spawner=sh) and
// by posix_spawn, glibc's vfork (spawner=posix_spawn, from Python). It
// reports the wall time (ns/op) and the sandbox's CPU (cpu-ms/op) per
// spawn: the floor under BenchmarkGVisorExec's command.
func BenchmarkGVisorSpawnFloor(b *testing.B) {
	needGVisor(b)
	ctx := context.Background()
	const n = 200
	spawners := []struct{ name, script string }{
		{"sh", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done`, n)},
		{"posix_spawn", fmt.Sprintf(`import os
for _ in range(%d):
    os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], {}), 0)`, n)},
	}
	for _, rt := range benchRuntimes(b) {
		for _, sp := range spawners {
			b.Run("runtime="+rt.name+"/spawner="+sp.name, func(b *testing.B) {
				sb, err := rt.be.Create(ctx, sandbox.Spec{Runtime: rt.runtime, Limits: sandbox.DefaultLimits})
				if err != nil {
					b.Fatal(err)
				}
				defer sb.Destroy(ctx)
				argv := []string{"sh", "-c", sp.script}
				if sp.name != "sh" {
					argv = []string{"python3", "-c", sp.script}
				}
				run := func() {
					if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: argv}); err != nil || r.ExitCode != 0 {
						b.Fatalf("run: %+v %v", r, err)
					}
				}
				run()
				time.Sleep(execSettle)
				var cpu, wall time.Duration
				for b.Loop() {
					c0, t0 := sandboxtest.Measured(b, sb).CPU, time.Now()
					run()
					wall += time.Since(t0)
					cpu += sandboxtest.Measured(b, sb).CPU - c0
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(wall.Microseconds())/1000/float64(b.N*n), "ms/spawn")
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N*n), "cpu-ms/spawn")
			})
		}
	}
}
