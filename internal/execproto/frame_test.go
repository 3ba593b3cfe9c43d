package execproto_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/airlockrun/airlock/internal/execproto"
)

// encode builds the wire bytes of a frame by hand, without AppendFrame, so the
// reader is tested against the documented layout rather than against itself.
func encode(t execproto.Type, stream uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(execproto.HeaderSize-4+len(payload)))
	b = append(b, byte(t))
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

// validFrames has one well-formed frame of every type.
func validFrames() []execproto.Frame {
	return []execproto.Frame{
		{Type: execproto.THello, Stream: 0, Payload: []byte(`{"version":1}`)},
		{Type: execproto.TSetup, Stream: 0, Payload: []byte(`{"hostname":"box","workspace":{"mode":"empty"}}`)},
		{Type: execproto.TReady, Stream: 0, Payload: []byte(`{"pid":1,"landlock_abi":4,"seccomp":true,"layers":["ns"]}`)},
		{Type: execproto.TOpen, Stream: 1, Payload: []byte(`{"op":"exec","argv":["true"]}`)},
		execproto.DataFrame(1, execproto.Stdin, []byte("hello")),
		execproto.DataFrame(7, execproto.Stdout, bytes.Repeat([]byte{0xff}, execproto.ChunkSize)),
		execproto.DataFrame(0xffffffff, execproto.Stderr, []byte{0}),
		execproto.CloseFrame(1, execproto.Stdin),
		execproto.AckFrame(1, execproto.Stdout, execproto.Window),
		{Type: execproto.TSignal, Stream: 1, Payload: []byte{15}},
		{Type: execproto.TSignal, Stream: 1, Payload: []byte{64}},
		execproto.ResizeFrame(1, 24, 80),
		{Type: execproto.TResult, Stream: 1, Payload: []byte(`{"outcome":"exited","exit_code":0}`)},
		{Type: execproto.TError, Stream: 0, Payload: []byte(`{"message":"bye"}`)},
		{Type: execproto.TError, Stream: 3, Payload: []byte(`{"message":"bad request"}`)},
		{Type: execproto.TCancel, Stream: 1},
		{Type: execproto.TOpen, Stream: 2, Payload: bytes.Repeat([]byte{' '}, execproto.MaxPayload)},
	}
}

func frameName(f execproto.Frame) string {
	return fmt.Sprintf("%v/stream=%d/len=%d", f.Type, f.Stream, len(f.Payload))
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range validFrames() {
		t.Run(frameName(f), func(t *testing.T) {
			b, err := execproto.AppendFrame(nil, f)
			if err != nil {
				t.Fatalf("AppendFrame(%v) = %v", f.Type, err)
			}
			if want := encode(f.Type, f.Stream, f.Payload); !bytes.Equal(b, want) {
				t.Fatalf("AppendFrame(%v) = % x..., want % x...", f.Type, head(b), head(want))
			}
			r := bytes.NewReader(b)
			got, err := execproto.ReadFrame(r)
			if err != nil {
				t.Fatalf("ReadFrame(AppendFrame(%v)) = %v", f.Type, err)
			}
			if got.Type != f.Type || got.Stream != f.Stream || !bytes.Equal(got.Payload, f.Payload) {
				t.Errorf("ReadFrame = {%v %d %d bytes}, want {%v %d %d bytes}",
					got.Type, got.Stream, len(got.Payload), f.Type, f.Stream, len(f.Payload))
			}
			if r.Len() != 0 {
				t.Errorf("ReadFrame left %d bytes unread", r.Len())
			}
			if _, err := execproto.ReadFrame(r); !errors.Is(err, io.EOF) {
				t.Errorf("ReadFrame at end = %v, want io.EOF", err)
			}

			var w bytes.Buffer
			if err := execproto.WriteFrame(&w, f); err != nil {
				t.Fatalf("WriteFrame(%v) = %v", f.Type, err)
			}
			if !bytes.Equal(w.Bytes(), b) {
				t.Errorf("WriteFrame and AppendFrame disagree for %v", f.Type)
			}
		})
	}
}

func head(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}

// TestReadFrameStream reads many frames back to back from one stream.
func TestReadFrameStream(t *testing.T) {
	var b []byte
	frames := validFrames()
	for _, f := range frames {
		var err error
		if b, err = execproto.AppendFrame(b, f); err != nil {
			t.Fatalf("AppendFrame(%v) = %v", f.Type, err)
		}
	}
	r := bytes.NewReader(b)
	for i, want := range frames {
		got, err := execproto.ReadFrame(r)
		if err != nil {
			t.Fatalf("frame %d: ReadFrame = %v", i, err)
		}
		if got.Type != want.Type || got.Stream != want.Stream || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("frame %d: got %v on stream %d, want %v on stream %d", i, got.Type, got.Stream, want.Type, want.Stream)
		}
	}
	if _, err := execproto.ReadFrame(r); !errors.Is(err, io.EOF) {
		t.Errorf("ReadFrame at end = %v, want io.EOF", err)
	}
}

func TestReadFrameRejects(t *testing.T) {
	hdr := func(n uint32, typ byte, stream uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, n)
		b = append(b, typ)
		return binary.BigEndian.AppendUint32(b, stream)
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"unknown type 0", encode(0, 1, nil)},
		{"unknown type 200", encode(200, 1, []byte("x"))},
		{"unknown type after cancel", encode(execproto.TCancel+1, 1, nil)},
		{"length 0", hdr(0, byte(execproto.TCancel), 1)},
		{"length shorter than header", hdr(execproto.HeaderSize-5, byte(execproto.TCancel), 1)},
		{"payload over max", hdr(execproto.HeaderSize-4+execproto.MaxPayload+1, byte(execproto.TData), 1)},
		{"truncated header 1 byte", []byte{0}},
		{"truncated header 8 bytes", encode(execproto.TCancel, 1, nil)[:8]},
		{"truncated payload empty", encode(execproto.TOpen, 1, []byte(`{"op":"stat"}`))[:execproto.HeaderSize]},
		{"truncated payload partial", encode(execproto.TOpen, 1, []byte(`{"op":"stat"}`))[:execproto.HeaderSize+3]},
		{"hello on stream 5", encode(execproto.THello, 5, []byte(`{"version":1}`))},
		{"setup on stream 1", encode(execproto.TSetup, 1, []byte(`{}`))},
		{"ready on stream 1", encode(execproto.TReady, 1, []byte(`{}`))},
		{"open on stream 0", encode(execproto.TOpen, 0, []byte(`{"op":"exec","argv":["true"]}`))},
		{"result on stream 0", encode(execproto.TResult, 0, []byte(`{}`))},
		{"cancel on stream 0", encode(execproto.TCancel, 0, nil)},
		{"data without channel byte", encode(execproto.TData, 1, nil)},
		{"data with channel byte only", encode(execproto.TData, 1, []byte{execproto.Stdout})},
		{"data on channel 7", encode(execproto.TData, 1, []byte{7, 'x'})},
		{"data on channel 3", encode(execproto.TData, 1, []byte{3, 'x'})},
		{"close without channel", encode(execproto.TClose, 1, nil)},
		{"close on channel 9", encode(execproto.TClose, 1, []byte{9})},
		{"close with 2 bytes", encode(execproto.TClose, 1, []byte{1, 1})},
		{"ack of 3 bytes", encode(execproto.TAck, 1, []byte{1, 0, 0})},
		{"ack of 6 bytes", encode(execproto.TAck, 1, []byte{1, 0, 0, 0, 1, 0})},
		{"ack on channel 3", encode(execproto.TAck, 1, []byte{3, 0, 0, 0, 1})},
		{"signal 0", encode(execproto.TSignal, 1, []byte{0})},
		{"signal 65", encode(execproto.TSignal, 1, []byte{65})},
		{"signal 255", encode(execproto.TSignal, 1, []byte{255})},
		{"signal empty", encode(execproto.TSignal, 1, nil)},
		{"resize of 3 bytes", encode(execproto.TResize, 1, []byte{0, 24, 0})},
		{"resize of 5 bytes", encode(execproto.TResize, 1, []byte{0, 24, 0, 80, 0})},
		{"cancel with payload", encode(execproto.TCancel, 1, []byte{0})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := execproto.ReadFrame(bytes.NewReader(tt.in))
			if !errors.Is(err, execproto.ErrFrame) {
				t.Fatalf("ReadFrame(% x) = %v, %v; want ErrFrame", head(tt.in), f.Type, err)
			}
		})
	}
}

func TestAppendFrameRejects(t *testing.T) {
	tests := []struct {
		name string
		f    execproto.Frame
	}{
		{"unknown type", execproto.Frame{Type: 0, Stream: 1}},
		{"hello on stream 5", execproto.Frame{Type: execproto.THello, Stream: 5}},
		{"open on stream 0", execproto.Frame{Type: execproto.TOpen}},
		{"payload over max", execproto.Frame{Type: execproto.TOpen, Stream: 1, Payload: make([]byte, execproto.MaxPayload+1)}},
		{"empty data", execproto.DataFrame(1, execproto.Stdout, nil)},
		{"data on channel 7", execproto.DataFrame(1, 7, []byte("x"))},
		{"signal 65", execproto.Frame{Type: execproto.TSignal, Stream: 1, Payload: []byte{65}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("keep")
			b, err := execproto.AppendFrame(prefix, tt.f)
			if !errors.Is(err, execproto.ErrFrame) {
				t.Fatalf("AppendFrame(%v) = %v, want ErrFrame", tt.f.Type, err)
			}
			if string(b) != "keep" {
				t.Errorf("AppendFrame on error returned %q, want the input unchanged", b)
			}
			var w bytes.Buffer
			if err := execproto.WriteFrame(&w, tt.f); !errors.Is(err, execproto.ErrFrame) {
				t.Errorf("WriteFrame(%v) = %v, want ErrFrame", tt.f.Type, err)
			}
			if w.Len() != 0 {
				t.Errorf("WriteFrame wrote %d bytes of an invalid frame", w.Len())
			}
		})
	}
}

// hugeHeader yields a header announcing a 2 GiB frame and then fails any
// further read, so a reader that trusted the length would both allocate the
// 2 GiB and surface errReadPastHeader.
type hugeHeader struct {
	hdr  []byte
	over bool
}

var errReadPastHeader = errors.New("read past the header")

func (h *hugeHeader) Read(p []byte) (int, error) {
	if len(h.hdr) == 0 {
		h.over = true
		return 0, errReadPastHeader
	}
	n := copy(p, h.hdr)
	h.hdr = h.hdr[n:]
	return n, nil
}

func TestReadFrameHugeLengthDoesNotAllocate(t *testing.T) {
	hdr := binary.BigEndian.AppendUint32(nil, 2<<30)
	hdr = append(hdr, byte(execproto.TData))
	hdr = binary.BigEndian.AppendUint32(hdr, 1)
	r := &hugeHeader{hdr: hdr}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := execproto.ReadFrame(r)
	runtime.ReadMemStats(&after)

	if !errors.Is(err, execproto.ErrFrame) {
		t.Fatalf("ReadFrame(2 GiB header) = %v, want ErrFrame", err)
	}
	if errors.Is(err, errReadPastHeader) || r.over {
		t.Errorf("ReadFrame(2 GiB header) read past the header: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("ReadFrame(2 GiB header) allocated %d bytes, want < 1 MiB", got)
	}
}

func TestReadFrameErrors(t *testing.T) {
	if _, err := execproto.ReadFrame(bytes.NewReader(nil)); !errors.Is(err, io.EOF) {
		t.Errorf("ReadFrame(empty) = %v, want io.EOF", err)
	}
	boom := errors.New("boom")
	if _, err := execproto.ReadFrame(errReader{boom}); !errors.Is(err, boom) {
		t.Errorf("ReadFrame(failing reader) = %v, want %v", err, boom)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestFrameHelpers(t *testing.T) {
	ack := execproto.AckFrame(9, execproto.Stderr, 0xdeadbeef)
	if err := ack.Validate(); err != nil {
		t.Fatalf("AckFrame().Validate() = %v", err)
	}
	if c, n := execproto.AckCredit(ack); c != execproto.Stderr || n != 0xdeadbeef {
		t.Errorf("AckCredit(AckFrame(2, 0xdeadbeef)) = %d, %#x; want 2, 0xdeadbeef", c, n)
	}

	rs := execproto.ResizeFrame(9, 0xffff, 1)
	if err := rs.Validate(); err != nil {
		t.Fatalf("ResizeFrame().Validate() = %v", err)
	}
	if rows, cols := execproto.ResizeSize(rs); rows != 0xffff || cols != 1 {
		t.Errorf("ResizeSize(ResizeFrame(65535, 1)) = %d, %d; want 65535, 1", rows, cols)
	}

	p := []byte("abc")
	d := execproto.DataFrame(9, execproto.Stdout, p)
	p[0] = 'X'
	if string(d.Payload) != "\x01abc" {
		t.Errorf("DataFrame payload = %q, want %q (a copy of the input)", d.Payload, "\x01abc")
	}

	c := execproto.CloseFrame(9, execproto.Stdin)
	if err := c.Validate(); err != nil || c.Payload[0] != execproto.Stdin {
		t.Errorf("CloseFrame(9, 0) = %v, %v; want a valid close of channel 0", c, err)
	}
}

func TestTypeString(t *testing.T) {
	tests := []struct {
		t    execproto.Type
		want string
	}{
		{execproto.THello, "hello"},
		{execproto.TData, "data"},
		{execproto.TCancel, "cancel"},
		{0, "type(0)"},
		{200, "type(200)"},
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("Type(%d).String() = %q, want %q", uint8(tt.t), got, tt.want)
		}
	}
}

func BenchmarkWriteReadFrame(b *testing.B) {
	data := bytes.Repeat([]byte("0123456789abcdef"), execproto.ChunkSize/16)
	f := execproto.DataFrame(1, execproto.Stdout, data)
	var buf bytes.Buffer
	buf.Grow(execproto.HeaderSize + len(f.Payload))
	w := execproto.NewWriter(&buf)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(f); err != nil {
			b.Fatal(err)
		}
		got, err := execproto.ReadFrame(&buf)
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Payload) != len(f.Payload) {
			b.Fatalf("ReadFrame payload = %d bytes, want %d", len(got.Payload), len(f.Payload))
		}
	}
}
