package server

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("gone") }

// TestStreamBuffer: a stream holds a buffer only between a write and the
// next flush, and what it wrote arrives whole and in order.
func TestStreamBuffer(t *testing.T) {
	var out bytes.Buffer
	b := &streamBuffer{w: &out}
	if err := b.Flush(); err != nil || b.bw != nil {
		t.Fatalf("Flush of nothing = %v, buffer held %v", err, b.bw != nil)
	}
	fmt.Fprintf(b, "retry: %d\n\n", 2000)
	if b.bw == nil || out.Len() != 0 {
		t.Fatalf("after a write: buffer held %v, %d bytes out; want held, nothing out", b.bw != nil, out.Len())
	}
	if err := b.Flush(); err != nil || b.bw != nil {
		t.Fatalf("Flush = %v, buffer held %v; want nil, released", err, b.bw != nil)
	}
	big := bytes.Repeat([]byte("x"), 100<<10) // larger than the buffer
	b.Write([]byte("a"))
	b.Write(big)
	b.Write([]byte("b"))
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "retry: 2000\n\na" + string(big) + "b"
	if out.String() != want {
		t.Errorf("wrote %d bytes, want %d in order", out.Len(), len(want))
	}
	b.Write([]byte("dropped"))
	b.release()
	if b.bw != nil || out.Len() != len(want) {
		t.Errorf("release: buffer held %v, %d bytes out; want released, nothing more", b.bw != nil, out.Len())
	}
	// A failed flush still gives the buffer back, and the next buffer
	// carries no error over.
	f := &streamBuffer{w: failWriter{}}
	f.Write([]byte("x"))
	if err := f.Flush(); err == nil || f.bw != nil {
		t.Errorf("Flush to a failing writer = %v, buffer held %v; want an error, released", err, f.bw != nil)
	}
	var again bytes.Buffer
	g := &streamBuffer{w: &again}
	g.Write([]byte("ok"))
	if err := g.Flush(); err != nil || again.String() != "ok" {
		t.Errorf("a stream after a failed one: Flush = %v, wrote %q", err, again.String())
	}
}
