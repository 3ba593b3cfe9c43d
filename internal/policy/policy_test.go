package policy

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// issueExample is the policy from the issue, with the CA path absolute.
const issueExample = `
network:
  default: deny            # deny | ask
  allow:
    - host: packages.example.com
    - host: "*.githubusercontent.com"
      ports: [443]
    - host: api.github.com
      methods: [GET]
  resolve:
    - host: allowed.test:18080
      to: 127.0.0.1:18080
  upstream_ca: /etc/airlock/internal-ca.pem
  credentials:
    - host: api.github.com
      secret: github_token
      header: Authorization
      value: "Bearer {{secret}}"
`

func TestParseIssueExample(t *testing.T) {
	doc, err := Parse([]byte(issueExample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Network{
		Default: Deny,
		Allow: []Rule{
			{Host: "packages.example.com"},
			{Host: "*.githubusercontent.com", Ports: []int{443}},
			{Host: "api.github.com", Methods: []string{"GET"}},
		},
		Resolve:     []Pin{{Host: "allowed.test:18080", To: "127.0.0.1:18080"}},
		UpstreamCA:  "/etc/airlock/internal-ca.pem",
		Credentials: []Credential{{Host: "api.github.com", Secret: "github_token", Header: "Authorization", Value: "Bearer {{secret}}"}},
	}
	if !reflect.DeepEqual(doc.Network, want) {
		t.Fatalf("Parse = %+v\nwant %+v", doc.Network, want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // substrings of the error
	}{
		{"empty", "", []string{"policy: empty document"}},
		{"unknown top key", "network: {}\nsandbx: {}\n", []string{"line 2", "sandbx", "did you mean sandbox?"}},
		{"unknown network key", "network:\n  default: deny\n  alow: []\n", []string{"line 3", "alow"}},
		{"unknown rule key", "network:\n  allow:\n    - host: a.example\n      port: [443]\n", []string{"line 4", "port"}},
		{"duplicate key", "network:\n  default: deny\n  default: ask\n", []string{"line 3", "already defined"}},
		{"wrong type", "network:\n  allow:\n    - host: a.example\n      ports: [https]\n", []string{"line 4"}},
		{"two documents", "network: {}\n---\nnetwork: {}\n", []string{"more than one"}},
		{"not a mapping", "- a\n- b\n", []string{"policy:"}},
		{
			"validation", "network:\n  allow:\n    - host: a.example\n    - host: b.example\n    - host: c.example\n      ports: [443, 70000]\n",
			[]string{"policy: network.allow[2].ports[1]: 70000 out of range 1-65535"},
		},
		{"too big", "network: {}\n#" + strings.Repeat("x", MaxSize), []string{"limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse = %+v, want error", doc)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseMinimal(t *testing.T) {
	for _, doc := range []string{"network: {}\n", "network:\n", "{}\n", "network:\n  default: ask\n"} {
		d, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("Parse(%q): %v", doc, err)
			continue
		}
		got := d.Network.Decide(Request{Host: "example.com", Port: 443})
		if got.Verdict == Allow {
			t.Errorf("Parse(%q).Decide = %+v; an empty policy must not allow", doc, got)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(good, []byte(issueExample), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, err := Load(good)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(doc.Network.Allow) != 3 {
		t.Errorf("Load: %d allow rules, want 3", len(doc.Network.Allow))
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("network:\n  default: allow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "network.default") {
		t.Errorf("Load(bad) = %v, want an error naming the file and network.default", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("Load(missing) = nil error")
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("network: {}\n#"+strings.Repeat("x", MaxSize+10)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Load(big) = %v, want size error", err)
	}
}
