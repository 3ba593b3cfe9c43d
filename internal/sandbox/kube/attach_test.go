package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/kube"
)

// creatorEnv, set to a namespace, makes the test binary the creating
// replica of TestAttachAfterKill: it creates a sandbox there, writes a
// file and starts a command in it, prints the sandbox's id and waits to be
// killed.
const creatorEnv = "AIRLOCK_KUBE_TEST_CREATOR"

// attachGrace is the tests' Config.DetachedGrace.
const attachGrace = 2 * time.Minute

// creator is the creating replica (see creatorEnv).
func creator(e *env, ns string) int {
	cfg := config(e, ns)
	cfg.DetachedGrace = attachGrace
	b, err := kube.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "creator:", err)
		return 1
	}
	ctx := context.Background()
	sb, err := b.Create(ctx, sandbox.Spec{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "creator:", err)
		return 1
	}
	var out bytes.Buffer
	if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "echo made-by-a >/workspace/a; echo ok"}, Stdout: &out}); err != nil || r.ExitCode != 0 {
		fmt.Fprintln(os.Stderr, "creator: run:", r, err, out.String())
		return 1
	}
	// A command of A's that is running when A dies.
	if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "echo $$ >/workspace/a.pid; exec sleep 600"}}); err != nil {
		fmt.Fprintln(os.Stderr, "creator: start:", err)
		return 1
	}
	fmt.Println(sb.ID()) //nolint:forbidigo // the creator's answer to its parent test
	select {}
}

// TestAttachAfterKill: any replica reaches any sandbox. Replica A (another
// process) creates a sandbox; replica B (its own Backend) attaches to it,
// sees A's files and runs commands; A is killed with SIGKILL, and B goes on
// serving the sandbox (A's command ends with A's connection); once B
// detaches, the sandbox lives out its grace, and Sweep deletes its ended
// pod; Destroy through any replica deletes it.
func TestAttachAfterKill(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), creatorEnv+"="+ns, "AIRLOCK_KUBE_EXECUTOR_IMAGE="+e.executorImage)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the creating replica's sandbox id: %v", err)
	}
	id := strings.TrimSpace(line)

	cfg := config(e, ns)
	cfg.DetachedGrace = attachGrace
	b, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Attach(ctx, id, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Attach(%s) = %v", id, err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	runB := func(script string) string {
		t.Helper()
		var o, eb bytes.Buffer
		r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &o, Stderr: &eb})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("replica B runs %q: %+v %v (stderr %q)", script, r, err, eb.String())
		}
		return o.String()
	}
	if got := runB("cat /workspace/a"); got != "made-by-a\n" {
		t.Errorf("replica B reads A's file: %q", got)
	}
	if got := runB(`kill -0 "$(cat /workspace/a.pid)" && echo running`); got != "running\n" {
		t.Errorf("A's command, seen from B: %q", got)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// A's exec stream ends when the API server sees its client gone; its
	// command is killed then.
	for runB(`kill -0 "$(cat /workspace/a.pid)" 2>/dev/null && echo running || echo gone`) != "gone\n" {
		select {
		case <-ctx.Done():
			t.Fatal("A's command still runs after A was killed")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if got := runB("echo after >/workspace/b; cat /workspace/a /workspace/b"); got != "made-by-a\nafter\n" {
		t.Errorf("replica B after A's kill -9: %q", got)
	}
	select {
	case <-sb.Done():
		t.Fatal("the sandbox is done after its creator died")
	default:
	}
	if info := sb.Info(); info.Backend != "kubernetes" || info.ID != id {
		t.Errorf("Info = %+v", info)
	}

	// B leaves: nobody is attached, the grace runs; a third replica
	// attaches within it and destroys the sandbox.
	sb.Detach()
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := c.Attach(ctx, id, sandbox.Spec{})
	if err != nil {
		t.Fatalf("Attach after the last host detached, within the grace: %v", err)
	}
	if err := sc.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.CoreV1().Pods(ns).Get(ctx, id, metav1.GetOptions{}); err == nil {
		// Deleted with no grace period: gone at once, or terminating.
		pod, _ := e.client.CoreV1().Pods(ns).Get(ctx, id, metav1.GetOptions{})
		if pod != nil && pod.DeletionTimestamp == nil {
			t.Errorf("the pod after Destroy through a third replica: not being deleted")
		}
	}
}

// TestDetachedGraceEnds: a sandbox whose only host detached ends by itself
// once its grace passes (the relay ends the executor), and Sweep deletes
// its ended pod; a running sandbox's pod is left alone.
func TestDetachedGraceEnds(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := config(e, ns)
	cfg.DetachedGrace = time.Second
	b, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	alive, err := b.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = alive.Destroy(context.Background()) })
	sb, err := b.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	sb.(*kube.Sandbox).Detach()
	for {
		pod, err := e.client.CoreV1().Pods(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the detached sandbox's pod is %s long after its grace", pod.Status.Phase)
		case <-time.After(200 * time.Millisecond):
		}
	}
	n, err := b.Sweep(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v, want the one ended pod", n, err)
	}
	pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Name == sb.ID() && p.DeletionTimestamp == nil {
			t.Errorf("the ended pod %s after Sweep: not deleted", p.Name)
		}
		if p.Name == alive.ID() && p.DeletionTimestamp != nil {
			t.Errorf("Sweep deletes the running sandbox's pod")
		}
	}
}
