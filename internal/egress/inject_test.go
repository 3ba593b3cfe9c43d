package egress

import (
	"net/url"
	"strings"
	"testing"
)

func TestSetQueryParam(t *testing.T) {
	tests := []struct {
		raw, want string
	}{
		{"", "key=S%26ecret"},
		{"a=1", "a=1&key=S%26ecret"},
		{"key=evil&a=1", "a=1&key=S%26ecret"},
		{"k%65y=evil&a=%20", "a=%20&key=S%26ecret"},
		{"a=1;key=evil&b=2", "b=2&key=S%26ecret"},
		{"key&key=&a", "a&key=S%26ecret"},
		{"%zz=1&a=1", "a=1&key=S%26ecret"},
		{"&&a=1&", "a=1&key=S%26ecret"},
	}
	for _, tt := range tests {
		if got := setQueryParam(tt.raw, "key", "S&ecret"); got != tt.want {
			t.Errorf("setQueryParam(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func FuzzSetQueryParam(f *testing.F) {
	f.Add("a=1&key=x", "key", "secret")
	f.Add("key;key=1", "key", "v a&l")
	f.Add("%6bey=1", "key", "v")
	f.Fuzz(func(t *testing.T, raw, name, value string) {
		if !validQueryName(name) {
			return // policy.Validate admits only these names
		}
		got := setQueryParam(raw, name, value)
		q, err := url.ParseQuery(strings.ReplaceAll(got, ";", "%3B"))
		if err != nil {
			// The kept pairs are the sandbox's, left as sent.
			return
		}
		if vs := q[name]; len(vs) != 1 || vs[0] != value {
			t.Fatalf("setQueryParam(%q, %q) = %q: parameter has values %q, want exactly [%q]", raw, name, got, vs, value)
		}
	})
}

func TestBoundTo(t *testing.T) {
	tests := []struct {
		patterns []string
		host     string
		want     bool
	}{
		{[]string{"api.github.com"}, "api.github.com", true},
		{[]string{"API.GitHub.com."}, "api.github.com", true},
		{[]string{"*.github.com"}, "api.github.com", true},
		{[]string{"*.github.com"}, "a.b.github.com", true},
		{[]string{"*.github.com"}, "github.com", false},
		{[]string{"*.github.com"}, "evilgithub.com", false},
		{[]string{"api.github.com"}, "api.github.com.evil.com", false},
		{[]string{"other.com", "api.github.com"}, "api.github.com", true},
		{[]string{"bad host"}, "bad host", false},
		{[]string{"*.bücher.de"}, "x.xn--bcher-kva.de", true},
	}
	for _, tt := range tests {
		if got := boundTo(tt.patterns, tt.host); got != tt.want {
			t.Errorf("boundTo(%q, %q) = %v, want %v", tt.patterns, tt.host, got, tt.want)
		}
	}
}

// validQueryName mirrors the names policy.Validate accepts for query
// credentials.
func validQueryName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.~-[]", c)) {
			return false
		}
	}
	return true
}
