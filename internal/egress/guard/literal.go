package guard

import (
	"net/netip"

	"github.com/airlockrun/airlock/internal/hostname"
)

// ParseLiteral reports whether host is an IP literal in any notation the C
// library or a browser accepts (dotted quad, single decimal "2130706433",
// octal "0177.0.0.1", hex "0x7f.0.0.1" / "0x7f000001", short forms "127.1" /
// "10.1.2", bracketed or bare IPv6 incl. zones "fe80::1%eth0", IPv4-mapped
// and -compatible IPv6) and returns the canonical address. A host that looks
// numeric but is malformed ("1.2.3.256", "0x", "08.1.1.1") is an error
// (*hostname.LiteralError), never treated as a name.
//
// It is hostname.ParseLiteral: hostname.Normalize and the guard must agree
// on what a literal is, so there is one parser, kept in the hostname leaf.
func ParseLiteral(host string) (addr netip.Addr, isLiteral bool, err error) {
	return hostname.ParseLiteral(host)
}
