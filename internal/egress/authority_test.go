package egress

import (
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestParseAuthority(t *testing.T) {
	tests := []struct {
		in       string
		def      int
		host     string
		port     int
		wantFail bool
	}{
		{in: "example.com:443", host: "example.com", port: 443},
		{in: "EXAMPLE.com.:8080", host: "EXAMPLE.com.", port: 8080},
		{in: "1.2.3.4:1", host: "1.2.3.4", port: 1},
		{in: "0x7f.1:80", host: "0x7f.1", port: 80},
		{in: "[::1]:443", host: "::1", port: 443},
		{in: "[fe80::1%25eth0]:443", host: "fe80::1%25eth0", port: 443},
		{in: "[::ffff:169.254.169.254]:80", host: "::ffff:169.254.169.254", port: 80},
		{in: "bücher.de:443", host: "bücher.de", port: 443},
		{in: "example.com", def: 80, host: "example.com", port: 80},
		{in: "[::1]", def: 80, host: "::1", port: 80},
		{in: "example.com:65535", host: "example.com", port: 65535},
		{in: "example.com", wantFail: true},                   // CONNECT needs a port
		{in: "example.com:", def: 80, wantFail: true},         // empty port
		{in: "example.com:0", wantFail: true},                 // port 0
		{in: "example.com:65536", wantFail: true},             // out of range
		{in: "example.com:+443", wantFail: true},              // sign
		{in: "example.com:-1", wantFail: true},                // sign
		{in: "example.com:000443", wantFail: true},            // too many digits
		{in: "example.com:44 3", wantFail: true},              // space
		{in: ":443", wantFail: true},                          // empty host
		{in: "[]:443", wantFail: true},                        // empty brackets
		{in: "::1:443", wantFail: true},                       // bare IPv6
		{in: "[::1]443", wantFail: true},                      // junk after ]
		{in: "[::1:443", wantFail: true},                      // no ]
		{in: "[1.2.3.4]:443", wantFail: true},                 // brackets around IPv4
		{in: "user@example.com:443", wantFail: true},          // userinfo
		{in: "example.com/x:443", wantFail: true},             // path
		{in: "exa mple.com:443", wantFail: true},              // space
		{in: "example.com%00:443", wantFail: true},            // escape outside brackets
		{in: "example.com\x00:443", wantFail: true},           // NUL
		{in: "exam\\ple.com:443", wantFail: true},             // backslash
		{in: "", def: 80, wantFail: true},                     // empty
		{in: strings.Repeat("a", 400) + ":1", wantFail: true}, // too long
		{in: strings.Repeat("0", 300), def: 80, wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			host, port, err := parseAuthority(tt.in, tt.def)
			if tt.wantFail {
				if err == nil {
					t.Fatalf("parseAuthority(%q) = %q, %d; want error", tt.in, host, port)
				}
				return
			}
			if err != nil || host != tt.host || port != tt.port {
				t.Fatalf("parseAuthority(%q) = %q, %d, %v; want %q, %d", tt.in, host, port, err, tt.host, tt.port)
			}
		})
	}
}

func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"example.com:443", "[::1]:80", "[fe80::1%25lo]:1", "0x7f.1:80", "a:0", "a:65536", "::1:443", "[::1]x", "bücher.de:443"} {
		f.Add(s, 0)
		f.Add(s, 80)
	}
	f.Fuzz(func(t *testing.T, s string, def int) {
		if def != 0 && def != 80 && def != 443 {
			def = 80
		}
		host, port, err := parseAuthority(s, def)
		if err != nil {
			return
		}
		if host == "" || port < 1 || port > 65535 {
			t.Fatalf("parseAuthority(%q) = %q, %d: empty host or bad port", s, host, port)
		}
		if strings.ContainsAny(host, "/@?#\\ \t\r\n[]") {
			t.Fatalf("parseAuthority(%q) = %q: host holds a URL delimiter", s, host)
		}
		// Whatever passes must mean the same to net/url and net: the
		// authority the policy judged is the one that is dialled.
		joined := net.JoinHostPort(host, strconv.Itoa(port))
		h2, p2, err := parseAuthority(joined, 0)
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("parseAuthority(%q) = %q, %d; rejoined %q parses to %q, %d, %v", s, host, port, joined, h2, p2, err)
		}
		if !strings.Contains(host, "%") {
			u, err := url.Parse("http://" + joined + "/")
			if err == nil && (u.Hostname() != host || u.Port() != strconv.Itoa(port)) {
				t.Fatalf("url.Parse(%q) host %q port %q; parseAuthority said %q, %d", joined, u.Hostname(), u.Port(), host, port)
			}
		}
	})
}

func TestDecisionPath(t *testing.T) {
	tests := []struct {
		raw string
		ok  bool
	}{
		{"/", true},
		{"/repos/a/b", true},
		{"/repos//a", true},
		{"/a%20b", true},
		{"/repos/../admin", false},
		{"/repos/./x", false},
		{"/repos/%2e%2e/admin", false},
		{"/repos/%2E%2e/admin", false},
		{"/repos/..;x/admin", false},
		{"/repos%2F..%2Fadmin", false},
		{"/repos%5cadmin", false},
		{"/a\\b", false},
		{"/..", false},
	}
	for _, tt := range tests {
		u, err := url.ParseRequestURI(tt.raw)
		if err != nil {
			t.Fatalf("url.ParseRequestURI(%q): %v", tt.raw, err)
		}
		_, err = decisionPath(u)
		if (err == nil) != tt.ok {
			t.Errorf("decisionPath(%q) err = %v, want ok=%v", tt.raw, err, tt.ok)
		}
	}
}

func FuzzDecisionPath(f *testing.F) {
	for _, s := range []string{"/", "/repos/x", "/a/../b", "/%2e%2e/", "/a;b/..;c", "/a%2fb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.ParseRequestURI(raw)
		if err != nil {
			return
		}
		p, err := decisionPath(u)
		if err != nil {
			return
		}
		for seg := range strings.SplitSeq(p, "/") {
			seg, _, _ = strings.Cut(seg, ";")
			if seg == "." || seg == ".." {
				t.Fatalf("decisionPath(%q) = %q passes a dot segment", raw, p)
			}
		}
		if strings.ContainsAny(p, "\\\x00") {
			t.Fatalf("decisionPath(%q) = %q passes a backslash or NUL", raw, p)
		}
	})
}
