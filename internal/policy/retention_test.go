package policy

import (
	"strings"
	"testing"
	"time"
)

// TestParseRetention: a retention section is read, validated with every
// problem named by its field and line, kept in the canonical form (and so
// in the hash), and left out of it while it keeps everything.
func TestParseRetention(t *testing.T) {
	doc, err := Parse([]byte("retention:\n  events: 168h\n  runs: 720h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Retention{Events: Duration(168 * time.Hour), Runs: Duration(720 * time.Hour)}); doc.Retention != want {
		t.Errorf("Retention = %+v, want %+v", doc.Retention, want)
	}
	if c := string(doc.Canonical()); !strings.Contains(c, "retention:\n  events: 168h\n  runs: 720h\n") {
		t.Errorf("Canonical() lacks the retention section:\n%s", c)
	}
	def, err := Parse([]byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Hash() == def.Hash() {
		t.Error("a retention section does not change the policy hash")
	}
	// Keeping everything is the default: the hash of a document written
	// before the section existed stays the same.
	zero, err := Parse([]byte("retention: {events: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if zero.Hash() != def.Hash() || strings.Contains(string(zero.Canonical()), "retention") {
		t.Errorf("an all-zero retention section changed the canonical form:\n%s", zero.Canonical())
	}
	again, err := Parse(doc.Canonical())
	if err != nil || again.Retention != doc.Retention {
		t.Errorf("Parse(Canonical()) = %+v, %v", again, err)
	}

	for _, tt := range []struct{ name, doc, want string }{
		{"negative", "retention:\n  events: -1h\n", `policy: retention.events: "-1h" is negative (line 2; hint: a duration must not be negative)`},
		{"under a minute", "retention:\n  runs: 30s\n", "policy: retention.runs: 30s is under a minute (line 2; hint: a duration like 720h; 0 keeps the content forever)"},
		{"too long", "retention:\n  runs: 1000000h\n", "policy: retention.runs: 1000000h is over 100 years (line 2; hint: a duration like 720h; 0 keeps the content forever)"},
		{"runs before events", "retention:\n  events: 720h\n  runs: 24h\n", "policy: retention.runs: runs 24h is shorter than events 720h (line 3; hint: a run is purged with its events: runs must not be shorter than events)"},
		{"unknown key", "retention:\n  outputs: 1h\n", "policy: retention: field outputs not found (line 2; hint: known keys: events, runs, checkpoints, artifacts)"},
		{"artifacts negative", "retention:\n  artifacts: -2h\n", `policy: retention.artifacts: "-2h" is negative (line 2; hint: a duration must not be negative)`},
		{"checkpoints under a minute", "retention:\n  checkpoints: 30s\n", "policy: retention.checkpoints: 30s is under a minute (line 2; hint: a duration like 720h; 0 keeps the content forever)"},
		{"not a duration", "retention:\n  events: forever\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			switch {
			case err == nil:
				t.Fatalf("Parse(%q) = nil, want an error", tt.doc)
			case tt.want != "" && !hasLine(err, tt.want):
				t.Fatalf("Parse error:\n%v\nwant a line %q", err, tt.want)
			case !strings.Contains(err.Error(), "retention"):
				t.Fatalf("Parse error %q does not name the field", err)
			}
		})
	}
}

// TestParseRetentionCheckpoints: the checkpoints and artifacts fields are read, kept in
// the canonical form and so changes the hash; a document without it
// hashes as before (the hash of an events/runs section is unchanged).
func TestParseRetentionCheckpoints(t *testing.T) {
	doc, err := Parse([]byte("retention:\n  events: 168h\n  checkpoints: 24h\n  artifacts: 720h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Retention{Events: Duration(168 * time.Hour), Checkpoints: Duration(24 * time.Hour), Artifacts: Duration(720 * time.Hour)}); doc.Retention != want {
		t.Errorf("Retention = %+v, want %+v", doc.Retention, want)
	}
	if c := string(doc.Canonical()); !strings.Contains(c, "retention:\n  events: 168h\n  checkpoints: 24h\n  artifacts: 720h\n") {
		t.Errorf("Canonical() lacks checkpoints:\n%s", c)
	}
	without, err := Parse([]byte("retention:\n  events: 168h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Hash() == without.Hash() {
		t.Error("checkpoints and artifacts do not change the policy hash")
	}
	_, sec, _ := strings.Cut(string(without.Canonical()), "\nretention:\n")
	if sec != "  events: 168h\n" {
		t.Errorf("the retention section of a document without checkpoints or artifacts is %q, want only events", sec)
	}
	again, err := Parse(doc.Canonical())
	if err != nil || again.Retention != doc.Retention {
		t.Errorf("Parse(Canonical()) = %+v, %v", again, err)
	}
}

// TestStricter: each field takes the shorter of the durations set; 0
// (keep forever) gives way to any other.
func TestStricter(t *testing.T) {
	h := func(n int) Duration { return Duration(time.Duration(n) * time.Hour) }
	for _, tt := range []struct{ a, b, want Retention }{
		{Retention{}, Retention{}, Retention{}},
		{Retention{Events: h(1)}, Retention{}, Retention{Events: h(1)}},
		{Retention{}, Retention{Runs: h(2)}, Retention{Runs: h(2)}},
		{Retention{Events: h(5), Runs: h(10)}, Retention{Events: h(7), Runs: h(3)}, Retention{Events: h(5), Runs: h(3)}},
		{Retention{Checkpoints: h(4)}, Retention{Checkpoints: h(2), Runs: h(9)}, Retention{Checkpoints: h(2), Runs: h(9)}},
		{Retention{Checkpoints: h(4)}, Retention{}, Retention{Checkpoints: h(4)}},
		{Retention{Artifacts: h(30), Runs: h(90)}, Retention{Artifacts: h(7)}, Retention{Artifacts: h(7), Runs: h(90)}},
	} {
		if got := Stricter(tt.a, tt.b); got != tt.want {
			t.Errorf("Stricter(%+v, %+v) = %+v, want %+v", tt.a, tt.b, got, tt.want)
		}
		if got := Stricter(tt.b, tt.a); got != tt.want {
			t.Errorf("Stricter(%+v, %+v) = %+v, want %+v", tt.b, tt.a, got, tt.want)
		}
	}
}
