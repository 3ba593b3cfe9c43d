package kube_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// BenchmarkFirstOutput: from a create to the first output of `echo hi`,
// on the kubernetes backend from a warm pool of pods and from nothing (a
// cold pod from a cached image), and on the native backend from its warm
// pool, on the same machine in the same run (bench/kube.sh runs it beside
// a bare `kubectl run` of the same image). The refill and the destroy run
// outside the timer.
//
//	go test -run=NONE -bench=FirstOutput -benchtime=10x ./internal/sandbox/kube/
func BenchmarkFirstOutput(b *testing.B) {
	ctx := context.Background()
	echo := func(b *testing.B, sb sandbox.Sandbox) {
		var out bytes.Buffer
		if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"echo", "hi"}, Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "hi\n" {
			b.Fatalf("echo: %+v %v %q", r, err, out.String())
		}
	}
	pooled := func(b *testing.B, be sandbox.Backend, spec sandbox.Spec) {
		p := pool.New(be, pool.Options{PerSpec: 1, Max: 2})
		defer p.Close(ctx)
		if err := p.Prime(spec); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			for deadline := time.Now().Add(2 * time.Minute); p.Stats().Idle < 1; {
				if time.Now().After(deadline) {
					b.Fatalf("the pool made no sandbox in two minutes: %+v", p.Stats())
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.StartTimer()
			sb, err := p.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			echo(b, sb)
			b.StopTimer()
			if p.Stats().Hits == 0 {
				b.Fatal("the create was not a pool hit")
			}
			_ = sb.Destroy(ctx)
			b.StartTimer()
		}
	}
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20, Pids: 64}}
	b.Run("backend=native/pool", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("needs root for native sandboxes")
		}
		path, remove, err := sandboxtest.BuildExecutor()
		if err != nil {
			b.Fatal(err)
		}
		defer remove()
		be, err := linux.New(linux.Config{Executor: path, StateDir: filepath.Join(b.TempDir(), "run")})
		if err != nil {
			b.Fatal(err)
		}
		defer be.Close()
		pooled(b, be, spec)
	})
	if cluster == nil {
		b.Log("no cluster: set AIRLOCK_KUBECONFIG for the kubernetes cases")
		return
	}
	ns := namespace(b, cluster)
	b.Run("backend=kubernetes/pool", func(b *testing.B) {
		pooled(b, newBackend(b, cluster, ns), spec)
	})
	b.Run("backend=kubernetes/cold", func(b *testing.B) {
		be := newBackend(b, cluster, ns)
		for b.Loop() {
			sb, err := be.Create(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			echo(b, sb)
			b.StopTimer()
			_ = sb.Destroy(ctx)
			b.StartTimer()
		}
	})
}

// BenchmarkCheckpointDeltaRestored is the checkpoint of a step that
// changed one file of the checkpoint benchmarks' 1 GiB tree
// (sandboxtest.MakeBenchTree), restored into a pod's empty workspace
// (checkpoint.Untar, as a restore does): walked/op is the entries the
// executor's walk looked at (the upper layer of the overlay over the
// pod's volume, or the whole volume without it), sandbox-cpu-ms/op the
// pod's CPU time during the checkpoint (its cgroup's, on this machine's
// node: cgroupfs, v1 cpuacct), mark-* the restore's mark.
//
//	go test -run=NONE -bench=CheckpointDeltaRestored -benchtime=10x ./internal/sandbox/kube/
func BenchmarkCheckpointDeltaRestored(b *testing.B) {
	if cluster == nil {
		b.Skip("no cluster: set AIRLOCK_KUBECONFIG")
	}
	ctx := context.Background()
	dir, _, err := sandboxtest.MakeBenchTree()
	defer os.RemoveAll(dir)
	if err != nil {
		b.Fatal(err)
	}
	ns := namespace(b, cluster)
	be := newBackend(b, cluster, ns)
	sb, err := be.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 1 << 30, Pids: 512, CPUs: 1, DiskBytes: 4 << 30}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sb.Destroy(ctx) }()
	b.Logf("layers: %q", sb.Info().Layers)
	// The tree's top names, not ".": a pod's volume root is not the
	// executor's to chmod without the overlay (the import's "./" entry
	// failed there with EPERM before it).
	tops, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"-C", dir, "-cf", "-"}
	for _, t := range tops {
		args = append(args, t.Name())
	}
	tarCmd := exec.Command("tar", args...)
	out, err := tarCmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := tarCmd.Start(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := checkpoint.Untar(ctx, sb, out, false); err != nil {
		b.Fatal(err)
	}
	if err := tarCmd.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("restore: %v", time.Since(start))
	pod, err := cluster.client.CoreV1().Pods(ns).Get(ctx, sb.Info().ID, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	cpu := podCPU(b, string(pod.UID))
	if cpu == nil {
		b.Logf("no cgroup of pod %s found on this node: no CPU times", pod.UID)
		cpu = func() time.Duration { return 0 }
	}
	cp := sb.(sandbox.Checkpointer)
	c0 := cpu()
	mark, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{MarkOnly: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	markCPU := cpu() - c0
	since := mark.Baseline
	step := sandbox.Command{Argv: []string{"sh", "-c", "echo x >> /workspace/" + sandboxtest.BenchTreeChanged}}
	// A first step copies the file's directories up to the upper layer;
	// the next ones change the file alone.
	if r, err := sandbox.Run(ctx, sb, step); err != nil || r.ExitCode != 0 {
		b.Fatalf("run: %+v %v", r, err)
	}
	res, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Since: since}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	since = res.Baseline
	var walked int64
	var used time.Duration
	for b.Loop() {
		b.StopTimer()
		if r, err := sandbox.Run(ctx, sb, step); err != nil || r.ExitCode != 0 {
			b.Fatalf("run: %+v %v", r, err)
		}
		c0 := cpu()
		b.StartTimer()
		res, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Since: since}, io.Discard)
		b.StopTimer()
		used += cpu() - c0
		b.StartTimer()
		if err != nil || res.Full || res.Entries != 1 {
			b.Fatalf("Checkpoint = %+v, %v; want a delta of the changed file alone", res, err)
		}
		since, walked = res.Baseline, walked+res.Walked
	}
	b.ReportMetric(float64(walked)/float64(b.N), "walked/op")
	b.ReportMetric(used.Seconds()*1e3/float64(b.N), "sandbox-cpu-ms/op")
	b.ReportMetric(float64(mark.Walked), "mark-walked")
	b.ReportMetric(markCPU.Seconds()*1e3, "mark-cpu-ms")
}

// podCPU returns a reader of the CPU time the pod uid has used, from its
// cgroup on this machine's node (the test cluster's kubelet: cgroupfs on
// cgroup v1, kubepods[/<qos>]/pod<uid> in the cpuacct hierarchy, or the
// unified one's cpu.stat), or nil where it finds none.
func podCPU(b *testing.B, uid string) func() time.Duration {
	b.Helper()
	read := func(file string) func() time.Duration {
		return func() time.Duration {
			raw, err := os.ReadFile(file)
			if err != nil {
				b.Fatal(err)
			}
			text := strings.TrimSpace(string(raw))
			unit := time.Nanosecond
			if strings.HasSuffix(file, "cpu.stat") {
				// cgroup v2: "usage_usec N" first.
				f := strings.Fields(text)
				if len(f) < 2 || f[0] != "usage_usec" {
					b.Fatalf("%s: no usage_usec first: %q", file, text)
				}
				text, unit = f[1], time.Microsecond
			}
			n, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return time.Duration(n) * unit
		}
	}
	for _, h := range []string{"cpuacct", "cpu,cpuacct", "unified", ""} {
		for _, q := range []string{"*/", ""} {
			name := "cpuacct.usage"
			if h == "unified" || h == "" {
				name = "cpu.stat"
			}
			m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", h, "kubepods", q+"pod"+uid, name))
			if len(m) == 1 {
				b.Logf("the pod's CPU time: %s", m[0])
				return read(m[0])
			}
		}
	}
	return nil
}
