package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// session is a second host's exec into the pod: pod-connect run in the
// pod's network namespace, as the API server's exec runs it.
type session struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  io.ReadCloser
	done chan struct{}
}

// exec starts another pod-connect beside the pod's relay.
func (pm *podMode) exec(t *testing.T) *session {
	t.Helper()
	cmd := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(pm.relayPID)+"/ns/net", pm.exe, "pod-connect")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &session{cmd: cmd, in: in, out: out, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

// attach is a second host attaching: its own exec, and the backend's
// handshake over it.
func (pm *podMode) attach(t *testing.T, ctx context.Context) *execconn.Conn {
	t.Helper()
	s := pm.exec(t)
	c, err := execconn.Dial(ctx, struct {
		io.Reader
		io.WriteCloser
	}{s.out, s.in}, podSetup())
	if err != nil {
		t.Fatalf("attach: Dial = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// killRelay ends the relay (and with it the executor) at the test's end:
// one that outlives its hosts is not ended by pod-connect's end.
func (pm *podMode) killRelay(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			_ = syscall.Kill(pm.relayPID, syscall.SIGQUIT)
			time.Sleep(time.Second)
			relay, _ := os.ReadFile(pm.relayErr)
			t.Logf("pod-connect's stderr:\n%s\nthe relay's:\n%s", pm.stderr.String(), relay)
		}
		_ = syscall.Kill(pm.relayPID, syscall.SIGKILL)
	})
}

// closeConn closes c, failing t if that takes over a minute.
func closeConn(t *testing.T, c *execconn.Conn) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		c.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the host's Close did not return in a minute")
	}
}

// relayGone waits until the relay's process has ended.
func (pm *podMode) relayGone(t *testing.T, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pm.relayPID) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay (pid %d) still runs %s after its last host left", pm.relayPID, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func run(t *testing.T, ctx context.Context, c *execconn.Conn, script string) (string, execproto.Result) {
	t.Helper()
	var o, e bytes.Buffer
	p, err := c.Start(execproto.Request{Argv: []string{"/bin/sh", "-c", script}, Dir: "/"}, nil, &o, &e)
	if err != nil {
		t.Fatalf("Start(%q) = %v", script, err)
	}
	r, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait(%q) = %v (stderr %q)", script, err, e.String())
	}
	return o.String(), r
}

// TestPodModeAttach: hosts attach to a running pod's executor, several at
// once (each host's stream ids are its own), a host's leaving ends only its
// own commands, and the sandbox ends once its last host left: at once
// without a grace, after it with one.
func TestPodModeAttach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pm := startPodMode(t, ctx, podSetup())
	pm.killRelay(t)
	a := pm.c
	if out, r := run(t, ctx, a, "echo from-a >/tmp/shared; echo started"); r.ExitCode != 0 || out != "started\n" {
		t.Fatalf("host A's command = %q %+v", out, r)
	}
	b := pm.attach(t, ctx)
	if strings.Join(b.Ready.Layers, " ") != strings.Join(a.Ready.Layers, " ") {
		t.Errorf("the attaching host's Ready.Layers = %q, want the sandbox's %q", b.Ready.Layers, a.Ready.Layers)
	}
	// Both hosts' first streams have the same id on their side.
	if out, r := run(t, ctx, b, "cat /tmp/shared"); r.ExitCode != 0 || out != "from-a\n" {
		t.Fatalf("host B reads A's file: %q %+v", out, r)
	}

	// A long command of A's with output flowing while A leaves: it is
	// killed, and B goes on.
	var ao bytes.Buffer
	long, err := a.Start(execproto.Request{Argv: []string{"/bin/sh", "-c", "echo $$ >/tmp/long.pid; while :; do echo line; done"}, Dir: "/"}, nil, &ao, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		if out, _ := run(t, ctx, b, "cat /tmp/long.pid 2>/dev/null"); out != "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	closeConn(t, a)
	if _, err := long.Wait(ctx); err == nil {
		t.Errorf("A's command after A closed its connection: no error")
	}
	for ctx.Err() == nil {
		out, _ := run(t, ctx, b, `kill -0 "$(cat /tmp/long.pid)" 2>/dev/null && echo alive || echo gone`)
		if out == "gone\n" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatal("A's command still runs after A left")
	}
	if out, r := run(t, ctx, b, "echo still here"); r.ExitCode != 0 || out != "still here\n" {
		t.Fatalf("host B after A left: %q %+v", out, r)
	}

	// B leaves too: without a grace, the relay ends the sandbox at once.
	closeConn(t, b)
	pm.relayGone(t, 30*time.Second)
}

// TestPodModeDetachedGrace: with --detached-grace the sandbox outlives
// its only host, a host attaching within the grace finds it as it was,
// and once that host has left too, the grace passes and the relay ends.
func TestPodModeDetachedGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pm := startPodMode(t, ctx, podSetup(), "--detached-grace=2s")
	pm.killRelay(t)
	if out, r := run(t, ctx, pm.c, "echo kept >/tmp/mark; echo ok"); r.ExitCode != 0 || out != "ok\n" {
		t.Fatalf("first host: %q %+v", out, r)
	}
	closeConn(t, pm.c)
	<-pm.exited // the first host's exec ended; the relay did not
	if err := syscall.Kill(pm.relayPID, 0); err != nil {
		t.Fatalf("the relay after its only host left, within the grace: %v", err)
	}
	b := pm.attach(t, ctx)
	if out, r := run(t, ctx, b, "cat /tmp/mark"); r.ExitCode != 0 || out != "kept\n" {
		t.Fatalf("a host attaching within the grace: %q %+v", out, r)
	}
	closeConn(t, b)
	pm.relayGone(t, 60*time.Second)
}

// TestPodModeSessionsIsolated: a host's frames reach only its own streams.
// A second host sends cancel, signal, stdin data and stdin close on every
// stream id the first host uses (and more); the first host's command, which
// copies its stdin to its output, sees none of it.
func TestPodModeSessionsIsolated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pm := startPodMode(t, ctx, podSetup())
	pm.killRelay(t)
	a := pm.c
	for range 3 { // use up a few stream ids
		run(t, ctx, a, "true")
	}
	inR, inW := io.Pipe()
	var out bytes.Buffer
	cat, err := a.Start(execproto.Request{Argv: []string{"/bin/cat"}, Dir: "/", Stdin: true}, inR, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}

	s := pm.exec(t)
	w := execproto.NewWriter(s.in)
	hello, _ := execproto.MessageFrame(execproto.THello, 0, execproto.Hello{Version: execproto.Version})
	setup, _ := execproto.MessageFrame(execproto.TSetup, 0, podSetup())
	for _, f := range []execproto.Frame{hello, setup} {
		if err := w.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(s.out)
	for _, want := range []execproto.Type{execproto.THello, execproto.TReady} {
		f, err := execproto.ReadFrame(r)
		if err != nil || f.Type != want {
			t.Fatalf("the raw host's handshake: %v %v, want %s", f.Type, err, want)
		}
	}
	for id := uint32(1); id <= 64; id++ {
		for _, f := range []execproto.Frame{
			execproto.DataFrame(id, execproto.Stdin, []byte("injected\n")),
			{Type: execproto.TSignal, Stream: id, Payload: []byte{byte(syscall.SIGKILL)}},
			{Type: execproto.TCancel, Stream: id},
			execproto.CloseFrame(id, execproto.Stdin),
		} {
			if err := w.Write(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A round trip on the raw session: everything before it was read.
	open, _ := execproto.MessageFrame(execproto.TOpen, 7, execproto.Request{Argv: []string{"/bin/true"}, Dir: "/"})
	if err := w.Write(open); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := execproto.ReadFrame(r)
		if err != nil {
			t.Fatalf("the raw host's own stream: %v", err)
		}
		if f.Stream != 7 {
			t.Fatalf("the raw host got a frame of stream %d, which it never opened", f.Stream)
		}
		if f.Type == execproto.TResult {
			break
		}
	}
	if _, err := io.WriteString(inW, "mine\n"); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	res, err := cat.Wait(ctx)
	if err != nil || res.ExitCode != 0 || out.String() != "mine\n" {
		t.Errorf("the first host's cat = %+v %v %q, want exit 0 and only its own input", res, err, out.String())
	}
}
