package policy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/hostname"
)

// Verdict is the outcome of a decision.
type Verdict string

// The verdicts. Allow lets a request through, Deny refuses it, Ask holds it
// until an approval decides.
const (
	Allow Verdict = "allow"
	Deny  Verdict = "deny"
	Ask   Verdict = "ask"
)

// Network says which destinations a sandbox may reach through the egress
// proxy. The zero value denies everything.
type Network struct {
	// Default is the verdict for a host no allow rule names: deny (also
	// when empty) or ask. "allow" is rejected: list the destinations.
	Default Verdict `yaml:"default"`
	// Allow lists the destinations that pass; the first rule that matches
	// host, port, method and path allows the request.
	Allow []Rule `yaml:"allow"`
	// Resolve pins names to addresses, like curl --resolve.
	Resolve []Pin `yaml:"resolve"`
	// UpstreamCA is the absolute path of a PEM file with extra CAs the
	// proxy trusts for upstream servers.
	UpstreamCA string `yaml:"upstream_ca"`
	// Credentials bind secrets to destinations; the proxy injects them.
	Credentials []Credential `yaml:"credentials"`
}

// Rule allows a set of destinations. Exactly one of Host and CIDR is set.
type Rule struct {
	// Host is an exact name, a "*.suffix" wildcard (matches names under
	// suffix at any depth, not suffix itself), or an IP literal. A literal
	// here passes the policy check only; the address guard still refuses a
	// private or local address unless a CIDR rule names it.
	Host string `yaml:"host"`
	// CIDR allows the destination addresses in this prefix, asked for as
	// IP literals, and lifts the address guard for exactly them (see
	// AllowsAddr), also when a name resolves to one.
	CIDR string `yaml:"cidr"`
	// Ports are the allowed destination ports; empty means 80 and 443.
	Ports []int `yaml:"ports"`
	// Methods, when not empty, makes the host inspected (TLS terminated)
	// and the request method must be one of them. Validate uppercases them.
	Methods []string `yaml:"methods"`
	// Paths, when not empty, makes the host inspected and the request path
	// must start with one of these prefixes. A prefix ending in "/" matches
	// any path under it; one without matches itself and paths under it
	// ("/repos" matches "/repos" and "/repos/x", not "/reposx").
	Paths []string `yaml:"paths"`
}

// Pin sends a name to a fixed address, like curl --resolve. A pin lets
// exactly that name and port reach that address, even a loopback or private
// one; it opens nothing else, and the name still needs an allow rule.
type Pin struct {
	Host string `yaml:"host"` // "name:port"
	To   string `yaml:"to"`   // "addr:port", addr an IP literal
}

// Credential binds a secret to a destination and a placement. Exactly one of
// Header, Query and BasicUser is set.
type Credential struct {
	// Host is an exact name, "*.suffix" wildcard or IP literal, like Rule.Host.
	Host string `yaml:"host"`
	// Secret is the name of the secret in the secret store.
	Secret string `yaml:"secret"`
	// Header is the name of the request header to set; Value is its
	// template, with {{secret}} exactly once (Validate fills in "{{secret}}"
	// when empty).
	Header string `yaml:"header"`
	Value  string `yaml:"value"`
	// Query is the name of a query parameter to set to the secret.
	Query string `yaml:"query"`
	// BasicUser sets HTTP basic auth with this user and the secret as password.
	BasicUser string `yaml:"basic_user"`
}

// SecretPlaceholder is the text in Credential.Value that the proxy replaces
// with the secret.
const SecretPlaceholder = "{{secret}}"

// Request is what Decide judges.
type Request struct {
	// Host is the destination in hostname.Normalize form.
	Host string
	Port int
	// Method and Path are empty when the proxy does not inspect the
	// connection (plain CONNECT). A rule with Methods or Paths never allows
	// such a request: the proxy inspects hosts Inspect names and decides each
	// request inside. Path is the path only, as sent (no query): any "." or
	// ".." segment, also percent-encoded or before a ';', any encoded '/' or
	// '\', and any raw '\', '?' or '#' make it fail every Paths rule.
	Method string
	Path   string
}

// Decision is the outcome of Decide.
type Decision struct {
	Verdict Verdict
	// Rule names the rule that decided, e.g. "allow[2] host=api.github.com",
	// or "default". A request denied for its port, method or path names the
	// allow rule that matched its host.
	Rule string
	// Reason is empty when allowed, else one of "no_rule", "port",
	// "method", "path".
	Reason string
}

// The reasons a Decision gives.
const (
	ReasonNoRule = "no_rule"
	ReasonPort   = "port"
	ReasonMethod = "method"
	ReasonPath   = "path"
)

// Decide judges r against the allow rules. The first rule that matches host,
// port and, for inspected rules, method and path allows r. A host no rule
// names gets the default verdict (deny or ask); a host some rule names but
// whose port, method or path no rule allows is denied, because the rule's
// author limited it on purpose. Decide normalizes nothing: r.Host must come
// from hostname.Normalize. Safe for concurrent use.
func (n *Network) Decide(r Request) Decision {
	best, bestRule := 0, "default" // how far the closest rule got
	reasons := [...]string{ReasonNoRule, ReasonPort, ReasonMethod, ReasonPath}
	for i := range n.Allow {
		rule := &n.Allow[i]
		if !rule.matchHost(r.Host) {
			continue
		}
		stage := 1
		switch {
		case !rule.matchPort(r.Port):
		case len(rule.Methods) > 0 && !slices.Contains(rule.Methods, r.Method):
			stage = 2
		case len(rule.Paths) > 0 && !matchPaths(rule.Paths, r.Path):
			stage = 3
		default:
			return Decision{Verdict: Allow, Rule: rule.label(i)}
		}
		if stage > best {
			best, bestRule = stage, rule.label(i)
		}
	}
	if best == 0 && n.Default == Ask {
		return Decision{Verdict: Ask, Rule: "default", Reason: ReasonNoRule}
	}
	return Decision{Verdict: Deny, Rule: bestRule, Reason: reasons[best]}
}

// Inspect reports whether the proxy must terminate TLS for host:port: a
// credential is bound to host, or an allow rule matching host and port has
// Methods or Paths.
func (n *Network) Inspect(host string, port int) bool {
	if len(n.CredentialsFor(host, port)) > 0 {
		return true
	}
	for i := range n.Allow {
		r := &n.Allow[i]
		if (len(r.Methods) > 0 || len(r.Paths) > 0) && r.matchHost(host) && r.matchPort(port) {
			return true
		}
	}
	return false
}

// CredentialsFor returns the credentials bound to host, in document order.
// A credential binds to its host on every port the allow rules open; port is
// accepted so a later schema can narrow that. The proxy injects them into
// plain-HTTP requests too (a policy that opens port 80 to a bound host sends
// the secret in clear on that hop: bind secrets to TLS destinations unless
// the network to the upstream is trusted).
func (n *Network) CredentialsFor(host string, port int) []Credential {
	var out []Credential
	for _, c := range n.Credentials {
		if hostname.Match(c.Host, host) {
			out = append(out, c)
		}
	}
	return out
}

// Pinned returns the address a resolve pin sends host:port to.
func (n *Network) Pinned(host string, port int) (netip.AddrPort, bool) {
	for _, p := range n.Resolve {
		name, portStr, err := net.SplitHostPort(p.Host)
		if err != nil || name != host || portStr != strconv.Itoa(port) {
			continue
		}
		to, err := netip.ParseAddrPort(p.To)
		if err != nil {
			continue
		}
		return to, true
	}
	return netip.AddrPort{}, false
}

// AllowsAddr reports whether a CIDR rule names a, so that the address guard
// lets it through even if it is private or local. IPv4-mapped IPv6 counts as
// its IPv4 address; zones are ignored.
func (n *Network) AllowsAddr(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	a = a.WithZone("").Unmap()
	for _, r := range n.Allow {
		if r.CIDR == "" {
			continue
		}
		if p, err := netip.ParsePrefix(r.CIDR); err == nil && p.Contains(a) {
			return true
		}
	}
	return false
}

func (r *Rule) label(i int) string {
	if r.CIDR != "" {
		return fmt.Sprintf("allow[%d] cidr=%s", i, r.CIDR)
	}
	return fmt.Sprintf("allow[%d] host=%s", i, r.Host)
}

func (r *Rule) matchHost(host string) bool {
	if r.CIDR != "" {
		p, err := netip.ParsePrefix(r.CIDR)
		if err != nil {
			return false
		}
		a, err := netip.ParseAddr(host)
		return err == nil && p.Contains(a.WithZone("").Unmap())
	}
	return r.Host != "" && hostname.Match(r.Host, host)
}

func (r *Rule) matchPort(port int) bool {
	if len(r.Ports) == 0 {
		return port == 80 || port == 443
	}
	return slices.Contains(r.Ports, port)
}

func matchPaths(prefixes []string, p string) bool {
	if !cleanPath(p) {
		return false
	}
	for _, pre := range prefixes {
		if p == pre || strings.HasPrefix(p, pre) && (strings.HasSuffix(pre, "/") || p[len(pre)] == '/') {
			return true
		}
	}
	return false
}

// cleanPath reports whether p is an absolute path that every server reads
// the same way. Prefix rules are only sound on such paths: "/public/../admin"
// starts with "/public/" but reaches /admin.
func cleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c <= ' ' || c >= 0x7f || c == '\\' || c == '?' || c == '#' {
			return false
		}
	}
	for _, seg := range strings.Split(p[1:], "/") {
		dec, ok := percentDecode(seg)
		if !ok || hasCTL(dec) || strings.ContainsAny(dec, "/\\") {
			return false
		}
		if before, _, _ := strings.Cut(dec, ";"); before == "." || before == ".." {
			return false
		}
	}
	return true
}

// percentDecode decodes %XX escapes; a malformed escape is not ok.
func percentDecode(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// fieldError is one validation problem, named by its field path.
type fieldError struct {
	field, msg string
}

func (e *fieldError) Error() string { return "policy: " + e.field + ": " + e.msg }

type checker struct{ errs []error }

func (c *checker) add(field, format string, args ...any) {
	c.errs = append(c.errs, &fieldError{field: field, msg: fmt.Sprintf(format, args...)})
}

// Validate checks n and reports every problem, each naming its field (e.g.
// "policy: network.allow[2].ports[0]: 70000 out of range 1-65535"), joined
// with errors.Join. It also rewrites n into the form Decide compares: every
// host field through hostname.Normalize, CIDRs and pins in canonical form,
// methods uppercased, an empty header Value set to "{{secret}}". Validate
// is idempotent. It must not run concurrently with other methods.
func (n *Network) Validate() error {
	var c checker
	switch n.Default {
	case "", Deny, Ask:
	case Allow:
		c.add("network.default", `"allow" is not supported: list the destinations under allow`)
	default:
		c.add("network.default", "%q is not one of deny, ask", shorten(string(n.Default)))
	}
	for i := range n.Allow {
		n.Allow[i].validate(&c, fmt.Sprintf("network.allow[%d]", i))
	}
	seenPins := map[string]bool{}
	for i := range n.Resolve {
		p := &n.Resolve[i]
		p.validate(&c, fmt.Sprintf("network.resolve[%d]", i))
		if seenPins[p.Host] {
			c.add(fmt.Sprintf("network.resolve[%d].host", i), "%s is pinned twice", p.Host)
		}
		seenPins[p.Host] = true
	}
	if n.UpstreamCA != "" {
		if strings.ContainsRune(n.UpstreamCA, 0) || !path.IsAbs(n.UpstreamCA) {
			c.add("network.upstream_ca", "%q is not an absolute path", shorten(n.UpstreamCA))
		}
	}
	seenCreds := map[string]bool{}
	for i := range n.Credentials {
		cr := &n.Credentials[i]
		field := fmt.Sprintf("network.credentials[%d]", i)
		key := cr.validate(&c, field)
		if key != "" && seenCreds[key] {
			c.add(field, "a credential with the same host and placement comes earlier")
		}
		seenCreds[key] = true
	}
	return errors.Join(c.errs...)
}

func (r *Rule) validate(c *checker, field string) {
	switch {
	case r.Host != "" && r.CIDR != "":
		c.add(field, "set host or cidr, not both")
	case r.Host == "" && r.CIDR == "":
		c.add(field, "one of host, cidr is required")
	case r.Host != "":
		if h, ok := validatePattern(c, field+".host", r.Host); ok {
			r.Host = h
		}
	default:
		p, err := netip.ParsePrefix(r.CIDR)
		switch {
		case err != nil:
			c.add(field+".cidr", "%q is not a CIDR prefix like 10.0.0.0/8", shorten(r.CIDR))
		case p.Addr().Is4In6():
			c.add(field+".cidr", "%s is IPv4-mapped: write the IPv4 prefix", p)
		case p != p.Masked():
			c.add(field+".cidr", "%s has host bits set: did you mean %s?", p, p.Masked())
		case p.Bits() == 0:
			c.add(field+".cidr", "%s names every address and would lift the address guard for all of them", p)
		default:
			r.CIDR = p.String()
		}
	}
	for j, port := range r.Ports {
		if port < 1 || port > 65535 {
			c.add(fmt.Sprintf("%s.ports[%d]", field, j), "%d out of range 1-65535", port)
		}
	}
	for j, m := range r.Methods {
		if !isToken(m) || len(m) > 32 {
			c.add(fmt.Sprintf("%s.methods[%d]", field, j), "%q is not an HTTP method", shorten(m))
			continue
		}
		r.Methods[j] = strings.ToUpper(m)
	}
	for j, p := range r.Paths {
		if !cleanPath(p) {
			c.add(fmt.Sprintf("%s.paths[%d]", field, j), `%q is not a clean absolute path (starts with "/"; no ".", ".." or encoded separators; printable ASCII; no "?" or "#")`, shorten(p))
		}
	}
}

// validatePattern checks an exact host, "*.suffix" wildcard or IP literal
// and returns it normalized (hostname.Pattern).
func validatePattern(c *checker, field, h string) (string, bool) {
	norm, err := hostname.Pattern(h)
	if err != nil {
		c.add(field, "%v", err)
		return "", false
	}
	return norm, true
}

func (p *Pin) validate(c *checker, field string) {
	name, port, err := splitHostPortStrict(p.Host)
	switch {
	case err != nil:
		c.add(field+".host", "%q: %v (want name:port)", shorten(p.Host), err)
	default:
		norm, err := hostname.Normalize(name)
		if err != nil {
			c.add(field+".host", "%v", err)
			break
		}
		if _, lit, _ := hostname.ParseLiteral(norm); lit {
			c.add(field+".host", "%q: pin a name, not an IP address", shorten(p.Host))
			break
		}
		p.Host = net.JoinHostPort(norm, strconv.Itoa(port))
	}
	to, err := netip.ParseAddrPort(p.To)
	switch {
	case err != nil:
		c.add(field+".to", "%q is not an IP address with a port, like 127.0.0.1:8080 or [::1]:8080", shorten(p.To))
	case to.Port() == 0:
		c.add(field+".to", "port 0 out of range 1-65535")
	case to.Addr().Zone() != "":
		c.add(field+".to", "%q: zones are not supported", shorten(p.To))
	case to.Addr().Unmap().IsUnspecified():
		c.add(field+".to", "%s is the unspecified address", to.Addr())
	case to.Addr().Unmap().IsMulticast() || to.Addr().Unmap() == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		c.add(field+".to", "%s is not a unicast address", to.Addr())
	default:
		p.To = netip.AddrPortFrom(to.Addr().Unmap(), to.Port()).String()
	}
}

// splitHostPortStrict splits "name:port" with a decimal port in 1-65535.
func splitHostPortStrict(s string) (string, int, error) {
	name, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, errors.New("missing port")
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || portStr[0] == '+' || portStr[0] == '-' || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q out of range 1-65535", shorten(portStr))
	}
	if name == "" {
		return "", 0, errors.New("empty name")
	}
	return name, port, nil
}

// validate checks a credential, normalizes it and returns a key that names
// its host and placement (empty when invalid).
func (cr *Credential) validate(c *checker, field string) string {
	ok := true
	if h, valid := validatePattern(c, field+".host", cr.Host); valid {
		cr.Host = h
	} else {
		ok = false
	}
	if !validSecretName(cr.Secret) {
		c.add(field+".secret", "%q is not a secret name ([A-Za-z0-9_.-], 1-128, starting with a letter or digit)", shorten(cr.Secret))
		ok = false
	}
	placements := 0
	for _, s := range []string{cr.Header, cr.Query, cr.BasicUser} {
		if s != "" {
			placements++
		}
	}
	if placements != 1 {
		c.add(field, "set exactly one of header, query, basic_user (found %d)", placements)
		return ""
	}
	if cr.Value != "" && cr.Header == "" {
		c.add(field+".value", "value is the template of a header: set header")
		ok = false
	}
	var key string
	switch {
	case cr.Header != "":
		if !isToken(cr.Header) || len(cr.Header) > 256 {
			c.add(field+".header", "%q is not a header name (token characters only)", shorten(cr.Header))
			ok = false
		} else if forbiddenHeaders[strings.ToLower(cr.Header)] {
			c.add(field+".header", "%s is a connection or framing header and cannot carry a credential", cr.Header)
			ok = false
		}
		if cr.Value == "" {
			cr.Value = SecretPlaceholder
		}
		// The value is a template, not a secret: showing it is safe.
		if n := strings.Count(cr.Value, SecretPlaceholder); n != 1 {
			c.add(field+".value", "must contain %s exactly once (found %d)", SecretPlaceholder, n)
			ok = false
		}
		if hasCTL(cr.Value) {
			c.add(field+".value", "contains control characters")
			ok = false
		}
		key = "header " + strings.ToLower(cr.Header)
	case cr.Query != "":
		if !validQueryName(cr.Query) {
			c.add(field+".query", "%q is not a query parameter name ([A-Za-z0-9_.~-[]], 1-128)", shorten(cr.Query))
			ok = false
		}
		key = "query " + cr.Query
	default:
		if strings.Contains(cr.BasicUser, ":") || hasCTL(cr.BasicUser) || len(cr.BasicUser) > 256 {
			c.add(field+".basic_user", "%q is not a basic auth user (no ':' or control characters)", shorten(cr.BasicUser))
			ok = false
		}
		key = "basic"
	}
	if !ok {
		return ""
	}
	return cr.Host + " " + key
}

// forbiddenHeaders are hop-by-hop or framing headers: a credential there
// would be stripped, or would let the value change how the request is read.
var forbiddenHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"keep-alive": true, "proxy-connection": true, "proxy-authorization": true,
	"proxy-authenticate": true, "te": true, "trailer": true, "upgrade": true,
}

// isToken reports whether s is an RFC 9110 token (header names, methods).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// validSecretName matches the secret store's names: [A-Za-z0-9_.-]{1,128},
// starting with a letter or digit.
func validSecretName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum || !alnum && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func validQueryName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.~-[]", rune(c))) {
			return false
		}
	}
	return true
}
