// Package param parses the whole-number parameters clients put in the
// host's HTTP APIs (the airlock API of internal/server and the E2B API of
// internal/e2b): sequence numbers and ledger cursors (?after=,
// Last-Event-ID), page sizes (?limit=), the time in a page token, a metrics
// range. Every one is parsed by Int.Parse, with one set of checks, so that
// none is read past its bounds: a value outside them is refused with a
// message that names the bounds, never wrapped around or clamped
// (?after=9223372036854775807 once read events from seq 1).
//
// It does no I/O and imports only the standard library: the server, the
// E2B API and any tool may import it.
package param

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Int is a whole-number parameter: its name as clients write it, the
// values it may take (Min to Max, both included), and its value when a
// client gives none.
type Int struct {
	Name     string
	Min, Max int64
	Default  int64
}

// Error is a value a client gave that Int.Parse refused. Its text is for
// the client: it names the parameter and its bounds and quotes at most
// maxQuoted bytes of the value.
type Error struct {
	Name     string
	Value    string
	Min, Max int64
}

// maxQuoted bounds the bytes of a refused value quoted back.
const maxQuoted = 24

func (e *Error) Error() string {
	v := strings.ToValidUTF8(e.Value, "?")
	if len(v) > maxQuoted {
		v = v[:maxQuoted]
		for !utf8.ValidString(v) {
			v = v[:len(v)-1]
		}
		v += "…"
	}
	if e.Max == math.MaxInt64 {
		return fmt.Sprintf("%s %q: want a whole number, %d or more", e.Name, v, e.Min)
	}
	return fmt.Sprintf("%s %q: want a whole number from %d to %d", e.Name, v, e.Min, e.Max)
}

// Parse reads v, the text a client gave for p: decimal digits, with a
// leading '-' only where p.Min is negative, and nothing else (no sign,
// space, fraction or exponent), whose value is within p.Min to p.Max. An
// empty v is p.Default. Anything else is an *Error.
func (p Int) Parse(v string) (int64, error) {
	if v == "" {
		return p.Default, nil
	}
	digits := v
	if p.Min < 0 {
		digits = strings.TrimPrefix(v, "-")
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, p.refuse(v)
	}
	// Out of int64's range is out of p's: ParseInt says so rather than
	// wrapping around.
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < p.Min || n > p.Max {
		return 0, p.refuse(v)
	}
	return n, nil
}

func (p Int) refuse(v string) *Error {
	return &Error{Name: p.Name, Value: v, Min: p.Min, Max: p.Max}
}
