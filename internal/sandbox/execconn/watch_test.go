package execconn_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// peer plays a (possibly hostile) executor on the other end of a real
// socket pair: it does the handshake, then answers each watch request with
// the frames a case scripts.
type peer struct {
	t    *testing.T
	conn net.Conn
	w    *execproto.Writer
}

// noLeak fails t if goroutines it started outlive it: registered first,
// its cleanup runs after every other.
func noLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		// A bound on a leak, not a speed: on a loaded machine an ended
		// goroutine may wait seconds to run its last lines.
		deadline := time.Now().Add(time.Minute)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				t.Errorf("%d goroutines after the test, %d before", runtime.NumGoroutine(), before)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// socketpair is a connected pair of unix stream sockets, buffered like the
// one between the host and a real executor.
func socketpair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	return conns[0], conns[1]
}

func dialPeer(t *testing.T) (*execconn.Conn, *peer) {
	t.Helper()
	noLeak(t)
	host, exec := socketpair(t)
	p := &peer{t: t, conn: exec, w: execproto.NewWriter(exec)}
	go func() {
		for _, want := range []execproto.Type{execproto.THello, execproto.TSetup} {
			f, err := execproto.ReadFrame(exec)
			if err != nil || f.Type != want {
				t.Errorf("handshake: got %v %v, want %s", f.Type, err, want)
				return
			}
			var reply execproto.Frame
			if want == execproto.THello {
				reply, _ = execproto.MessageFrame(execproto.THello, 0, execproto.Hello{Version: execproto.Version})
			} else {
				reply, _ = execproto.MessageFrame(execproto.TReady, 0, execproto.Ready{PID: 1})
			}
			if err := p.w.Write(reply); err != nil {
				t.Errorf("handshake: %v", err)
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := execconn.Dial(ctx, host, &execproto.Setup{})
	if err != nil {
		t.Fatalf("Dial = %v", err)
	}
	t.Cleanup(func() {
		exec.Close()
		c.Close()
	})
	return c, p
}

// open reads the next frame, which must open a watch stream.
func (p *peer) open() uint32 {
	p.t.Helper()
	f, err := execproto.ReadFrame(p.conn)
	if err != nil || f.Type != execproto.TOpen {
		p.t.Fatalf("want an open frame, got %v %v", f.Type, err)
	}
	var req execproto.Request
	if err := execproto.DecodeMessage(f.Payload, &req); err != nil || req.Op != execproto.OpWatch {
		p.t.Fatalf("want a watch request, got %+v %v", req, err)
	}
	return f.Stream
}

func (p *peer) data(stream uint32, payload string) {
	p.t.Helper()
	if err := p.w.Write(execproto.DataFrame(stream, execproto.Stdout, []byte(payload))); err != nil {
		p.t.Fatal(err)
	}
}

func (p *peer) result(stream uint32, r execproto.Result) {
	p.t.Helper()
	f, _ := execproto.MessageFrame(execproto.TResult, stream, r)
	if err := p.w.Write(f); err != nil {
		p.t.Fatal(err)
	}
}

// drain reads the host's frames (acks, cancels) until the connection
// closes, and reports whether a cancel for stream came.
func (p *peer) drain(stream uint32) <-chan bool {
	cancelled := make(chan bool, 1)
	go func() {
		seen := false
		defer func() { cancelled <- seen }()
		for {
			f, err := execproto.ReadFrame(p.conn)
			if err != nil {
				return
			}
			if f.Type == execproto.TCancel && f.Stream == stream && !seen {
				seen = true
				p.result(stream, execproto.Result{})
			}
		}
	}()
	return cancelled
}

func collect(t *testing.T, ch <-chan sandbox.WatchEvent) []sandbox.WatchEvent {
	t.Helper()
	var out []sandbox.WatchEvent
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("the watch channel was not closed within 10s; got %+v", out)
		}
	}
}

func TestWatchStream(t *testing.T) {
	c, p := dialPeer(t)
	type watched struct {
		ch  <-chan sandbox.WatchEvent
		err error
	}
	got := make(chan watched, 1)
	go func() {
		ch, err := c.Watch(context.Background(), "/workspace", true)
		got <- watched{ch, err}
	}()
	id := p.open()
	p.data(id, `{"op":"start"}`)
	w := <-got
	if w.err != nil {
		t.Fatalf("Watch = %v", w.err)
	}
	acks := p.drain(id)
	p.data(id, `{"op":"create","path":"/workspace/d","dir":true}`)
	p.data(id, `{"op":"write","path":"/workspace/d/f"}`)
	p.result(id, execproto.Result{})
	want := []sandbox.WatchEvent{{Op: sandbox.WatchCreate, Path: "/workspace/d", Dir: true}, {Op: sandbox.WatchWrite, Path: "/workspace/d/f"}}
	if evs := collect(t, w.ch); len(evs) != 2 || evs[0] != want[0] || evs[1] != want[1] {
		t.Errorf("events %+v, want %+v", evs, want)
	}
	p.conn.Close()
	<-acks
}

// TestWatchHostileExecutor: what the executor sends on a watch stream is
// untrusted; anything but a start event and then valid events ends the
// watch, with no event of it delivered.
func TestWatchHostileExecutor(t *testing.T) {
	tests := []struct {
		name   string
		frames []string
		result *execproto.Result // sent after the frames, if set
		errIs  error
	}{
		{"missing directory", nil, &execproto.Result{ExitCode: -1, Error: "watch /workspace: no such file or directory", Errno: "ENOENT"}, fs.ErrNotExist},
		{"event before start", []string{`{"op":"create","path":"/x"}`}, nil, execproto.ErrFrame},
		{"not JSON", []string{"\x00\x01"}, nil, execproto.ErrFrame},
		{"unknown op", []string{`{"op":"explode","path":"/x"}`}, nil, execproto.ErrFrame},
		{"relative path", []string{`{"op":"start"}`, `{"op":"create","path":"x"}`}, nil, nil},
		{"unknown field", []string{`{"op":"start"}`, `{"op":"create","path":"/x","secret":1}`}, nil, nil},
		{"second start", []string{`{"op":"start"}`, `{"op":"start"}`}, nil, nil},
		{"ended before start", nil, &execproto.Result{}, execproto.ErrFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, p := dialPeer(t)
			type watched struct {
				ch  <-chan sandbox.WatchEvent
				err error
			}
			got := make(chan watched, 1)
			go func() {
				ch, err := c.Watch(context.Background(), "/workspace", false)
				got <- watched{ch, err}
			}()
			id := p.open()
			cancelled := p.drain(id)
			for _, f := range tt.frames {
				p.data(id, f)
			}
			if tt.result != nil {
				p.result(id, *tt.result)
			}
			w := <-got
			switch {
			case tt.errIs != nil:
				if !errors.Is(w.err, tt.errIs) {
					t.Errorf("Watch = %v, want %v", w.err, tt.errIs)
				}
			case w.err != nil:
				t.Errorf("Watch = %v, want the watch started", w.err)
			default:
				if evs := collect(t, w.ch); len(evs) != 0 {
					t.Errorf("events %+v from a broken stream, want none", evs)
				}
			}
			p.conn.Close()
			if seen := <-cancelled; tt.result == nil && !seen {
				t.Errorf("the host did not cancel the broken watch")
			}
		})
	}
}

// TestWatchCancel: ending the context closes the channel, and an event the
// consumer never reads does not keep the connection from closing.
func TestWatchCancel(t *testing.T) {
	c, p := dialPeer(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan (<-chan sandbox.WatchEvent), 1)
	go func() {
		ch, err := c.Watch(ctx, "/workspace", false)
		if err != nil {
			t.Errorf("Watch = %v", err)
		}
		got <- ch
	}()
	id := p.open()
	p.data(id, `{"op":"start"}`)
	ch := <-got
	cancelled := p.drain(id)
	p.data(id, `{"op":"create","path":"/workspace/unread"}`)
	cancel()
	collect(t, ch)
	p.conn.Close()
	if !<-cancelled {
		t.Error("no cancel frame after the context ended")
	}
	if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Logf("Close = %v", err)
	}
}
