package event

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// RunIDPrefix starts every run id.
const RunIDPrefix = "run_"

// crockford is Crockford's base32 alphabet, as ULID uses it: digits then
// upper-case letters without I, L, O and U. Its order is the byte order, so
// ids sort as strings in the order of their timestamps.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// runIDLen is the length of a run id: the prefix and 26 base32 digits
// (128 bits: a 48-bit millisecond timestamp, then 80 random bits).
const runIDLen = len(RunIDPrefix) + 26

// NewRunID returns a new run id for a run created at t: "run_" followed by
// a ULID (26 base32 digits: milliseconds since 1970 in 48 bits, then 80 bits
// from crypto/rand). Ids sort as strings by creation time to the
// millisecond; ids made in the same millisecond sort randomly among
// themselves. t is a parameter so that tests with a fake clock get
// predictable order.
func NewRunID(t time.Time) string {
	var b [16]byte
	ms := t.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	binary.BigEndian.PutUint64(b[:8], uint64(ms)<<16)
	rand.Read(b[6:]) // never fails (crypto/rand documents it)
	return RunIDPrefix + encodeULID(b)
}

// ErrRunID is wrapped by ValidRunID's errors.
var ErrRunID = errors.New("malformed run id")

// ValidRunID checks that s has the exact form NewRunID returns.
func ValidRunID(s string) error {
	if len(s) != runIDLen || s[:len(RunIDPrefix)] != RunIDPrefix {
		return fmt.Errorf("event: %w %q", ErrRunID, truncate(s))
	}
	digits := s[len(RunIDPrefix):]
	if digits[0] > '7' { // the first digit carries only 3 of the 128 bits
		return fmt.Errorf("event: %w %q", ErrRunID, s)
	}
	for i := 0; i < len(digits); i++ {
		if decodeCrockford(digits[i]) < 0 {
			return fmt.Errorf("event: %w %q", ErrRunID, s)
		}
	}
	return nil
}

// RunIDTime returns the creation time encoded in a run id, to the
// millisecond.
func RunIDTime(id string) (time.Time, error) {
	if err := ValidRunID(id); err != nil {
		return time.Time{}, err
	}
	var ms uint64
	for _, c := range []byte(id[len(RunIDPrefix) : len(RunIDPrefix)+10]) {
		ms = ms<<5 | uint64(decodeCrockford(c))
	}
	return time.UnixMilli(int64(ms)).UTC(), nil
}

func encodeULID(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [26]byte
	// 26 digits of 5 bits hold 130 bits; the first digit carries the top
	// 3 bits of the 128.
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

func decodeCrockford(c byte) int {
	for i := 0; i < len(crockford); i++ {
		if crockford[i] == c {
			return i
		}
	}
	return -1
}
