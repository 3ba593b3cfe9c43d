package execconn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// stalledWriter takes nothing until released, so what the executor sends
// stays queued on the host.
type stalledWriter struct {
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	buf     bytes.Buffer // guarded by mu
}

func newStalledWriter() *stalledWriter { return &stalledWriter{release: make(chan struct{})} }

func (w *stalledWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *stalledWriter) free() { w.once.Do(func() { close(w.release) }) }

func (w *stalledWriter) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Len()
}

// TestStreamWindow: the host buffers at most the window its request asked
// for on a channel, a bulk window for the bulk ops and the default for the
// others. An executor that sends up to the window while the host's
// consumer is stalled is fine; one that sends more is broken or hostile,
// and the connection ends instead of the host's memory growing.
func TestStreamWindow(t *testing.T) {
	ops := []struct {
		name   string
		window int64
		chunk  int
		// call makes the request, with w as its output.
		call func(ctx context.Context, c *execconn.Conn, w io.Writer) error
	}{
		{"checkpoint", execproto.BulkWindow, execproto.BulkChunkSize, func(ctx context.Context, c *execconn.Conn, w io.Writer) error {
			_, err := c.Checkpoint(ctx, execproto.TreeWorkspace, "", false, w)
			return err
		}},
		{"export", execproto.BulkWindow, execproto.BulkChunkSize, func(ctx context.Context, c *execconn.Conn, w io.Writer) error {
			return c.Export(ctx, "/workspace", w)
		}},
		{"exec", execproto.Window, execproto.ChunkSize, func(ctx context.Context, c *execconn.Conn, w io.Writer) error {
			p, err := c.Start(execproto.Request{Argv: []string{"cat"}}, nil, w, nil)
			if err != nil {
				return err
			}
			_, err = p.Wait(ctx)
			return err
		}},
		{"exec asking for bulk", execproto.BulkWindow, execproto.BulkChunkSize, func(ctx context.Context, c *execconn.Conn, w io.Writer) error {
			p, err := c.Start(execproto.Request{Argv: []string{"cat"}, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}, nil, w, nil)
			if err != nil {
				return err
			}
			_, err = p.Wait(ctx)
			return err
		}},
	}
	for _, op := range ops {
		for _, over := range []bool{false, true} {
			name := op.name + "/window"
			if over {
				name = op.name + "/beyond window"
			}
			t.Run(name, func(t *testing.T) {
				c, p := dialPeer(t)
				w := newStalledWriter()
				defer w.free()
				done := make(chan error, 1)
				go func() { done <- op.call(context.Background(), c, w) }()

				f, err := execproto.ReadFrame(p.conn)
				if err != nil || f.Type != execproto.TOpen {
					t.Fatalf("want an open frame, got %v %v", f.Type, err)
				}
				var req execproto.Request
				if err := execproto.DecodeMessage(f.Payload, &req); err != nil {
					t.Fatal(err)
				}
				if window, chunk := req.Flow(); window != op.window || chunk != op.chunk {
					t.Fatalf("%s request's Flow() = %d, %d; want %d, %d", op.name, window, chunk, op.window, op.chunk)
				}
				acks := p.drain(f.Stream)
				// The stalled writer holds at most one frame; the queue
				// holds the rest. Beyond the window: a frame and a byte
				// more than the queue may hold, wherever the writer is.
				total := int(op.window)
				if over {
					total += op.chunk + 1
				}
				for sent := 0; sent < total; {
					n := min(op.chunk, total-sent)
					if err := p.w.Write(execproto.DataFrame(f.Stream, execproto.Stdout, make([]byte, n))); err != nil {
						t.Fatal(err)
					}
					sent += n
				}
				if over {
					// The host fails its streams, which waits for their
					// writers, once it has noted why the connection
					// ended: free the writer then.
					for c.Err() == nil {
						time.Sleep(time.Millisecond)
					}
					w.free()
					if err := <-done; !errors.Is(err, sandbox.ErrLost) {
						t.Errorf("%s past the window = %v, want ErrLost", op.name, err)
					}
					if err := c.Err(); !errors.Is(err, execproto.ErrFrame) {
						t.Errorf("connection ended with %v, want ErrFrame", err)
					}
					p.conn.Close()
					<-acks
					return
				}
				var res execproto.Result
				if op.name == "checkpoint" {
					res.Checkpoint = &execproto.CheckpointResult{Baseline: "b-1", Full: true}
				}
				p.result(f.Stream, res)
				w.free()
				if err := <-done; err != nil {
					t.Fatalf("%s of a full window = %v", op.name, err)
				}
				if w.len() != total {
					t.Errorf("%s wrote %d bytes, want %d", op.name, w.len(), total)
				}
				select {
				case <-c.Done():
					t.Errorf("the connection ended: %v", c.Err())
				default:
				}
				p.conn.Close()
				<-acks
			})
		}
	}
}

// TestStdinFrames: the host sends stdin in frames of the request's chunk
// size, and no more than its window before the executor acknowledges.
func TestStdinFrames(t *testing.T) {
	for _, bulk := range []bool{false, true} {
		window, chunk := int64(execproto.Window), execproto.ChunkSize
		if bulk {
			window, chunk = execproto.BulkWindow, execproto.BulkChunkSize
		}
		t.Run(map[bool]string{false: "default", true: "bulk"}[bulk], func(t *testing.T) {
			c, p := dialPeer(t)
			in := bytes.Repeat([]byte("0123456789abcdef"), int(window)/16*3)
			req := execproto.Request{Argv: []string{"cat"}}
			if bulk {
				req.Window, req.ChunkSize = execproto.BulkWindow, execproto.BulkChunkSize
			}
			proc, err := c.Start(req, bytes.NewReader(in), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			f, err := execproto.ReadFrame(p.conn)
			if err != nil || f.Type != execproto.TOpen {
				t.Fatalf("want an open frame, got %v %v", f.Type, err)
			}
			var got bytes.Buffer
			var unacked, largest int64
			for {
				f, err := execproto.ReadFrame(p.conn)
				if err != nil {
					t.Fatal(err)
				}
				if f.Type == execproto.TClose {
					break
				}
				if f.Type != execproto.TData {
					t.Fatalf("got a %s frame, want data", f.Type)
				}
				n := int64(len(f.Payload) - 1)
				largest = max(largest, n)
				got.Write(f.Payload[1:])
				if unacked += n; unacked > window {
					t.Fatalf("%d bytes unacknowledged, window %d", unacked, window)
				}
				// Acknowledge a window's worth at a time: the host must
				// stop at the window and wait for it.
				if unacked == window {
					if err := p.w.Write(execproto.AckFrame(f.Stream, execproto.Stdin, uint32(unacked))); err != nil {
						t.Fatal(err)
					}
					unacked = 0
				}
			}
			if !bytes.Equal(got.Bytes(), in) {
				t.Errorf("stdin arrived as %d bytes, want the %d sent", got.Len(), len(in))
			}
			if largest != int64(chunk) {
				t.Errorf("largest stdin frame %d bytes, want the chunk size %d", largest, chunk)
			}
			p.result(f.Stream, execproto.Result{Outcome: execproto.OutcomeExited})
			if _, err := proc.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDialVersionMismatch: an executor of another protocol version (one
// that knows no stream windows, say, or one from before the binary
// messages, whose hello is JSON) is refused at the handshake with an error
// naming both versions, before any request could be misread.
func TestDialVersionMismatch(t *testing.T) {
	tests := []struct {
		name    string
		version int
		hello   func() execproto.Frame
	}{
		{"binary", execproto.Version - 1, func() execproto.Frame {
			f, _ := execproto.MessageFrame(execproto.THello, 0, execproto.Hello{Version: execproto.Version - 1})
			return f
		}},
		// Protocol 8, the last whose hello was JSON.
		{"JSON", 8, func() execproto.Frame {
			f, _ := execproto.JSONFrame(execproto.THello, 0, execproto.Hello{Version: 8})
			return f
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noLeak(t)
			host, exec := socketpair(t)
			defer exec.Close()
			go func() {
				if _, err := execproto.ReadFrame(exec); err != nil {
					return
				}
				_ = execproto.WriteFrame(exec, tt.hello())
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := execconn.Dial(ctx, host, &execproto.Setup{})
			if err == nil {
				c.Close()
				t.Fatal("Dial with an executor of the previous version = nil, want an error")
			}
			host.Close()
			want := fmt.Sprintf("executor speaks protocol %d, host %d", tt.version, execproto.Version)
			if err.Error() != want {
				t.Errorf("Dial = %q, want %q", err, want)
			}
		})
	}
}
