package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Events bounds what a run's sandboxes may report through their event
// channel (airlock-event, /run/airlock/events). What a sandbox reports is
// untrusted data: it is recorded, marked as the sandbox's, and shown; it is
// never an instruction to the host and never an input of a decision.
//
//	events:
//	  rate: 20              # events a second per sandbox (default 20)
//	  burst: 200            # more at once, then the rate (default 200)
//	  max_size: 4k          # bytes of one event (default 4k, at most 16k)
//	  artifacts:
//	    max_size: 10M       # bytes of one declared artifact (default 10M)
//	    max_count: 20       # artifacts a run keeps this way (default 20)
//	  kinds:                # kinds beyond progress, log, metric, artifact, test
//	    - name: coverage
//	      max_size: 1k      # default: events.max_size
//
// The zero value is the default. Off turns the channel's recording off:
// lines are read and counted as refused.
type Events struct {
	Off       bool            `yaml:"off,omitempty"`
	Rate      int             `yaml:"rate,omitempty"`
	Burst     int             `yaml:"burst,omitempty"`
	MaxSize   Size            `yaml:"max_size,omitempty"`
	Artifacts EventArtifacts  `yaml:"artifacts,omitempty"`
	Kinds     []EventKindRule `yaml:"kinds,omitempty"`
	// Rules opt in to reading an event: none by default, and then no
	// event is ever an input of a decision.
	Rules []EventRule `yaml:"rules,omitempty"`
}

// EventRule reads the accepted, validated, redacted events of the kinds
// it names; the first whose condition holds decides, for the run:
//
//	events:
//	  rules:
//	    - kinds: [test]             # required, no wildcard
//	      when: event.status == "fail"
//	      action: stop              # stop | ask | deny
//	      reason: a test failed
//
// When is a CEL expression over `event` (the sandbox.event payload as a
// map: kind, name, status, message, ...; source is always "sandbox"),
// `run` and `sandbox`, as the tools section's rules see them. stop ends the
// run as failed; ask holds its next tool call for an approval; deny refuses
// its next tool call.
type EventRule struct {
	Kinds  []string `yaml:"kinds"`
	When   string   `yaml:"when"`
	Action string   `yaml:"action"`
	Reason string   `yaml:"reason,omitempty"`
}

// The actions of an events rule.
const (
	EventStop = "stop"
	EventAsk  = "ask"
	EventDeny = "deny"
)

// EventArtifacts bounds the artifacts sandboxes declare.
type EventArtifacts struct {
	MaxSize  Size `yaml:"max_size,omitempty"`
	MaxCount int  `yaml:"max_count,omitempty"`
}

// EventKindRule admits a custom kind of sandbox event.
type EventKindRule struct {
	Name    string `yaml:"name"`
	MaxSize Size   `yaml:"max_size,omitempty"`
}

// Defaults and bounds of the events section.
const (
	DefaultEventRate          = 20
	DefaultEventBurst         = 200
	DefaultEventMaxSize       = 4 << 10
	MaxEventSize              = 16 << 10 // execproto.MaxEventLine: the executor drops longer lines
	DefaultEventArtifactSize  = 10 << 20
	DefaultEventArtifactCount = 20
	maxEventKinds             = 64
)

// BuiltinEventKinds are the kinds every policy admits.
var BuiltinEventKinds = []string{"progress", "log", "metric", "artifact", "test"}

var eventKindName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

func (e *Events) isZero() bool {
	return !e.Off && e.Rate == 0 && e.Burst == 0 && e.MaxSize == 0 && e.Artifacts == (EventArtifacts{}) && len(e.Kinds) == 0 && len(e.Rules) == 0
}

// Resolved returns the section with its defaults filled in.
func (e Events) Resolved() Events {
	if e.Rate == 0 {
		e.Rate = DefaultEventRate
	}
	if e.Burst == 0 {
		e.Burst = DefaultEventBurst
	}
	if e.MaxSize == 0 {
		e.MaxSize = DefaultEventMaxSize
	}
	if e.Artifacts.MaxSize == 0 {
		e.Artifacts.MaxSize = DefaultEventArtifactSize
	}
	if e.Artifacts.MaxCount == 0 {
		e.Artifacts.MaxCount = DefaultEventArtifactCount
	}
	kinds := make([]EventKindRule, len(e.Kinds))
	for i, k := range e.Kinds {
		if k.MaxSize == 0 {
			k.MaxSize = e.MaxSize
		}
		kinds[i] = k
	}
	e.Kinds = kinds
	e.Rules = slices.Clone(e.Rules)
	return e
}

func (e *Events) validate(p *problems) {
	if e.Rate < 0 || e.Rate > 10000 {
		p.add("events.rate", "events a second, 1 to 10000", "%d is out of range", e.Rate)
	}
	if e.Burst < 0 || e.Burst > 100000 {
		p.add("events.burst", "events at once, 1 to 100000", "%d is out of range", e.Burst)
	}
	if e.MaxSize < 0 || e.MaxSize > MaxEventSize {
		p.add("events.max_size", "at most 16k", "%s is out of range", e.MaxSize)
	}
	if e.Artifacts.MaxSize < 0 {
		p.add("events.artifacts.max_size", "a size like 10M", "negative size")
	}
	if e.Artifacts.MaxCount < 0 || e.Artifacts.MaxCount > 1000 {
		p.add("events.artifacts.max_count", "0 to 1000", "%d is out of range", e.Artifacts.MaxCount)
	}
	if len(e.Kinds) > maxEventKinds {
		p.add("events.kinds", "", "%d kinds, at most %d", len(e.Kinds), maxEventKinds)
		return
	}
	seen := map[string]bool{}
	for _, b := range BuiltinEventKinds {
		seen[b] = true
	}
	for i, k := range e.Kinds {
		field := fmt.Sprintf("events.kinds[%d]", i)
		switch {
		case !eventKindName.MatchString(k.Name):
			p.add(field+".name", "lowercase letters, digits, '_', '.' and '-', starting with a letter", "%q is not a kind name", shorten(k.Name))
		case seen[k.Name]:
			p.add(field+".name", "", "kind %q is built in or listed twice", k.Name)
		}
		seen[k.Name] = true
		if k.MaxSize < 0 || k.MaxSize > MaxEventSize {
			p.add(field+".max_size", "at most 16k", "%s is out of range", k.MaxSize)
		}
	}
	if len(e.Rules) > maxRules {
		p.add("events.rules", "", "%d rules, at most %d", len(e.Rules), maxRules)
		return
	}
	for i, r := range e.Rules {
		f := fmt.Sprintf("events.rules[%d]", i)
		if len(r.Kinds) == 0 {
			p.add(f+".kinds", "the kinds of event the rule reads, like [test]", "missing: a rule reads only the kinds it names")
		}
		for j, k := range r.Kinds {
			if !seen[k] {
				p.add(fmt.Sprintf("%s.kinds[%d]", f, j), "a built-in kind ("+strings.Join(BuiltinEventKinds, ", ")+") or one events.kinds lists; no wildcard", "%q is not a kind of this policy", shorten(k))
			}
		}
		if strings.TrimSpace(r.When) == "" {
			p.add(f+".when", `a CEL condition over event, run and sandbox, like event.status == "fail"`, "missing")
		}
		switch r.Action {
		case EventStop, EventAsk, EventDeny:
		case "":
			p.add(f+".action", "stop, ask or deny", "missing")
		default:
			p.add(f+".action", "stop, ask or deny", "%q is not one of stop, ask, deny", shorten(r.Action))
		}
		if len(r.Reason) > maxReason || hasCTL(r.Reason) {
			p.add(f+".reason", "one line of at most 1024 bytes", "too long or contains control characters")
		}
	}
}

// Check validates the section on its own (a run's config carries it apart
// from its document).
func (e *Events) Check() error {
	p := &problems{}
	e.validate(p)
	if len(p.errs) == 0 {
		return nil
	}
	return joinErrors(p.errs)
}
