// Package hostname is airlock's one dialect of host names and host
// patterns: the spelling that policy rules, secrets' host bindings and the
// egress proxy all compare. A name is normalized once (IDNA to ASCII,
// lowercase, no trailing dot); anything numeric in any notation a C
// resolver or a browser accepts is an IP literal in canonical form, never a
// name. A pattern is an exact host, a "*.suffix" wildcard or an IP literal,
// normalized the same way, and Match compares only normalized forms.
//
// It is a leaf (standard library and golang.org/x/net/idna), so that the
// policy, the secret store and the proxy's address guard share it without
// importing each other.
//
// Importers: internal/policy, internal/secret, internal/egress,
// internal/egress/guard and internal/e2b (a sandbox's own network rules).
package hostname

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// maxHostLen bounds every host this package parses. A DNS name is at most
// 253 bytes in ASCII; the bound leaves room for Unicode input that maps down
// to that and for bracketed IPv6 literals with zones, and keeps a hostile
// input from costing more than a few microseconds.
const maxHostLen = 1024

// LiteralError reports a host that looks like an IP address but is not a
// valid one ("1.2.3.256", "0x", "08.1.1.1"). Such a host is refused: it must
// never fall through to name resolution, where a C resolver or a browser may
// read it differently.
type LiteralError struct {
	Host   string // the input, shortened for the message
	Reason string
}

func (e *LiteralError) Error() string {
	return fmt.Sprintf("invalid IP literal %q: %s", e.Host, e.Reason)
}

func literalErr(host, reason string) error {
	return &LiteralError{Host: shorten(host), Reason: reason}
}

// ParseLiteral reports whether host is an IP literal in any notation that the
// C library (inet_aton) or a browser (the WHATWG URL host parser) accepts, and
// returns its canonical address:
//
//   - dotted quad "127.0.0.1", with at most one trailing dot;
//   - IPv4 short forms "127.1", "10.1.2" and a single number "2130706433";
//   - octal ("0177.0.0.1") and hex ("0x7f.0.0.1", "0x7f000001") parts;
//   - Unicode forms a browser maps to those (full-width digits, "。");
//   - IPv6, bare or bracketed, with a zone ("fe80::1%eth0", "[fe80::1%25eth0]").
//
// IPv4-mapped IPv6 (::ffff:a.b.c.d) is returned as the IPv4 address, since
// that is the address a socket reaches. Other embeddings (::a.b.c.d, NAT64,
// 6to4) stay IPv6; the guard judges them by what they embed.
//
// A host is numeric when it contains ':' or starts with '[', or when its last
// dot-separated label is all digits or starts with "0x" (the WHATWG "ends in
// a number" rule, stricter for "0x" forms). A numeric host that does not
// parse is an error, never a name. For every other host isLiteral is false
// and err is nil: it is a name, for Normalize to judge.
func ParseLiteral(host string) (addr netip.Addr, isLiteral bool, err error) {
	if len(host) > maxHostLen {
		return netip.Addr{}, false, literalErr(host, "too long")
	}
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") || len(host) < 3 {
			return netip.Addr{}, false, literalErr(host, "unbalanced brackets")
		}
		a, err := parseIPv6(host, host[1:len(host)-1], true)
		return a, err == nil, err
	}
	if strings.ContainsAny(host, ":]") {
		a, err := parseIPv6(host, host, false)
		return a, err == nil, err
	}
	s := host
	if !isASCII(s) && utf8.ValidString(s) {
		// A browser maps the host through IDNA before it looks for a number,
		// so "１２７.０.０.１" is 127.0.0.1 to it. Do the same. A host that
		// does not map is no valid name either; Normalize refuses it.
		mapped, err := idna.Lookup.ToASCII(s)
		if err != nil {
			return netip.Addr{}, false, nil
		}
		s = mapped
	}
	s = strings.ToLower(s)
	trimmed := strings.TrimRight(s, ".")
	last := trimmed[strings.LastIndexByte(trimmed, '.')+1:]
	if !numericLabel(last) {
		return netip.Addr{}, false, nil
	}
	if len(s)-len(trimmed) > 1 {
		return netip.Addr{}, false, literalErr(host, "more than one trailing dot")
	}
	a, reason := parseIPv4(trimmed)
	if reason != "" {
		return netip.Addr{}, false, literalErr(host, reason)
	}
	return a, true, nil
}

// numericLabel reports whether a last label makes the host an IPv4 literal.
func numericLabel(l string) bool {
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") {
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

// parseIPv4 parses lowercase s the way inet_aton does: one to four parts,
// each decimal, octal (leading 0) or hex (0x); every part but the last is one
// byte, the last fills the remaining bytes. It returns a non-empty reason on
// failure. Unlike inet_aton, "0x" without digits is refused.
func parseIPv4(s string) (netip.Addr, string) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, "more than four parts"
	}
	var vals [4]uint64
	for i, p := range parts {
		v, reason := parseIPv4Part(p)
		if reason != "" {
			return netip.Addr{}, fmt.Sprintf("part %d: %s", i+1, reason)
		}
		vals[i] = v
	}
	n := len(parts)
	for i := 0; i < n-1; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, fmt.Sprintf("part %d: %d out of range 0-255", i+1, vals[i])
		}
	}
	lastMax := uint64(1)<<(8*(5-n)) - 1
	if vals[n-1] > lastMax {
		return netip.Addr{}, fmt.Sprintf("part %d: %d out of range 0-%d", n, vals[n-1], lastMax)
	}
	var v uint32
	for i := 0; i < n-1; i++ {
		v |= uint32(vals[i]) << (24 - 8*i)
	}
	v |= uint32(vals[n-1])
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), ""
}

// parseIPv4Part parses one part of an IPv4 literal. Values above 2^32 stop
// the scan early, so any length of digits costs linear time and no overflow.
func parseIPv4Part(p string) (uint64, string) {
	if p == "" {
		return 0, "empty"
	}
	base := uint64(10)
	digits := p
	switch {
	case strings.HasPrefix(p, "0x"):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, `"0x" without hex digits`
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	var v uint64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		default:
			return 0, fmt.Sprintf("invalid character %q", c)
		}
		if d >= base {
			return 0, fmt.Sprintf("digit %q invalid in base %d", c, base)
		}
		v = v*base + d
		if v > 0xffffffff {
			return 0, "out of range"
		}
	}
	return v, ""
}

// parseIPv6 parses an IPv6 literal with an optional zone. In brackets (a URL
// authority) the zone separator may be percent-encoded as "%25" (RFC 6874).
func parseIPv6(host, s string, bracketed bool) (netip.Addr, error) {
	addrPart, zone, hasZone := strings.Cut(s, "%")
	if hasZone {
		if bracketed && strings.HasPrefix(zone, "25") && len(zone) > 2 {
			zone = zone[2:]
		}
		if !validZone(zone) {
			return netip.Addr{}, literalErr(host, "invalid zone")
		}
	}
	if !strings.Contains(addrPart, ":") {
		return netip.Addr{}, literalErr(host, "not an IPv6 address")
	}
	a, err := netip.ParseAddr(addrPart)
	if err != nil || !a.Is6() {
		return netip.Addr{}, literalErr(host, "not an IPv6 address")
	}
	if a.Is4In6() {
		// The socket layer reaches ::ffff:a.b.c.d as a.b.c.d; name it so.
		return a.Unmap(), nil
	}
	if hasZone {
		a = a.WithZone(zone)
	}
	return a, nil
}

// validZone accepts interface names and indexes: [A-Za-z0-9_.-]{1,64}. Zones
// end up in logs and audit records, so nothing else gets through.
func validZone(z string) bool {
	if z == "" || len(z) > 64 {
		return false
	}
	for i := 0; i < len(z); i++ {
		c := z[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Normalize returns the one spelling of host that policy rules, secrets and
// the proxy compare: IDNA converted to ASCII (x/net/idna Lookup profile, which
// also lowercases), one trailing dot removed, every label 1-63 bytes of
// [a-z0-9-] not starting or ending with '-', at most 253 bytes in all. A host
// that is numeric in any notation is an IP literal (see ParseLiteral) and is
// returned in canonical form ("0x7f.1" -> "127.0.0.1", "[::1]" -> "::1").
// Empty hosts, names with ports, '/', '@', spaces, '*' or '_' are errors.
func Normalize(host string) (string, error) {
	if host == "" {
		return "", errors.New("empty host")
	}
	a, lit, err := ParseLiteral(host)
	if err != nil {
		return "", err
	}
	if lit {
		return a.String(), nil
	}
	if !utf8.ValidString(host) {
		return "", fmt.Errorf("invalid host name %q: not UTF-8", shorten(host))
	}
	name, err := idna.Lookup.ToASCII(host)
	if err != nil {
		return "", fmt.Errorf("invalid host name %q: %w", shorten(host), err)
	}
	name = strings.TrimSuffix(name, ".")
	if reason := checkName(name); reason != "" {
		return "", fmt.Errorf("invalid host name %q: %s", shorten(host), reason)
	}
	// ParseLiteral mapped host through the same profile, so a name that
	// comes out numeric would be a bug there; refuse rather than guess.
	if _, lit, err := ParseLiteral(name); lit || err != nil {
		return "", fmt.Errorf("invalid host name %q: maps to a numeric host", shorten(host))
	}
	return name, nil
}

// checkName checks an ASCII name after IDNA mapping and returns a non-empty
// reason when it is not a valid DNS host name.
func checkName(name string) string {
	if name == "" {
		return "empty"
	}
	if len(name) > 253 {
		return "longer than 253 bytes"
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return "empty label"
		}
		if len(l) > 63 {
			return "label longer than 63 bytes"
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "label starts or ends with '-'"
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Sprintf("invalid character %q", c)
			}
		}
	}
	return ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// shorten keeps error messages bounded when the input is hostile.
func shorten(s string) string {
	const limit = 80
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
