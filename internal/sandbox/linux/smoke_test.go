package linux_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

func TestSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws := t.TempDir()
	os.WriteFile(ws+"/hello.txt", []byte("hi\n"), 0o644)
	sb, err := b.Create(ctx, sandbox.Spec{Workspace: ws, Limits: sandbox.DefaultLimits})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	t.Logf("layers: %v", sb.Info().Layers)
	var out, errb bytes.Buffer
	r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "id; pwd; ls -la /workspace; cat /workspace/hello.txt; echo x > /workspace/new; ls /; cat /proc/self/status | grep -E 'Cap|NoNew|Seccomp'"}, Stdout: &out, Stderr: &errb})
	t.Logf("result %+v err %v\nstdout:\n%s\nstderr:\n%s", r, err, out.String(), errb.String())
}
