package executor

import (
	"net/netip"
	"testing"
)

func TestParseIPv4Port(t *testing.T) {
	tests := []struct {
		in   string
		addr [4]byte
		port int
		ok   bool
	}{
		{"127.0.0.1:3128", [4]byte{127, 0, 0, 1}, 3128, true},
		{"10.0.0.255:65535", [4]byte{10, 0, 0, 255}, 65535, true},
		{"127.0.0.1:0", [4]byte{}, 0, false},
		{"127.0.0.1:65536", [4]byte{}, 0, false},
		{"127.0.0.1:080", [4]byte{}, 0, false},
		{"127.0.0.1:+80", [4]byte{}, 0, false},
		{"127.0.0.1", [4]byte{}, 0, false},
		{"127.0.0.01:80", [4]byte{}, 0, false},
		{"127.0.0.256:80", [4]byte{}, 0, false},
		{"127.0.0:80", [4]byte{}, 0, false},
		{"127.0.0.1.1:80", [4]byte{}, 0, false},
		{"127..0.1:80", [4]byte{}, 0, false},
		{"[::1]:80", [4]byte{}, 0, false},
		{"::1:80", [4]byte{}, 0, false},
		{"127.0.0.1:80:1", [4]byte{}, 0, false},
		{"", [4]byte{}, 0, false},
	}
	for _, tt := range tests {
		addr, port, ok := parseIPv4Port(tt.in)
		if ok != tt.ok || (ok && (addr != tt.addr || port != tt.port)) {
			t.Errorf("parseIPv4Port(%q) = %v, %d, %v; want %v, %d, %v", tt.in, addr, port, ok, tt.addr, tt.port, tt.ok)
		}
	}
}

// FuzzParseIPv4Port holds the parser to net/netip: it accepts exactly the
// IPv4 address and port pairs netip reads and writes back unchanged.
func FuzzParseIPv4Port(f *testing.F) {
	for _, s := range []string{"127.0.0.1:3128", "1.2.3.4:1", "01.2.3.4:5", "1.2.3.4:05", "[::1]:1", "1.2.3.4:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addr, port, ok := parseIPv4Port(s)
		ap, err := netip.ParseAddrPort(s)
		want := err == nil && ap.Addr().Is4() && ap.Port() != 0 && ap.String() == s
		if ok != want {
			t.Fatalf("parseIPv4Port(%q) ok = %v, netip says %v (%v)", s, ok, want, err)
		}
		if ok && (addr != ap.Addr().As4() || port != int(ap.Port())) {
			t.Fatalf("parseIPv4Port(%q) = %v:%d, netip says %v", s, addr, port, ap)
		}
	})
}
