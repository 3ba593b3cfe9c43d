package policy

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// llmExample uses every key of the llm section.
const llmExample = `
llm:
  enabled: true
  models: ["gpt-4o*", claude-sonnet-4-5, "local:*"]
  map:
    fast: local:llama3.1-8b
    smart: anthropic:claude-sonnet-4-5
  max_requests_per_minute: 60
  max_tokens: 200000
  max_credits: 5
  log_bodies: true
`

func TestParseLLM(t *testing.T) {
	doc, err := Parse([]byte(llmExample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := LLM{
		Enabled:              true,
		Models:               []string{"gpt-4o*", "claude-sonnet-4-5", "local:*"},
		Map:                  ModelMap{"fast": "local:llama3.1-8b", "smart": "anthropic:claude-sonnet-4-5"},
		MaxRequestsPerMinute: 60, MaxTokens: 200_000, MaxCredits: 5, LogBodies: true,
	}
	if !reflect.DeepEqual(doc.LLM, want) {
		t.Errorf("LLM = %+v\nwant %+v", doc.LLM, want)
	}
	if d := Default().LLM; !reflect.DeepEqual(d, LLM{}) {
		t.Errorf("Default().LLM = %+v, want off and empty", d)
	}
}

func TestLLMResolveAndAllows(t *testing.T) {
	doc, err := Parse([]byte(llmExample))
	if err != nil {
		t.Fatal(err)
	}
	l := &doc.LLM
	tests := []struct {
		upstream, model    string
		wantUp, wantModel  string
		wantMapped, allows bool
	}{
		{"openai", "gpt-4o-mini", "openai", "gpt-4o-mini", false, true},
		{"openai", "gpt-4o", "openai", "gpt-4o", false, true},
		{"openai", "gpt-4.1", "openai", "gpt-4.1", false, false},
		{"openai", "fast", "local", "llama3.1-8b", true, true},            // "local:*" matches the spec
		{"openai", "smart", "anthropic", "claude-sonnet-4-5", true, true}, // the resolved name is listed
		{"anthropic", "claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", false, true},
		{"anthropic", "claude-opus-4", "anthropic", "claude-opus-4", false, false},
		{"openai", "", "openai", "", false, false},
	}
	for _, tt := range tests {
		up, model, mapped := l.Resolve(tt.upstream, tt.model)
		if up != tt.wantUp || model != tt.wantModel || mapped != tt.wantMapped {
			t.Errorf("Resolve(%q, %q) = %q, %q, %v; want %q, %q, %v", tt.upstream, tt.model, up, model, mapped, tt.wantUp, tt.wantModel, tt.wantMapped)
		}
		if got := l.Allows(up, model); got != tt.allows {
			t.Errorf("Allows(%q, %q) = %v, want %v", up, model, got, tt.allows)
		}
	}
	// A map key is not itself allowed: only what it resolves to counts.
	strict := LLM{Enabled: true, Models: []string{"fast"}, Map: ModelMap{"fast": "openai:gpt-4.1"}}
	if up, m, _ := strict.Resolve("openai", "fast"); strict.Allows(up, m) {
		t.Errorf("Allows(%q, %q) = true; the allowlist names only the alias", up, m)
	}
}

func TestMatchGlob(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"gpt-4o*", "gpt-4o", true},
		{"gpt-4o*", "gpt-4o-mini-2024-07-18", true},
		{"gpt-4o*", "gpt-4", false},
		{"*", "", true},
		{"*", "meta-llama/Llama-3-8B", true},
		{"meta-llama/*", "meta-llama/Llama-3-8B", true},
		{"gpt-?o", "gpt-4o", true},
		{"gpt-?o", "gpt-40o", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"**", "x", true},
		{"", "", true},
		{"", "x", false},
		{"[a]", "a", false}, // no classes: brackets are literal
		{"[a]", "[a]", true},
	}
	for _, tt := range tests {
		if got := MatchGlob(tt.pattern, tt.s); got != tt.want {
			t.Errorf("MatchGlob(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// FuzzMatchGlob checks MatchGlob against a regular expression built from
// the pattern.
func FuzzMatchGlob(f *testing.F) {
	f.Add("gpt-4o*", "gpt-4o-mini")
	f.Add("a*b?c*", "aXbbcc")
	f.Add("*a*a*a*a*b", strings.Repeat("a", 40))
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if len(pattern) > 64 || len(s) > 256 || !isASCII(pattern) || !isASCII(s) {
			return // the reference below works on runes, the glob on bytes
		}
		var re strings.Builder
		re.WriteString(`(?s)\A`)
		for i := 0; i < len(pattern); i++ {
			switch c := pattern[i]; c {
			case '*':
				re.WriteString(`[\x00-\xff]*`)
			case '?':
				re.WriteString(`[\x00-\xff]`)
			default:
				re.WriteString(regexp.QuoteMeta(string([]byte{c})))
			}
		}
		re.WriteString(`\z`)
		want := regexp.MustCompile(re.String()).MatchString(s)
		if got := MatchGlob(pattern, s); got != want {
			t.Fatalf("MatchGlob(%q, %q) = %v, regexp says %v", pattern, s, got, want)
		}
	})
}

func TestParseLLMErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      string
	}{
		{
			"unknown key", "llm:\n  enable: true\n",
			"policy: llm: field enable not found (line 2; hint: did you mean enabled? known keys: enabled, models, map, max_requests_per_minute, max_tokens, max_credits, log_bodies)",
		},
		{
			"not a mapping", "llm: true\n",
			"policy: llm: want a mapping, got true (line 1; hint: known keys: enabled, models, map, max_requests_per_minute, max_tokens, max_credits, log_bodies)",
		},
		{
			"enabled not a bool", "llm:\n  enabled: yes\n",
			`policy: llm.enabled: want true or false, got the string "yes" (line 2; hint: write true or false)`,
		},
		{
			"enabled without models", "llm:\n  enabled: true\n",
			`policy: llm.models: the gateway is enabled but allows no model (line 1; hint: list the models sandboxes may call, like ["gpt-4o-mini"], or ["*"] for any)`,
		},
		{
			"models not a list", "llm:\n  models: gpt-4o\n",
			`policy: llm.models: want a list, got the string "gpt-4o" (line 2; hint: write a list, like [a, b] or one "- item" per line)`,
		},
		{
			"model empty", "llm:\n  models: [gpt-4o, '']\n",
			`policy: llm.models[1]: "" is not a model name (line 2; hint: a model name or a glob of one, like "gpt-4o*", of at most 256 printable bytes)`,
		},
		{
			"model padded", "llm:\n  models: [' gpt-4o']\n",
			`policy: llm.models[0]: " gpt-4o" is not a model name (line 2; hint: a model name or a glob of one, like "gpt-4o*", of at most 256 printable bytes)`,
		},
		{
			"model twice", "llm:\n  models:\n    - gpt-4o\n    - gpt-4o\n",
			"policy: llm.models[1]: gpt-4o is listed already as llm.models[0] (line 4)",
		},
		{
			"model a number", "llm:\n  models: [4]\n",
			"policy: llm.models[0]: want a string, got the number 4 (line 2; hint: quote it if it is meant as text)",
		},
		{
			"map not a mapping", "llm:\n  map: [a]\n",
			`policy: llm.map: want a mapping, got a list (line 2; hint: write model: UPSTREAM:MODEL pairs, like fast: "local:llama3")`,
		},
		{
			"map value not a string", "llm:\n  map:\n    fast: 3\n",
			"policy: llm.map.fast: want a string, got the number 3 (line 3; hint: quote it if it is meant as text)",
		},
		{
			"map value no upstream", "llm:\n  map:\n    fast: llama3\n",
			`policy: llm.map.fast: "llama3" is not UPSTREAM:MODEL (line 3; hint: UPSTREAM:MODEL, like "openai:gpt-4o-mini"; the upstream is lowercase letters, digits, _ and -)`,
		},
		{
			"map value bad upstream", "llm:\n  map:\n    fast: Local:llama3\n",
			`policy: llm.map.fast: "Local:llama3" is not UPSTREAM:MODEL (line 3; hint: UPSTREAM:MODEL, like "openai:gpt-4o-mini"; the upstream is lowercase letters, digits, _ and -)`,
		},
		{
			"map value no model", "llm:\n  map:\n    fast: 'local:'\n",
			`policy: llm.map.fast: "local:" is not UPSTREAM:MODEL (line 3; hint: UPSTREAM:MODEL, like "openai:gpt-4o-mini"; the upstream is lowercase letters, digits, _ and -)`,
		},
		{
			"map key twice", "llm:\n  map:\n    fast: a:b\n    fast: a:c\n",
			`policy: llm.map: mapping key "fast" already defined at line 3 (line 4)`,
		},
		{
			"rate negative", "llm:\n  max_requests_per_minute: -1\n",
			"policy: llm.max_requests_per_minute: -1 is negative (line 2; hint: 0 or leaving it out means no bound)",
		},
		{
			"tokens negative", "llm:\n  max_tokens: -1\n",
			"policy: llm.max_tokens: -1 is negative (line 2; hint: 0 or leaving it out means no bound)",
		},
		{
			"credits negative", "llm:\n  max_credits: -1\n",
			"policy: llm.max_credits: -1 is negative (line 2; hint: 0 or leaving it out means no bound)",
		},
		{
			"credits huge", "llm:\n  max_credits: 1000001\n",
			"policy: llm.max_credits: 1000001 is more than 1000000 credits (line 2)",
		},
		{
			"log_bodies not a bool", "llm:\n  log_bodies: 1\n",
			"policy: llm.log_bodies: want true or false, got the number 1 (line 2; hint: write true or false)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse = %s, want error %q", doc.Canonical(), tt.want)
			}
			if !hasLine(err, tt.want) {
				t.Fatalf("Parse error:\n%v\nwant a line %q", err, tt.want)
			}
		})
	}
}

// TestLLMCanonical: the section is left out of the canonical form (and so
// of the hash) while it is all defaults; written out, with models sorted,
// once it says anything; and any change of meaning changes the hash.
func TestLLMCanonical(t *testing.T) {
	def := Default().Hash()
	for _, src := range []string{"llm:\n", "llm: {}\n", "llm:\n  enabled: false\n  models: []\n  map: {}\n  log_bodies: false\n"} {
		doc, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		if doc.Hash() != def {
			t.Errorf("Parse(%q).Hash() = %s, want the default's %s\n%s", src, doc.Hash(), def, doc.Canonical())
		}
		if strings.Contains(string(doc.Canonical()), "llm") {
			t.Errorf("Parse(%q).Canonical() writes the default llm section:\n%s", src, doc.Canonical())
		}
	}
	base, err := Parse([]byte(llmExample))
	if err != nil {
		t.Fatal(err)
	}
	const wantSection = `llm:
  enabled: true
  models:
    - claude-sonnet-4-5
    - gpt-4o*
    - local:*
  map:
    fast: local:llama3.1-8b
    smart: anthropic:claude-sonnet-4-5
  max_requests_per_minute: 60
  max_tokens: 200000
  max_credits: 5
  log_bodies: true
`
	if c := string(base.Canonical()); !strings.HasSuffix(c, wantSection) {
		t.Errorf("Canonical() =\n%s\nwant it to end with\n%s", c, wantSection)
	}
	same := "llm: {log_bodies: true, max_credits: 5, max_tokens: 200000, max_requests_per_minute: 60, " +
		"map: {smart: 'anthropic:claude-sonnet-4-5', fast: 'local:llama3.1-8b'}, models: ['local:*', claude-sonnet-4-5, 'gpt-4o*'], enabled: true}\n"
	doc, err := Parse([]byte(same))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Hash() != base.Hash() {
		t.Errorf("reordered llm section: Hash() = %s, want %s\n%s", doc.Hash(), base.Hash(), doc.Canonical())
	}
	off, err := Parse([]byte("llm:\n  models: [gpt-4o]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(off.Canonical()), "llm:\n  enabled: false\n  models:\n    - gpt-4o\n  map: {}\n  log_bodies: false\n") {
		t.Errorf("a disabled section that lists a model:\n%s", off.Canonical())
	}
	changes := []struct{ old, new string }{
		{"enabled: true", "enabled: false"},
		{"claude-sonnet-4-5, ", ""},
		{"fast: local:llama3.1-8b", "fast: local:llama3.1-70b"},
		{"    smart: anthropic:claude-sonnet-4-5\n", ""},
		{"max_requests_per_minute: 60", "max_requests_per_minute: 61"},
		{"max_tokens: 200000", "max_tokens: 1"},
		{"max_credits: 5", "max_credits: 6"},
		{"log_bodies: true", "log_bodies: false"},
	}
	for _, c := range changes {
		src := strings.Replace(llmExample, c.old, c.new, 1)
		if src == llmExample {
			t.Fatalf("change %q does not apply", c.old)
		}
		doc, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%q -> %q: Parse: %v", c.old, c.new, err)
		}
		if doc.Hash() == base.Hash() {
			t.Errorf("%q -> %q does not change the hash", c.old, c.new)
		}
		again, err := Parse(doc.Canonical())
		if err != nil || again.Hash() != doc.Hash() {
			t.Errorf("%q -> %q: the canonical form does not parse to the same hash: %v", c.old, c.new, err)
		}
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
