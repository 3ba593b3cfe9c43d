package guard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/hostname"
)

// Resolver looks up a host's addresses. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens TCP connections to checked addresses only. A Dialer is safe
// for concurrent use; its fields must not change once it is in use.
type Dialer struct {
	// Guard judges every address. Required: Dial fails without one.
	Guard *Guard
	// Resolver resolves names on the host. Nil means net.DefaultResolver.
	Resolver Resolver
	// Pin returns the address a policy resolve pin sends host:port to
	// (policy.Network.Pinned). A pinned address is dialled as is, without
	// the guard's class check: the policy allowed exactly it. May be nil.
	Pin func(host string, port int) (netip.AddrPort, bool)
	// Timeout bounds the whole Dial, resolution included. Zero means only
	// ctx bounds it.
	Timeout time.Duration
	// Narrow, when set, is asked about every address Dial would connect
	// to (pinned ones too) once the guard passed it, with the host as the
	// policy judged it; true refuses it (ReasonNarrowed), and, as for the
	// guard, a name with one refused address is refused whole. It can
	// only refuse what the guard lets through, never let through what the
	// guard refuses. It is called on every Dial, so its answer may change
	// while the Dialer is in use; it must be safe for concurrent use.
	Narrow func(host string, a netip.Addr) bool
}

// narrowed returns the refusal of a by Narrow, or nil.
func (d *Dialer) narrowed(host string, a netip.Addr) error {
	if d.Narrow != nil && d.Narrow(host, a.WithZone("").Unmap()) {
		return &DeniedError{Host: host, Addr: a, Reason: ReasonNarrowed}
	}
	return nil
}

// Dial resolves host on the host side (unless it is an IP literal or
// pinned), checks EVERY resolved address (if any is refused, the whole name
// is refused: a name that mixes public and private answers is an attack or a
// misconfiguration either way), then dials the checked netip.AddrPort
// directly (no second lookup: no DNS rebinding), re-checking the address the
// socket connects to in a net.Dialer Control hook. The addresses are tried in
// resolver order until one connects. It returns the address actually
// dialled.
//
// host is the host as the policy judged it (hostname.Normalize form). A
// refusal is a *DeniedError; any other error is a network failure or ctx.
func (d *Dialer) Dial(ctx context.Context, host string, port int) (net.Conn, netip.AddrPort, error) {
	if d.Guard == nil {
		return nil, netip.AddrPort{}, errors.New("guard: Dialer has no Guard")
	}
	if port < 1 || port > 65535 {
		return nil, netip.AddrPort{}, &DeniedError{Host: host, Reason: ReasonInvalidPort}
	}
	if host == "" {
		return nil, netip.AddrPort{}, &DeniedError{Host: host, Reason: ReasonInvalidHost}
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}

	if d.Pin != nil {
		if ap, ok := d.Pin(host, port); ok {
			// Even an explicit pin cannot name a non-peer: Linux connects
			// 0.0.0.0 to the host itself.
			switch c := Classify(ap.Addr()); c {
			case ClassInvalid, ClassUnspecified, ClassMulticast, ClassBroadcast:
				return nil, netip.AddrPort{}, &DeniedError{Host: host, Addr: ap.Addr(), Reason: reasonFor(c)}
			}
			if ap.Port() == 0 {
				return nil, netip.AddrPort{}, &DeniedError{Host: host, Addr: ap.Addr(), Reason: ReasonInvalidPort}
			}
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if err := d.narrowed(host, ap.Addr()); err != nil {
				return nil, netip.AddrPort{}, err
			}
			conn, err := d.dialChecked(ctx, host, ap, true)
			var denied *DeniedError
			if errors.As(err, &denied) {
				return nil, netip.AddrPort{}, denied
			}
			if err != nil {
				return nil, netip.AddrPort{}, fmt.Errorf("guard: dial %s port %d pinned to %s: %w", host, port, ap, err)
			}
			return conn, ap, nil
		}
	}

	addr, lit, err := ParseLiteral(host)
	if err != nil {
		return nil, netip.AddrPort{}, &DeniedError{Host: host, Reason: ReasonInvalidHost, Err: err}
	}
	var addrs []netip.Addr
	if lit {
		addrs = []netip.Addr{addr}
	} else {
		// Only a name in the one form the policy judged goes to the
		// resolver: a C resolver may read other spellings ("1.2.3.4 x",
		// "0x7f.1.") as something else than the policy saw.
		if norm, err := hostname.Normalize(host); err != nil || norm != host {
			return nil, netip.AddrPort{}, &DeniedError{Host: host, Reason: ReasonInvalidHost, Err: err}
		}
		addrs, err = d.lookup(ctx, host)
		if err != nil {
			return nil, netip.AddrPort{}, err
		}
	}
	for _, a := range addrs {
		if err := d.Guard.Check(a); err != nil {
			return nil, netip.AddrPort{}, asDenied(err, host)
		}
		if err := d.narrowed(host, a); err != nil {
			return nil, netip.AddrPort{}, err
		}
	}

	var firstErr error
	for i, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), uint16(port))
		conn, err := d.dialAttempt(ctx, host, ap, len(addrs)-i)
		if err == nil {
			return conn, ap, nil
		}
		var denied *DeniedError
		if errors.As(err, &denied) {
			return nil, netip.AddrPort{}, denied
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("guard: dial %s port %d: %w", host, port, firstErr)
}

// lookup resolves host once. Resolver failures are refusals, not network
// errors, unless ctx ended.
func (d *Dialer) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	var r Resolver = net.DefaultResolver
	if d.Resolver != nil {
		r = d.Resolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("guard: resolve %s: %w", host, ctx.Err())
		}
		return nil, &DeniedError{Host: host, Reason: ReasonResolveFailed, Err: err}
	}
	if len(addrs) == 0 {
		return nil, &DeniedError{Host: host, Reason: ReasonNoAddress}
	}
	return addrs, nil
}

// dialAttempt dials one of several checked addresses, giving it a fair share
// of the time left (as net.Dialer does), so that one black-holed address
// does not use up the time of those after it.
func (d *Dialer) dialAttempt(ctx context.Context, host string, ap netip.AddrPort, remaining int) (net.Conn, error) {
	if deadline, ok := ctx.Deadline(); ok && remaining > 1 {
		left := time.Until(deadline)
		share := left / time.Duration(remaining)
		const saneMinimum = 2 * time.Second
		if share < saneMinimum {
			share = min(left, saneMinimum)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, share)
		defer cancel()
	}
	return d.dialChecked(ctx, host, ap, false)
}

// dialChecked connects to ap, a literal address, so the net package does no
// lookup of its own.
func (d *Dialer) dialChecked(ctx context.Context, host string, ap netip.AddrPort, pinned bool) (net.Conn, error) {
	network := "tcp6"
	if ap.Addr().Is4() {
		network = "tcp4"
	}
	nd := net.Dialer{Control: d.control(host, ap, pinned)}
	conn, err := nd.DialContext(ctx, network, ap.String())
	if err != nil {
		var denied *DeniedError
		if errors.As(err, &denied) {
			return nil, denied
		}
		return nil, err
	}
	return conn, nil
}

// control is the last check before connect(2): the socket must be about to
// connect to the very address that was checked, and that address must still
// pass the guard (the host's addresses may have been refreshed meanwhile).
func (d *Dialer) control(host string, want netip.AddrPort, pinned bool) func(string, string, syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		got, err := netip.ParseAddrPort(address)
		if err != nil || got.Port() != want.Port() ||
			got.Addr().WithZone("").Unmap() != want.Addr().WithZone("").Unmap() {
			return &DeniedError{Host: host, Addr: got.Addr(), Reason: ReasonAddrMismatch}
		}
		if pinned {
			return nil
		}
		return asDenied(d.Guard.Check(got.Addr()), host)
	}
}
