package guard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockrun/airlock/internal/policy"
)

// countingListener accepts TCP connections and counts them.
type countingListener struct {
	l net.Listener
	// accepted carries accepted connections in accept order. Buffered so
	// the accept loop never blocks on a test that dials a handful of times.
	accepted chan net.Conn
	done     chan struct{}
}

// listen starts a counting listener on addr ("ip:port").
func listen(t *testing.T, addr string) *countingListener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	c := &countingListener{l: l, accepted: make(chan net.Conn, 64), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer close(c.accepted)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.accepted <- conn
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-c.done
		for conn := range c.accepted {
			conn.Close()
		}
	})
	return c
}

func (c *countingListener) port() int { return c.l.Addr().(*net.TCPAddr).Port }

func (c *countingListener) addrPort() netip.AddrPort {
	return netip.MustParseAddrPort(c.l.Addr().String())
}

// count returns how many connections reached the listener so far. It
// connects a sentinel of its own and counts the connections accepted before
// it: the accept queue is in order, so no sleep or timeout is needed.
func (c *countingListener) count(t *testing.T) int {
	t.Helper()
	var s net.Conn
	var err error
	for range 100 {
		s, err = net.Dial("tcp", c.l.Addr().String())
		// A transient kernel hiccup with IPv6 in a fresh namespace
		// (see setupNetns); anything else fails at once.
		if !errors.Is(err, syscall.ENETUNREACH) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("sentinel dial %s: %v", c.l.Addr(), err)
	}
	defer s.Close()
	n := 0
	for conn := range c.accepted {
		sentinel := conn.RemoteAddr().String() == s.LocalAddr().String()
		conn.Close()
		if sentinel {
			return n
		}
		n++
	}
	t.Fatal("listener closed before the sentinel arrived")
	return 0
}

// wantDenied fails unless err is a *DeniedError with reason.
func wantDenied(t *testing.T, err error, reason string) *DeniedError {
	t.Helper()
	var d *DeniedError
	if !errors.As(err, &d) {
		t.Fatalf("err = %v, want *DeniedError %s", err, reason)
	}
	if d.Reason != reason {
		t.Fatalf("DeniedError = %v, want reason %s", d, reason)
	}
	return d
}

func newGuard(t *testing.T, allow func(netip.Addr) bool) *Guard {
	t.Helper()
	g, err := NewGuard(allow)
	if err != nil {
		t.Fatalf("NewGuard: %v", err)
	}
	return g
}

func TestDialLoopbackLiteralsRefused(t *testing.T) {
	l := listen(t, "127.0.0.1:0")
	dns := startDNS(t, zone(map[string]dnsAnswer{"loop.test": {addrs: []string{"127.0.0.1"}}}))
	d := &Dialer{Guard: newGuard(t, nil), Resolver: dns.resolver()}
	for _, host := range []string{
		"127.0.0.1", "127.1", "2130706433", "0x7f000001", "0x7f.0.0.1", "0177.0.0.1",
		"017700000001", "127.0.0.1.", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "１２７.０.０.１",
		"loop.test", "localhost",
	} {
		t.Run(host, func(t *testing.T) {
			conn, ap, err := d.Dial(context.Background(), host, l.port())
			if err == nil {
				conn.Close()
				t.Fatalf("Dial(%q) connected to %v, want refused", host, ap)
			}
			den := wantDenied(t, err, string(ClassLoopback))
			if den.Host != host {
				t.Errorf("DeniedError.Host = %q, want %q", den.Host, host)
			}
		})
	}
	if n := l.count(t); n != 0 {
		t.Fatalf("loopback listener got %d connections, want 0", n)
	}
}

func TestDialIPv6LoopbackRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	ln.Close()
	l := listen(t, "[::1]:0")
	d := &Dialer{Guard: newGuard(t, nil)}
	for _, host := range []string{"::1", "[::1]", "[0:0:0:0:0:0:0:1]"} {
		_, _, err := d.Dial(context.Background(), host, l.port())
		wantDenied(t, err, string(ClassLoopback))
	}
	if n := l.count(t); n != 0 {
		t.Fatalf("[::1] listener got %d connections, want 0", n)
	}
}

func TestDialMalformed(t *testing.T) {
	d := &Dialer{Guard: newGuard(t, nil), Resolver: startDNS(t, zone(nil)).resolver()}
	tests := []struct {
		host   string
		port   int
		reason string
	}{
		{"1.2.3.256", 80, ReasonInvalidHost},
		{"08.1.1.1", 80, ReasonInvalidHost},
		{"0x", 80, ReasonInvalidHost},
		{"", 80, ReasonInvalidHost},
		{"Name.test", 80, ReasonInvalidHost}, // not in NormalizeHost form
		{"name.test.", 80, ReasonInvalidHost},
		{"1.2.3.4 x", 80, ReasonInvalidHost},
		{"under_score.test", 80, ReasonInvalidHost},
		{"example.test", 0, ReasonInvalidPort},
		{"example.test", 65536, ReasonInvalidPort},
		{"missing.test", 80, ReasonResolveFailed},
	}
	for _, tt := range tests {
		_, _, err := d.Dial(context.Background(), tt.host, tt.port)
		den := wantDenied(t, err, tt.reason)
		if tt.reason == ReasonResolveFailed {
			var dnsErr *net.DNSError
			if !errors.As(den, &dnsErr) {
				t.Errorf("Dial(%q) = %v, want it to wrap the *net.DNSError", tt.host, err)
			}
		}
	}
	if _, _, err := (&Dialer{}).Dial(context.Background(), "example.test", 80); err == nil {
		t.Error("Dial without a Guard succeeded")
	}
}

func TestDialCanceledIsNotDenied(t *testing.T) {
	d := &Dialer{Guard: newGuard(t, nil), Resolver: startDNS(t, zone(nil)).resolver()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := d.Dial(ctx, "name.test", 443)
	var den *DeniedError
	if err == nil || errors.As(err, &den) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial(canceled) = %v, want context.Canceled, not a refusal", err)
	}
}

// TestDialPin: a pin lets exactly that name and port reach its loopback
// address; the address asked for directly, or by another name, stays refused.
func TestDialPin(t *testing.T) {
	l := listen(t, "127.0.0.1:0")
	port := strconv.Itoa(l.port())
	doc, err := policy.Parse([]byte(`
network:
  allow:
    - host: allowed.test
      ports: [` + port + `]
  resolve:
    - host: allowed.test:` + port + `
      to: 127.0.0.1:` + port + `
`))
	if err != nil {
		t.Fatal(err)
	}
	n := &doc.Network
	dns := startDNS(t, zone(map[string]dnsAnswer{
		"allowed.test": {addrs: []string{"127.0.0.1"}},
		"other.test":   {addrs: []string{"127.0.0.1"}},
	}))
	d := &Dialer{Guard: newGuard(t, n.AllowsAddr), Resolver: dns.resolver(), Pin: n.Pinned}

	conn, ap, err := d.Dial(context.Background(), "allowed.test", l.port())
	if err != nil {
		t.Fatalf("Dial(allowed.test) = %v, want the pinned address", err)
	}
	conn.Close()
	if ap != l.addrPort() {
		t.Errorf("Dial(allowed.test) dialled %v, want %v", ap, l.addrPort())
	}
	if c := dns.count("allowed.test", dnsmessage.TypeA); c != 0 {
		t.Errorf("a pinned name was looked up %d times, want 0", c)
	}

	for _, host := range []string{"127.0.0.1", "localhost", "other.test"} {
		_, _, err := d.Dial(context.Background(), host, l.port())
		wantDenied(t, err, string(ClassLoopback))
	}
	// The same name on another port is not pinned: it resolves, and the
	// loopback answer is refused.
	_, _, err = d.Dial(context.Background(), "allowed.test", l.port()+1)
	wantDenied(t, err, string(ClassLoopback))

	if n := l.count(t); n != 1 {
		t.Fatalf("listener got %d connections, want exactly 1 (the pinned one)", n)
	}
}

// TestDialCIDRAllows: a CIDR rule lifts the guard for exactly its addresses.
func TestDialCIDRAllows(t *testing.T) {
	allowed := listen(t, "127.0.0.2:0")
	other := listen(t, "127.0.0.3:0")
	n := &policy.Network{Allow: []policy.Rule{{CIDR: "127.0.0.2/32"}}}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	dns := startDNS(t, zone(map[string]dnsAnswer{
		"two.test":   {addrs: []string{"127.0.0.2"}},
		"mixed.test": {addrs: []string{"127.0.0.2", "127.0.0.3"}},
	}))
	d := &Dialer{Guard: newGuard(t, n.AllowsAddr), Resolver: dns.resolver()}

	for _, host := range []string{"127.0.0.2", "0x7f000002", "two.test"} {
		conn, ap, err := d.Dial(context.Background(), host, allowed.port())
		if err != nil {
			t.Fatalf("Dial(%q) = %v, want allowed by the CIDR rule", host, err)
		}
		conn.Close()
		if ap.Addr() != netip.MustParseAddr("127.0.0.2") {
			t.Errorf("Dial(%q) dialled %v", host, ap)
		}
	}
	for _, host := range []string{"127.0.0.3", "mixed.test"} {
		_, _, err := d.Dial(context.Background(), host, other.port())
		den := wantDenied(t, err, string(ClassLoopback))
		if den.Addr != netip.MustParseAddr("127.0.0.3") {
			t.Errorf("Dial(%q) refused %v, want 127.0.0.3", host, den.Addr)
		}
	}
	if got := allowed.count(t); got != 3 {
		t.Errorf("allowed listener got %d connections, want 3", got)
	}
	if got := other.count(t); got != 0 {
		t.Errorf("other listener got %d connections, want 0", got)
	}
}

// TestCheckNeverAllowsNonPeers: even an allowance cannot open unspecified,
// multicast or broadcast addresses.
func TestCheckNeverAllowsNonPeers(t *testing.T) {
	g := &Guard{AllowAddr: func(netip.Addr) bool { return true }}
	for _, s := range []string{"0.0.0.0", "::", "224.0.0.1", "ff02::1", "255.255.255.255", "::ffff:0.0.0.0"} {
		if err := g.Check(netip.MustParseAddr(s)); err == nil {
			t.Errorf("Check(%s) = nil with AllowAddr always true", s)
		}
	}
	if err := g.Check(netip.Addr{}); err == nil {
		t.Error("Check(zero) = nil")
	}
	if err := g.Check(netip.MustParseAddr("10.0.0.1")); err != nil {
		t.Errorf("Check(10.0.0.1) = %v with AllowAddr always true", err)
	}
}

func TestCheckReasons(t *testing.T) {
	g := &Guard{}
	tests := []struct{ addr, reason string }{
		{"10.0.0.1", ReasonPrivate},
		{"169.254.169.254", "link_local"},
		{"fe80::1%eth0", "link_local"},
		{"127.0.0.1", "loopback"},
		{"100.64.0.1", "cgnat"},
		{"2001::1", "reserved"},
		{"::ffff:192.168.0.1", ReasonPrivate},
		{"64:ff9b::a9fe:a9fe", "link_local"},
	}
	for _, tt := range tests {
		wantDenied(t, g.Check(netip.MustParseAddr(tt.addr)), tt.reason)
	}
	if err := g.Check(netip.MustParseAddr("8.8.8.8")); err != nil {
		t.Errorf("Check(8.8.8.8) = %v, want nil", err)
	}
}

// TestControlRechecks: the Control hook refuses a socket about to connect
// anywhere but the checked address, and re-runs the guard.
func TestControlRechecks(t *testing.T) {
	d := &Dialer{Guard: &Guard{}}
	want := netip.MustParseAddrPort("8.8.8.8:443")
	ctl := d.control("h.test", want, false)
	if err := ctl("tcp4", "8.8.8.8:443", nil); err != nil {
		t.Errorf("control(checked address) = %v, want nil", err)
	}
	wantDenied(t, ctl("tcp4", "10.0.0.1:443", nil), ReasonAddrMismatch)
	wantDenied(t, ctl("tcp4", "8.8.8.8:80", nil), ReasonAddrMismatch)
	wantDenied(t, ctl("tcp4", "garbage", nil), ReasonAddrMismatch)

	bad := d.control("h.test", netip.MustParseAddrPort("127.0.0.1:80"), false)
	wantDenied(t, bad("tcp4", "127.0.0.1:80", nil), string(ClassLoopback))
	pinned := d.control("h.test", netip.MustParseAddrPort("127.0.0.1:80"), true)
	if err := pinned("tcp4", "127.0.0.1:80", nil); err != nil {
		t.Errorf("control(pinned) = %v, want nil", err)
	}
}

func TestDeniedErrorText(t *testing.T) {
	err := &DeniedError{Host: "meta.test", Addr: netip.MustParseAddr("169.254.169.254"), Reason: "link_local"}
	if got, want := err.Error(), "guard: refused meta.test (169.254.169.254): link_local"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	check := (&Guard{}).Check(netip.MustParseAddr("10.0.0.1"))
	if got, want := check.Error(), "guard: refused 10.0.0.1: private_address"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestDialNarrow: Narrow refuses addresses the guard lets through, before
// any connection is made: a literal, a name with one refused address
// (refused whole), and a pinned name; it cannot open what the guard
// refuses.
func TestDialNarrow(t *testing.T) {
	two := listen(t, "127.0.0.2:0")
	n := &policy.Network{
		Allow:   []policy.Rule{{CIDR: "127.0.0.2/32"}, {CIDR: "127.0.0.3/32"}},
		Resolve: []policy.Pin{{Host: fmt.Sprintf("pinned.test:%d", two.port()), To: two.addrPort().String()}},
	}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	dns := startDNS(t, zone(map[string]dnsAnswer{
		"two.test":   {addrs: []string{"127.0.0.2"}},
		"mixed.test": {addrs: []string{"127.0.0.3", "127.0.0.2"}},
	}))
	refused := netip.MustParseAddr("127.0.0.2")
	var asked []string
	d := &Dialer{
		Guard: newGuard(t, n.AllowsAddr), Resolver: dns.resolver(), Pin: n.Pinned,
		Narrow: func(host string, a netip.Addr) bool {
			asked = append(asked, host+"="+a.String())
			return a == refused && host != "exempt.test"
		},
	}
	for _, host := range []string{"127.0.0.2", "two.test", "mixed.test", "pinned.test"} {
		_, _, err := d.Dial(context.Background(), host, two.port())
		if den := wantDenied(t, err, ReasonNarrowed); den.Addr != refused {
			t.Errorf("Dial(%q) refused %v, want %v", host, den.Addr, refused)
		}
	}
	if got := two.count(t); got != 0 {
		t.Errorf("the refused address got %d connections, want 0", got)
	}
	// Narrow is asked only about what the guard passed.
	asked = nil
	_, _, err := d.Dial(context.Background(), "127.0.0.4", two.port())
	wantDenied(t, err, string(ClassLoopback))
	if len(asked) != 0 {
		t.Errorf("Narrow asked %v about an address the guard refused", asked)
	}
	refused = netip.Addr{}
	conn, _, err := d.Dial(context.Background(), "two.test", two.port())
	if err != nil {
		t.Fatalf("Dial once Narrow refuses nothing = %v", err)
	}
	conn.Close()
}
