package execproto

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Encoder and Decoder give another package's messages the binary form of
// this package's (codec.go: numbered fields in increasing order, zero values
// absent, one encoding per message, a strict decoder), so that they need no
// encoding/json either: the sandbox handoff's request and replies, sent by
// the front end on every warm `sandbox run`. A message is written by a
// function that calls one method per field, in field order, and read by a
// loop over Field:
//
//	b, err := execproto.EncodeFields(func(e *execproto.Encoder) { e.Str(1, m.Name); e.Int(2, m.N) })
//	err := execproto.DecodeFields(b, func(d *execproto.Decoder) {
//		for d.More() {
//			switch n := d.Field(); n {
//			case 1:
//				m.Name = d.Str()
//			case 2:
//				m.N = d.Int()
//			default:
//				d.Unknown(n)
//			}
//		}
//	})

// Encoder appends one message's fields. Each method writes field n, or
// nothing for the zero value.
type Encoder struct{ e encoder }

// EncodeFields returns CodecVersion and the fields that fields writes.
func EncodeFields(fields func(*Encoder)) ([]byte, error) {
	e := Encoder{e: encoder{b: make([]byte, 1, 256)}}
	e.e.b[0] = CodecVersion
	fields(&e)
	return e.e.b, e.e.err
}

// Str writes a string.
func (e *Encoder) Str(n uint64, s string) { e.e.str(n, s) }

// Bytes writes a byte string.
func (e *Encoder) Bytes(n uint64, b []byte) { e.e.str(n, string(b)) }

// Int writes a signed integer.
func (e *Encoder) Int(n uint64, v int64) { e.e.int(n, v) }

// Float writes a float64 by its bits (0 absent; -0 is not 0 here).
func (e *Encoder) Float(n uint64, v float64) { e.e.uint(n, math.Float64bits(v)) }

// Flag writes a bool.
func (e *Encoder) Flag(n uint64, v bool) { e.e.flag(n, v) }

// Strs writes a list of strings.
func (e *Encoder) Strs(n uint64, l []string) { e.e.strs(n, l) }

// Msg writes a nested message whose fields fields writes. A pointer's
// message (pointer true: the caller writes nothing for a nil one) is
// written even with no fields; a struct's is absent then.
func (e *Encoder) Msg(n uint64, pointer bool, fields func(*Encoder)) {
	b, ok := e.sub(fields)
	if ok && (len(b) > 0 || pointer) {
		e.e.field(n)
		e.e.b = binary.AppendUvarint(e.e.b, uint64(len(b)))
		e.e.b = append(e.e.b, b...)
	}
}

// Msgs writes a list of count nested messages, the ith written by
// fields(i, ...).
func (e *Encoder) Msgs(n uint64, count int, fields func(int, *Encoder)) {
	if count == 0 {
		return
	}
	e.e.field(n)
	e.e.b = binary.AppendUvarint(e.e.b, uint64(count))
	for i := range count {
		b, _ := e.sub(func(s *Encoder) { fields(i, s) })
		e.e.b = binary.AppendUvarint(e.e.b, uint64(len(b)))
		e.e.b = append(e.e.b, b...)
	}
}

// sub encodes a nested message's fields; an error is kept as e's.
func (e *Encoder) sub(fields func(*Encoder)) ([]byte, bool) {
	var s Encoder
	fields(&s)
	if s.e.err != nil {
		if e.e.err == nil {
			e.e.err = s.e.err
		}
		return nil, false
	}
	return s.e.b, true
}

// Decoder reads one message's fields. The first error stops it: every
// later read returns a zero value, and More reports false.
type Decoder struct{ d decoder }

// DecodeFields parses p, CodecVersion and a message's fields, with fields (a
// loop over Field). Every error wraps ErrFrame.
func DecodeFields(p []byte, fields func(*Decoder)) error {
	switch {
	case len(p) == 0:
		return fmt.Errorf("%w: empty message", ErrFrame)
	case p[0] != CodecVersion:
		return fmt.Errorf("%w: message form %d, want %d", ErrFrame, p[0], CodecVersion)
	}
	d := Decoder{d: decoder{p: p[1:]}}
	fields(&d)
	if d.d.err == nil && len(d.d.p) > 0 {
		d.d.fail("%d bytes after the last field", len(d.d.p))
	}
	return d.d.err
}

// More reports whether a field follows.
func (d *Decoder) More() bool { return d.d.more() }

// Field reads the next field's number, which must be above the last.
func (d *Decoder) Field() uint64 { return d.d.field() }

// Unknown refuses field n, which the message does not have.
func (d *Decoder) Unknown(n uint64) { d.d.unknown(n) }

// Fail refuses the message: a field's value is out of its range.
func (d *Decoder) Fail(why string) { d.d.fail("field %d: %s", d.d.last, why) }

// Str reads a string (never empty: empty is absent).
func (d *Decoder) Str() string { return d.d.str() }

// Bytes reads a byte string (never empty).
func (d *Decoder) Bytes() []byte {
	s := d.d.str()
	if s == "" {
		return nil
	}
	return []byte(s)
}

// Int reads a signed integer (never 0).
func (d *Decoder) Int() int64 { return d.d.int64() }

// Float reads a float64 (never +0), refusing NaN and the infinities.
func (d *Decoder) Float() float64 {
	v := math.Float64frombits(d.d.uint(math.MaxUint64))
	if math.IsNaN(v) || math.IsInf(v, 0) {
		d.d.fail("field %d: not a finite number", d.d.last)
		return 0
	}
	return v
}

// Strs reads a list of strings (never empty; its strings may be).
func (d *Decoder) Strs() []string { return d.d.strs() }

// Msg reads a nested message with fields. A struct's (pointer false)
// has at least one field; a pointer's may have none.
func (d *Decoder) Msg(pointer bool, fields func(*Decoder)) {
	n := d.d.length()
	if n == 0 && !pointer && d.d.err == nil {
		d.d.fail("field %d: an empty message", d.d.last)
	}
	d.sub(n, fields)
}

// Msgs reads a list of nested messages (never empty), each with fields,
// which appends the element it reads into; the count is not trusted to
// size anything.
func (d *Decoder) Msgs(fields func(*Decoder)) {
	n := d.d.count()
	for range n {
		if d.d.err != nil {
			return
		}
		d.sub(d.d.length(), fields)
	}
}

// sub reads the next n bytes as a message with fields.
func (d *Decoder) sub(n int, fields func(*Decoder)) {
	if d.d.err != nil {
		return
	}
	s := Decoder{d: decoder{p: d.d.p[:n]}}
	d.d.p = d.d.p[n:]
	fields(&s)
	if s.d.err == nil && len(s.d.p) > 0 {
		s.d.fail("%d bytes after the last field", len(s.d.p))
	}
	if s.d.err != nil {
		d.d.err = s.d.err
		d.d.p = nil
	}
}
