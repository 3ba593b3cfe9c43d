package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/airlockrun/airlock/internal/secret/scan"
)

// Secrets says what happens to credentials the host was never given: a key
// a user pastes into a task, a token the model copies into a command, a
// private key in a tool's output. The scanner (internal/secret/scan:
// gitleaks' rules and airlock's) finds them by their shape; the secrets the
// host stores are redacted everywhere whatever this section says.
//
//	secrets:
//	  arguments: ask          # a call whose arguments carry one
//	  results: redact         # tool results, before the log and the model
//	  task: redact            # the run's task, before it is recorded
//	  patch: redact           # the patch, before it is exported
//	  rules:                  # decide arguments' findings first
//	    - when: tool == "write_file" && secrets.all(s, s == "generic-api-key")
//	      action: allow
//	  allow: ['^sk_test_']    # values that are not secrets (RE2)
//	  disable: [jwt]          # rule ids not to use
//
// The zero value is the default: everything scanned, arguments asked about,
// the rest redacted.
type Secrets struct {
	// Off turns the scanner off.
	Off bool `yaml:"off,omitempty"`
	// Arguments decides a tool call whose arguments carry a finding when
	// no rule of Rules decides (default ask). It can only make a call's
	// decision stricter: a call the tools section denies stays denied.
	Arguments Verdict `yaml:"arguments,omitempty"`
	// Results is what happens to a finding in a tool's result: redact
	// (default; the model and the log see a marker naming the rule) or
	// keep.
	Results SecretAction `yaml:"results,omitempty"`
	// Task is what happens to a finding in the run's task: redact
	// (default), keep, or refuse (the run is not created).
	Task SecretAction `yaml:"task,omitempty"`
	// Patch is what happens to a finding in the added lines of the patch
	// a run exports: redact (default) or keep.
	Patch SecretAction `yaml:"patch,omitempty"`
	// Rules decide a call whose arguments carry findings before
	// Arguments does; they see what tool rules see, and secrets.
	Rules []ToolRule `yaml:"rules,omitempty"`
	// Allow are RE2 patterns of values that are not secrets.
	Allow []string `yaml:"allow,omitempty"`
	// Disable are ids of the scanner's rules not to use.
	Disable []string `yaml:"disable,omitempty"`
}

// SecretAction is what happens to a finding in text the host records.
type SecretAction string

// The actions of a finding.
const (
	SecretRedact SecretAction = "redact"
	SecretKeep   SecretAction = "keep"
	SecretRefuse SecretAction = "refuse"
)

// Or returns a, or def when a is empty.
func (a SecretAction) Or(def SecretAction) SecretAction {
	if a == "" {
		return def
	}
	return a
}

func (s *Secrets) isZero() bool {
	return !s.Off && s.Arguments == "" && s.Results == "" && s.Task == "" && s.Patch == "" &&
		len(s.Rules) == 0 && len(s.Allow) == 0 && len(s.Disable) == 0
}

// ScanOptions is the scanner's configuration the section asks for.
func (s *Secrets) ScanOptions() scan.Options {
	return scan.Options{Allow: slices.Clone(s.Allow), Disable: slices.Clone(s.Disable)}
}

const maxSecretPatterns = 256

func (s *Secrets) validate(p *problems) {
	checkVerdict(p, "secrets.arguments", s.Arguments, true)
	for _, f := range []struct {
		field string
		v     SecretAction
		ok    []SecretAction
	}{
		{"secrets.results", s.Results, []SecretAction{SecretRedact, SecretKeep}},
		{"secrets.task", s.Task, []SecretAction{SecretRedact, SecretKeep, SecretRefuse}},
		{"secrets.patch", s.Patch, []SecretAction{SecretRedact, SecretKeep}},
	} {
		if f.v != "" && !slices.Contains(f.ok, f.v) {
			names := make([]string, len(f.ok))
			for i, a := range f.ok {
				names[i] = string(a)
			}
			p.add(f.field, "one of "+strings.Join(names, ", "), "%q is not an action", shorten(string(f.v)))
		}
	}
	checkRules(p, "secrets.rules", s.Rules)
	if len(s.Allow)+len(s.Disable) > maxSecretPatterns {
		p.add("secrets.allow", "", "%d patterns and rule ids, at most %d", len(s.Allow)+len(s.Disable), maxSecretPatterns)
		return
	}
	for i, a := range s.Allow {
		if err := scan.CheckOptions(scan.Options{Allow: []string{a}}); err != nil {
			p.add(fmt.Sprintf("secrets.allow[%d]", i), "an RE2 pattern of values that are not secrets, like '^sk_test_'", "%q does not compile", shorten(a))
		}
	}
	for i, id := range s.Disable {
		if err := scan.CheckOptions(scan.Options{Disable: []string{id}}); err != nil {
			p.add(fmt.Sprintf("secrets.disable[%d]", i), "a rule id of the scanner, like jwt or generic-api-key (airlock policy scan --rules lists them)", "no rule %q", shorten(id))
		}
	}
}

// Scanner returns the secret scanner the document asks for; nil when
// secrets.off is set. It is built once per document.
func (d *Document) Scanner() *scan.Scanner {
	if tp := d.toolPolicy(); tp.scanner != nil {
		return tp.scanner()
	}
	// A document whose rules do not compile decides nothing; its text
	// is still scanned with the default rules.
	return scan.NewOrDefault(scan.Options{})
}

// ResultScanner returns the scanner that redacts what the sandbox sends
// back (tool results, its events): Scanner, or nil when secrets.results
// keeps findings or scanning is off.
func (d *Document) ResultScanner() *scan.Scanner {
	if d.Secrets.Results == SecretKeep {
		return nil
	}
	return d.Scanner()
}

// argFindings returns the ids of the rules that find something in the
// string values of args (a JSON object), sorted and distinct.
func argFindings(sc *scan.Scanner, args json.RawMessage) []string {
	if sc == nil || len(args) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(args, &v) != nil {
		// Not JSON: scan it as it is.
		return scan.IDs(sc.Scan(string(args)))
	}
	var fs []scan.Finding
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			fs = append(fs, sc.Scan(v)...)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return scan.IDs(fs)
}

// stricter returns the stricter of two decisions (deny, then ask, then
// allow); a when they are as strict.
func stricter(a, b ToolDecision) ToolDecision {
	rank := map[Verdict]int{Allow: 0, Ask: 1, Deny: 2}
	if rank[b.Action] > rank[a.Action] {
		return b
	}
	return a
}
