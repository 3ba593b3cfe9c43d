package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LLM is what the LLM gateway lets a run's sandboxes do: call models with
// the run's scoped token, never with a provider key. It is off unless the
// document turns it on.
//
//	llm:
//	  enabled: true
//	  models: ["gpt-4o*", claude-sonnet-4-5]
//	  map:
//	    fast: local:llama3.1-8b
//	  max_requests_per_minute: 60
//	  max_tokens: 200000
//	  max_credits: 5
//	  log_bodies: false
type LLM struct {
	// Enabled turns the gateway on for the run (default false).
	Enabled bool `yaml:"enabled"`
	// Models are the models a sandbox may call: exact names or globs in
	// which * matches any run of characters and ? any one character
	// ("gpt-4o*"). A request's model is checked after Map has resolved
	// it: against the upstream's model name and against
	// "UPSTREAM:MODEL". Its order means nothing.
	Models []string `yaml:"models"`
	// Map renames models: a request for the key is sent to the upstream
	// and model of the value, written "UPSTREAM:MODEL" (the upstream is
	// one the host configures, like openai, anthropic or a local
	// OpenAI-compatible server). A model not in Map goes to the upstream
	// the sandbox addressed, under its own name.
	Map ModelMap `yaml:"map"`
	// MaxRequestsPerMinute bounds the gateway calls of the run in any
	// minute; 0 means no bound from the policy.
	MaxRequestsPerMinute int64 `yaml:"max_requests_per_minute,omitempty"`
	// MaxTokens bounds the tokens (input and output) of all the run's
	// gateway calls; 0 means no bound from the policy.
	MaxTokens int64 `yaml:"max_tokens,omitempty"`
	// MaxCredits bounds what the run's gateway calls may cost, in
	// credits; 0 means no bound from the policy.
	MaxCredits int64 `yaml:"max_credits,omitempty"`
	// LogBodies records prompt and completion bodies in the run's log,
	// through the redactor (default false: only sizes, tokens and cost).
	LogBodies bool `yaml:"log_bodies"`
}

// ModelMap maps a model name a sandbox asks for to "UPSTREAM:MODEL".
type ModelMap map[string]string

// Bounds of the llm section.
const (
	maxLLMModels = 256
	maxModelName = 256
	maxUpstream  = 64
)

// Allows reports whether the resolved model may be called: whether a
// pattern of Models matches model or upstream+":"+model.
func (l *LLM) Allows(upstream, model string) bool {
	spec := upstream + ":" + model
	for _, p := range l.Models {
		if MatchGlob(p, model) || MatchGlob(p, spec) {
			return true
		}
	}
	return false
}

// Resolve returns the upstream and model a request for model goes to: the
// entry of Map when there is one, else upstream (the one the sandbox
// addressed) and model unchanged. mapped says whether Map decided.
func (l *LLM) Resolve(upstream, model string) (up, name string, mapped bool) {
	if v, ok := l.Map[model]; ok {
		u, m, _ := strings.Cut(v, ":")
		return u, m, true
	}
	return upstream, model, false
}

// MatchGlob reports whether s matches pattern, in which * matches any run
// of characters (also none, also "/") and ? any one byte; every other byte
// matches itself. It runs in O(len(pattern)·len(s)) at worst.
func MatchGlob(pattern, s string) bool {
	// The classic two-pointer wildcard match: on a mismatch, go back to
	// the last star and let it take one more byte.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]) && pattern[p] != '*':
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// decodeNode decodes the map of model names.
func (m *ModelMap) decodeNode(d *decoder, n *yaml.Node, field string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, `write model: UPSTREAM:MODEL pairs, like fast: "local:llama3"`, "want a mapping, got %s", describe(n))
		return
	}
	out := ModelMap{}
	d.eachKey(n, field, func(k, v *yaml.Node) {
		var s string
		d.decode(v, join(field, k.Value), refValue(&s))
		out[k.Value] = s
	})
	*m = out
}

// validModelName reports whether s can name a model: 1 to 256 bytes
// without control characters or spaces at either end.
func validModelName(s string) bool {
	return s != "" && len(s) <= maxModelName && !hasCTL(s) && !strings.ContainsRune(s, '\t') && strings.TrimSpace(s) == s
}

// validUpstream reports whether s can name an upstream: lowercase letters,
// digits, _ and -, starting with a letter, at most 64.
func validUpstream(s string) bool {
	if s == "" || len(s) > maxUpstream || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (l *LLM) validate(p *problems) {
	if len(l.Models) > maxLLMModels {
		p.add("llm.models", "", "%d models, at most %d", len(l.Models), maxLLMModels)
	}
	seen := map[string]int{}
	for i, m := range l.Models {
		field := fmt.Sprintf("llm.models[%d]", i)
		switch j, dup := seen[m]; {
		case !validModelName(m):
			p.add(field, `a model name or a glob of one, like "gpt-4o*", of at most 256 printable bytes`, "%q is not a model name", shorten(m))
		case dup:
			p.add(field, "", "%s is listed already as llm.models[%d]", m, j)
		default:
			seen[m] = i
		}
	}
	if l.Enabled && len(l.Models) == 0 {
		p.add("llm.models", `list the models sandboxes may call, like ["gpt-4o-mini"], or ["*"] for any`, "the gateway is enabled but allows no model")
	}
	if len(l.Map) > maxLLMModels {
		p.add("llm.map", "", "%d entries, at most %d", len(l.Map), maxLLMModels)
	}
	for _, k := range sortedNames(l.Map) {
		field := join("llm.map", k)
		if !validModelName(k) {
			p.add(field, "a model name of at most 256 printable bytes", "%q is not a model name", shorten(k))
			continue
		}
		up, model, ok := strings.Cut(l.Map[k], ":")
		if !ok || !validUpstream(up) || !validModelName(model) {
			p.add(field, `UPSTREAM:MODEL, like "openai:gpt-4o-mini"; the upstream is lowercase letters, digits, _ and -`,
				"%q is not UPSTREAM:MODEL", shorten(l.Map[k]))
		}
	}
	for _, v := range []struct {
		field string
		v     int64
	}{{"llm.max_requests_per_minute", l.MaxRequestsPerMinute}, {"llm.max_tokens", l.MaxTokens}, {"llm.max_credits", l.MaxCredits}} {
		if v.v < 0 {
			p.add(v.field, "0 or leaving it out means no bound", "%d is negative", v.v)
		}
	}
	if l.MaxCredits > maxLLMCredits {
		p.add("llm.max_credits", "", "%d is more than %d credits", l.MaxCredits, int64(maxLLMCredits))
	}
}

// maxLLMCredits keeps max_credits in micro-credits far from the int64
// limit (a million credits, the ledger's largest entry).
const maxLLMCredits = 1_000_000

// isZero reports whether l is the default: off, nothing listed, no bound.
func (l *LLM) isZero() bool {
	return !l.Enabled && len(l.Models) == 0 && len(l.Map) == 0 && l.MaxRequestsPerMinute == 0 &&
		l.MaxTokens == 0 && l.MaxCredits == 0 && !l.LogBodies
}
