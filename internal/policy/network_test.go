package policy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name string
		n    Network
		want string // one of the joined errors, exactly
	}{
		{"default allow", Network{Default: Allow}, `policy: network.default: "allow" is not supported: list the destinations under allow`},
		{"default other", Network{Default: "maybe"}, `policy: network.default: "maybe" is not one of deny, ask`},
		{
			"port range",
			Network{Allow: []Rule{{Host: "a.example"}, {Host: "b.example"}, {Host: "c.example", Ports: []int{70000}}}},
			"policy: network.allow[2].ports[0]: 70000 out of range 1-65535",
		},
		{"port zero", Network{Allow: []Rule{{Host: "a.example", Ports: []int{443, 0}}}}, "policy: network.allow[0].ports[1]: 0 out of range 1-65535"},
		{"no host", Network{Allow: []Rule{{Ports: []int{443}}}}, "policy: network.allow[0]: one of host, cidr is required"},
		{"host and cidr", Network{Allow: []Rule{{Host: "a.example", CIDR: "10.0.0.0/8"}}}, "policy: network.allow[0]: set host or cidr, not both"},
		{"host port", Network{Allow: []Rule{{Host: "a.example:443"}}}, `policy: network.allow[0].host: "a.example:443": ports go in ports, not in host`},
		{"host v6 port", Network{Allow: []Rule{{Host: "[::1]:443"}}}, `policy: network.allow[0].host: "[::1]:443": ports go in ports, not in host`},
		{"host url", Network{Allow: []Rule{{Host: "https://a.example"}}}, `policy: network.allow[0].host: "https://a.example": a host, not a URL or path: no "/"`},
		{"host path", Network{Allow: []Rule{{Host: "a.example/x"}}}, `policy: network.allow[0].host: "a.example/x": a host, not a URL or path: no "/"`},
		{"host user", Network{Allow: []Rule{{Host: "u@a.example"}}}, `policy: network.allow[0].host: "u@a.example": a host has no user part: no "@"`},
		{"host space", Network{Allow: []Rule{{Host: "a .example"}}}, `policy: network.allow[0].host: "a .example": contains white space`},
		{"wildcard middle", Network{Allow: []Rule{{Host: "a.*.example"}}}, `policy: network.allow[0].host: "a.*.example": a wildcard is allowed only as a whole leading "*." label`},
		{"wildcard partial", Network{Allow: []Rule{{Host: "*a.example"}}}, `policy: network.allow[0].host: "*a.example": a wildcard is allowed only as a whole leading "*." label`},
		{"wildcard twice", Network{Allow: []Rule{{Host: "*.*.example"}}}, `policy: network.allow[0].host: "*.*.example": a wildcard is allowed only as a whole leading "*." label`},
		{"wildcard alone", Network{Allow: []Rule{{Host: "*"}}}, `policy: network.allow[0].host: "*": a wildcard is allowed only as a whole leading "*." label`},
		{"wildcard ip", Network{Allow: []Rule{{Host: "*.0.0.1"}}}, `policy: network.allow[0].host: "*.0.0.1": a wildcard needs a name, not an IP address`},
		{"bad literal", Network{Allow: []Rule{{Host: "1.2.3.256"}}}, `policy: network.allow[0].host: invalid IP literal "1.2.3.256": part 4: 256 out of range 0-255`},
		{"bad cidr", Network{Allow: []Rule{{CIDR: "10.0.0.0"}}}, `policy: network.allow[0].cidr: "10.0.0.0" is not a CIDR prefix like 10.0.0.0/8`},
		{"cidr host bits", Network{Allow: []Rule{{CIDR: "10.1.2.3/8"}}}, `policy: network.allow[0].cidr: 10.1.2.3/8 has host bits set: did you mean 10.0.0.0/8?`},
		{"cidr all", Network{Allow: []Rule{{CIDR: "0.0.0.0/0"}}}, `policy: network.allow[0].cidr: 0.0.0.0/0 names every address and would lift the address guard for all of them`},
		{"cidr mapped", Network{Allow: []Rule{{CIDR: "::ffff:10.0.0.0/104"}}}, `policy: network.allow[0].cidr: ::ffff:10.0.0.0/104 is IPv4-mapped: write the IPv4 prefix`},
		{"method", Network{Allow: []Rule{{Host: "a.example", Methods: []string{"GET", "PO ST"}}}}, `policy: network.allow[0].methods[1]: "PO ST" is not an HTTP method`},
		{"path relative", Network{Allow: []Rule{{Host: "a.example", Paths: []string{"repos/"}}}}, `policy: network.allow[0].paths[0]: "repos/" is not a clean absolute path`},
		{"path dots", Network{Allow: []Rule{{Host: "a.example", Paths: []string{"/a/../b"}}}}, `policy: network.allow[0].paths[0]: "/a/../b" is not a clean absolute path`},
		{"pin no port", Network{Resolve: []Pin{{Host: "a.test", To: "127.0.0.1:1"}}}, `policy: network.resolve[0].host: "a.test": missing port (want name:port)`},
		{"pin port range", Network{Resolve: []Pin{{Host: "a.test:99999", To: "127.0.0.1:1"}}}, `policy: network.resolve[0].host: "a.test:99999": port "99999" out of range 1-65535 (want name:port)`},
		{"pin literal", Network{Resolve: []Pin{{Host: "127.0.0.1:80", To: "127.0.0.1:1"}}}, `policy: network.resolve[0].host: "127.0.0.1:80": pin a name, not an IP address`},
		{"pin to name", Network{Resolve: []Pin{{Host: "a.test:80", To: "localhost:80"}}}, `policy: network.resolve[0].to: "localhost:80" is not an IP address with a port, like 127.0.0.1:8080 or [::1]:8080`},
		{"pin to no port", Network{Resolve: []Pin{{Host: "a.test:80", To: "127.0.0.1"}}}, `policy: network.resolve[0].to: "127.0.0.1" is not an IP address with a port`},
		{"pin to octal", Network{Resolve: []Pin{{Host: "a.test:80", To: "0177.0.0.1:80"}}}, `policy: network.resolve[0].to: "0177.0.0.1:80" is not an IP address with a port`},
		{"pin to unspecified", Network{Resolve: []Pin{{Host: "a.test:80", To: "0.0.0.0:80"}}}, `policy: network.resolve[0].to: 0.0.0.0 is the unspecified address`},
		{"pin to multicast", Network{Resolve: []Pin{{Host: "a.test:80", To: "[ff02::1]:80"}}}, `policy: network.resolve[0].to: ff02::1 is not a unicast address`},
		{"pin twice", Network{Resolve: []Pin{{Host: "a.test:80", To: "127.0.0.1:1"}, {Host: "A.test.:80", To: "127.0.0.1:2"}}}, `policy: network.resolve[1].host: a.test:80 is pinned twice`},
		{"ca relative", Network{UpstreamCA: "ca.pem"}, `policy: network.upstream_ca: "ca.pem" is not an absolute path`},
		{"cred no placement", Network{Credentials: []Credential{{Host: "a.example", Secret: "s"}}}, "policy: network.credentials[0]: set exactly one of header, query, basic_user (found 0)"},
		{"cred two placements", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "X-Key", Query: "key"}}}, "policy: network.credentials[0]: set exactly one of header, query, basic_user (found 2)"},
		{"cred secret name", Network{Credentials: []Credential{{Host: "a.example", Secret: "-s", Header: "X-Key"}}}, `policy: network.credentials[0].secret: "-s" is not a secret name`},
		{"cred no host", Network{Credentials: []Credential{{Secret: "s", Header: "X-Key"}}}, `policy: network.credentials[0].host: "": empty`},
		{"cred template none", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "Authorization", Value: "Bearer"}}}, "policy: network.credentials[0].value: must contain {{secret}} exactly once (found 0)"},
		{"cred template twice", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "X", Value: "{{secret}}{{secret}}"}}}, "policy: network.credentials[0].value: must contain {{secret}} exactly once (found 2)"},
		{"cred value crlf", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "X", Value: "{{secret}}\r\nX-Evil: 1"}}}, "policy: network.credentials[0].value: contains control characters"},
		{"cred header crlf", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "X\r\nY"}}}, `policy: network.credentials[0].header: "X\r\nY" is not a header name (token characters only)`},
		{"cred header colon", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "X:Y"}}}, `policy: network.credentials[0].header: "X:Y" is not a header name (token characters only)`},
		{"cred header host", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "Host"}}}, "policy: network.credentials[0].header: Host is a connection or framing header and cannot carry a credential"},
		{"cred value without header", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Query: "key", Value: "{{secret}}"}}}, "policy: network.credentials[0].value: value is the template of a header: set header"},
		{"cred query", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Query: "a&b"}}}, `policy: network.credentials[0].query: "a&b" is not a query parameter name`},
		{"cred basic colon", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", BasicUser: "a:b"}}}, `policy: network.credentials[0].basic_user: "a:b" is not a basic auth user`},
		{"cred duplicate", Network{Credentials: []Credential{{Host: "a.example", Secret: "s", Header: "X-Key"}, {Host: "A.example", Secret: "t", Header: "x-key"}}}, "policy: network.credentials[1]: a credential with the same host and placement comes earlier"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.n.Validate()
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want %q", tt.n, tt.want)
			}
			found := false
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(line, tt.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("Validate error:\n%s\nwant a line starting %q", err, tt.want)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	n := Network{Default: "x", Allow: []Rule{{Host: "a:1"}, {Host: "b.example", Ports: []int{0}}}}
	err := n.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Fatalf("Validate = %v, want three problems", err)
	}
}

func TestValidateNormalizes(t *testing.T) {
	n := Network{
		Allow: []Rule{
			{Host: "API.GitHub.com.", Methods: []string{"get", "Post"}},
			{Host: "*.BÜCHER.example"},
			{Host: "0x7f.1"},
			{Host: "[::FFFF:10.0.0.1]"},
			{CIDR: "fd00:0::/8"},
		},
		Resolve:     []Pin{{Host: "Allowed.Test.:18080", To: "[::ffff:127.0.0.1]:18080"}},
		Credentials: []Credential{{Host: "API.github.com", Secret: "tok", Header: "X-Token"}},
	}
	if err := n.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := Network{
		Allow: []Rule{
			{Host: "api.github.com", Methods: []string{"GET", "POST"}},
			{Host: "*.xn--bcher-kva.example"},
			{Host: "127.0.0.1"},
			{Host: "10.0.0.1"},
			{CIDR: "fd00::/8"},
		},
		Resolve:     []Pin{{Host: "allowed.test:18080", To: "127.0.0.1:18080"}},
		Credentials: []Credential{{Host: "api.github.com", Secret: "tok", Header: "X-Token", Value: "{{secret}}"}},
	}
	if !reflect.DeepEqual(n, want) {
		t.Fatalf("after Validate:\n got %+v\nwant %+v", n, want)
	}
	again := n
	if err := again.Validate(); err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("second Validate = %v, %+v; not idempotent", err, again)
	}
}

func mustValid(t *testing.T, n Network) *Network {
	t.Helper()
	if err := n.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return &n
}

func TestDecide(t *testing.T) {
	n := mustValid(t, Network{
		Allow: []Rule{
			{Host: "packages.example.com"},
			{Host: "*.githubusercontent.com", Ports: []int{443}},
			{Host: "api.github.com", Methods: []string{"GET"}},
			{Host: "uploads.example.com", Methods: []string{"PUT", "POST"}, Paths: []string{"/v1/", "/health"}},
			{CIDR: "10.1.0.0/16", Ports: []int{8080}},
			{Host: "203.0.113.7"},
			{Host: "2001:db8::7", Ports: []int{443}},
		},
	})
	tests := []struct {
		name string
		r    Request
		want Decision
	}{
		{"exact 443", Request{Host: "packages.example.com", Port: 443}, Decision{Allow, "allow[0] host=packages.example.com", ""}},
		{"exact 80", Request{Host: "packages.example.com", Port: 80}, Decision{Allow, "allow[0] host=packages.example.com", ""}},
		{"exact other port", Request{Host: "packages.example.com", Port: 8443}, Decision{Deny, "allow[0] host=packages.example.com", "port"}},
		{"exact not sub", Request{Host: "x.packages.example.com", Port: 443}, Decision{Deny, "default", "no_rule"}},
		{"exact not parent", Request{Host: "example.com", Port: 443}, Decision{Deny, "default", "no_rule"}},
		{"suffix trick", Request{Host: "evilpackages.example.com", Port: 443}, Decision{Deny, "default", "no_rule"}},
		{"wildcard one", Request{Host: "raw.githubusercontent.com", Port: 443}, Decision{Allow, "allow[1] host=*.githubusercontent.com", ""}},
		{"wildcard deep", Request{Host: "a.b.githubusercontent.com", Port: 443}, Decision{Allow, "allow[1] host=*.githubusercontent.com", ""}},
		{"wildcard not apex", Request{Host: "githubusercontent.com", Port: 443}, Decision{Deny, "default", "no_rule"}},
		{"wildcard no dot", Request{Host: "evilgithubusercontent.com", Port: 443}, Decision{Deny, "default", "no_rule"}},
		{"wildcard empty label", Request{Host: ".githubusercontent.com", Port: 443}, Decision{Deny, "default", "no_rule"}},
		{"wildcard port", Request{Host: "raw.githubusercontent.com", Port: 80}, Decision{Deny, "allow[1] host=*.githubusercontent.com", "port"}},
		{"method ok", Request{Host: "api.github.com", Port: 443, Method: "GET", Path: "/repos"}, Decision{Allow, "allow[2] host=api.github.com", ""}},
		{"method bad", Request{Host: "api.github.com", Port: 443, Method: "POST", Path: "/repos"}, Decision{Deny, "allow[2] host=api.github.com", "method"}},
		{"method case", Request{Host: "api.github.com", Port: 443, Method: "get"}, Decision{Deny, "allow[2] host=api.github.com", "method"}},
		{"not inspected", Request{Host: "api.github.com", Port: 443}, Decision{Deny, "allow[2] host=api.github.com", "method"}},
		{"path ok", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/files/a"}, Decision{Allow, "allow[3] host=uploads.example.com", ""}},
		{"path exact", Request{Host: "uploads.example.com", Port: 443, Method: "POST", Path: "/health"}, Decision{Allow, "allow[3] host=uploads.example.com", ""}},
		{"path segment", Request{Host: "uploads.example.com", Port: 443, Method: "POST", Path: "/health/x"}, Decision{Allow, "allow[3] host=uploads.example.com", ""}},
		{"path prefix not segment", Request{Host: "uploads.example.com", Port: 443, Method: "POST", Path: "/healthz"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path dir only", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path dotdot", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/../admin"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path encoded dotdot", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/%2e%2E/admin"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path encoded slash", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/..%2fadmin"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path semicolon", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/..;/admin"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path backslash", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/..\\admin"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path query", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/a?x=1"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path bad escape", Request{Host: "uploads.example.com", Port: 443, Method: "PUT", Path: "/v1/%zz"}, Decision{Deny, "allow[3] host=uploads.example.com", "path"}},
		{"path method wrong first", Request{Host: "uploads.example.com", Port: 443, Method: "GET", Path: "/v1/a"}, Decision{Deny, "allow[3] host=uploads.example.com", "method"}},
		{"cidr in", Request{Host: "10.1.2.3", Port: 8080}, Decision{Allow, "allow[4] cidr=10.1.0.0/16", ""}},
		{"cidr port", Request{Host: "10.1.2.3", Port: 443}, Decision{Deny, "allow[4] cidr=10.1.0.0/16", "port"}},
		{"cidr out", Request{Host: "10.2.0.1", Port: 8080}, Decision{Deny, "default", "no_rule"}},
		{"cidr name", Request{Host: "internal.example", Port: 8080}, Decision{Deny, "default", "no_rule"}},
		{"literal rule", Request{Host: "203.0.113.7", Port: 443}, Decision{Allow, "allow[5] host=203.0.113.7", ""}},
		{"v6 literal rule", Request{Host: "2001:db8::7", Port: 443}, Decision{Allow, "allow[6] host=2001:db8::7", ""}},
		{"empty host", Request{Host: "", Port: 443}, Decision{Deny, "default", "no_rule"}},
		{"unlisted", Request{Host: "evil.example", Port: 443}, Decision{Deny, "default", "no_rule"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := n.Decide(tt.r); got != tt.want {
				t.Fatalf("Decide(%+v) = %+v, want %+v", tt.r, got, tt.want)
			}
		})
	}
}

func TestDecideAsk(t *testing.T) {
	n := mustValid(t, Network{Default: Ask, Allow: []Rule{{Host: "api.github.com", Methods: []string{"GET"}}}})
	tests := []struct {
		r    Request
		want Decision
	}{
		{Request{Host: "unlisted.example", Port: 443}, Decision{Ask, "default", "no_rule"}},
		// A listed host the rule limits is denied, not asked about.
		{Request{Host: "api.github.com", Port: 443, Method: "DELETE", Path: "/"}, Decision{Deny, "allow[0] host=api.github.com", "method"}},
		{Request{Host: "api.github.com", Port: 22}, Decision{Deny, "allow[0] host=api.github.com", "port"}},
		{Request{Host: "api.github.com", Port: 443, Method: "GET", Path: "/"}, Decision{Allow, "allow[0] host=api.github.com", ""}},
	}
	for _, tt := range tests {
		if got := n.Decide(tt.r); got != tt.want {
			t.Errorf("Decide(%+v) = %+v, want %+v", tt.r, got, tt.want)
		}
	}
}

func TestDecideFirstMatchWins(t *testing.T) {
	n := mustValid(t, Network{Allow: []Rule{
		{Host: "api.github.com", Methods: []string{"GET"}},
		{Host: "api.github.com", Ports: []int{443}},
	}})
	got := n.Decide(Request{Host: "api.github.com", Port: 443, Method: "POST", Path: "/x"})
	want := Decision{Allow, "allow[1] host=api.github.com", ""}
	if got != want {
		t.Fatalf("Decide = %+v, want %+v", got, want)
	}
}

func TestInspectAndCredentials(t *testing.T) {
	n := mustValid(t, Network{
		Allow: []Rule{
			{Host: "api.github.com", Methods: []string{"GET"}},
			{Host: "plain.example"},
			{Host: "paths.example", Paths: []string{"/a"}, Ports: []int{8443}},
			{Host: "bound.example"},
		},
		Credentials: []Credential{
			{Host: "bound.example", Secret: "one", Header: "Authorization", Value: "Bearer {{secret}}"},
			{Host: "*.bound.example", Secret: "two", Query: "key"},
			{Host: "bound.example", Secret: "three", BasicUser: "bot"},
		},
	})
	inspect := []struct {
		host string
		port int
		want bool
	}{
		{"api.github.com", 443, true},
		{"api.github.com", 22, false},
		{"plain.example", 443, false},
		{"paths.example", 8443, true},
		{"paths.example", 443, false},
		{"bound.example", 443, true},
		{"x.bound.example", 443, true},
		{"other.example", 443, false},
	}
	for _, tt := range inspect {
		if got := n.Inspect(tt.host, tt.port); got != tt.want {
			t.Errorf("Inspect(%q, %d) = %v, want %v", tt.host, tt.port, got, tt.want)
		}
	}
	names := func(cs []Credential) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Secret)
		}
		return out
	}
	if got := names(n.CredentialsFor("bound.example", 443)); !reflect.DeepEqual(got, []string{"one", "three"}) {
		t.Errorf("CredentialsFor(bound.example) = %v, want [one three]", got)
	}
	if got := names(n.CredentialsFor("a.b.bound.example", 443)); !reflect.DeepEqual(got, []string{"two"}) {
		t.Errorf("CredentialsFor(a.b.bound.example) = %v, want [two]", got)
	}
	if got := n.CredentialsFor("notbound.example", 443); got != nil {
		t.Errorf("CredentialsFor(notbound.example) = %v, want none", got)
	}
}

func TestPinnedAndAllowsAddr(t *testing.T) {
	n := mustValid(t, Network{
		Allow: []Rule{
			{Host: "allowed.test", Ports: []int{18080}},
			{CIDR: "10.0.0.0/8"},
			{CIDR: "fd00::/8"},
			{Host: "192.168.1.1"},
		},
		Resolve: []Pin{
			{Host: "allowed.test:18080", To: "127.0.0.1:18080"},
			{Host: "v6.test:443", To: "[::1]:8443"},
		},
	})
	pins := []struct {
		host string
		port int
		want string // "" = not pinned
	}{
		{"allowed.test", 18080, "127.0.0.1:18080"},
		{"allowed.test", 80, ""},
		{"other.test", 18080, ""},
		{"127.0.0.1", 18080, ""},
		{"localhost", 18080, ""},
		{"v6.test", 443, "[::1]:8443"},
	}
	for _, tt := range pins {
		ap, ok := n.Pinned(tt.host, tt.port)
		if tt.want == "" && ok || tt.want != "" && (!ok || ap.String() != tt.want) {
			t.Errorf("Pinned(%q, %d) = %v, %v; want %q", tt.host, tt.port, ap, ok, tt.want)
		}
	}
	// A pin opens nothing by itself: the name still needs its allow rule.
	if d := n.Decide(Request{Host: "v6.test", Port: 443}); d.Verdict != Deny {
		t.Errorf("Decide(v6.test:443) = %+v; a pin alone must not allow", d)
	}
	addrs := []struct {
		a    string
		want bool
	}{
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true},
		{"11.0.0.1", false},
		{"fd12::1", true},
		{"fe80::1%eth0", false},
		{"192.168.1.1", false}, // a host rule literal lifts nothing
		{"127.0.0.1", false},
	}
	for _, tt := range addrs {
		if got := n.AllowsAddr(netip.MustParseAddr(tt.a)); got != tt.want {
			t.Errorf("AllowsAddr(%s) = %v, want %v", tt.a, got, tt.want)
		}
	}
	if n.AllowsAddr(netip.Addr{}) {
		t.Error("AllowsAddr(zero) = true")
	}
}

// TestUnvalidatedFailsClosed: rules that never went through Validate must
// not match more than they say.
func TestUnvalidatedFailsClosed(t *testing.T) {
	n := Network{Allow: []Rule{{Host: "*"}, {Host: "*."}, {CIDR: "bogus"}, {Host: "Example.com"}}}
	for _, h := range []string{"example.com", "a.example", "10.0.0.1"} {
		if d := n.Decide(Request{Host: h, Port: 443}); d.Verdict != Deny {
			t.Errorf("Decide(%q) = %+v, want deny", h, d)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	n := Network{Default: Deny}
	for _, h := range []string{"a.example", "b.example", "*.c.example", "d.example", "*.githubusercontent.com", "api.github.com"} {
		n.Allow = append(n.Allow, Rule{Host: h, Ports: []int{443}})
	}
	n.Allow = append(n.Allow, Rule{Host: "up.example", Methods: []string{"GET"}, Paths: []string{"/v1/"}})
	if err := n.Validate(); err != nil {
		b.Fatal(err)
	}
	r := Request{Host: "up.example", Port: 443, Method: "GET", Path: "/v1/files/abc"}
	b.ReportAllocs()
	for b.Loop() {
		if n.Decide(r).Verdict != Allow {
			b.Fatal("not allowed")
		}
	}
}
