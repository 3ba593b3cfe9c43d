package guard

import (
	"net/netip"
	"regexp"
	"testing"
)

// plainQuad matches dotted quads that netip.ParseAddr also reads: four
// decimal parts, no leading zeros.
var plainQuad = regexp.MustCompile(`^(0|[1-9][0-9]{0,2})(\.(0|[1-9][0-9]{0,2})){3}$`)

// FuzzParseLiteral: plain dotted quads parse exactly as net/netip parses
// them; whatever ParseLiteral returns round-trips; and every IPv6 form that
// carries an IPv4 address is classified like that address, so no spelling
// of an address is judged differently.
func FuzzParseLiteral(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1", "0x7f.1", "0177.0.0.1", "2130706433", "1.2.3.256", "08.1.1.1", "0x",
		"[::ffff:169.254.169.254]", "fe80::1%25eth0", "64:ff9b::a00:1", "１２７.０.０.１", "example.com",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, lit, err := ParseLiteral(s)
		if plainQuad.MatchString(s) {
			na, nerr := netip.ParseAddr(s)
			if (nerr == nil) != (err == nil && lit) || nerr == nil && na != a {
				t.Fatalf("ParseLiteral(%q) = %v, %v, %v; netip says %v, %v", s, a, lit, err, na, nerr)
			}
		}
		if err != nil {
			if lit {
				t.Fatalf("ParseLiteral(%q) returned an error and a literal", s)
			}
			return
		}
		if !lit {
			return
		}
		if a.Is4In6() {
			t.Fatalf("ParseLiteral(%q) = %s, mapped form not unmapped", s, a)
		}
		b, lit2, err := ParseLiteral(a.String())
		if err != nil || !lit2 || b != a {
			t.Fatalf("ParseLiteral(%q) = %s, which re-parses as %v, %v, %v", s, a, b, lit2, err)
		}
		c := Classify(a)
		if c == ClassInvalid {
			t.Fatalf("Classify(ParseLiteral(%q) = %s) = invalid", s, a)
		}
		if z := Classify(a.WithZone("")); z != c {
			t.Fatalf("Classify(%s) = %s but without its zone %s", a, c, z)
		}
		if err := (&Guard{}).Check(a); (err == nil) != (c == ClassPublic) {
			t.Fatalf("Check(%s) = %v for class %s", a, err, c)
		}
		if !a.Is4() {
			return
		}
		v4 := a.As4()
		forms := map[string]netip.Addr{
			"mapped": netip.AddrFrom16(a.As16()),
			"nat64":  netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 10: 0, 11: 0, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]}),
			"6to4":   netip.AddrFrom16([16]byte{0x20, 0x02, v4[0], v4[1], v4[2], v4[3], 15: 1}),
		}
		if v4 != [4]byte{0, 0, 0, 1} { // ::0.0.0.1 is ::1, loopback
			forms["compatible"] = netip.AddrFrom16([16]byte{12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
		}
		for name, form := range forms {
			if got := Classify(form); got != c {
				t.Fatalf("Classify(%s) = %s, but its %s form %s is %s", a, c, name, form, got)
			}
		}
	})
}
