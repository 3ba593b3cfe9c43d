package policy

import (
	"strings"
	"testing"
)

func TestParseEventsErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"events:\n  rate: -1\n", `events.rate: -1 is out of range`},
		{"events:\n  max_size: 1M\n", `events.max_size: 1M is out of range`},
		{"events:\n  kinds:\n    - name: progress\n", `kind "progress" is built in`},
		{"events:\n  kinds:\n    - name: a\n    - name: a\n", `kind "a" is built in or listed twice`},
		{"events:\n  kinds:\n    - name: Bad Name\n", `events.kinds[0].name: "Bad Name" is not a kind name`},
		{"events:\n  kinds:\n    - name: cov\n      max_size: 17k\n", `events.kinds[0].max_size: 17K is out of range`},
		{"events:\n  artifacts:\n    max_count: 5000\n", `events.artifacts.max_count: 5000 is out of range`},
		{"events:\n  flood: true\n", `field flood not found`},
	} {
		_, err := Parse([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tt.doc, err, tt.want)
		}
	}
}

// TestCanonicalEvents: a document without an events section hashes as
// before the section existed; one with it writes its defaults out and
// round-trips.
func TestCanonicalEvents(t *testing.T) {
	if strings.Contains(string(Default().Canonical()), "events") {
		t.Errorf("the default document's canonical form names events:\n%s", Default().Canonical())
	}
	doc, err := Parse([]byte("events:\n  rate: 5\n  kinds:\n    - name: coverage\n      max_size: 1k\n    - name: bench\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := string(doc.Canonical())
	for _, want := range []string{"rate: 5", "burst: 200", "max_size: 4K", "max_count: 20", "name: coverage\n      max_size: 1K", "name: bench\n      max_size: 4K"} {
		if !strings.Contains(c, want) {
			t.Errorf("canonical form lacks %q:\n%s", want, c)
		}
	}
	again, err := Parse(doc.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Canonical()) != c {
		t.Errorf("canonical form does not round-trip:\n%s\nthen\n%s", c, again.Canonical())
	}
}
