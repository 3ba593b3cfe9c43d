package guard

import "net/netip"

// Class names the kind of a destination address. Only ClassPublic passes the
// guard without an explicit allowance.
type Class string

// The classes Classify and Guard.Check use.
const (
	ClassPublic        Class = "public"
	ClassLoopback      Class = "loopback"      // 127.0.0.0/8, ::1
	ClassLinkLocal     Class = "link_local"    // 169.254.0.0/16 (incl. cloud metadata), fe80::/10
	ClassPrivate       Class = "private"       // RFC 1918, fc00::/7 ULA, fec0::/10 site-local, 64:ff9b:1::/48
	ClassCGNAT         Class = "cgnat"         // 100.64.0.0/10
	ClassMulticast     Class = "multicast"     // 224.0.0.0/4, ff00::/8
	ClassUnspecified   Class = "unspecified"   // 0.0.0.0, ::
	ClassBroadcast     Class = "broadcast"     // 255.255.255.255
	ClassDocumentation Class = "documentation" // TEST-NET-1/2/3, 2001:db8::/32, 3fff::/20
	ClassBenchmark     Class = "benchmark"     // 198.18.0.0/15, 2001:2::/48
	ClassReserved      Class = "reserved"      // 0.0.0.0/8, 192.0.0.0/24, 240.0.0.0/4, Teredo, and IPv6 outside 2000::/3
	ClassHostOwn       Class = "host_own"      // an address of one of the host's own interfaces (Guard.Check only)
	ClassInvalid       Class = "invalid"       // the zero netip.Addr
)

type classRange struct {
	prefix netip.Prefix
	class  Class
}

// ipv4Ranges are the IPv4 special-purpose ranges (IANA registry, RFC 6890 and
// successors) that a sandbox must not reach. Order matters: the first match
// wins, so single addresses come before the ranges that hold them.
var ipv4Ranges = []classRange{
	{netip.MustParsePrefix("0.0.0.0/32"), ClassUnspecified},
	{netip.MustParsePrefix("0.0.0.0/8"), ClassReserved}, // "this network"; Linux connects 0.x to itself
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassCGNAT},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate},
	{netip.MustParsePrefix("192.0.0.0/24"), ClassReserved}, // IETF protocol assignments, DS-Lite, NAT64 discovery
	{netip.MustParsePrefix("192.0.2.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("192.88.99.0/24"), ClassReserved}, // deprecated 6to4 relay anycast
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate},
	{netip.MustParsePrefix("198.18.0.0/15"), ClassBenchmark},
	{netip.MustParsePrefix("198.51.100.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("203.0.113.0/24"), ClassDocumentation},
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
	{netip.MustParsePrefix("255.255.255.255/32"), ClassBroadcast},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},
}

// ipv6Ranges are the IPv6 special-purpose ranges checked after the IPv4
// embeddings have been judged. Anything outside 2000::/3 (global unicast) is
// reserved as well.
var ipv6Ranges = []classRange{
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("64:ff9b:1::/48"), ClassPrivate},      // local-use NAT64 (RFC 8215)
	{netip.MustParsePrefix("100::/64"), ClassReserved},           // discard-only
	{netip.MustParsePrefix("2001:2::/48"), ClassBenchmark},       // inside 2001::/23, so first
	{netip.MustParsePrefix("2001::/23"), ClassReserved},          // IETF protocol assignments, incl. Teredo 2001::/32 and ORCHID
	{netip.MustParsePrefix("2001:db8::/32"), ClassDocumentation}, //
	{netip.MustParsePrefix("3fff::/20"), ClassDocumentation},     // RFC 9637
	{netip.MustParsePrefix("5f00::/16"), ClassReserved},          // SRv6 SIDs (RFC 9602)
	{netip.MustParsePrefix("fc00::/7"), ClassPrivate},            // unique local
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},         //
	{netip.MustParsePrefix("fec0::/10"), ClassPrivate},           // deprecated site-local
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},          //
	{netip.MustParsePrefix("2000::/3"), ClassPublic},             // global unicast
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	compatible  = netip.MustParsePrefix("::/96")
)

// Classify says what kind of address a is, from the address alone (the
// host's own addresses are Guard.Check's business). Zones are ignored. IPv6
// forms that carry an IPv4 address are judged by that IPv4 address: mapped
// ::ffff:a.b.c.d, compatible ::a.b.c.d (except :: and ::1), NAT64
// 64:ff9b::/96 and 6to4 2002:AABB:CCDD::/48. Teredo (2001::/32) is refused as
// reserved: it tunnels to an address the guard cannot see.
func Classify(a netip.Addr) Class {
	if !a.IsValid() {
		return ClassInvalid
	}
	a = a.WithZone("")
	if v4, ok := embeddedIPv4(a); ok {
		a = v4
	}
	if a.Is4() {
		return lookup(ipv4Ranges, a, ClassPublic)
	}
	return lookup(ipv6Ranges, a, ClassReserved)
}

// embeddedIPv4 returns the IPv4 address an IPv6 form carries, if any.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if a.Is4() {
		return netip.Addr{}, false
	}
	if a.Is4In6() {
		return a.Unmap(), true
	}
	b := a.As16()
	switch {
	case a == netip.IPv6Unspecified() || a == netip.IPv6Loopback():
		return netip.Addr{}, false // judged as IPv6 below, not as 0.0.0.0/0.0.0.1
	case compatible.Contains(a), nat64Prefix.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

func lookup(ranges []classRange, a netip.Addr, otherwise Class) Class {
	for _, r := range ranges {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return otherwise
}
