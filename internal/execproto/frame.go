package execproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version. Host and executor exchange it in Hello and
// refuse to talk across versions. Version 2 added the watch and disk_usage
// operations, version 3 the checkpoint operation, version 4 a stream's own
// window and chunk size (Request.Window, Request.ChunkSize), version 5 the
// connect operation (OpConnect) and the events operation (OpEvents), version
// 6 the import operation (OpImport), version 7 a host root's id-mapped
// system trees (Setup.SystemTrees), a mkdir as root (Request.MkdirAsRoot)
// and sudo (Setup.Sudo), version 8 egress streams (OpEgress,
// Setup.ProxyStreams), version 9 the binary form of Hello, Setup, Ready,
// Request, Result and Error (codec.go) instead of JSON, version 10 a read's
// head (Request.Head): the opened file described before its data.
const Version = 10

// HeaderSize is the size of a frame header: a 4-byte big-endian length of
// what follows the length (type, stream ID and payload), a 1-byte type and a
// 4-byte big-endian stream ID.
const HeaderSize = 9

// MaxPayload bounds the payload of one frame. A peer that announces more is
// broken or hostile; the reader refuses it before allocating anything.
const MaxPayload = 1 << 20

// ChunkSize is the largest data payload a sender puts in one Data frame of a
// stream that did not ask for another (Request.ChunkSize).
const ChunkSize = 32 << 10

// Window is the initial flow-control credit, in bytes, of every data channel
// of a stream that did not ask for another (Request.Window). A sender never
// has more than its window of unacknowledged bytes in flight on one channel;
// the receiver returns credit with Ack frames as it consumes data.
const Window = 256 << 10

// Bounds of a stream's own flow control. A request may ask for a window of
// Window to MaxWindow bytes and a chunk size of ChunkSize to MaxChunkSize:
// each side then holds at most that window per channel of the stream, so
// the bound stays a constant of the protocol whatever a peer asks for.
const (
	MaxWindow    = 4 << 20
	MaxChunkSize = 256 << 10
)

// BulkWindow and BulkChunkSize are what the host asks for on a stream that
// carries bulk data (a checkpoint or an export out of the sandbox, an archive
// into it). The defaults, sized for interactive output, cap such a stream at
// about 200 MB/s: the sender waits a round trip for credit every 256 KiB.
// With 2 MiB in flight in frames of 256 KiB the same stream measured ~417
// MB/s (docs/benchmarks.md, "Workspace checkpoints").
const (
	BulkWindow    = 2 << 20
	BulkChunkSize = 256 << 10
)

// Type is the kind of a frame.
type Type uint8

// Frame types. Stream 0 is the connection itself; every request opens its own
// stream ID chosen by the host.
const (
	// THello carries a Hello (MessageFrame). First frame in each direction, on stream 0.
	THello Type = 1 + iota
	// TSetup carries a Setup from the host, on stream 0, once.
	TSetup
	// TReady carries a Ready from the executor, on stream 0, once.
	TReady
	// TOpen carries a Request that opens a new stream.
	TOpen
	// TData carries one channel byte followed by raw bytes.
	TData
	// TClose carries one channel byte: no more data on that channel.
	TClose
	// TAck carries one channel byte and a 4-byte big-endian credit.
	TAck
	// TSignal carries one byte: a signal number to deliver to the process of the stream.
	TSignal
	// TResize carries two big-endian uint16: rows and columns of the stream's terminal.
	TResize
	// TResult carries a Result and ends the stream.
	TResult
	// TError carries an Error; on stream 0 it ends the connection.
	TError
	// TCancel asks the executor to end the stream's work (kill the process tree).
	TCancel

	maxType = TCancel
)

var typeNames = [...]string{
	THello: "hello", TSetup: "setup", TReady: "ready", TOpen: "open", TData: "data",
	TClose: "close", TAck: "ack", TSignal: "signal", TResize: "resize",
	TResult: "result", TError: "error", TCancel: "cancel",
}

func (t Type) String() string {
	if t == 0 || t > maxType {
		return fmt.Sprintf("type(%d)", uint8(t))
	}
	return typeNames[t]
}

// Channels of a stream's data.
const (
	Stdin  byte = 0 // host -> executor: process stdin, or the content of a file write
	Stdout byte = 1 // executor -> host: process stdout, or the content of a file read or export
	Stderr byte = 2 // executor -> host: process stderr
)

// Frame is one decoded protocol frame. Payload is owned by the frame.
type Frame struct {
	Type    Type
	Stream  uint32
	Payload []byte
}

// ErrFrame reports a frame that breaks the protocol. The connection that
// produced it cannot be trusted any further.
var ErrFrame = errors.New("malformed frame")

func frameErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFrame, fmt.Sprintf(format, args...))
}

// Validate checks the fixed-size and per-type rules of a frame.
func (f *Frame) Validate() error {
	if f.Type == 0 || f.Type > maxType {
		return frameErr("unknown type %d", uint8(f.Type))
	}
	if len(f.Payload) > MaxPayload {
		return frameErr("%s payload of %d bytes exceeds %d", f.Type, len(f.Payload), MaxPayload)
	}
	onConn := f.Type == THello || f.Type == TSetup || f.Type == TReady
	if onConn && f.Stream != 0 {
		return frameErr("%s on stream %d, want 0", f.Type, f.Stream)
	}
	if !onConn && f.Type != TError && f.Stream == 0 {
		return frameErr("%s on stream 0", f.Type)
	}
	want := -1
	switch f.Type {
	case TClose:
		want = 1
	case TAck:
		want = 5
	case TSignal:
		want = 1
	case TResize:
		want = 4
	case TCancel:
		want = 0
	case TData:
		if len(f.Payload) < 2 {
			return frameErr("data frame without data")
		}
	}
	if want >= 0 && len(f.Payload) != want {
		return frameErr("%s payload of %d bytes, want %d", f.Type, len(f.Payload), want)
	}
	switch f.Type {
	case TData, TClose, TAck:
		if c := f.Payload[0]; c > Stderr {
			return frameErr("%s on unknown channel %d", f.Type, c)
		}
	case TSignal:
		if s := f.Payload[0]; s == 0 || s > 64 {
			return frameErr("signal %d out of range", s)
		}
	}
	return nil
}

// ReadFrame reads and validates one frame. It reads exactly one frame's bytes
// and never allocates more than MaxPayload. io.EOF means the peer closed the
// connection cleanly between frames.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, frameErr("truncated header")
		}
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[0:4])
	if n < HeaderSize-4 {
		return Frame{}, frameErr("length %d shorter than header", n)
	}
	size := n - (HeaderSize - 4)
	if size > MaxPayload {
		return Frame{}, frameErr("payload of %d bytes exceeds %d", size, MaxPayload)
	}
	f := Frame{Type: Type(h[4]), Stream: binary.BigEndian.Uint32(h[5:9])}
	if size > 0 {
		f.Payload = make([]byte, size)
		if _, err := io.ReadFull(r, f.Payload); err != nil {
			return Frame{}, frameErr("truncated payload: %v", err)
		}
	}
	if err := f.Validate(); err != nil {
		return Frame{}, err
	}
	return f, nil
}

// AppendFrame appends the encoding of f to b. It validates f first, so a
// writer cannot put a frame on the wire that a reader would refuse.
func AppendFrame(b []byte, f Frame) ([]byte, error) {
	if err := f.Validate(); err != nil {
		return b, err
	}
	b = binary.BigEndian.AppendUint32(b, uint32(HeaderSize-4+len(f.Payload)))
	b = append(b, byte(f.Type))
	b = binary.BigEndian.AppendUint32(b, f.Stream)
	return append(b, f.Payload...), nil
}

// WriteFrame writes f with a single Write call.
func WriteFrame(w io.Writer, f Frame) error {
	b, err := AppendFrame(make([]byte, 0, HeaderSize+len(f.Payload)), f)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// DataFrame builds a Data frame for channel c.
func DataFrame(stream uint32, c byte, p []byte) Frame {
	payload := make([]byte, 1+len(p))
	payload[0] = c
	copy(payload[1:], p)
	return Frame{Type: TData, Stream: stream, Payload: payload}
}

// CloseFrame builds a Close frame for channel c.
func CloseFrame(stream uint32, c byte) Frame {
	return Frame{Type: TClose, Stream: stream, Payload: []byte{c}}
}

// AckFrame returns n bytes of credit on channel c.
func AckFrame(stream uint32, c byte, n uint32) Frame {
	p := make([]byte, 5)
	p[0] = c
	binary.BigEndian.PutUint32(p[1:], n)
	return Frame{Type: TAck, Stream: stream, Payload: p}
}

// AckCredit decodes an Ack payload. The frame must have been validated.
func AckCredit(f Frame) (c byte, n uint32) {
	return f.Payload[0], binary.BigEndian.Uint32(f.Payload[1:])
}

// ResizeFrame asks for a terminal of rows x cols.
func ResizeFrame(stream uint32, rows, cols uint16) Frame {
	p := make([]byte, 4)
	binary.BigEndian.PutUint16(p[0:], rows)
	binary.BigEndian.PutUint16(p[2:], cols)
	return Frame{Type: TResize, Stream: stream, Payload: p}
}

// ResizeSize decodes a Resize payload. The frame must have been validated.
func ResizeSize(f Frame) (rows, cols uint16) {
	return binary.BigEndian.Uint16(f.Payload[0:]), binary.BigEndian.Uint16(f.Payload[2:])
}
