// Package guard checks the addresses the egress proxy connects to and dials
// only addresses it has checked.
//
// The policy decides which names a sandbox may reach; the guard decides which
// addresses. A name that passes the policy can still resolve to the cloud
// metadata service, a private network, the host itself or loopback, by
// accident or by an attacker who controls its DNS. The guard refuses every
// address that is not public unicast, unless policy explicitly allows that
// exact address (a CIDR rule, or a resolve pin for that name and port).
//
// Invariants: a name is resolved once, every address it resolved to is
// checked, and the connection goes to a checked address (no second lookup,
// so DNS rebinding cannot swap the address between check and dial). Literal
// IP hosts in any notation are parsed strictly and judged the same way; a
// malformed numeric host is refused, never resolved.
//
// Importers: the egress proxy (internal/egress). The package imports the
// hostname leaf for the one shared IP literal parser.
package guard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
)

// The reasons of a DeniedError that are not address classes.
const (
	ReasonPrivate       = "private_address"   // ClassPrivate
	ReasonHostAddress   = "host_address"      // ClassHostOwn
	ReasonResolveFailed = "resolve_failed"    // the name did not resolve
	ReasonNoAddress     = "no_address"        // the name resolved to no address
	ReasonInvalidHost   = "invalid_host"      // a malformed literal or an empty host
	ReasonInvalidPort   = "invalid_port"      // port outside 1-65535
	ReasonAddrMismatch  = "connected_address" // the socket was about to connect elsewhere than checked
	ReasonNarrowed      = "sandbox_rule"      // the sandbox's own rules refuse it (Dialer.Narrow)
)

// DeniedError reports a destination the guard refused. Reason is
// machine-readable: a Class name ("loopback", "link_local", "cgnat", ...),
// except "private_address" for ClassPrivate and "host_address" for the host's
// own addresses, or one of the other Reason constants.
type DeniedError struct {
	Host   string     // the host asked for
	Addr   netip.Addr // the refused address; zero when none was reached
	Reason string
	// Err is the underlying cause, e.g. the resolver error for
	// "resolve_failed"; nil otherwise.
	Err error
}

func (e *DeniedError) Error() string {
	var what string
	switch {
	case e.Host != "" && e.Addr.IsValid():
		what = " " + e.Host + " (" + e.Addr.String() + ")"
	case e.Host != "":
		what = " " + e.Host
	case e.Addr.IsValid():
		what = " " + e.Addr.String()
	}
	msg := "guard: refused" + what + ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying cause.
func (e *DeniedError) Unwrap() error { return e.Err }

// reasonFor turns a class into a DeniedError reason.
func reasonFor(c Class) string {
	switch c {
	case ClassPrivate:
		return ReasonPrivate
	case ClassHostOwn:
		return ReasonHostAddress
	}
	return string(c)
}

// Guard judges destination addresses. Use NewGuard: a Guard built by hand
// does not know the host's own addresses and so refuses only by class.
// Check is safe for concurrent use with itself and with Refresh.
type Guard struct {
	// AllowAddr lets an address through even if it is not public (policy
	// CIDR rules, see policy.Network.AllowsAddr). It is called with the
	// unmapped, zone-less address and must be safe for concurrent use. May
	// be nil. It never lets through unspecified, multicast or broadcast
	// addresses: they name no single peer (Linux connects 0.0.0.0 to the
	// host itself).
	AllowAddr func(netip.Addr) bool

	mu sync.RWMutex
	// own holds the host's interface addresses (unmapped, zone-less). Guarded by mu.
	own map[netip.Addr]bool
}

// NewGuard returns a Guard that also refuses the host's own interface
// addresses, as found now; call Refresh when they change.
func NewGuard(allow func(netip.Addr) bool) (*Guard, error) {
	g := &Guard{AllowAddr: allow}
	if err := g.Refresh(); err != nil {
		return nil, err
	}
	return g, nil
}

// Refresh re-reads the host's interface addresses.
func (g *Guard) Refresh() error {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return fmt.Errorf("guard: list interface addresses: %w", err)
	}
	own := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		var ip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		}
		if na, ok := netip.AddrFromSlice(ip); ok {
			own[na.Unmap()] = true
		}
	}
	g.mu.Lock()
	g.own = own
	g.mu.Unlock()
	return nil
}

// Check returns nil if a may be dialled, else a *DeniedError (with Host
// empty). Public unicast addresses pass unless they belong to the host;
// anything else passes only when AllowAddr says so.
func (g *Guard) Check(a netip.Addr) error {
	a = a.WithZone("")
	c := Classify(a)
	switch c {
	case ClassInvalid, ClassUnspecified, ClassMulticast, ClassBroadcast:
		return &DeniedError{Addr: a, Reason: reasonFor(c)}
	}
	if g.AllowAddr != nil && g.AllowAddr(a.Unmap()) {
		return nil
	}
	if c != ClassPublic {
		return &DeniedError{Addr: a, Reason: reasonFor(c)}
	}
	// An embedded IPv4 form of a host address counts too: ::ffff:a.b.c.d
	// reaches a.b.c.d.
	v4, _ := embeddedIPv4(a)
	g.mu.RLock()
	own := g.own[a.Unmap()] || v4.IsValid() && g.own[v4]
	g.mu.RUnlock()
	if own {
		return &DeniedError{Addr: a, Reason: ReasonHostAddress}
	}
	return nil
}

// asDenied returns err as a *DeniedError with Host set, if it is one.
func asDenied(err error, host string) error {
	var d *DeniedError
	if errors.As(err, &d) {
		d.Host = host
	}
	return err
}
