package execproto

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
)

// The binary form of the messages of a sandbox's start and of every
// request: Hello, Setup, Ready, Request, Result and Error. encoding/json
// cost each Go process about a millisecond of CPU and 30-50 page faults at
// its first use of a type (reflection over the fields, its caches), in the
// host's front end and in the executor, on every sandbox's start
// (docs/benchmarks.md, "Issue 29"); this form is written by hand.
//
// A payload is the byte CodecVersion followed by the message's fields, each
// a field number (a varint) and a value, in increasing field order:
//
//   - a string: its length (a varint) and its bytes, any bytes;
//   - a signed integer: a zigzag varint; an unsigned one: a varint;
//   - a bool: the field number alone (true);
//   - a list: its count (a varint), then each element, a string or an
//     integer as above or a message as below;
//   - a map: its count, then each key and value, keys in increasing order;
//   - a message: its length (a varint) and its fields.
//
// A field whose value is the zero value (an empty string or list, 0, false,
// a nil pointer) is absent; a present pointer to a message of zero fields is
// a length of 0. So every message has exactly one encoding, and the decoder
// refuses anything else: a field out of order or repeated, a field number
// it does not know, a zero value written out, a varint longer than it needs,
// a length past the end, a map's keys out of order, bytes after the last
// field, another CodecVersion. FuzzDecodeMessage holds a decoded message to
// re-encode to exactly the bytes read; the JSON fuzz targets hold the two
// forms to the same values.

// CodecVersion is the first byte of every binary payload.
const CodecVersion = 1

// A Message is a payload with a binary form: Hello, Setup, Ready, Request,
// Result and Error.
type Message interface {
	appendFields(e *encoder)
}

// A Decodable is a pointer to a Message: *Hello, *Setup, *Ready,
// *Request, *Result or *Error.
type Decodable interface {
	decodeFields(d *decoder)
}

// MessageFrame builds a frame whose payload is m in its binary form.
func MessageFrame(t Type, stream uint32, m Message) (Frame, error) {
	e := encoder{b: make([]byte, 1, 128)}
	e.b[0] = CodecVersion
	m.appendFields(&e)
	if e.err != nil {
		return Frame{}, fmt.Errorf("encode %s: %w", t, e.err)
	}
	if len(e.b) > MaxPayload {
		return Frame{}, fmt.Errorf("encode %s: %d bytes exceeds frame limit", t, len(e.b))
	}
	return Frame{Type: t, Stream: stream, Payload: e.b}, nil
}

// AppendMessage appends m's binary form (CodecVersion and its fields) to b.
func AppendMessage(b []byte, m Message) ([]byte, error) {
	e := encoder{b: append(b, CodecVersion)}
	m.appendFields(&e)
	return e.b, e.err
}

// DecodeMessage parses the binary payload p into m strictly (see above).
// Every error wraps ErrFrame.
//
// A Hello may also be the JSON of an executor or host of a protocol
// version before the binary form (8 and before), so that the two report
// each other's version instead of a malformed frame.
func DecodeMessage(p []byte, m Decodable) error {
	if h, ok := m.(*Hello); ok && len(p) > 0 && p[0] == '{' {
		var old Hello
		if err := Decode(p, &old); err != nil {
			return err
		}
		if old.Version >= firstBinaryVersion {
			return fmt.Errorf("%w: a hello of protocol %d in JSON", ErrFrame, old.Version)
		}
		*h = old
		return nil
	}
	if len(p) == 0 {
		return fmt.Errorf("%w: empty message", ErrFrame)
	}
	if p[0] != CodecVersion {
		return fmt.Errorf("%w: message form %d, want %d", ErrFrame, p[0], CodecVersion)
	}
	d := decoder{p: p[1:]}
	m.decodeFields(&d)
	return d.err
}

// firstBinaryVersion is the protocol version that brought the binary form.
const firstBinaryVersion = 9

// encoder appends fields to b.
type encoder struct {
	b   []byte
	err error
}

func (e *encoder) field(n uint64) { e.b = binary.AppendUvarint(e.b, n) }

func (e *encoder) raw(s string) {
	e.b = binary.AppendUvarint(e.b, uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) str(n uint64, s string) {
	if s != "" {
		e.field(n)
		e.raw(s)
	}
}

func (e *encoder) int(n uint64, v int64) {
	if v != 0 {
		e.field(n)
		e.b = binary.AppendVarint(e.b, v)
	}
}

func (e *encoder) uint(n, v uint64) {
	if v != 0 {
		e.field(n)
		e.b = binary.AppendUvarint(e.b, v)
	}
}

func (e *encoder) flag(n uint64, v bool) {
	if v {
		e.field(n)
	}
}

func (e *encoder) strs(n uint64, l []string) {
	if len(l) > 0 {
		e.field(n)
		e.b = binary.AppendUvarint(e.b, uint64(len(l)))
		for _, s := range l {
			e.raw(s)
		}
	}
}

func (e *encoder) ints(n uint64, l []int) {
	if len(l) > 0 {
		e.field(n)
		e.b = binary.AppendUvarint(e.b, uint64(len(l)))
		for _, v := range l {
			e.b = binary.AppendVarint(e.b, int64(v))
		}
	}
}

func (e *encoder) strMap(n uint64, m map[string]string) {
	if len(m) > 0 {
		e.field(n)
		e.b = binary.AppendUvarint(e.b, uint64(len(m)))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			e.raw(k)
			e.raw(m[k])
		}
	}
}

func (e *encoder) uintMap(n uint64, m map[string]uint64) {
	if len(m) > 0 {
		e.field(n)
		e.b = binary.AppendUvarint(e.b, uint64(len(m)))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			e.raw(k)
			e.b = binary.AppendUvarint(e.b, m[k])
		}
	}
}

// msg appends m as field n, or nothing when m has no fields and is not
// present (a nil pointer, or a struct field of zero value).
func (e *encoder) msg(n uint64, present bool, m Message) {
	if !present {
		return
	}
	sub := encoder{}
	m.appendFields(&sub)
	if sub.err != nil && e.err == nil {
		e.err = sub.err
	}
	e.field(n)
	e.b = binary.AppendUvarint(e.b, uint64(len(sub.b)))
	e.b = append(e.b, sub.b...)
}

// msgs appends a list of n messages, each given by at(i).
func (e *encoder) msgs(field uint64, n int, at func(int) Message) {
	if n == 0 {
		return
	}
	e.field(field)
	e.b = binary.AppendUvarint(e.b, uint64(n))
	for i := range n {
		sub := encoder{}
		at(i).appendFields(&sub)
		if sub.err != nil && e.err == nil {
			e.err = sub.err
		}
		e.b = binary.AppendUvarint(e.b, uint64(len(sub.b)))
		e.b = append(e.b, sub.b...)
	}
}

// decoder reads the fields of one message from p. The first error stops
// it: every later read returns a zero value.
type decoder struct {
	p    []byte
	last uint64 // the last field number read
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrFrame}, args...)...)
	}
	d.p = nil
}

// more reports whether a field follows.
func (d *decoder) more() bool { return d.err == nil && len(d.p) > 0 }

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.p)
	if n <= 0 || n != uvarintLen(v) {
		d.fail("malformed varint")
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.p)
	if n <= 0 || n != varintLen(v) {
		d.fail("malformed varint")
		return 0
	}
	d.p = d.p[n:]
	return v
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func varintLen(v int64) int {
	u := uint64(v) << 1
	if v < 0 {
		u = ^u
	}
	return uvarintLen(u)
}

// field reads the next field number, which must be above the last.
func (d *decoder) field() uint64 {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n <= d.last {
		d.fail("field %d after field %d", n, d.last)
		return 0
	}
	d.last = n
	return n
}

// unknown refuses field n (0 after an error: the error stands).
func (d *decoder) unknown(n uint64) {
	if n != 0 {
		d.fail("unknown field %d", n)
	}
}

// length reads a length or count, which cannot exceed the bytes left (an
// element takes at least one byte), so no hostile count allocates.
func (d *decoder) length() int {
	n := d.uvarint()
	if n > uint64(len(d.p)) {
		d.fail("length %d past the end of the message", n)
		return 0
	}
	return int(n)
}

// count reads a list's or map's count: a present list is never empty.
func (d *decoder) count() int {
	n := d.length()
	if n == 0 && d.err == nil {
		d.fail("field %d: an empty list", d.last)
	}
	return n
}

func (d *decoder) raw() string {
	n := d.length()
	s := string(d.p[:n])
	d.p = d.p[n:]
	return s
}

func (d *decoder) str() string {
	s := d.raw()
	if s == "" && d.err == nil {
		d.fail("field %d: an empty string", d.last)
	}
	return s
}

func (d *decoder) int64() int64 {
	v := d.varint()
	if v == 0 && d.err == nil {
		d.fail("field %d: a zero", d.last)
	}
	return v
}

func (d *decoder) int() int {
	v := d.int64()
	if v < math.MinInt || v > math.MaxInt {
		d.fail("field %d: %d out of range", d.last, v)
		return 0
	}
	return int(v)
}

// uint reads a nonzero unsigned integer of at most limit.
func (d *decoder) uint(limit uint64) uint64 {
	v := d.uvarint()
	switch {
	case d.err != nil:
	case v == 0:
		d.fail("field %d: a zero", d.last)
	case v > limit:
		d.fail("field %d: %d out of range", d.last, v)
		return 0
	}
	return v
}

func (d *decoder) strs() []string {
	n := d.count()
	l := make([]string, 0, prealloc(n))
	for range n {
		l = append(l, d.raw())
	}
	return l
}

func (d *decoder) ints() []int {
	n := d.count()
	l := make([]int, 0, prealloc(n))
	for range n {
		v := d.varint()
		if v < math.MinInt || v > math.MaxInt {
			d.fail("field %d: %d out of range", d.last, v)
		}
		l = append(l, int(v))
	}
	return l
}

// key reads a map's next key, which must be above the previous (prev).
func (d *decoder) key(i int, prev string) string {
	k := d.raw()
	if i > 0 && k <= prev && d.err == nil {
		d.fail("field %d: map key %.40q after %.40q", d.last, k, prev)
	}
	return k
}

func (d *decoder) strMap() map[string]string {
	n := d.count()
	m := make(map[string]string, prealloc(n))
	k := ""
	for i := range n {
		k = d.key(i, k)
		m[k] = d.raw()
	}
	return m
}

func (d *decoder) uintMap() map[string]uint64 {
	n := d.count()
	m := make(map[string]uint64, prealloc(n))
	k := ""
	for i := range n {
		k = d.key(i, k)
		m[k] = d.uvarint()
	}
	return m
}

// msg decodes a message field into m. A struct field (present false) of
// no fields would have been absent, so it is refused; a pointer's may be
// empty.
func (d *decoder) msg(m Decodable, pointer bool) {
	n := d.length()
	if n == 0 && !pointer && d.err == nil {
		d.fail("field %d: an empty message", d.last)
		return
	}
	d.sub(n, m)
}

// sub decodes the next n bytes as m.
func (d *decoder) sub(n int, m Decodable) {
	if d.err != nil {
		return
	}
	s := decoder{p: d.p[:n]}
	d.p = d.p[n:]
	m.decodeFields(&s)
	if s.err != nil {
		d.err = s.err
		d.p = nil
	}
}

// msgs decodes a list of messages, each into the element add appends.
// The list grows as elements arrive: a count is not trusted to size it.
func (d *decoder) msgs(add func() Decodable) {
	n := d.count()
	for range n {
		if d.err != nil {
			return
		}
		d.sub(d.length(), add())
	}
}

// prealloc bounds what a count, which only the bytes left bound, may
// allocate ahead of the elements.
func prealloc(n int) int { return min(n, 64) }
