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

// TestParseEventRulesErrors: a rule names the kinds it reads (no
// wildcard, no kind the policy does not admit), has a condition and one of
// stop, ask, deny; `event` is its variable and no tool call's.
func TestParseEventRulesErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"events:\n  rules:\n    - when: 'true'\n      action: stop\n", `events.rules[0].kinds: missing`},
		{"events:\n  rules:\n    - kinds: []\n      when: 'true'\n      action: stop\n", `events.rules[0].kinds: missing`},
		{"events:\n  rules:\n    - kinds: ['*']\n      when: 'true'\n      action: stop\n", `events.rules[0].kinds[0]: "*" is not a kind of this policy`},
		{"events:\n  rules:\n    - kinds: [coverage]\n      when: 'true'\n      action: stop\n", `events.rules[0].kinds[0]: "coverage" is not a kind`},
		{"events:\n  rules:\n    - kinds: [test]\n      when: 'true'\n      action: allow\n", `events.rules[0].action: "allow" is not one of stop, ask, deny`},
		{"events:\n  rules:\n    - kinds: [test]\n      when: 'true'\n      action: kill\n", `events.rules[0].action: "kill" is not one of stop, ask, deny`},
		{"events:\n  rules:\n    - kinds: [test]\n      when: 'true'\n", `events.rules[0].action: missing`},
		{"events:\n  rules:\n    - kinds: [test]\n      action: stop\n", `events.rules[0].when: missing`},
		{"events:\n  rules:\n    - kinds: [test]\n      when: args.command == 'x'\n      action: deny\n", `undeclared reference to 'args'`},
		{"events:\n  rules:\n    - kinds: [test]\n      when: event.status\n      action: deny\n", `want bool`},
		// The tools section does not see `event`.
		{"tools:\n  rules:\n    - when: event.kind == 'test'\n      action: deny\n", `undeclared reference to 'event'`},
	} {
		_, err := Parse([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tt.doc, err, tt.want)
		}
	}
}

// TestDecideEvent: the first rule naming the event's kind whose condition
// holds decides; a kind no rule names is evaluated by none; a policy
// without rules decides nothing.
func TestDecideEvent(t *testing.T) {
	doc, err := Parse([]byte(`
events:
  kinds:
    - name: coverage
  rules:
    - kinds: [coverage]
      when: event.data.pct < 50
      action: deny
      reason: coverage fell
    - kinds: [test]
      when: event.status == "fail" && sandbox.name == "main" && run.step > 0
      action: stop
      reason: a test failed
    - kinds: [test]
      when: event.name.startsWith("slow")
      action: ask
`))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := CompileEventRules(doc.Events)
	if err != nil {
		t.Fatal(err)
	}
	run := RunInfo{Step: 2}
	for _, tt := range []struct {
		kind, payload string
		want          EventDecision
		ok            bool
	}{
		{"test", `{"kind":"test","name":"unit","status":"fail"}`, EventDecision{Action: EventStop, Rule: "events.rules[1]", Reason: "a test failed"}, true},
		{"test", `{"kind":"test","name":"unit","status":"pass"}`, EventDecision{}, false},
		{"test", `{"kind":"test","name":"slow-e2e","status":"pass"}`, EventDecision{Action: EventAsk, Rule: "events.rules[2]", Reason: `matched: event.name.startsWith("slow")`}, true},
		{"coverage", `{"kind":"coverage","data":{"pct":40}}`, EventDecision{Action: EventDeny, Rule: "events.rules[0]", Reason: "coverage fell"}, true},
		// A kind no rule names: not evaluated, even though a rule's
		// condition would hold on its fields.
		{"log", `{"kind":"log","name":"unit","status":"fail"}`, EventDecision{}, false},
		// A rule that fails decides nothing, and says why.
		{"coverage", `{"kind":"coverage","data":{}}`, EventDecision{Rule: "events.rules[0]"}, true},
	} {
		got, ok := rules.DecideEvent(tt.kind, []byte(tt.payload), run, "main")
		if strings.HasPrefix(got.Reason, "policy: the rule failed") {
			got.Reason = ""
		}
		if got != tt.want || ok != tt.ok {
			t.Errorf("DecideEvent(%s, %s) = %+v, %v; want %+v, %v", tt.kind, tt.payload, got, ok, tt.want, tt.ok)
		}
	}
	none, err := CompileEventRules(Default().Events)
	if err != nil || none != nil {
		t.Fatalf("CompileEventRules(default) = %v, %v; want nil, nil", none, err)
	}
	if d, ok := none.DecideEvent("test", []byte(`{"kind":"test","status":"fail"}`), run, "main"); ok {
		t.Errorf("the default policy decided %+v", d)
	}
}

// TestCanonicalEventRules: rules are part of the hash; a document without
// them hashes as before they existed (TestCanonicalEvents, the golden
// default).
func TestCanonicalEventRules(t *testing.T) {
	base, err := Parse([]byte("events:\n  rate: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ev, _ := strings.Cut(string(base.Canonical()), "\nevents:"); strings.Contains(ev, "rules") {
		t.Errorf("a document without events rules writes them:\n%s", base.Canonical())
	}
	with, err := Parse([]byte("events:\n  rate: 5\n  rules:\n    - kinds: [test]\n      when: event.status == 'fail'\n      action: stop\n"))
	if err != nil {
		t.Fatal(err)
	}
	if with.Hash() == base.Hash() {
		t.Error("an events rule does not change the hash")
	}
	again, err := Parse(with.Canonical())
	if err != nil || again.Hash() != with.Hash() {
		t.Errorf("canonical form with rules does not round-trip: %v\n%s", err, with.Canonical())
	}
}

// BenchmarkDecideEvent: one test event through two rules, the second of
// which matches (what an events rule costs the events goroutine).
func BenchmarkDecideEvent(b *testing.B) {
	doc, err := Parse([]byte("events:\n  rules:\n    - kinds: [log]\n      when: 'true'\n      action: deny\n    - kinds: [test]\n      when: event.status == 'fail' && event.name.startsWith('unit')\n      action: stop\n"))
	if err != nil {
		b.Fatal(err)
	}
	rules, err := CompileEventRules(doc.Events)
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"source":"sandbox","sandbox":"main","kind":"test","name":"unit/x","status":"fail","duration_s":1.5}`)
	for b.Loop() {
		if d, ok := rules.DecideEvent("test", payload, RunInfo{}, "main"); !ok || d.Action != EventStop {
			b.Fatal(d)
		}
	}
}
