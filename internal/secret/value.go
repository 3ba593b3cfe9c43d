package secret

import (
	"fmt"
	"log/slog"
)

// redacted is what every printing path shows instead of a value.
const redacted = "[redacted]"

// Value holds a secret. String, GoString, Format, MarshalJSON, MarshalText
// and LogValue all yield "[redacted]"; Reveal is the only way to the bytes.
// The zero Value is empty.
type Value struct {
	// p reaches the bytes through two pointers rather than holding them, so
	// that even reflective printing of a struct that holds a Value in an
	// unexported field (where fmt cannot call Format, and dereferences one
	// pointer at the top level) shows an address, never the bytes.
	p *valueBytes
}

type valueBytes struct{ b *[]byte }

// NewValue returns a Value holding a copy of b.
func NewValue(b []byte) Value {
	if len(b) == 0 {
		return Value{}
	}
	c := append([]byte(nil), b...)
	return Value{p: &valueBytes{b: &c}}
}

// Reveal returns a copy of the secret bytes. Callers must not log, print,
// store or send them anywhere but their one intended place.
func (v Value) Reveal() []byte {
	if v.p == nil {
		return nil
	}
	return append([]byte(nil), *v.p.b...)
}

// Len is the length of the secret in bytes.
func (v Value) Len() int {
	if v.p == nil {
		return 0
	}
	return len(*v.p.b)
}

// bytes returns the held bytes without copying, for this package only.
func (v Value) bytes() []byte {
	if v.p == nil {
		return nil
	}
	return *v.p.b
}

// String returns "[redacted]".
func (Value) String() string { return redacted }

// GoString returns "[redacted]".
func (Value) GoString() string { return redacted }

// Format writes "[redacted]" for every verb and flag.
func (Value) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON returns the JSON string "[redacted]".
func (Value) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[redacted]".
func (Value) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue returns "[redacted]", so slog never records the bytes.
func (Value) LogValue() slog.Value { return slog.StringValue(redacted) }

var (
	_ fmt.Stringer   = Value{}
	_ fmt.GoStringer = Value{}
	_ fmt.Formatter  = Value{}
	_ slog.LogValuer = Value{}
)
