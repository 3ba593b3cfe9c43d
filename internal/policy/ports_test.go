package policy

import (
	"bytes"
	"strings"
	"testing"
)

func TestPortsAccess(t *testing.T) {
	doc, err := Parse([]byte(`
ports:
  expose:
    - ports: 3000
      access: public
    - ports: "8000-8999"
    - ports: 8080
      access: public
  max_connections: 5
  max_connection_bytes: 1M
  max_bytes: 1G
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		port   int
		want   PortAccess
		wantOK bool
	}{
		{3000, AccessPublic, true},
		{2999, "", false},
		{8000, AccessToken, true},
		{8080, AccessToken, true}, // the first rule that names it decides
		{8999, AccessToken, true},
		{9000, "", false},
		{49983, "", false},
	} {
		got, ok := doc.Ports.Access(tc.port)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("Access(%d) = %q, %v, want %q, %v", tc.port, got, ok, tc.want, tc.wantOK)
		}
	}
	if doc.Ports.Connections() != 5 || doc.Ports.MaxConnectionBytes != 1<<20 || doc.Ports.MaxBytes != 1<<30 {
		t.Errorf("limits = %d, %d, %d", doc.Ports.Connections(), doc.Ports.MaxConnectionBytes, doc.Ports.MaxBytes)
	}
	// The canonical form parses to the same document.
	again, err := Parse(doc.Canonical())
	if err != nil {
		t.Fatalf("Parse(Canonical()): %v\n%s", err, doc.Canonical())
	}
	if !bytes.Equal(again.Canonical(), doc.Canonical()) {
		t.Errorf("Canonical changed on a round trip:\n%s\nthen\n%s", doc.Canonical(), again.Canonical())
	}
	if !strings.Contains(string(doc.Canonical()), "access: token") {
		t.Errorf("Canonical does not write the default access:\n%s", doc.Canonical())
	}
}

func TestPortsDefaultExposesNothing(t *testing.T) {
	d := Default()
	for _, port := range []int{1, 80, 3000, 8080, 49983, 65535} {
		if a, ok := d.Ports.Access(port); ok {
			t.Errorf("Default().Ports.Access(%d) = %q, true, want nothing exposed", port, a)
		}
	}
	if d.Ports.Connections() != DefaultMaxPortConnections {
		t.Errorf("Connections() = %d, want %d", d.Ports.Connections(), DefaultMaxPortConnections)
	}
	// The section is left out of the canonical form while unset: the
	// hashes of documents written before it stay the same.
	if strings.Contains(string(d.Canonical()), "ports:") {
		t.Errorf("Default().Canonical() has a ports section:\n%s", d.Canonical())
	}
}

func TestPortsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, field, msg string
	}{
		{"zero port", "ports:\n  expose:\n    - ports: 0\n", "ports.expose[0].ports", `"0" is not a port (1-65535)`},
		{"too high", "ports:\n  expose:\n    - ports: 65536\n", "ports.expose[0].ports", `"65536" is not a port`},
		{"backwards range", "ports:\n  expose:\n    - ports: 9000-8000\n", "ports.expose[0].ports", "the range ends before it starts"},
		{"not a number", "ports:\n  expose:\n    - ports: http\n", "ports.expose[0].ports", `"http" is not a port`},
		{"a list", "ports:\n  expose:\n    - ports: [80, 443]\n", "ports.expose[0].ports", "want a port or a range, got a list"},
		{"missing ports", "ports:\n  expose:\n    - access: public\n", "ports.expose[0].ports", "required"},
		{"bad access", "ports:\n  expose:\n    - ports: 80\n      access: open\n", "ports.expose[0].access", `"open" is not an access`},
		{"unknown key", "ports:\n  exposed: []\n", "ports", "field exposed not found"},
		{"negative connections", "ports:\n  max_connections: -1\n", "ports.max_connections", "out of range"},
		{"more connections than a sandbox relays", "ports:\n  max_connections: 1025\n", "ports.max_connections", "out of range 0-1024"},
		{"bad size", "ports:\n  max_bytes: lots\n", "ports.max_bytes", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want one at %s", tc.doc, tc.field)
			}
			ps := Problems(err)
			if len(ps) != 1 {
				t.Fatalf("Parse(%q) = %v, want one problem", tc.doc, err)
			}
			if ps[0].Field != tc.field || !strings.Contains(ps[0].Msg, tc.msg) || ps[0].Line == 0 {
				t.Errorf("Parse(%q) = %v (field %q, line %d), want field %s and %q", tc.doc, ps[0], ps[0].Field, ps[0].Line, tc.field, tc.msg)
			}
		})
	}
}
