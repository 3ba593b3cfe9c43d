package guard

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/airlockrun/airlock/internal/hostname"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		addr string
		want Class
	}{
		{"8.8.8.8", ClassPublic},
		{"1.1.1.1", ClassPublic},
		{"100.63.255.255", ClassPublic},
		{"100.128.0.0", ClassPublic},
		{"172.15.255.255", ClassPublic},
		{"172.32.0.0", ClassPublic},
		{"223.255.255.255", ClassPublic},
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassReserved},
		{"0.255.255.255", ClassReserved},
		{"10.0.0.1", ClassPrivate},
		{"10.255.255.255", ClassPrivate},
		{"100.64.0.1", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"127.0.0.1", ClassLoopback},
		{"127.255.255.254", ClassLoopback},
		{"169.254.169.254", ClassLinkLocal},
		{"169.254.0.1", ClassLinkLocal},
		{"172.16.0.1", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"192.0.0.1", ClassReserved},
		{"192.0.0.170", ClassReserved},
		{"192.0.2.1", ClassDocumentation},
		{"192.88.99.1", ClassReserved},
		{"192.168.1.1", ClassPrivate},
		{"198.18.0.1", ClassBenchmark},
		{"198.19.255.255", ClassBenchmark},
		{"198.51.100.1", ClassDocumentation},
		{"203.0.113.10", ClassDocumentation},
		{"224.0.0.1", ClassMulticast},
		{"239.255.255.250", ClassMulticast},
		{"240.0.0.1", ClassReserved},
		{"255.255.255.254", ClassReserved},
		{"255.255.255.255", ClassBroadcast},
		// IPv6.
		{"2606:4700:4700::1111", ClassPublic},
		{"2a00:1450::1", ClassPublic},
		{"::", ClassUnspecified},
		{"::1", ClassLoopback},
		{"fe80::1", ClassLinkLocal},
		{"fe80::1%eth0", ClassLinkLocal},
		{"febf::1", ClassLinkLocal},
		{"fec0::1", ClassPrivate},
		{"fc00::1", ClassPrivate},
		{"fd12:3456::1", ClassPrivate},
		{"ff02::1", ClassMulticast},
		{"ff0e::1", ClassMulticast},
		{"2001:db8::1", ClassDocumentation},
		{"3fff::1", ClassDocumentation},
		{"2001:2::1", ClassBenchmark},
		{"2001::1", ClassReserved},             // Teredo
		{"2001:0:4136:e378::1", ClassReserved}, // Teredo with a server
		{"2001:10::1", ClassReserved},          // ORCHID
		{"100::1", ClassReserved},              // discard-only
		{"5f00::1", ClassReserved},             // SRv6
		{"4000::1", ClassReserved},             // outside 2000::/3
		{"::ffff:0:1.2.3.4", ClassReserved},    // IPv4-translated (RFC 2765), not mapped
		{"64:ff9b:1::a00:1", ClassPrivate},     // local-use NAT64
		// IPv4 embedded in IPv6, judged by the IPv4 address.
		{"::ffff:127.0.0.1", ClassLoopback},
		{"::ffff:169.254.169.254", ClassLinkLocal},
		{"::ffff:10.0.0.1", ClassPrivate},
		{"::ffff:8.8.8.8", ClassPublic},
		{"::ffff:0.0.0.0", ClassUnspecified},
		{"::127.0.0.1", ClassLoopback},
		{"::169.254.169.254", ClassLinkLocal},
		{"::10.0.0.1", ClassPrivate},
		{"::8.8.8.8", ClassPublic},
		{"::0.0.0.2", ClassReserved},
		{"64:ff9b::127.0.0.1", ClassLoopback},
		{"64:ff9b::169.254.169.254", ClassLinkLocal},
		{"64:ff9b::100.64.0.1", ClassCGNAT},
		{"64:ff9b::8.8.8.8", ClassPublic},
		{"2002:7f00:1::", ClassLoopback},
		{"2002:a9fe:a9fe::1", ClassLinkLocal},
		{"2002:c0a8:101::", ClassPrivate},
		{"2002:808:808::1", ClassPublic},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := Classify(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Fatalf("Classify(%s) = %s, want %s", tt.addr, got, tt.want)
			}
		})
	}
	if got := Classify(netip.Addr{}); got != ClassInvalid {
		t.Errorf("Classify(zero) = %s, want %s", got, ClassInvalid)
	}
}

// TestLiteralNotations: every spelling of an address is judged like the
// address itself.
func TestLiteralNotations(t *testing.T) {
	tests := []struct {
		host string
		want Class
	}{
		{"127.0.0.1", ClassLoopback},
		{"127.1", ClassLoopback},
		{"2130706433", ClassLoopback},
		{"0x7f000001", ClassLoopback},
		{"0x7f.0.0.1", ClassLoopback},
		{"0177.0.0.1", ClassLoopback},
		{"0177.1", ClassLoopback},
		{"017700000001", ClassLoopback},
		{"127.0.0.1.", ClassLoopback},
		{"１２７.０.０.１", ClassLoopback},
		{"127。0。0。1", ClassLoopback},
		{"[::1]", ClassLoopback},
		{"::1", ClassLoopback},
		{"[::ffff:127.0.0.1]", ClassLoopback},
		{"[::ffff:7f00:1]", ClassLoopback},
		{"[::127.0.0.1]", ClassLoopback},
		{"[64:ff9b::7f00:1]", ClassLoopback},
		{"[2002:7f00:1::]", ClassLoopback},
		{"169.254.169.254", ClassLinkLocal},
		{"169.254.43518", ClassLinkLocal},
		{"2852039166", ClassLinkLocal},
		{"0xa9fea9fe", ClassLinkLocal},
		{"0xA9.0xFE.0xA9.0xFE", ClassLinkLocal},
		{"0251.0376.0251.0376", ClassLinkLocal},
		{"0251.254.43518", ClassLinkLocal},
		{"[::ffff:169.254.169.254]", ClassLinkLocal},
		{"[::ffff:a9fe:a9fe]", ClassLinkLocal},
		{"fe80::1%eth0", ClassLinkLocal},
		{"[fe80::1%25eth0]", ClassLinkLocal},
		{"10.1.2", ClassPrivate},
		{"167772161", ClassPrivate},
		{"012.0.0.1", ClassPrivate},
		{"0xc0.0xa8.1.1", ClassPrivate},
		{"[fd00::1]", ClassPrivate},
		{"100.64.1", ClassCGNAT},
		{"0", ClassUnspecified},
		{"0.0.0.0", ClassUnspecified},
		{"0x0", ClassUnspecified},
		{"[::]", ClassUnspecified},
		{"[::ffff:0.0.0.0]", ClassUnspecified},
		{"4294967295", ClassBroadcast},
		{"0xffffffff", ClassBroadcast},
		{"3758096385", ClassMulticast},
		{"8.8.8.8", ClassPublic},
		{"134744072", ClassPublic},
		{"0x8.0x8.0x8.0x8", ClassPublic},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			a, lit, err := ParseLiteral(tt.host)
			if err != nil || !lit {
				t.Fatalf("ParseLiteral(%q) = %v, %v, %v; want a literal", tt.host, a, lit, err)
			}
			if got := Classify(a); got != tt.want {
				t.Fatalf("Classify(ParseLiteral(%q) = %s) = %s, want %s", tt.host, a, got, tt.want)
			}
		})
	}
}

func TestParseLiteralRefusesMalformed(t *testing.T) {
	for _, host := range []string{"1.2.3.256", "0x", "08.1.1.1", "0x7g.1", "1.2.3.4.5", "127.0.0.1..", "[127.0.0.1]", "::ffff:0x7f.1", "4294967296"} {
		_, _, err := ParseLiteral(host)
		var le *hostname.LiteralError
		if !errors.As(err, &le) {
			t.Errorf("ParseLiteral(%q) err = %v, want *hostname.LiteralError", host, err)
		}
	}
}
