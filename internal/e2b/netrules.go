package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/hostname"
	"github.com/airlockrun/airlock/internal/policy"
)

// A sandbox's own network rules: E2B's network.allowOut and denyOut, on
// create and PUT /sandboxes/{id}/network. They narrow what the
// template's policy lets the sandbox reach, never widen it: the egress
// proxy first decides by the policy, then refuses a connection these
// rules deny (egress.Config.Narrow), at each connection, so an update
// applies to the next one. As E2B defines them:
//   - an entry is a CIDR block ("8.8.8.8/32"), a bare IP address, or, in
//     allowOut only, a domain ("example.com", "*.example.com");
//   - allTraffic is 0.0.0.0/0;
//   - an allowOut entry takes precedence over every denyOut entry: a
//     connection an allowOut entry matches is not refused;
//   - allowOut alone refuses nothing.
//
// A domain entry matches the host the sandbox asked for; an address
// entry the address the proxy connects to (each address of a name).

// unsupported refuses what of a network request airlock does not serve:
// transform rules and an egress proxy of the client's.
func (n *networkRequest) unsupported() error {
	switch {
	case n == nil:
		return nil
	case len(n.Rules) > 0:
		return &publicError{status: 400, msg: "network.rules: transform rules are not supported; a template's policy binds credentials to hosts"}
	case n.EgressProxy != nil:
		return &publicError{status: 400, msg: "network.egressProxy: not supported; the sandbox's egress goes through airlock's proxy"}
	}
	return nil
}

// checkMaskHost checks create's network.maskRequestHost: a host, with an
// optional port, where ${PORT} stands for the port a request goes to
// (E2B's 'localhost:${PORT}').
func checkMaskHost(h string) error {
	probe := strings.ReplaceAll(h, maskPort, "8080")
	if h == "" || len(h) > 260 || strings.ContainsAny(probe, " \t\r\n/?#@\\") || strings.ContainsFunc(probe, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return fmt.Errorf("network.maskRequestHost %.80q: want a host, with an optional port (${PORT} is the port requested)", h)
	}
	return nil
}

// maskPort stands for the port in a maskRequestHost.
const maskPort = "${PORT}"

// requestHost is the Host header of a request relayed to port: the mask's,
// else in's.
func (b *box) requestHost(in string, port int) string {
	if b.maskHost == "" {
		return in
	}
	return strings.ReplaceAll(b.maskHost, maskPort, strconv.Itoa(port))
}

// allTraffic is E2B's ALL_TRAFFIC.
const allTraffic = "0.0.0.0/0"

// maxNetEntries bounds each list.
const maxNetEntries = 256

// netRules is one set of a sandbox's rules, never changed once made: an
// update swaps the whole set.
type netRules struct {
	allowOut, denyOut []string // as given, normalized
	allowNets         []netip.Prefix
	allowHosts        []string // hostname.Pattern form
	denyNets          []netip.Prefix
}

// parseNetRules checks and parses allowOut and denyOut; nil when both
// are empty. Its errors are the client's (400).
func parseNetRules(allowOut, denyOut []string) (*netRules, error) {
	if len(allowOut) == 0 && len(denyOut) == 0 {
		return nil, nil
	}
	if len(allowOut) > maxNetEntries || len(denyOut) > maxNetEntries {
		return nil, fmt.Errorf("network: at most %d entries in allowOut and in denyOut", maxNetEntries)
	}
	r := &netRules{}
	for i, e := range allowOut {
		if p, ok := parseNet(e); ok {
			r.allowNets = append(r.allowNets, p)
			r.allowOut = append(r.allowOut, p.String())
			continue
		}
		h, err := hostname.Pattern(strings.TrimSpace(e))
		if err != nil {
			return nil, fmt.Errorf("network.allowOut[%d]: want a CIDR block, an IP address or a domain: %w", i, err)
		}
		r.allowHosts = append(r.allowHosts, h)
		r.allowOut = append(r.allowOut, h)
	}
	for i, e := range denyOut {
		p, ok := parseNet(e)
		if !ok {
			return nil, fmt.Errorf("network.denyOut[%d] %q: want a CIDR block or an IP address (domain names are not supported for deny rules)", i, clip(e))
		}
		r.denyNets = append(r.denyNets, p)
		r.denyOut = append(r.denyOut, p.String())
	}
	return r, nil
}

// parseNet reads a CIDR block or a bare address (as a /32 or /128).
func parseNet(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// refuses reports whether the rules refuse a connection to host at a.
// Safe for concurrent use (r never changes).
func (r *netRules) refuses(host string, a netip.Addr) bool {
	if r == nil {
		return false
	}
	for _, h := range r.allowHosts {
		if hostname.Match(h, host) {
			return false
		}
	}
	for _, p := range r.allowNets {
		if p.Contains(a) {
			return false
		}
	}
	for _, p := range r.denyNets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// widens returns the 403 for the first allowOut entry that asks for
// what the template's policy does not allow (egress is whether the
// sandbox has any), or nil. An entry is within the policy when an allow
// rule covers all of it: a CIDR rule its whole block, a host rule (or
// wildcard) its domain (or every name of its wildcard).
func (r *netRules) widens(tpl template, egress bool) error {
	if r == nil {
		return nil
	}
	deny := func(entry, why string) error {
		return &publicError{status: 403, msg: fmt.Sprintf("network.allowOut %q: %s; a sandbox's network rules can narrow what its template's policy allows, not widen it", entry, why)}
	}
	if len(r.allowOut) > 0 && !egress {
		return deny(r.allowOut[0], fmt.Sprintf("the sandbox has no egress (template %s's policy allows none, or internet access is off)", tpl.name))
	}
	net := tpl.doc.Network
	for _, p := range r.allowNets {
		if !netCovered(net, p) {
			return deny(p.String(), fmt.Sprintf("template %s's policy allows no CIDR rule that holds it", tpl.name))
		}
	}
	for _, h := range r.allowHosts {
		if !hostCovered(net, h) {
			return deny(h, fmt.Sprintf("template %s's policy has no allow rule for it", tpl.name))
		}
	}
	return nil
}

// netCovered reports whether an allow rule of n covers all of p: a CIDR
// rule holding the block, or for one address a host rule naming it.
func netCovered(n policy.Network, p netip.Prefix) bool {
	for _, rule := range n.Allow {
		if rule.CIDR != "" {
			if rp, err := netip.ParsePrefix(rule.CIDR); err == nil && rp.Bits() <= p.Bits() && rp.Contains(p.Addr()) {
				return true
			}
			continue
		}
		if p.IsSingleIP() {
			if a, lit, _ := hostname.ParseLiteral(rule.Host); lit && a.Unmap() == p.Addr() {
				return true
			}
		}
	}
	return false
}

// hostCovered reports whether an allow rule of n covers pattern h: the
// same host, a wildcard over it, or for a wildcard h a wildcard over all
// of it.
func hostCovered(n policy.Network, h string) bool {
	suffix, wild := strings.CutPrefix(h, "*.")
	for _, rule := range n.Allow {
		if rule.Host == "" {
			continue
		}
		rs, rwild := strings.CutPrefix(rule.Host, "*.")
		switch {
		case !wild && hostname.Match(rule.Host, h):
			return true
		case wild && rwild && (suffix == rs || strings.HasSuffix(suffix, "."+rs)):
			return true
		}
	}
	return false
}

// networkUpdate is PUT /sandboxes/{id}/network's body: it replaces the
// sandbox's rules, and an omitted field clears its list.
type networkUpdate struct {
	AllowOut    []string       `json:"allowOut"`
	DenyOut     []string       `json:"denyOut"`
	Rules       map[string]any `json:"rules"`
	EgressProxy map[string]any `json:"egressProxy"`
	// AllowInternetAccess false is denyOut 0.0.0.0/0, as E2B says; true
	// cannot give a sandbox egress it was created without.
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

// handleUpdateNetwork replaces a sandbox's network rules (updateNetwork).
// A running sandbox's egress proxy applies them from its next
// connection; connections open now go on.
func (s *Server) handleUpdateNetwork(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req networkUpdate
	if err := readBody(r, &req); err != nil {
		return err
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	if err := (&networkRequest{Rules: req.Rules, EgressProxy: req.EgressProxy}).unsupported(); err != nil {
		return err
	}
	egress := b.internet && s.hasEgress(b.template)
	deny := req.DenyOut
	if a := req.AllowInternetAccess; a != nil {
		if *a && !egress {
			return &publicError{status: 403, msg: "allow_internet_access: the sandbox has no egress to turn on (its template's policy allows none, or it was created without internet access)"}
		}
		if !*a {
			deny = append(slices.Clone(deny), allTraffic)
		}
	}
	rules, err := parseNetRules(req.AllowOut, deny)
	if err != nil {
		return &publicError{status: 400, msg: err.Error()}
	}
	if err := rules.widens(b.template, egress); err != nil {
		return err
	}
	b.life.Lock()
	b.rules.Store(rules)
	b.mu.Lock()
	paused := b.state == statePaused
	b.mu.Unlock()
	var err2 error
	if paused {
		// A paused sandbox's rules are in its paused state too, for a
		// restarted server.
		ps, err := s.readPaused(b.rec.runID)
		if err == nil {
			err = s.writePaused(b, ps)
		}
		err2 = err
	}
	b.life.Unlock()
	if err2 != nil {
		return fmt.Errorf("e2b: update the network of %s: %w", b.id, err2)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
