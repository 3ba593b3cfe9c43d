package hostname

import (
	"fmt"
	"net"
	"strings"
)

// Pattern checks a host pattern and returns it normalized: an exact host
// (Normalize), a "*.suffix" wildcard whose suffix is a name, or an IP
// literal. Its errors say what is wrong in words a policy author or a
// secret's owner can act on (a URL, a port, a misplaced '*').
func Pattern(p string) (string, error) {
	if reason := patternProblem(p); reason != "" {
		return "", fmt.Errorf("%q: %s", shorten(p), reason)
	}
	suffix, wild := strings.CutPrefix(p, "*.")
	if !wild && strings.Contains(p, "*") || wild && strings.Contains(suffix, "*") {
		return "", fmt.Errorf(`%q: a wildcard is allowed only as a whole leading "*." label`, shorten(p))
	}
	norm, err := Normalize(suffix)
	if err != nil {
		return "", err
	}
	if !wild {
		return norm, nil
	}
	if _, lit, _ := ParseLiteral(norm); lit {
		return "", fmt.Errorf("%q: a wildcard needs a name, not an IP address", shorten(p))
	}
	return "*." + norm, nil
}

// patternProblem gives clear messages for the mistakes Normalize would
// only call invalid.
func patternProblem(h string) string {
	switch {
	case h == "":
		return "empty"
	case strings.Contains(h, "://") || strings.Contains(h, "/"):
		return `a host, not a URL or path: no "/"`
	case strings.Contains(h, "@"):
		return `a host has no user part: no "@"`
	case strings.ContainsAny(h, " \t\r\n"):
		return "contains white space"
	}
	if name, port, err := net.SplitHostPort(h); err == nil && port != "" {
		if _, lit, _ := ParseLiteral(name); lit || !strings.Contains(name, ":") {
			return "ports go in ports, not in host"
		}
	}
	return ""
}

// Match reports whether host, in Normalize form, matches pattern, in
// Pattern form: the same host, or any name at least one label below a
// wildcard's suffix (not the suffix itself). Since a wildcard's suffix is
// a name whose last label is not numeric, it never matches an IP literal.
// A pattern not in Pattern form matches nothing it should not: compare
// only normalized forms.
func Match(pattern, host string) bool {
	if host == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		suffix := "." + rest
		return rest != "" && len(host) > len(suffix) && strings.HasSuffix(host, suffix) && host[len(host)-len(suffix)-1] != '.'
	}
	return pattern == host
}
