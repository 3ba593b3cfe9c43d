package supervisor_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/supervisor"
)

var executorPath string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		os.Exit(m.Run()) // the tests skip
	}
	path, remove, err := sandboxtest.BuildExecutor()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	executorPath = path
	code := m.Run()
	remove()
	os.Exit(code)
}

// serve makes a sandbox and serves it on a socket until the test ends.
func serve(t *testing.T) (sandbox.Sandbox, supervisor.Client) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create sandboxes")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	sb := sandboxtest.Create(t, b, sandbox.Spec{})
	dir, err := os.MkdirTemp("", "sv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = (&supervisor.Server{SB: sb, Owner: os.Getuid()}).Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return sb, supervisor.Client{Path: path}
}

// TestConnect: a connect request relays a TCP connection to a port in the
// sandbox over the supervisor's socket, half-closes passed on both ways;
// nothing listening is ErrPortClosed.
func TestConnect(t *testing.T) {
	sb, cl := serve(t)
	sandboxtest.StartEchoServer(t, sb, 8000)
	c, err := cl.Connect(8000)
	if err != nil {
		t.Fatalf("Connect(8000) = %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	msg := bytes.Repeat([]byte("through the supervisor "), 200_000)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	// The echo server shuts its side once it reads EOF: the EOF here
	// proves the half-close went in and came back out.
	got, err := io.ReadAll(c)
	if werr := <-errc; werr != nil {
		t.Fatalf("write: %v", werr)
	}
	if err != nil || !bytes.Equal(got, msg) {
		t.Errorf("echo through the supervisor: %d bytes, %v; want the %d sent, then EOF", len(got), err, len(msg))
	}

	if _, err := cl.Connect(8001); !errors.Is(err, supervisor.ErrPortClosed) {
		t.Errorf("Connect(8001), nothing listening = %v, want ErrPortClosed", err)
	}
	if _, err := cl.Connect(0); err == nil || errors.Is(err, supervisor.ErrPortClosed) {
		t.Errorf("Connect(0) = %v, want an error other than ErrPortClosed", err)
	}
}
