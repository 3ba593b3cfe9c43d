package guard

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockrun/airlock/internal/policy"
)

// These tests run only in the inner run of TestNetns, in a network namespace
// of their own with nsMetadata, nsPrivate, nsCGNAT, nsPublic (and nsULA)
// on one interface. Every address they dial exists only there.

// nsListeners starts a counting listener on one port on every namespace
// address and returns them by address.
func nsListeners(t *testing.T) (int, map[string]*countingListener) {
	t.Helper()
	first := listen(t, net.JoinHostPort(nsPublic, "0"))
	port := first.port()
	ls := map[string]*countingListener{nsPublic: first}
	addrs := []string{nsMetadata, nsPrivate, nsCGNAT}
	if nsIPv6 {
		addrs = append(addrs, nsULA)
	}
	for _, a := range addrs {
		ls[a] = listen(t, net.JoinHostPort(a, strconv.Itoa(port)))
	}
	return port, ls
}

func wantCounts(t *testing.T, ls map[string]*countingListener, want map[string]int) {
	t.Helper()
	for a, l := range ls {
		if got := l.count(t); got != want[a] {
			t.Errorf("listener on %s got %d connections, want %d", a, got, want[a])
		}
	}
}

// classGuard judges by class only: in the namespace nsPublic is one of "the
// host's own" addresses, so NewGuard would refuse it (TestInNetnsHostOwn).
func classGuard(allow func(netip.Addr) bool) *Guard { return &Guard{AllowAddr: allow} }

func TestInNetnsLiteralsRefused(t *testing.T) {
	requireNetns(t)
	port, ls := nsListeners(t)
	d := &Dialer{Guard: classGuard(nil)}
	tests := []struct{ host, reason string }{
		{"169.254.169.254", "link_local"},
		{"169.254.43518", "link_local"},
		{"2852039166", "link_local"},
		{"0xa9fea9fe", "link_local"},
		{"0xA9.0xFE.0xA9.0xFE", "link_local"},
		{"0251.0376.0251.0376", "link_local"},
		{"[::ffff:169.254.169.254]", "link_local"},
		{"::ffff:a9fe:a9fe", "link_local"},
		{"10.0.0.1", ReasonPrivate},
		{"10.1", ReasonPrivate},
		{"012.0.0.1", ReasonPrivate},
		{"167772161", ReasonPrivate},
		{"[::ffff:10.0.0.1]", ReasonPrivate},
		{"100.64.0.1", "cgnat"},
		{"100.64.1", "cgnat"},
		{"[fd00::10]", ReasonPrivate},
		{"fd00::10", ReasonPrivate},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			conn, ap, err := d.Dial(context.Background(), tt.host, port)
			if err == nil {
				conn.Close()
				t.Fatalf("Dial(%q) connected to %v", tt.host, ap)
			}
			wantDenied(t, err, tt.reason)
		})
	}
	wantCounts(t, ls, nil)
}

func TestInNetnsNamesRefused(t *testing.T) {
	requireNetns(t)
	port, ls := nsListeners(t)
	dns := startDNS(t, zone(map[string]dnsAnswer{
		"meta.test":    {addrs: []string{nsMetadata}},
		"private.test": {addrs: []string{nsPrivate}},
		"cgnat.test":   {addrs: []string{nsCGNAT}},
		"ula.test":     {addrs: []string{nsULA}},
		"mapped.test":  {addrs: []string{"::ffff:169.254.169.254"}},
		"nat64.test":   {addrs: []string{"64:ff9b::a00:1"}},
		"mixed.test":   {addrs: []string{nsPublic, nsPrivate}},
		"mixed6.test":  {addrs: []string{nsPublic, nsULA}},
		"chain.test":   {cname: []string{"hop.test", "inside.test"}, addrs: []string{nsPrivate}},
		"meta2.test":   {cname: []string{"metadata.google.internal"}, addrs: []string{nsMetadata}},
	}))
	d := &Dialer{Guard: classGuard(nil), Resolver: dns.resolver()}
	tests := []struct{ host, reason, addr string }{
		{"meta.test", "link_local", nsMetadata},
		{"private.test", ReasonPrivate, nsPrivate},
		{"cgnat.test", "cgnat", nsCGNAT},
		{"ula.test", ReasonPrivate, nsULA},
		{"mapped.test", "link_local", nsMetadata},
		{"nat64.test", ReasonPrivate, "64:ff9b::a00:1"},
		{"mixed.test", ReasonPrivate, nsPrivate},
		{"mixed6.test", ReasonPrivate, nsULA},
		{"chain.test", ReasonPrivate, nsPrivate},
		{"meta2.test", "link_local", nsMetadata},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			conn, ap, err := d.Dial(context.Background(), tt.host, port)
			if err == nil {
				conn.Close()
				t.Fatalf("Dial(%q) connected to %v", tt.host, ap)
			}
			den := wantDenied(t, err, tt.reason)
			if den.Host != tt.host || den.Addr.Unmap() != netip.MustParseAddr(tt.addr).Unmap() {
				t.Errorf("Dial(%q) = %v, want host %s address %s", tt.host, den, tt.host, tt.addr)
			}
		})
	}
	wantCounts(t, ls, nil)
}

// TestInNetnsPublicDialled proves the refusals above are the guard's doing:
// the stand-in public address does get dialled.
func TestInNetnsPublicDialled(t *testing.T) {
	requireNetns(t)
	port, ls := nsListeners(t)
	dns := startDNS(t, zone(map[string]dnsAnswer{"pub.test": {addrs: []string{nsPublic}}}))
	d := &Dialer{Guard: classGuard(nil), Resolver: dns.resolver()}
	for _, host := range []string{"pub.test", nsPublic, "0x8080404", "134743044", "[::ffff:8.8.4.4]"} {
		conn, ap, err := d.Dial(context.Background(), host, port)
		if err != nil {
			t.Fatalf("Dial(%q) = %v, want connected", host, err)
		}
		conn.Close()
		if want := netip.AddrPortFrom(netip.MustParseAddr(nsPublic), uint16(port)); ap != want {
			t.Errorf("Dial(%q) dialled %v, want %v", host, ap, want)
		}
	}
	wantCounts(t, ls, map[string]int{nsPublic: 5})
}

// TestInNetnsRebinding: the name answers public first and private after.
// The dialer must connect to the address it checked, without asking again.
func TestInNetnsRebinding(t *testing.T) {
	requireNetns(t)
	port, ls := nsListeners(t)
	dns := startDNS(t, func(name string, qtype dnsmessage.Type, n int) dnsAnswer {
		if name != "rebind.test" {
			return dnsAnswer{rcode: dnsmessage.RCodeNameError}
		}
		if n == 1 {
			return dnsAnswer{addrs: []string{nsPublic}}
		}
		return dnsAnswer{addrs: []string{nsPrivate}}
	})
	d := &Dialer{Guard: classGuard(nil), Resolver: dns.resolver()}
	conn, ap, err := d.Dial(context.Background(), "rebind.test", port)
	if err != nil {
		t.Fatalf("Dial(rebind.test) = %v, want the checked public address", err)
	}
	conn.Close()
	if ap.Addr() != netip.MustParseAddr(nsPublic) {
		t.Errorf("Dial(rebind.test) dialled %v, want %s", ap, nsPublic)
	}
	if got := dns.count("rebind.test", dnsmessage.TypeA); got != 1 {
		t.Errorf("rebind.test was asked %d times for A, want 1", got)
	}
	// The server has rebound by now: a second lookup (which a naive dialer
	// would do) gets the private address.
	again, err := dns.resolver().LookupNetIP(context.Background(), "ip4", "rebind.test")
	if err != nil || len(again) != 1 || again[0] != netip.MustParseAddr(nsPrivate) {
		t.Fatalf("second lookup = %v, %v; want %s (the test needs a rebinding server)", again, err, nsPrivate)
	}
	// And the next Dial sees the private answer and refuses.
	_, _, err = d.Dial(context.Background(), "rebind.test", port)
	wantDenied(t, err, ReasonPrivate)
	wantCounts(t, ls, map[string]int{nsPublic: 1})
}

// TestInNetnsHostOwn: NewGuard refuses the host's own addresses, also public
// ones, and Refresh picks up new ones.
func TestInNetnsHostOwn(t *testing.T) {
	requireNetns(t)
	port, ls := nsListeners(t)
	g := newGuard(t, nil)
	d := &Dialer{Guard: g}
	for _, host := range []string{nsPublic, "[::ffff:8.8.4.4]"} {
		_, _, err := d.Dial(context.Background(), host, port)
		wantDenied(t, err, ReasonHostAddress)
	}
	wantCounts(t, ls, nil)

	const later = "9.9.9.9"
	if err := g.Check(netip.MustParseAddr(later)); err != nil {
		t.Fatalf("Check(%s) = %v before it is a host address", later, err)
	}
	if err := ipCmd("addr", "add", later+"/32", "dev", nsDev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ipCmd("addr", "del", later+"/32", "dev", nsDev) })
	if err := g.Check(netip.MustParseAddr(later)); err != nil {
		t.Fatalf("Check(%s) = %v before Refresh", later, err)
	}
	if err := g.Refresh(); err != nil {
		t.Fatal(err)
	}
	wantDenied(t, g.Check(netip.MustParseAddr(later)), ReasonHostAddress)
}

// TestInNetnsPolicy wires the guard to a real policy: a CIDR rule opens
// exactly its address, a pin opens exactly its name and port.
func TestInNetnsPolicy(t *testing.T) {
	requireNetns(t)
	port, ls := nsListeners(t)
	p := strconv.Itoa(port)
	doc, err := policy.Parse([]byte(`
network:
  allow:
    - cidr: 10.0.0.1/32
      ports: [` + p + `]
    - host: internal.test
      ports: [` + p + `]
    - host: meta.test
      ports: [` + p + `]
  resolve:
    - host: meta.test:` + p + `
      to: 169.254.169.254:` + p + `
`))
	if err != nil {
		t.Fatal(err)
	}
	n := &doc.Network
	dns := startDNS(t, zone(map[string]dnsAnswer{
		"internal.test": {addrs: []string{nsPrivate}},
		"meta.test":     {addrs: []string{nsMetadata}},
		"other.test":    {addrs: []string{nsCGNAT}},
	}))
	d := &Dialer{Guard: classGuard(n.AllowsAddr), Resolver: dns.resolver(), Pin: n.Pinned}

	for _, host := range []string{nsPrivate, "internal.test", "meta.test"} {
		conn, _, err := d.Dial(context.Background(), host, port)
		if err != nil {
			t.Fatalf("Dial(%q) = %v, want allowed by policy", host, err)
		}
		conn.Close()
	}
	refused := []struct {
		host   string
		port   int
		reason string
	}{
		{nsMetadata, port, "link_local"},      // the pinned address asked for directly
		{"meta.test", port + 1, "link_local"}, // the pinned name on another port
		{"other.test", port, "cgnat"},         // not named by the CIDR rule
		{"10.0.0.2", port, ReasonPrivate},     // next to the CIDR rule's address
	}
	for _, tt := range refused {
		_, _, err := d.Dial(context.Background(), tt.host, tt.port)
		wantDenied(t, err, tt.reason)
	}
	wantCounts(t, ls, map[string]int{nsPrivate: 2, nsMetadata: 1})
}

func TestInNetnsSetup(t *testing.T) {
	requireNetns(t)
	t.Logf("namespace addresses on %s, IPv6 %v", nsDev, nsIPv6)
}
