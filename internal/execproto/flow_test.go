package execproto_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
)

// hang bounds every wait in these tests. It only turns a deadlock into a
// failure; no assertion depends on it.
const hang = 10 * time.Second

// frameChan is an io.Writer that decodes each Write as exactly one frame and
// hands it over on an unbuffered channel, so the test decides when the sender
// may go on.
type frameChan struct {
	t      *testing.T
	frames chan execproto.Frame
}

func newFrameChan(t *testing.T) *frameChan {
	return &frameChan{t: t, frames: make(chan execproto.Frame)}
}

func (c *frameChan) Write(p []byte) (int, error) {
	r := bytes.NewReader(p)
	f, err := execproto.ReadFrame(r)
	if err != nil || r.Len() != 0 {
		c.t.Errorf("Write got %d bytes that are not one frame: %v", len(p), err)
		return 0, errors.New("not one frame")
	}
	c.frames <- f
	return len(p), nil
}

func recvFrame(t *testing.T, c <-chan execproto.Frame) execproto.Frame {
	t.Helper()
	select {
	case f := <-c:
		return f
	case <-time.After(hang):
		t.Fatal("no frame within the hang guard")
		return execproto.Frame{}
	}
}

func recvErr(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(hang):
		t.Fatal("no result within the hang guard")
		return nil
	}
}

// assertNothingSent checks that the sender has neither sent a frame nor
// returned. It can only catch a violation that has already happened; a sender
// that is correctly blocked passes.
func assertNothingSent(t *testing.T, fc *frameChan, done <-chan error, why string) {
	t.Helper()
	select {
	case f := <-fc.frames:
		t.Fatalf("%s: sent %v with %d bytes", why, f.Type, len(f.Payload))
	case err := <-done:
		t.Fatalf("%s: SendData returned %v", why, err)
	default:
	}
}

func TestSendDataWaitsForCredit(t *testing.T) {
	data := make([]byte, 100)
	for i := range data {
		data[i] = byte(i)
	}
	credit := execproto.NewCredit(0)
	fc := newFrameChan(t)
	w := execproto.NewWriter(fc)
	done := make(chan error, 1)
	go func() { done <- w.SendData(5, execproto.Stdout, credit, execproto.ChunkSize, data) }()

	assertNothingSent(t, fc, done, "without credit")

	if err := credit.Add(40); err != nil {
		t.Fatalf("Add(40) = %v", err)
	}
	f := recvFrame(t, fc.frames)
	if want := execproto.DataFrame(5, execproto.Stdout, data[:40]); f.Stream != 5 || !bytes.Equal(f.Payload, want.Payload) {
		t.Fatalf("first frame = stream %d, %d bytes; want stream 5 carrying data[:40]", f.Stream, len(f.Payload))
	}

	assertNothingSent(t, fc, done, "after spending all credit")

	if err := credit.Add(1000); err != nil {
		t.Fatalf("Add(1000) = %v", err)
	}
	f = recvFrame(t, fc.frames)
	if want := execproto.DataFrame(5, execproto.Stdout, data[40:]); !bytes.Equal(f.Payload, want.Payload) {
		t.Fatalf("second frame carries %d bytes, want data[40:]", len(f.Payload)-1)
	}
	if err := recvErr(t, done); err != nil {
		t.Fatalf("SendData = %v", err)
	}
	// 1000 credit minus the 60 bytes sent.
	if n, err := credit.Take(math.MaxInt32); n != 940 || err != nil {
		t.Errorf("Take after SendData = %d, %v; want 940, nil", n, err)
	}
}

// TestSendDataChunks: SendData cuts data into frames of the stream's chunk
// size, each one Write of one whole frame with the bytes in order, for the
// default size (encoded in the Writer's buffer) and a bulk one (in its
// pool's), and the small frames after a bulk one are still whole.
func TestSendDataChunks(t *testing.T) {
	for _, chunk := range []int{execproto.ChunkSize, execproto.BulkChunkSize} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			data := make([]byte, 2*chunk+chunk/2)
			for i := range data {
				data[i] = byte(i * 7)
			}
			credit := execproto.NewCredit(execproto.MaxWindow)
			fc := newFrameChan(t)
			w := execproto.NewWriter(fc)
			done := make(chan error, 1)
			go func() {
				err := w.SendData(1, execproto.Stderr, credit, chunk, data)
				if err == nil {
					err = w.SendData(2, execproto.Stdout, credit, chunk, []byte("tail"))
				}
				done <- err
			}()
			var got []byte
			for i, want := range []int{chunk, chunk, chunk / 2} {
				f := recvFrame(t, fc.frames)
				if n := len(f.Payload) - 1; n != want || f.Payload[0] != execproto.Stderr || f.Stream != 1 {
					t.Errorf("frame %d: stream %d channel %d, %d bytes; want stream 1 channel 2, %d bytes", i, f.Stream, f.Payload[0], n, want)
				}
				got = append(got, f.Payload[1:]...)
			}
			if !bytes.Equal(got, data) {
				t.Error("the frames' bytes differ from the data sent")
			}
			if f := recvFrame(t, fc.frames); f.Stream != 2 || string(f.Payload) != "\x01tail" {
				t.Errorf("frame after the data: stream %d payload %q, want stream 2 %q", f.Stream, f.Payload, "\x01tail")
			}
			if err := recvErr(t, done); err != nil {
				t.Fatalf("SendData = %v", err)
			}
			if err := w.SendData(1, execproto.Stderr, credit, chunk, nil); err != nil {
				t.Errorf("SendData(nil) = %v, want nil and no frame", err)
			}
		})
	}
}

func TestSendDataCreditClosed(t *testing.T) {
	credit := execproto.NewCredit(0)
	fc := newFrameChan(t)
	w := execproto.NewWriter(fc)
	done := make(chan error, 1)
	go func() { done <- w.SendData(1, execproto.Stdout, credit, execproto.ChunkSize, []byte("x")) }()

	credit.Close()
	if err := recvErr(t, done); !errors.Is(err, execproto.ErrClosed) {
		t.Errorf("SendData after Close = %v, want ErrClosed", err)
	}
	if _, err := credit.Take(1); !errors.Is(err, execproto.ErrClosed) {
		t.Errorf("Take after Close = %v, want ErrClosed", err)
	}
}

func TestCreditTake(t *testing.T) {
	c := execproto.NewCredit(10)
	if n, err := c.Take(4); n != 4 || err != nil {
		t.Fatalf("Take(4) of 10 = %d, %v; want 4, nil", n, err)
	}
	if n, err := c.Take(100); n != 6 || err != nil {
		t.Fatalf("Take(100) of 6 = %d, %v; want 6, nil", n, err)
	}

	got := make(chan int, 1)
	go func() {
		n, err := c.Take(100)
		if err != nil {
			t.Errorf("Take(100) = %v", err)
		}
		got <- n
	}()
	if err := c.Add(3); err != nil {
		t.Fatalf("Add(3) = %v", err)
	}
	select {
	case n := <-got:
		if n != 3 {
			t.Errorf("Take(100) after Add(3) = %d, want 3", n)
		}
	case <-time.After(hang):
		t.Fatal("Take did not wake after Add")
	}
}

func TestCreditAddBeyondWindow(t *testing.T) {
	tests := []struct {
		name    string
		initial int64
		adds    []uint32
		wantErr bool
	}{
		{"up to 4 windows", execproto.Window, []uint32{3 * execproto.Window}, false},
		{"one byte past 4 windows", execproto.Window, []uint32{3 * execproto.Window, 1}, true},
		{"max uint32", 1, []uint32{math.MaxUint32}, true},
		{"many small acks", 0, []uint32{execproto.Window, execproto.Window, execproto.Window, execproto.Window, 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := execproto.NewCredit(tt.initial)
			var err error
			total := tt.initial
			for _, n := range tt.adds {
				if err = c.Add(n); err != nil {
					break
				}
				total += int64(n)
			}
			if (err != nil) != tt.wantErr {
				t.Fatalf("Add(%v) = %v, want error: %t", tt.adds, err, tt.wantErr)
			}
			// A refused Add must not change the window. (Take blocks on an
			// empty window, so only look when there is credit.)
			if total == 0 {
				return
			}
			if n, err := c.Take(math.MaxInt); int64(n) != total || err != nil {
				t.Errorf("Take(all) = %d, %v; want %d, nil", n, err, total)
			}
		})
	}
}

type failWriter struct {
	err    error
	writes int
}

func (w *failWriter) Write([]byte) (int, error) {
	w.writes++
	return 0, w.err
}

func TestWriterStickyError(t *testing.T) {
	boom := errors.New("broken pipe")
	fw := &failWriter{err: boom}
	w := execproto.NewWriter(fw)
	if err := w.Write(execproto.CloseFrame(1, execproto.Stdin)); !errors.Is(err, boom) {
		t.Fatalf("Write to failing writer = %v, want %v", err, boom)
	}
	if err := w.Write(execproto.CloseFrame(1, execproto.Stdin)); !errors.Is(err, boom) {
		t.Errorf("second Write = %v, want the first error %v", err, boom)
	}
	if fw.writes != 1 {
		t.Errorf("underlying writer called %d times, want 1: writes after an error must not reach it", fw.writes)
	}
}

func TestWriterInvalidFrameDoesNotPoison(t *testing.T) {
	var buf bytes.Buffer
	w := execproto.NewWriter(&buf)
	if err := w.Write(execproto.Frame{Type: execproto.TOpen}); !errors.Is(err, execproto.ErrFrame) {
		t.Fatalf("Write(open on stream 0) = %v, want ErrFrame", err)
	}
	if buf.Len() != 0 {
		t.Fatalf("invalid frame put %d bytes on the wire", buf.Len())
	}
	if err := w.Write(execproto.CloseFrame(1, execproto.Stdin)); err != nil {
		t.Fatalf("Write after a rejected frame = %v, want nil", err)
	}
	if _, err := execproto.ReadFrame(&buf); err != nil {
		t.Errorf("ReadFrame after rejected frame = %v", err)
	}
}

// choppyWriter passes each Write on in small pieces, so two unsynchronised
// writers would interleave their bytes.
type choppyWriter struct {
	w     io.Writer
	piece int
}

func (c choppyWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += c.piece {
		end := min(off+c.piece, len(p))
		if _, err := c.w.Write(p[off:end]); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

func TestWriterConcurrentFramesDoNotInterleave(t *testing.T) {
	const (
		writers = 8
		frames  = 60
	)
	host, exec := net.Pipe()
	defer host.Close()
	w := execproto.NewWriter(choppyWriter{w: exec, piece: 13})

	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			stream := uint32(g + 1)
			for seq := range frames {
				// Sizes vary so frames straddle every piece boundary.
				body := bytes.Repeat([]byte{byte(g)}, 1+(seq*997+g*131)%4096)
				p := binary.BigEndian.AppendUint32(nil, uint32(seq))
				if err := w.Write(execproto.DataFrame(stream, byte(g%3), append(p, body...))); err != nil {
					t.Errorf("writer %d: Write = %v", g, err)
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		exec.Close()
	}()

	next := make([]int, writers)
	total := 0
	for {
		f, err := execproto.ReadFrame(host)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d frames: ReadFrame = %v (frames interleaved?)", total, err)
		}
		g := int(f.Stream) - 1
		if g < 0 || g >= writers || f.Type != execproto.TData || len(f.Payload) < 6 {
			t.Fatalf("frame %d: unexpected %v on stream %d with %d bytes", total, f.Type, f.Stream, len(f.Payload))
		}
		if c := f.Payload[0]; c != byte(g%3) {
			t.Fatalf("frame %d: stream %d on channel %d, want %d", total, f.Stream, c, g%3)
		}
		if seq := int(binary.BigEndian.Uint32(f.Payload[1:5])); seq != next[g] {
			t.Fatalf("stream %d: seq %d, want %d", f.Stream, seq, next[g])
		}
		if body := f.Payload[5:]; len(bytes.Trim(body, string([]byte{byte(g)}))) != 0 {
			t.Fatalf("stream %d seq %d: payload holds bytes of another writer", f.Stream, next[g])
		}
		next[g]++
		total++
	}
	if total != writers*frames {
		t.Errorf("read %d frames, want %d", total, writers*frames)
	}
}

func TestInboxOrderAndDrain(t *testing.T) {
	q := execproto.NewInbox(execproto.Window)
	in := []execproto.Chunk{
		{Channel: execproto.Stdout, Data: []byte("a")},
		{Channel: execproto.Stderr, Data: []byte("b")},
		{Channel: execproto.Stdout, Data: []byte("c")},
		{Channel: execproto.Stdin, Data: []byte("d")},
	}
	for _, c := range in {
		if err := q.Put(c.Channel, c.Data); err != nil {
			t.Fatalf("Put(%d, %q) = %v", c.Channel, c.Data, err)
		}
	}
	q.Close()
	q.Close() // idempotent
	if err := q.Put(execproto.Stdout, []byte("late")); !errors.Is(err, execproto.ErrClosed) {
		t.Errorf("Put after Close = %v, want ErrClosed", err)
	}
	for i, want := range in {
		got, ok := q.Get()
		if !ok || got.Channel != want.Channel || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("Get #%d = %d %q %t, want %d %q true", i, got.Channel, got.Data, ok, want.Channel, want.Data)
		}
	}
	for range 2 {
		if got, ok := q.Get(); ok {
			t.Fatalf("Get after drain = %d %q true, want ok=false", got.Channel, got.Data)
		}
	}
}

func TestInboxWindow(t *testing.T) {
	q := execproto.NewInbox(execproto.Window)
	full := make([]byte, execproto.Window)
	if err := q.Put(execproto.Stdout, full); err != nil {
		t.Fatalf("Put(Window bytes) = %v", err)
	}
	if err := q.Put(execproto.Stdout, []byte{1}); err == nil {
		t.Fatal("Put beyond Window = nil, want an error")
	}
	if err := q.Put(execproto.Stderr, []byte{1}); err != nil {
		t.Errorf("Put on another channel = %v, want nil: windows are per channel", err)
	}
	if err := q.Put(3, []byte{1}); err == nil {
		t.Error("Put on channel 3 = nil, want an error")
	}
	if c, ok := q.Get(); !ok || len(c.Data) != execproto.Window {
		t.Fatalf("Get = %d bytes %t, want the full window", len(c.Data), ok)
	}
	if err := q.Put(execproto.Stdout, full); err != nil {
		t.Errorf("Put(Window bytes) after consuming = %v, want nil", err)
	}
}

func TestInboxGetWaits(t *testing.T) {
	q := execproto.NewInbox(execproto.Window)
	got := make(chan execproto.Chunk)
	go func() {
		for {
			c, ok := q.Get()
			if !ok {
				close(got)
				return
			}
			got <- c
		}
	}()
	select {
	case c := <-got:
		t.Fatalf("Get on empty Inbox returned %q", c.Data)
	default:
	}
	if err := q.Put(execproto.Stdout, []byte("x")); err != nil {
		t.Fatalf("Put = %v", err)
	}
	select {
	case c := <-got:
		if string(c.Data) != "x" {
			t.Errorf("Get = %q, want %q", c.Data, "x")
		}
	case <-time.After(hang):
		t.Fatal("Get did not wake after Put")
	}
	q.Close()
	select {
	case c, ok := <-got:
		if ok {
			t.Errorf("Get after Close = %q, want end", c.Data)
		}
	case <-time.After(hang):
		t.Fatal("Get did not wake after Close")
	}
}

// TestFlowControlEndToEnd pushes data through the whole path: SendData with a
// Window of credit, a connection, ReadFrame into an Inbox, a consumer that
// acknowledges what it took. A sender that ignored credit would overflow the
// Inbox; a receiver that lost credit would hang.
func TestFlowControlEndToEnd(t *testing.T) {
	data := make([]byte, 2<<20+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	host, exec := net.Pipe()
	defer host.Close()
	defer exec.Close()

	credit := execproto.NewCredit(execproto.Window)
	sender := execproto.NewWriter(exec)
	sent := make(chan error, 1)
	go func() { sent <- sender.SendData(1, execproto.Stdout, credit, execproto.ChunkSize, data) }()

	// The executor reads Acks from its end.
	acks := make(chan error, 1)
	go func() {
		for {
			f, err := execproto.ReadFrame(exec)
			if err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
					err = nil
				}
				acks <- err
				return
			}
			_, n := execproto.AckCredit(f)
			if err := credit.Add(n); err != nil {
				acks <- err
				return
			}
		}
	}()

	// The host reads Data into an Inbox; a consumer drains it and acks.
	q := execproto.NewInbox(execproto.Window)
	ackw := execproto.NewWriter(host)
	var got bytes.Buffer
	consumed := make(chan error, 1)
	go func() {
		for got.Len() < len(data) {
			c, ok := q.Get()
			if !ok {
				consumed <- errors.New("inbox closed early")
				return
			}
			got.Write(c.Data)
			if err := ackw.Write(execproto.AckFrame(1, c.Channel, uint32(len(c.Data)))); err != nil {
				consumed <- err
				return
			}
		}
		consumed <- nil
	}()

	for n := 0; n < len(data); {
		f, err := execproto.ReadFrame(host)
		if err != nil {
			t.Fatalf("ReadFrame = %v", err)
		}
		if err := q.Put(f.Payload[0], f.Payload[1:]); err != nil {
			t.Fatalf("Inbox.Put after %d bytes = %v: sender exceeded its window", n, err)
		}
		n += len(f.Payload) - 1
	}
	if err := recvErr(t, sent); err != nil {
		t.Fatalf("SendData = %v", err)
	}
	if err := recvErr(t, consumed); err != nil {
		t.Fatalf("consumer = %v", err)
	}
	host.Close()
	if err := recvErr(t, acks); err != nil {
		t.Fatalf("ack reader = %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Errorf("received %d bytes that differ from the %d sent", got.Len(), len(data))
	}
}

func TestCreditTakeUntil(t *testing.T) {
	c := execproto.NewCredit(5)
	stop := make(chan struct{})
	if n, err := c.TakeUntil(100, stop); n != 5 || err != nil {
		t.Fatalf("TakeUntil(100) of 5 = %d, %v; want 5, nil", n, err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.TakeUntil(1, stop)
		got <- err
	}()
	close(stop)
	if err := recvErr(t, got); !errors.Is(err, execproto.ErrStopped) {
		t.Errorf("TakeUntil when stopped = %v, want ErrStopped", err)
	}
	// Credit there and stop closed: the credit is taken (as a Read with
	// data and an expired deadline would still fail; callers check stop).
	if err := c.Add(2); err != nil {
		t.Fatal(err)
	}
	if n, err := c.TakeUntil(10, stop); n != 2 || err != nil {
		t.Errorf("TakeUntil with credit = %d, %v; want 2, nil", n, err)
	}
	c.Close()
	if _, err := c.TakeUntil(1, make(chan struct{})); !errors.Is(err, execproto.ErrClosed) {
		t.Errorf("TakeUntil after Close = %v, want ErrClosed", err)
	}
}

func TestSendDataUntilPartial(t *testing.T) {
	credit := execproto.NewCredit(3)
	fc := newFrameChan(t)
	w := execproto.NewWriter(fc)
	stop := make(chan struct{})
	done := make(chan error, 1)
	var sent int
	go func() {
		var err error
		sent, err = w.SendDataUntil(1, execproto.Stdin, credit, execproto.ChunkSize, []byte("hello"), stop)
		done <- err
	}()
	f := recvFrame(t, fc.frames)
	if string(f.Payload[1:]) != "hel" {
		t.Fatalf("first frame = %q, want %q", f.Payload[1:], "hel")
	}
	close(stop)
	if err := recvErr(t, done); !errors.Is(err, execproto.ErrStopped) {
		t.Fatalf("SendDataUntil = %v, want ErrStopped", err)
	}
	if sent != 3 {
		t.Errorf("SendDataUntil sent %d bytes, want 3", sent)
	}
}

func TestInboxPutClose(t *testing.T) {
	q := execproto.NewInbox(execproto.Window)
	if err := q.Put(execproto.Stdout, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := q.PutClose(execproto.Stdout); err != nil {
		t.Fatalf("PutClose = %v", err)
	}
	if err := q.PutClose(execproto.Stdout); err == nil {
		t.Error("second PutClose = nil, want an error")
	}
	if err := q.Put(execproto.Stdout, []byte("b")); err == nil {
		t.Error("Put after PutClose = nil, want an error")
	}
	if err := q.PutClose(3); err == nil {
		t.Error("PutClose(3) = nil, want an error")
	}
	if err := q.Put(execproto.Stderr, []byte("c")); err != nil {
		t.Errorf("Put on another channel after PutClose = %v", err)
	}
	want := []execproto.Chunk{
		{Channel: execproto.Stdout, Data: []byte("a")},
		{Channel: execproto.Stdout, Close: true},
		{Channel: execproto.Stderr, Data: []byte("c")},
	}
	for i, w := range want {
		got, ok := q.Get()
		if !ok || got.Channel != w.Channel || got.Close != w.Close || !bytes.Equal(got.Data, w.Data) {
			t.Fatalf("Get #%d = %+v %t, want %+v", i, got, ok, w)
		}
	}
}
