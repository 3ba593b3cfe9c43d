package hostname

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseLiteral(t *testing.T) {
	tests := []struct {
		host string
		want string // canonical address; "" = not a literal
		err  bool
	}{
		// Names.
		{host: "example.com"},
		{host: "example.com."},
		{host: "localhost"},
		{host: "127.0.0.1.nip.io"},
		{host: "0x7f.example"},
		{host: "1e3"},
		{host: ""},
		{host: "."},
		// Dotted quads.
		{host: "127.0.0.1", want: "127.0.0.1"},
		{host: "127.0.0.1.", want: "127.0.0.1"},
		{host: "0.0.0.0", want: "0.0.0.0"},
		{host: "255.255.255.255", want: "255.255.255.255"},
		{host: "169.254.169.254", want: "169.254.169.254"},
		// Single number, short forms.
		{host: "2130706433", want: "127.0.0.1"},
		{host: "0", want: "0.0.0.0"},
		{host: "4294967295", want: "255.255.255.255"},
		{host: "127.1", want: "127.0.0.1"},
		{host: "10.1.2", want: "10.1.0.2"},
		{host: "10.65535", want: "10.0.255.255"},
		{host: "169.254.43518", want: "169.254.169.254"},
		{host: "192.168.257", want: "192.168.1.1"},
		// Octal and hex.
		{host: "0177.0.0.1", want: "127.0.0.1"},
		{host: "0177.1", want: "127.0.0.1"},
		{host: "00000000000000000177.0.0.1", want: "127.0.0.1"},
		{host: "017700000001", want: "127.0.0.1"},
		{host: "0x7f.0.0.1", want: "127.0.0.1"},
		{host: "0X7F.0.0.1", want: "127.0.0.1"},
		{host: "0x7f000001", want: "127.0.0.1"},
		{host: "0x7f.1", want: "127.0.0.1"},
		{host: "0xa9.0xfe.0xa9.0xfe", want: "169.254.169.254"},
		{host: "0xA9FEA9FE", want: "169.254.169.254"},
		{host: "0251.0376.0251.0376", want: "169.254.169.254"},
		{host: "0x0a.0.0.01", want: "10.0.0.1"},
		{host: "0x00000000000000000000000a.1", want: "10.0.0.1"},
		// Unicode forms a browser maps.
		{host: "１２７.０.０.１", want: "127.0.0.1"},
		{host: "127。0。0。1", want: "127.0.0.1"},
		{host: "①②⑦.0.0.1", want: "127.0.0.1"},
		// IPv6.
		{host: "::1", want: "::1"},
		{host: "[::1]", want: "::1"},
		{host: "::", want: "::"},
		{host: "[::]", want: "::"},
		{host: "fe80::1%eth0", want: "fe80::1%eth0"},
		{host: "[fe80::1%25eth0]", want: "fe80::1%eth0"},
		{host: "[fe80::1%eth0]", want: "fe80::1%eth0"},
		{host: "[fe80::1%25]", want: "fe80::1%25"},
		{host: "::ffff:127.0.0.1", want: "127.0.0.1"},
		{host: "[::ffff:169.254.169.254]", want: "169.254.169.254"},
		{host: "::ffff:7f00:1", want: "127.0.0.1"},
		{host: "::127.0.0.1", want: "::7f00:1"},
		{host: "64:ff9b::10.0.0.1", want: "64:ff9b::a00:1"},
		{host: "2002:a9fe:a9fe::", want: "2002:a9fe:a9fe::"},
		{host: "2001:DB8::1", want: "2001:db8::1"},
		// Malformed numeric hosts are errors, never names.
		{host: "1.2.3.256", err: true},
		{host: "256.1.1.1", err: true},
		{host: "1.2.3.4.5", err: true},
		{host: "1.2.3.4..", err: true},
		{host: "1..2.3", err: true},
		{host: ".1.2.3", err: true},
		{host: "0x", err: true},
		{host: "0x.1", err: true},
		{host: "1.0x", err: true},
		{host: "0xg", err: true},
		{host: "08.1.1.1", err: true},
		{host: "09", err: true},
		{host: "4294967296", err: true},
		{host: "0x100000000", err: true},
		{host: "10.16777216", err: true},
		{host: "99999999999999999999999999999", err: true},
		{host: "foo.1", err: true},
		{host: "example.123", err: true},
		{host: " 1.2.3.4", err: true},
		{host: "+1.2.3.4", err: true},
		{host: "1.2.3.-4"}, // a (bad) name to a browser too; Normalize refuses it
		{host: "[1.2.3.4]", err: true},
		{host: "[::1", err: true},
		{host: "[]", err: true},
		{host: "::1]", err: true},
		{host: "::1:", err: true},
		{host: "example.com:443", err: true},
		{host: "[::1]:443", err: true},
		{host: "::ffff:0x7f.1", err: true},
		{host: "::ffff:0177.0.0.1", err: true},
		{host: "fe80::1%", err: true},
		{host: "fe80::1%eth0/x", err: true},
		{host: "fe80::1%eth 0", err: true},
		{host: strings.Repeat("1", 2000), err: true},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			a, lit, err := ParseLiteral(tt.host)
			switch {
			case tt.err:
				var le *LiteralError
				if err == nil || !errors.As(err, &le) {
					t.Fatalf("ParseLiteral(%q) = %v, %v, %v; want *LiteralError", tt.host, a, lit, err)
				}
			case err != nil:
				t.Fatalf("ParseLiteral(%q): %v", tt.host, err)
			case tt.want == "":
				if lit {
					t.Fatalf("ParseLiteral(%q) = %v, literal; want a name", tt.host, a)
				}
			default:
				if !lit || a.String() != tt.want {
					t.Fatalf("ParseLiteral(%q) = %v, %v; want %s", tt.host, a, lit, tt.want)
				}
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		host, want string // want "" = error
	}{
		{"example.com", "example.com"},
		{"Example.COM", "example.com"},
		{"example.com.", "example.com"},
		{"API.GitHub.com.", "api.github.com"},
		{"bücher.example", "xn--bcher-kva.example"},
		{"BÜCHER.example", "xn--bcher-kva.example"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"ｅｘａｍｐｌｅ.com", "example.com"},
		{"example。com", "example.com"},
		{"localhost", "localhost"},
		{"a-b.c", "a-b.c"},
		{"127.0.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"１２７.０.０.１", "127.0.0.1"},
		{"[::1]", "::1"},
		{"[::ffff:10.0.0.1]", "10.0.0.1"},
		{"[2001:DB8::1]", "2001:db8::1"},
		{"", ""},
		{".", ""},
		{"example..com", ""},
		{"example.com..", ""},
		{".example.com", ""},
		{"-a.example", ""},
		{"a-.example", ""},
		{"under_score.example", ""},
		{"*.example.com", ""},
		{"exa mple.com", ""},
		{"user@example.com", ""},
		{"example.com/path", ""},
		{"example.com:443", ""},
		{"1.2.3.256", ""},
		{"08.1.1.1", ""},
		{strings.Repeat("a", 64) + ".com", ""},
		{strings.Repeat("a.", 127) + "com", ""},
		{"ex\x00ample.com", ""},
		{"\xff.com", ""},
		{"1.2.3.-4", ""},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got, err := Normalize(tt.host)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("Normalize(%q) = %q, want error", tt.host, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Normalize(%q) = %q, %v; want %q", tt.host, got, err, tt.want)
			}
			again, err := Normalize(got)
			if err != nil || again != got {
				t.Fatalf("Normalize(%q) = %q, %v; not idempotent", got, again, err)
			}
		})
	}
}

// TestParseLiteralMatchesNetip checks the dotted quads netip also accepts.
func TestParseLiteralMatchesNetip(t *testing.T) {
	for _, s := range []string{"1.2.3.4", "0.0.0.0", "255.255.255.255", "100.64.0.1", "8.8.8.8"} {
		a, lit, err := ParseLiteral(s)
		if err != nil || !lit || a != netip.MustParseAddr(s) {
			t.Errorf("ParseLiteral(%q) = %v, %v, %v; want %s", s, a, lit, err, s)
		}
	}
}

// FuzzNormalize: the output is a fixed point, lowercase ASCII without a
// trailing dot, and either a canonical IP literal or a valid DNS name.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"Example.COM.", "bücher.example", "0x7f.1", "[::ffff:10.0.0.1]", "１２７.０.０.１", "fe80::1%eth0", "a..b", "xn--bcher-kva.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		out, err := Normalize(host)
		if err != nil {
			return
		}
		again, err := Normalize(out)
		if err != nil || again != out {
			t.Fatalf("Normalize(%q) = %q, but Normalize(%q) = %q, %v", host, out, out, again, err)
		}
		a, lit, err := ParseLiteral(out)
		if err != nil {
			t.Fatalf("ParseLiteral(Normalize(%q) = %q): %v", host, out, err)
		}
		if lit {
			if a.String() != out {
				t.Fatalf("Normalize(%q) = %q, not canonical (%s)", host, out, a)
			}
			b, lit2, err := ParseLiteral(host)
			if err != nil || !lit2 || b != a {
				t.Fatalf("Normalize(%q) = literal %s but ParseLiteral says %v, %v, %v", host, a, b, lit2, err)
			}
			return
		}
		if reason := checkName(out); reason != "" || strings.HasSuffix(out, ".") || out != strings.ToLower(out) {
			t.Fatalf("Normalize(%q) = %q: %s", host, out, reason)
		}
	})
}
