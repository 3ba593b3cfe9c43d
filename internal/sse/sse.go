// Package sse parses a server-sent event stream (text/event-stream) as the
// WHATWG HTML standard defines it (§9.2 "Server-sent events", the event stream
// interpretation). The model providers stream their replies in this format,
// and airlock's own API streams a run's events in it (internal/client reads
// them).
//
// Invariants:
//   - Lines end in CRLF, LF or CR, also when a CRLF pair is split between two
//     reads; a UTF-8 byte order mark at the very start is skipped.
//   - Comment lines (starting with ':') and unknown fields are ignored; an
//     event with no data lines is not dispatched; an event left
//     unterminated at the end of the stream is discarded.
//   - A "retry" field of ASCII digits sets the stream's reconnection time
//     (Reader.Retry); any other value is ignored.
//   - No line and no event grows past the size limit given to NewReader.
//
// The package is a leaf: standard library only.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// DefaultMaxEvent is the size limit NewReader uses when given zero.
const DefaultMaxEvent = 1 << 20

// ErrTooLarge is returned (wrapped) when a line or the data of one event is
// longer than the reader's limit.
var ErrTooLarge = errors.New("sse: event too large")

// Event is one dispatched event.
type Event struct {
	// Type is the value of the last "event" field, or "message" when the
	// event had none.
	Type string
	// Data is the values of the event's "data" fields joined with "\n".
	Data string
	// ID is the last event ID: the value of the most recent "id" field seen
	// in this or an earlier event of the stream.
	ID string
}

// Reader reads events from a stream. It is not safe for concurrent use.
type Reader struct {
	br  *bufio.Reader
	max int

	started bool // the optional byte order mark has been checked
	skipLF  bool // the previous line ended in CR: a following LF belongs to it
	line    []byte

	data    []byte
	hasData bool
	typ     string
	lastID  string
	// retry is the last valid "retry" field; hasRetry says one came.
	retry    time.Duration
	hasRetry bool
}

// maxRetry bounds the reconnection time a stream may set, so that the
// conversion to a Duration cannot overflow (about 31 years).
const maxRetry = 1<<50 - 1

// Retry returns the reconnection time the stream last set with a "retry"
// field, and whether it set one. A retry field alone dispatches no event:
// read Retry after Next returns, whatever it returned.
func (r *Reader) Retry() (time.Duration, bool) {
	return r.retry, r.hasRetry
}

// NewReader returns a Reader of r that refuses lines and events longer than
// maxEvent bytes (DefaultMaxEvent when maxEvent <= 0).
func NewReader(r io.Reader, maxEvent int) *Reader {
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEvent
	}
	return &Reader{br: bufio.NewReaderSize(r, 4096), max: maxEvent}
}

// Next returns the next event. At the end of the stream it returns io.EOF
// (an unterminated last event is discarded, as the standard requires); a
// read error is returned as is, and ErrTooLarge (wrapped) for an oversized
// line or event, after which the Reader must not be used again.
func (r *Reader) Next() (Event, error) {
	if !r.started {
		r.started = true
		if b, err := r.br.Peek(3); err == nil && bytes.Equal(b, []byte("\xEF\xBB\xBF")) {
			_, _ = r.br.Discard(3)
		}
	}
	for {
		line, err := r.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if ev, ok := r.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			r.typ = string(value)
		case "data":
			if len(r.data)+len(value)+1 > r.max {
				return Event{}, fmt.Errorf("%w: data over %d bytes", ErrTooLarge, r.max)
			}
			r.data = append(r.data, value...)
			r.data = append(r.data, '\n')
			r.hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				r.lastID = string(value)
			}
		case "retry":
			if ms, ok := digits(value); ok {
				r.retry, r.hasRetry = time.Duration(ms)*time.Millisecond, true
			}
		}
	}
}

// digits parses a "retry" value: one or more ASCII digits, at most
// maxRetry.
func digits(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > maxRetry {
			return 0, false
		}
	}
	return n, true
}

// dispatch ends the event being built; ok is false when it had no data.
func (r *Reader) dispatch() (Event, bool) {
	defer func() {
		r.data = r.data[:0]
		r.hasData = false
		r.typ = ""
	}()
	if !r.hasData {
		return Event{}, false
	}
	ev := Event{Type: r.typ, Data: string(r.data[:len(r.data)-1]), ID: r.lastID}
	if ev.Type == "" {
		ev.Type = "message"
	}
	return ev, true
}

// readLine returns the next line without its terminator. The slice is valid
// until the next call.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		if r.br.Buffered() == 0 {
			if _, err := r.br.Peek(1); err != nil {
				// End of stream or read error: a line without terminator
				// is not a line, so it is dropped with the pending event.
				return nil, err
			}
		}
		buf, _ := r.br.Peek(r.br.Buffered())
		if r.skipLF {
			r.skipLF = false
			if buf[0] == '\n' {
				_, _ = r.br.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(buf, "\r\n")
		if i < 0 {
			r.line = append(r.line, buf...)
			_, _ = r.br.Discard(len(buf))
			if len(r.line) > r.max {
				return nil, fmt.Errorf("%w: line over %d bytes", ErrTooLarge, r.max)
			}
			continue
		}
		r.line = append(r.line, buf[:i]...)
		n := i + 1
		if buf[i] == '\r' {
			switch {
			case i+1 == len(buf):
				r.skipLF = true // the LF of a CRLF may come with the next read
			case buf[i+1] == '\n':
				n++
			}
		}
		_, _ = r.br.Discard(n)
		if len(r.line) > r.max {
			return nil, fmt.Errorf("%w: line over %d bytes", ErrTooLarge, r.max)
		}
		return r.line, nil
	}
}
