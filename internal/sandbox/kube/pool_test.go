package kube_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
)

// TestWarmPool: the native backend's warm pool (internal/sandbox/pool)
// over the kubernetes backend keeps pods running with their executors
// handshaken; a create takes one (a hit: no API call, no pod made), its
// command runs in that pod, and the pool makes another pod in its place.
func TestWarmPool(t *testing.T) {
	e := needCluster(t)
	ns := namespace(t, e)
	p := pool.New(newBackend(t, e, ns), pool.Options{PerSpec: 2})
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	spec := sandbox.Spec{Limits: sandbox.DefaultLimits}
	if err := p.Prime(spec); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitIdle := func(n int) {
		t.Helper()
		for p.Stats().Idle < n {
			select {
			case <-ctx.Done():
				t.Fatalf("the pool has %d idle pods, want %d: %+v", p.Stats().Idle, n, p.Stats())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	waitIdle(2)
	pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]bool{}
	for _, pod := range pods.Items {
		before[pod.Name] = true
	}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	if s := p.Stats(); s.Hits != 1 {
		t.Errorf("stats %+v, want one hit", s)
	}
	if !before[sb.ID()] {
		t.Errorf("the create's sandbox %s is not one of the pool's pods %v", sb.ID(), before)
	}
	var out bytes.Buffer
	if r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"echo", "warm"}, Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "warm\n" {
		t.Fatalf("a command in the pooled pod: %+v %v %q", r, err, out.String())
	}
	waitIdle(2) // refilled
}
