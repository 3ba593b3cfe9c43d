package policy

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Ports says which TCP ports of a sandbox the host lets clients reach
// (through the E2B data plane's preview URLs, <port>-<id>.<domain>), who
// may, and how much. Nothing is exposed unless a rule names the port.
//
//	ports:
//	  expose:
//	    - ports: 3000            # one port
//	      access: public         # anyone who can reach the host's data plane
//	    - ports: 8000-8999       # a range
//	      access: token          # needs the sandbox's traffic access token
//	  max_connections: 100       # open at once, per sandbox
//	  max_connection_bytes: 1G   # each way, per connection
//	  max_bytes: 10G             # both ways, all connections of a sandbox
//
// Why the host decides: a port a program in the sandbox listens on is
// code the host does not trust answering clients the host does; exposing
// one is a decision like letting the sandbox reach a host, and it is made
// in the same document.
type Ports struct {
	// Expose lists the ports that may be reached; the first rule that
	// names a port decides its access.
	Expose []PortRule `yaml:"expose,omitempty"`
	// MaxConnections bounds a sandbox's connections open at once (default
	// and most DefaultMaxPortConnections); a connection over it is refused.
	MaxConnections int64 `yaml:"max_connections,omitempty"`
	// MaxConnectionBytes bounds what one connection carries each way; 0
	// means no bound. A connection that reaches it is closed.
	MaxConnectionBytes Size `yaml:"max_connection_bytes,omitempty"`
	// MaxBytes bounds what all of a sandbox's connections carry, both
	// ways together, over its life; 0 means no bound. Once spent, new
	// connections are refused and open ones closed.
	MaxBytes Size `yaml:"max_bytes,omitempty"`
}

// PortRule exposes a range of ports.
type PortRule struct {
	// Ports is one port ("3000") or an inclusive range ("8000-8999").
	Ports PortRange `yaml:"ports"`
	// Access is AccessPublic or AccessToken (default).
	Access PortAccess `yaml:"access,omitempty"`
}

// PortAccess says who may reach an exposed port.
type PortAccess string

// The accesses of an exposed port.
const (
	// AccessPublic lets anyone who can reach the data plane and names the
	// sandbox reach the port (E2B's default).
	AccessPublic PortAccess = "public"
	// AccessToken needs the sandbox's traffic access token, which only
	// the sandbox's creator is given.
	AccessToken PortAccess = "token"
)

// DefaultMaxPortConnections is max_connections' default.
const DefaultMaxPortConnections = 1024

// maxPortRules bounds ports.expose.
const maxPortRules = 256

// PortRange is an inclusive range of TCP ports; a single port has First
// equal to Last.
type PortRange struct {
	First, Last int
}

// String writes r as "N" or "N-M".
func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(r.First)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// MarshalYAML writes r as Canonical does: one port as an integer, a range
// as "N-M".
func (r PortRange) MarshalYAML() (any, error) {
	if r.First == r.Last {
		return r.First, nil
	}
	return r.String(), nil
}

// Contains reports whether port is in r.
func (r PortRange) Contains(port int) bool { return r.First <= port && port <= r.Last }

// ParsePortRange parses "N" or "N-M", ports 1 to 65535 with N <= M.
func ParsePortRange(s string) (PortRange, error) {
	a, b, isRange := strings.Cut(strings.TrimSpace(s), "-")
	first, err := parsePort(a)
	if err != nil {
		return PortRange{}, err
	}
	last := first
	if isRange {
		if last, err = parsePort(b); err != nil {
			return PortRange{}, err
		}
		if last < first {
			return PortRange{}, fmt.Errorf("%q: the range ends before it starts", shorten(s))
		}
	}
	return PortRange{first, last}, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port (1-65535)", shorten(s))
	}
	return n, nil
}

func (r *PortRange) decodeScalar(n *yaml.Node) *Error {
	const hint = "one port like 3000, or a range like 8000-8999"
	switch n.ShortTag() {
	case "!!int", "!!str":
		v, err := ParsePortRange(n.Value)
		if err != nil {
			return &Error{Msg: err.Error(), Hint: hint}
		}
		*r = v
		return nil
	}
	return &Error{Msg: "want a port or a range, got " + describe(n), Hint: hint}
}

// Access returns the access of port: the first rule's that names it, and
// false when none does (the port is not exposed).
func (p *Ports) Access(port int) (PortAccess, bool) {
	for _, r := range p.Expose {
		if r.Ports.Contains(port) {
			return r.Access.or(AccessToken), true
		}
	}
	return "", false
}

// Connections is MaxConnections with its default.
func (p *Ports) Connections() int64 {
	if p.MaxConnections == 0 {
		return DefaultMaxPortConnections
	}
	return p.MaxConnections
}

func (a PortAccess) or(def PortAccess) PortAccess {
	if a == "" {
		return def
	}
	return a
}

func (p *Ports) isZero() bool {
	return len(p.Expose) == 0 && p.MaxConnections == 0 && p.MaxConnectionBytes == 0 && p.MaxBytes == 0
}

// has reports whether a problem of field is known already (one the
// decoder found, which left the value zero).
func (p *problems) has(field string) bool {
	for _, e := range p.errs {
		if e.Field == field {
			return true
		}
	}
	return false
}

func (p *Ports) validate(pr *problems) {
	if len(p.Expose) > maxPortRules {
		pr.add("ports.expose", "use ranges, like 8000-8999", "%d rules, at most %d", len(p.Expose), maxPortRules)
	}
	for i, r := range p.Expose {
		field := fmt.Sprintf("ports.expose[%d]", i)
		if r.Ports.First == 0 && !pr.has(field+".ports") {
			pr.add(field+".ports", "one port like 3000, or a range like 8000-8999", "required")
		}
		switch r.Access {
		case "", AccessPublic, AccessToken:
		default:
			pr.add(field+".access", "public (anyone who can reach the data plane) or token (the sandbox's traffic access token)",
				"%q is not an access", shorten(string(r.Access)))
		}
	}
	// Why at most the default: a sandbox's executor relays at most 1024
	// connections at once (execproto.MaxConnects); a bound above it would
	// promise what the sandbox refuses.
	if p.MaxConnections < 0 || p.MaxConnections > DefaultMaxPortConnections {
		pr.add("ports.max_connections", "0 takes the default, "+strconv.Itoa(DefaultMaxPortConnections)+", which is also the most a sandbox relays",
			"%d out of range 0-%d", p.MaxConnections, DefaultMaxPortConnections)
	}
}
