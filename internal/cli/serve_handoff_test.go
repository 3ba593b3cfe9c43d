package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
)

// TestServeHandoff: airlock serve, with its pool, takes this user's handed
// off sandbox runs on $AIRLOCK_HOME's socket, as airlock sandbox daemon
// does, and stops listening when it stops.
func TestServeHandoff(t *testing.T) {
	home, exe := serveHome(t, "alh-")
	s := startServe(t, home, exe)
	sock := handoff.SocketPath(home)
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ctx := context.Background()
	req := handoff.Request{Spec: sandbox.Spec{Limits: sandbox.DefaultLimits}, Argv: []string{"sh", "-c", "echo served; exit 4"}}
	p, err := handoff.Start(ctx, sock, req, handoff.Stdio{Stdout: out, Stderr: out})
	if err != nil {
		t.Fatalf("handoff.Start to airlock serve: %v", err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out.Name())
	if res.ExitStatus() != 4 || string(b) != "served\n" {
		t.Errorf("handed off to serve: %+v, output %q; want exit 4, %q", res, b, "served\n")
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("airlock serve exited %d", code)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("after serve stopped, its socket: %v, want it gone", err)
	}
}
