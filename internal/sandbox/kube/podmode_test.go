package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestPodModeLocal runs the executor's pod mode as a pod runs it, without
// a cluster: `airlock-exec pod` as an unprivileged uid with no
// capabilities, in a network and mount namespace of its own (the pod's)
// whose /tmp, /home, /root and /run/airlock are fresh tmpfs (the pod's
// volumes; the host has no /workspace to cover, and commands run in /), and `airlock-exec pod-connect` in the same network
// namespace as the host's exec. The host side is the backend's handshake
// (its Setup); the command sees loopback only and runs as root of its own
// user namespace. Closing the connection ends the executor and the relay.
func TestPodModeLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pm := startPodMode(t, ctx, podSetup())
	c := pm.c
	for _, l := range []string{"runtime:kubernetes", "namespaces:user,mnt,pid,net,ipc,uts", "network:loopback-only", "seccomp"} {
		if !strings.Contains(strings.Join(c.Ready.Layers, " "), l) {
			t.Errorf("Ready.Layers = %q, want %s", c.Ready.Layers, l)
		}
	}
	var o, e bytes.Buffer
	p, err := c.Start(execproto.Request{Argv: []string{"/bin/sh", "-c", "sed 1,2d /proc/net/dev | cut -d: -f1; id -u; cat /proc/self/uid_map"}, Dir: "/"}, nil, &o, &e)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Wait(ctx)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v (stderr %q)", r, err, e.String())
	}
	f := strings.Fields(o.String())
	// Interfaces, then uid, then the one line of the map: 0 65534 1.
	if want := "lo 0 0 65534 1"; strings.Join(f, " ") != want {
		t.Errorf("output = %q, want %q (loopback only, root mapped to the pod's uid alone)", strings.Join(f, " "), want)
	}
	pm.end(t)
}

// podMode is the executor's pod mode as TestPodModeLocal runs it.
type podMode struct {
	c      *execconn.Conn
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	// exe is the executor; relayPID the relay's process (the pod's PID 1).
	exe      string
	relayPID int
	// relayErr is the file of the relay's stderr.
	relayErr string
	// exited is closed once the relay's process ended, with waitErr.
	exited  chan struct{}
	waitErr error
}

// podSetup is the backend's Setup for a default spec.
func podSetup() *execproto.Setup {
	return &execproto.Setup{
		Hostname: "airlock", DiskBytes: 1 << 30, ShmBytes: 64 << 20,
		User:    execproto.User{Name: "root", UID: 0, GID: 0, Home: "/root"},
		Rlimits: map[string]uint64{"core": 0}, NoSetGroups: true, GVisor: true,
		Workspace: execproto.Workspace{Mode: execproto.WorkspaceEmpty},
	}
}

// end closes the host's connection and checks that the relay ends.
func (pm *podMode) end(t *testing.T) {
	t.Helper()
	pm.c.Close()
	select {
	case <-pm.exited:
		if pm.waitErr != nil {
			t.Errorf("pod-connect = %v (stderr %s)", pm.waitErr, pm.stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = pm.cmd.Process.Kill()
		t.Fatal("pod-connect did not end after the host closed its connection")
	}
}

// startPodMode starts the executor's pod mode as a pod runs it (see
// TestPodModeLocal) and shakes hands with setup. It skips without root.
func startPodMode(t *testing.T, ctx context.Context, setup *execproto.Setup, relayArgs ...string) *podMode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces and mounts stand in for the pod)")
	}
	for _, tool := range []string{"unshare", "setpriv", "ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	path, remove, err := sandboxtest.BuildExecutor()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	// A directory outside /tmp, which the pod's namespace covers.
	dir, err := os.MkdirTemp("/var/tmp", "airlock-podmode-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	exe := filepath.Join(dir, "airlock-exec")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The pod: its PID 1 (the relay) runs as nobody; the exec runs
	// pod-connect beside it, as root of the pod's namespaces (an exec runs
	// as the container's user; root here only because this shell is).
	pod := `set -e
mount --make-rprivate /
ip link set lo up
for d in /run/airlock /tmp /home /root; do mount -t tmpfs -o mode=1777 tmpfs $d; done
setpriv --reuid 65534 --regid 65534 --clear-groups --inh-caps=-all --bounding-set=-all "$1" pod $3 </dev/null >/dev/null 2>"$2.err" &
echo $! >"$2"
exec "$1" pod-connect`
	pidFile := filepath.Join(dir, "relay.pid")
	cmd := exec.Command("unshare", "--net", "--mount", "sh", "-c", pod, "sh", exe, pidFile, strings.Join(relayArgs, " "))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pm := &podMode{cmd: cmd, exited: make(chan struct{}), stderr: &stderr, exe: exe, relayErr: pidFile + ".err"}
	go func() {
		pm.waitErr = cmd.Wait()
		close(pm.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-pm.exited
	})
	c, err := execconn.Dial(ctx, struct {
		io.Reader
		io.WriteCloser
	}{out, in}, setup)
	if err != nil {
		t.Fatalf("Dial = %v (stderr %s)", err, stderr.String())
	}
	t.Cleanup(func() { c.Close() })
	pm.c = c
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(string(pid), &pm.relayPID); err != nil {
		t.Fatalf("relay pid %q: %v", pid, err)
	}
	return pm
}
