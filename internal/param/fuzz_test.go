package param_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/param"
)

// FuzzIntParse: on any text and bounds, Parse either returns a value
// within the bounds that is the text's own (it reads back from its decimal
// form), or an *Error whose message is valid UTF-8 of bounded length;
// and it accepts every in-range decimal that strconv reads from plain
// digits.
func FuzzIntParse(f *testing.F) {
	f.Add("9223372036854775807", int64(0), int64(9223372036854775807))
	f.Add("9223372036854775808", int64(0), int64(9223372036854775807))
	f.Add("-1", int64(0), int64(500))
	f.Add("", int64(1), int64(500))
	f.Add("abc", int64(0), int64(10))
	f.Fuzz(func(t *testing.T, v string, lo, hi int64) {
		if lo > hi {
			return
		}
		p := param.Int{Name: "n", Min: lo, Max: hi, Default: lo}
		n, err := p.Parse(v)
		if err != nil {
			var pe *param.Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error %T, want *param.Error", v, err)
			}
			if msg := err.Error(); !utf8.ValidString(msg) || len(msg) > 200 {
				t.Fatalf("Parse(%q): message %q is not bounded valid UTF-8", v, msg)
			}
			digits := v
			if lo < 0 {
				digits = strings.TrimPrefix(v, "-")
			}
			if m, perr := strconv.ParseInt(v, 10, 64); perr == nil && digits != "" && strings.Trim(digits, "0123456789") == "" && m >= lo && m <= hi {
				t.Fatalf("Parse(%q) refused %d, within %d to %d", v, m, lo, hi)
			}
			return
		}
		if n < lo || n > hi {
			t.Fatalf("Parse(%q) = %d, outside %d to %d", v, n, lo, hi)
		}
		if v == "" {
			return
		}
		if back, err := p.Parse(strconv.FormatInt(n, 10)); err != nil || back != n {
			t.Fatalf("Parse(%q) = %d, which does not read back (%d, %v)", v, n, back, err)
		}
		if m, err := strconv.ParseInt(v, 10, 64); err != nil || m != n {
			t.Fatalf("Parse(%q) = %d; strconv reads %d, %v", v, n, m, err)
		}
	})
}
