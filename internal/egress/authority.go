package egress

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

const (
	// maxHostLen bounds the host part: a 253-byte DNS name plus a trailing
	// dot, with room for an IPv6 literal with a zone.
	maxHostLen = 262
	// maxAuthorityLen bounds the whole "host:port", brackets included.
	maxAuthorityLen = maxHostLen + len("[]:65535")
)

// errAuthority is wrapped by every parseAuthority failure.
var errAuthority = errors.New("bad authority")

// parseAuthority parses the authority of a proxy request: "host:port",
// "[v6]:port", or, when defaultPort is not 0, the same without ":port". The
// port is 1 to 5 decimal digits in 1..65535, with no sign. The host is
// returned as written (brackets removed) and still has to go through
// hostname.Normalize; parseAuthority only rejects what can never be a host:
// empty, characters outside a DNS name or an IP literal, userinfo, a path or
// a bare IPv6 address. Being strict here keeps the string the policy decides
// on identical to the one the dialer resolves.
func parseAuthority(s string, defaultPort int) (host string, port int, err error) {
	if s == "" || len(s) > maxAuthorityLen {
		return "", 0, fmt.Errorf("%w: length %d", errAuthority, len(s))
	}
	var portStr string
	hasPort := false
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("%w: missing ]", errAuthority)
		}
		host = s[1:end]
		rest := s[end+1:]
		switch {
		case rest == "":
		case rest[0] == ':':
			portStr, hasPort = rest[1:], true
		default:
			return "", 0, fmt.Errorf("%w: junk after ]", errAuthority)
		}
		if !strings.Contains(host, ":") {
			return "", 0, fmt.Errorf("%w: brackets around a non-IPv6 host", errAuthority)
		}
		if err := checkHostChars(host, true); err != nil {
			return "", 0, err
		}
	} else {
		host = s
		if i := strings.LastIndexByte(s, ':'); i >= 0 {
			host, portStr, hasPort = s[:i], s[i+1:], true
		}
		if strings.Contains(host, ":") {
			return "", 0, fmt.Errorf("%w: IPv6 literal without brackets", errAuthority)
		}
		if err := checkHostChars(host, false); err != nil {
			return "", 0, err
		}
	}
	if host == "" || len(host) > maxHostLen {
		return "", 0, fmt.Errorf("%w: host length %d", errAuthority, len(host))
	}
	if !hasPort {
		if defaultPort == 0 {
			return "", 0, fmt.Errorf("%w: missing port", errAuthority)
		}
		return host, defaultPort, nil
	}
	port, err = parsePort(portStr)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// parsePort accepts 1 to 5 ASCII digits naming a port in 1..65535.
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 {
		return 0, fmt.Errorf("%w: bad port", errAuthority)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: bad port", errAuthority)
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("%w: port %d out of range", errAuthority, n)
	}
	return n, nil
}

// checkHostChars allows the bytes of a DNS name (letters, digits, '-', '_',
// '.'), of IP literals in any notation (hex digits, 'x', ':' and a '%'
// zone in brackets) and non-ASCII bytes (IDNA names, which NormalizeHost
// converts or rejects). Everything that could change how a URL or a request
// line is split ('/', '@', '?', '#', '\\', spaces, controls, '%' outside
// brackets) is refused.
func checkHostChars(h string, bracketed bool) error {
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '.', c == '_':
		case c >= 0x80:
		case bracketed && (c == ':' || c == '%'):
		default:
			return fmt.Errorf("%w: byte %#x in host", errAuthority, c)
		}
	}
	return nil
}

// errPath is returned by decisionPath for paths whose meaning could differ
// between the policy check and the upstream server.
var errPath = errors.New("ambiguous path")

// decisionPath returns the path a method/path rule is checked against: the
// decoded path of u. Path rules are prefixes, so anything an upstream might
// normalize differently from a plain prefix match is refused rather than
// guessed at: dot segments (also percent-encoded or followed by ";params",
// which some servers strip), encoded slashes and backslashes, backslashes,
// NUL and other control bytes. Clients normalize dot segments before
// sending, so legitimate requests are not affected.
func decisionPath(u *url.URL) (string, error) {
	p := u.Path
	if p == "" {
		p = "/"
	}
	if p[0] != '/' {
		return "", fmt.Errorf("%w: relative", errPath)
	}
	raw := strings.ToLower(u.EscapedPath())
	if strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") {
		return "", fmt.Errorf("%w: encoded separator", errPath)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return "", fmt.Errorf("%w: byte %#x", errPath, c)
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i]
		}
		if seg == "." || seg == ".." {
			return "", fmt.Errorf("%w: dot segment", errPath)
		}
	}
	// Empty segments ("//") pass as sent: they cannot move a path into an
	// allowed prefix, only out of it.
	return p, nil
}
