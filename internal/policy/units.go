package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Size is a number of bytes. In a document it is written as an integer of
// bytes or as a number with a K, M, G or T suffix (powers of 1024, "512M",
// "1.5G"; "KiB", "MB" and the like mean the same); Canonical writes the
// shortest exact form ("1536M").
type Size int64

// ParseSize reads a size the way a policy document writes one. Negative
// sizes are refused.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size %q: empty", shorten(s))
	}
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToUpper(t[i:])
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	shift, ok := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[unit]
	if !ok || num == "" {
		return 0, fmt.Errorf("%q is not a size", shorten(s))
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a size", shorten(s))
	}
	v := f * float64(uint64(1)<<shift)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", shorten(s))
	}
	return Size(v), nil
}

// String writes s the way ParseSize reads it, exactly.
func (s Size) String() string {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"T", 40}, {"G", 30}, {"M", 20}, {"K", 10}} {
		if s >= 1<<u.shift && s%(1<<u.shift) == 0 {
			return strconv.FormatInt(int64(s>>u.shift), 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalYAML writes s as String does.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

func (s *Size) decodeScalar(n *yaml.Node) *Error {
	const hint = "write bytes as an integer, or a number with a K, M, G or T suffix, like 512M or 1G"
	switch n.ShortTag() {
	case "!!int":
		var v int64
		if err := n.Decode(&v); err != nil || v < 0 {
			return &Error{Msg: fmt.Sprintf("%s is not a size", shorten(n.Value)), Hint: hint}
		}
		*s = Size(v)
		return nil
	case "!!str", "!!float":
		v, err := ParseSize(n.Value)
		if err != nil {
			return &Error{Msg: err.Error(), Hint: hint}
		}
		*s = v
		return nil
	}
	return &Error{Msg: "want a size, got " + describe(n), Hint: hint}
}

// Duration is a span of time, written as a Go duration ("90s", "10m",
// "1h30m"); Canonical writes it without zero units ("10m", not "10m0s").
type Duration time.Duration

// String writes d as a Go duration without trailing zero units.
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalYAML writes d as String does.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

func (d *Duration) decodeScalar(n *yaml.Node) *Error {
	const hint = "write a number with a unit, like 90s, 10m or 1h30m"
	if n.ShortTag() != "!!str" {
		if n.ShortTag() == "!!int" || n.ShortTag() == "!!float" {
			return &Error{Msg: fmt.Sprintf("%s has no unit", shorten(n.Value)), Hint: hint}
		}
		return &Error{Msg: "want a duration, got " + describe(n), Hint: hint}
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return &Error{Msg: fmt.Sprintf("%q is not a duration", shorten(n.Value)), Hint: hint}
	}
	if v < 0 {
		return &Error{Msg: fmt.Sprintf("%q is negative", shorten(n.Value)), Hint: "a duration must not be negative"}
	}
	*d = Duration(v)
	return nil
}
