package executor

import (
	"bytes"
	"testing"
)

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
