package param_test

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/param"
)

// TestIntParse: the bounds checks every cursor, seq and page size of the
// APIs goes through.
func TestIntParse(t *testing.T) {
	seq := param.Int{Name: "after", Min: 0, Max: math.MaxInt64}
	limit := param.Int{Name: "limit", Min: 1, Max: 500, Default: 50}
	signed := param.Int{Name: "offset", Min: -10, Max: 10}
	for _, tt := range []struct {
		name string
		p    param.Int
		v    string
		want int64
		ok   bool
	}{
		{"empty is the default", limit, "", 50, true},
		{"empty seq is 0", seq, "", 0, true},
		{"zero", seq, "0", 0, true},
		{"max int64", seq, "9223372036854775807", math.MaxInt64, true},
		{"max int64 + 1", seq, "9223372036854775808", 0, false},
		{"far past int64", seq, strings.Repeat("9", 40), 0, false},
		{"negative", seq, "-1", 0, false},
		{"min int64", seq, "-9223372036854775808", 0, false},
		{"minus zero", seq, "-0", 0, false},
		{"plus sign", seq, "+5", 0, false},
		{"non-numeric", seq, "abc", 0, false},
		{"trailing garbage", seq, "12abc", 0, false},
		{"leading space", seq, " 5", 0, false},
		{"trailing space", seq, "5 ", 0, false},
		{"fraction", seq, "1.0", 0, false},
		{"exponent", seq, "1e3", 0, false},
		{"hex", seq, "0x10", 0, false},
		{"underscores", seq, "1_000", 0, false},
		{"arabic-indic digit", seq, "٣", 0, false},
		{"lone minus", signed, "-", 0, false},
		{"leading zeros", seq, "007", 7, true},
		{"limit at its minimum", limit, "1", 1, true},
		{"limit at its maximum", limit, "500", 500, true},
		{"limit below", limit, "0", 0, false},
		{"limit above", limit, "501", 0, false},
		{"limit max int64", limit, "9223372036854775807", 0, false},
		{"limit max int64 + 1", limit, "9223372036854775808", 0, false},
		{"signed negative", signed, "-10", -10, true},
		{"signed below", signed, "-11", 0, false},
		{"signed minus zero", signed, "-0", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.p.Parse(tt.v)
			if !tt.ok {
				var pe *param.Error
				if !errors.As(err, &pe) || pe.Name != tt.p.Name || pe.Value != tt.v {
					t.Fatalf("%+v.Parse(%q) = %d, %v; want an *param.Error", tt.p, tt.v, got, err)
				}
				if msg := err.Error(); !strings.HasPrefix(msg, tt.p.Name+" ") || !strings.Contains(msg, strconv.FormatInt(tt.p.Min, 10)) {
					t.Errorf("%+v.Parse(%q): message %q does not name the parameter and its bounds", tt.p, tt.v, msg)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%+v.Parse(%q) = %d, %v; want %d", tt.p, tt.v, got, err, tt.want)
			}
		})
	}
}

// TestErrorText: the message names the bounds and quotes a bounded,
// valid UTF-8 piece of the value.
func TestErrorText(t *testing.T) {
	for _, tt := range []struct {
		p    param.Int
		v    string
		want string
	}{
		{param.Int{Name: "after", Max: math.MaxInt64}, "x", `after "x": want a whole number, 0 or more`},
		{param.Int{Name: "limit", Min: 1, Max: 500}, "0", `limit "0": want a whole number from 1 to 500`},
		{param.Int{Name: "limit", Min: 1, Max: 500}, strings.Repeat("9", 30), `limit "999999999999999999999999…": want a whole number from 1 to 500`},
		{param.Int{Name: "limit", Min: 1, Max: 500}, "\xff1", `limit "?1": want a whole number from 1 to 500`},
		{param.Int{Name: "limit", Min: 1, Max: 500}, strings.Repeat("é", 20), `limit "éééééééééééé…": want a whole number from 1 to 500`},
	} {
		_, err := tt.p.Parse(tt.v)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%+v.Parse(%q) = %v, want %s", tt.p, tt.v, err, tt.want)
		}
	}
}
