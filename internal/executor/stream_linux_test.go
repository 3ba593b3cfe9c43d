package executor

import (
	"bytes"
	"errors"
	"testing"

	"github.com/airlockrun/airlock/internal/execproto"
)

// TestStdinRacingTheEnd: a stream closes its stdin inbox when its work ends,
// before it sends its result and leaves the executor's streams; stdin the
// host sent meanwhile is dropped, as for a stream already gone, and does not
// end the whole connection as a malformed frame (a connect stream under
// load: "malformed frame: stdin: closed", the sandbox lost). What the host
// may not do stays refused: stdin after its own close, or beyond the window.
func TestStdinRacingTheEnd(t *testing.T) {
	s := newStream(&executor{}, 3, execproto.Request{Op: execproto.OpConnect, Port: 80})
	s.stdin.Close() // as run and connect do when the work ends
	if err := s.handle(execproto.DataFrame(3, execproto.Stdin, []byte("late"))); err != nil {
		t.Fatalf("stdin for an ending stream = %v, want it dropped", err)
	}

	s = newStream(&executor{}, 5, execproto.Request{Op: execproto.OpConnect, Port: 80})
	if err := s.handle(execproto.CloseFrame(5, execproto.Stdin)); err != nil {
		t.Fatal(err)
	}
	if err := s.handle(execproto.DataFrame(5, execproto.Stdin, []byte("x"))); !errors.Is(err, execproto.ErrFrame) {
		t.Errorf("stdin after the host's close = %v, want ErrFrame", err)
	}
	s = newStream(&executor{}, 7, execproto.Request{Op: execproto.OpConnect, Port: 80})
	if err := s.handle(execproto.DataFrame(7, execproto.Stdin, make([]byte, execproto.Window+1))); !errors.Is(err, execproto.ErrFrame) {
		t.Errorf("stdin beyond the window = %v, want ErrFrame", err)
	}
}

// TestOutputCaughtUp checks that a pump counts as caught up only once it has
// read every byte its pipe held when the command exited, however the pump's
// reads and the exit interleave. The writing end stays open, as a background
// child would hold it, so only the count can tell the pump it is done.
func TestOutputCaughtUp(t *testing.T) {
	const size = 48 << 10 // fits in a pipe: the writer never blocks
	data := bytes.Repeat([]byte("x"), size)
	for i := range 3000 {
		r, w, err := pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		o := newOutput(r, 1, nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 512)
			for {
				if _, err := o.readSome(buf); err != nil {
					return
				}
			}
		}()
		// Exit at a different point of the pump's reading each time.
		for range i % 50 {
			_ = o.read.Load()
		}
		o.exited()
		<-o.caughtUp
		if got := o.read.Load(); got != size {
			t.Fatalf("iteration %d: caught up after %d of the %d bytes the pipe held at exit", i, got, size)
		}
		r.Close()
		w.Close()
		<-done
	}
}
