// Package scan finds credentials airlock was never told about: a cloud key
// a user pasted into a task, a token the model copied from a file into a
// command, a private key in a tool's output. The host's Redactor scrubs the
// secrets it stores; this scanner catches the rest by their shape.
//
// The rules are gitleaks' default rule set (github.com/zricethezav/gitleaks,
// its config package: some 220 rules for cloud providers' keys, GitHub,
// GitLab, Slack and Stripe tokens, JWTs, PEM private keys and generic
// high-entropy assignments, with their allowlists), kept as data by a
// project that maintains it, plus airlock's own few (connection strings
// with a password). Only the config package is linked: gitleaks' detector
// drags archive decoders and git into the build, so the matching is here
// and follows gitleaks' semantics: a rule runs when the text holds one of
// its keywords, its secret is the rule's secret group (or the first
// non-empty group), the secret's Shannon entropy must exceed the rule's
// threshold, and a finding the global or the rule's allowlists allow is
// dropped. Rules that match file paths are not used: what is scanned here
// is text, not files.
//
// A Scanner is safe for concurrent use. Scanning is linear in the text
// times the rules whose keywords it holds; callers cap what they scan.
package scan

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"

	ahocorasick "github.com/BobuSumisu/aho-corasick"
	"github.com/spf13/viper"
	gitleaks "github.com/zricethezav/gitleaks/v8/config"
)

// Finding is one credential-shaped value in a text.
type Finding struct {
	// Rule is the id of the rule that found it (gitleaks' ids, e.g.
	// "aws-access-token", "github-pat", "private-key").
	Rule string `json:"rule"`
	// Start and End are the secret's byte offsets in the text.
	Start int `json:"start"`
	End   int `json:"end"`
}

// Options adjust the default rule set.
type Options struct {
	// Disable are rule ids not to use.
	Disable []string
	// Allow are RE2 patterns: a secret one of them matches is not a
	// finding (test fixtures, known placeholders).
	Allow []string
}

// Scanner finds credentials in text.
type Scanner struct {
	*ruleSet
	// off are the rules not to use, by index.
	off   []bool
	allow []*regexp.Regexp
}

// ruleSet is the loaded rules, shared by every Scanner.
type ruleSet struct {
	rules []rule
	// byKeyword maps a lower-case keyword to the rules that need it.
	byKeyword map[string][]int
	// always are the rules without keywords: they run on every text.
	always []int
	trie   *ahocorasick.Trie
	global []allowlist
}

// rule is one detection rule.
type rule struct {
	id          string
	re          *regexp.Regexp
	secretGroup int
	entropy     float64
	allow       []allowlist
	// keywords, lower case: the rule runs only on a text holding one;
	// none means every text.
	keywords []string
	// long is a rule whose match may span many lines.
	long bool
}

// allowlist drops findings whose secret (or match, or line) matches one of
// its regexes or holds one of its stop words; with and, only when all of
// the checks it has hold.
type allowlist struct {
	target    string // "", "match" or "line"
	regexes   []*regexp.Regexp
	stopWords []string
	and       bool
}

// defaults is the rule set, loaded once.
var defaults = sync.OnceValues(func() (*ruleSet, error) {
	rules, global, err := load()
	if err != nil {
		return nil, err
	}
	rs := &ruleSet{rules: rules, byKeyword: map[string][]int{}, global: global}
	var keywords []string
	for i, r := range rules {
		if len(r.keywords) == 0 {
			rs.always = append(rs.always, i)
		}
		for _, k := range r.keywords {
			if rs.byKeyword[k] == nil {
				keywords = append(keywords, k)
			}
			rs.byKeyword[k] = append(rs.byKeyword[k], i)
		}
	}
	rs.trie = ahocorasick.NewTrieBuilder().AddStrings(keywords).Build()
	return rs, nil
})

// Preload loads the rules in the background, so that the first Scanner a
// process makes does not wait for them (parsing and compiling some 220
// rules takes tens of milliseconds of CPU).
func Preload() { go func() { _, _ = defaults() }() }

// CheckOptions reports what New would refuse in o, without loading the
// rules unless o disables some (their ids are checked against them).
func CheckOptions(o Options) error {
	for _, p := range o.Allow {
		if _, err := regexp.Compile(p); err != nil {
			return fmt.Errorf("secret scan: allow %q: %w", p, err)
		}
	}
	if len(o.Disable) == 0 {
		return nil
	}
	_, err := New(Options{Disable: o.Disable})
	return err
}

// New returns a Scanner of the default rules adjusted by o. An unknown rule
// id in Disable or a pattern that does not compile is an error.
func New(o Options) (*Scanner, error) {
	rs, err := defaults()
	if err != nil {
		return nil, err
	}
	s := &Scanner{ruleSet: rs, off: make([]bool, len(rs.rules))}
	for _, id := range o.Disable {
		i := slices.IndexFunc(rs.rules, func(r rule) bool { return r.id == id })
		if i < 0 {
			return nil, fmt.Errorf("secret scan: disable: no rule %q", id)
		}
		s.off[i] = true
	}
	for _, p := range o.Allow {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("secret scan: allow %q: %w", p, err)
		}
		s.allow = append(s.allow, re)
	}
	return s, nil
}

// NewOrDefault is New(o), or a Scanner of the default rules when o asks for
// what New refuses (options recorded by another build, or those of a document
// that failed validation): text is never left unscanned because its options
// came from elsewhere. It is nil only if the built-in rules do not load, a
// defect this package's tests catch.
func NewOrDefault(o Options) *Scanner {
	if s, err := New(o); err == nil {
		return s
	}
	s, _ := New(Options{})
	return s
}

// load reads gitleaks' default configuration and airlock's own rules.
func load() ([]rule, []allowlist, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(gitleaks.DefaultConfig)); err != nil {
		return nil, nil, fmt.Errorf("secret scan: read gitleaks' rules: %w", err)
	}
	var vc gitleaks.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return nil, nil, fmt.Errorf("secret scan: read gitleaks' rules: %w", err)
	}
	cfg, err := vc.Translate()
	if err != nil {
		return nil, nil, fmt.Errorf("secret scan: read gitleaks' rules: %w", err)
	}
	var rules []rule
	for _, r := range cfg.GetOrderedRules() {
		// Path rules judge files by name; rules that need other rules'
		// findings nearby (multi-part credentials) and rules gitleaks
		// itself does not report stand alone are left out.
		if r.Regex == nil || r.Path != nil || len(r.RequiredRules) > 0 || r.SkipReport {
			continue
		}
		src := r.Regex.String()
		rules = append(rules, rule{
			id: r.RuleID, re: r.Regex, secretGroup: r.SecretGroup, entropy: r.Entropy, allow: allowlistsOf(r.Allowlists), keywords: lower(r.Keywords),
			long: strings.Contains(src, `[\s\S`) || strings.Contains(src, "(?s"),
		})
	}
	rules = append(rules, ownRules...)
	if len(rules) < 100 {
		return nil, nil, errors.New("secret scan: gitleaks' default rules did not load")
	}
	return rules, allowlistsOf(cfg.Allowlists), nil
}

// asciiLower is text with ASCII letters in lower case: the same length,
// so offsets into it are offsets into text (strings.ToLower may change
// the length of other letters).
func asciiLower(text string) []byte {
	b := []byte(text)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}

func lower(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToLower(s)
	}
	return out
}

func allowlistsOf(as []*gitleaks.Allowlist) []allowlist {
	var out []allowlist
	for _, a := range as {
		// Commit and path conditions never hold for text; an "and" list
		// that needs one can never allow.
		if a.MatchCondition == gitleaks.AllowlistMatchAnd && (len(a.Commits) > 0 || len(a.Paths) > 0) {
			continue
		}
		if len(a.Regexes) == 0 && len(a.StopWords) == 0 {
			continue
		}
		out = append(out, allowlist{target: a.RegexTarget, regexes: a.Regexes, stopWords: lower(a.StopWords), and: a.MatchCondition == gitleaks.AllowlistMatchAnd})
	}
	return out
}

// ownRules are what gitleaks' defaults do not cover and airlock's users
// paste: a URL with a password in it (databases, brokers, git remotes).
// A placeholder password (a variable, stars, x's, "password") is allowed.
var ownRules = []rule{{
	id:          "url-password",
	re:          regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^:/?#\s@"'<>]{1,64}:([^@/?#\s"'<>]{3,128})@[a-zA-Z0-9.-]+`),
	secretGroup: 1,
	entropy:     2.0,
	allow: []allowlist{{regexes: []*regexp.Regexp{
		regexp.MustCompile(`^(?i:\$\{?[a-z_][a-z0-9_]*\}?|\*+|x+|\.+|<[^>]*>|\{\{.*\}\}|%[a-z_]+%|pass(word)?|secret|changeme|example)$`),
	}}},
	keywords: []string{"://"},
}}

// Scan returns the findings in text, in order of their start, without
// overlaps (a secret two rules find is reported once).
func (s *Scanner) Scan(text string) []Finding {
	if s == nil || text == "" {
		return nil
	}
	// Each rule runs where its keywords are (gitleaks runs it over the
	// whole text: a 32 KiB result with one token in it would cost every
	// rule that token's keywords name a pass over all of it).
	windows := map[int][][2]int{}
	for _, i := range s.always {
		windows[i] = [][2]int{{0, len(text)}}
	}
	for _, m := range s.trie.Match(asciiLower(text)) {
		at := int(m.Pos())
		for _, i := range s.byKeyword[m.MatchString()] {
			windows[i] = addWindow(windows[i], s.rules[i].window(text, at))
		}
	}
	// The rules run in their order (not the map's), so that of two
	// findings alike (gitleaks' bittrex-access-key and bittrex-secret-key
	// are one expression) the same is named every time.
	order := make([]int, 0, len(windows))
	for i := range windows {
		order = append(order, i)
	}
	slices.Sort(order)
	var out []Finding
	for _, i := range order {
		if s.off[i] {
			continue
		}
		for _, w := range windows[i] {
			out = s.rules[i].find(text, w[0], w[1], s, out)
		}
	}
	// Where findings overlap, the one of a specific rule is kept over a
	// generic one (a Stripe key is also a high-entropy assignment), then
	// the longer, then the earlier rule's.
	slices.SortStableFunc(out, func(a, b Finding) int {
		if ga, gb := generic(a.Rule), generic(b.Rule); ga != gb {
			if ga {
				return 1
			}
			return -1
		}
		return (b.End - b.Start) - (a.End - a.Start)
	})
	var kept []Finding
	for _, f := range out {
		if !slices.ContainsFunc(kept, func(k Finding) bool { return f.Start < k.End && k.Start < f.End }) {
			kept = append(kept, f)
		}
	}
	slices.SortFunc(kept, func(a, b Finding) int { return a.Start - b.Start })
	return kept
}

// Bounds of the text a rule's regular expression runs over around one of
// its keywords: from the start of the line windowBefore bytes before it to
// windowAfter bytes after it (windowAfterLong for rules whose match may run
// over many lines, like a PEM private key's).
const (
	windowBefore    = 512
	windowAfter     = 4 << 10
	windowAfterLong = 64 << 10
)

// window is the stretch of text r runs over for the keyword at byte at.
func (r *rule) window(text string, at int) [2]int {
	start := max(at-windowBefore, 0)
	start = strings.LastIndexByte(text[:start], '\n') + 1
	after := windowAfter
	if r.long {
		after = windowAfterLong
	}
	end := min(at+after, len(text))
	if i := strings.IndexByte(text[end:], '\n'); i >= 0 {
		end += i + 1
	} else {
		end = len(text)
	}
	return [2]int{start, end}
}

// addWindow adds w to ws, whose windows are in order and disjoint, merging
// where they overlap.
func addWindow(ws [][2]int, w [2]int) [][2]int {
	if n := len(ws); n > 0 && w[0] <= ws[n-1][1] {
		ws[n-1][1] = max(ws[n-1][1], w[1])
		return ws
	}
	return append(ws, w)
}

// find appends rule r's findings in text[from:to] to out, with offsets in
// text.
func (r *rule) find(text string, from, to int, s *Scanner, out []Finding) []Finding {
	for _, m := range r.re.FindAllStringSubmatchIndex(text[from:to], -1) {
		for k := range m {
			if m[k] >= 0 {
				m[k] += from
			}
		}
		start, end := m[0], m[1]
		// A match that ends in newlines ends before them, as in gitleaks.
		for end > start && text[end-1] == '\n' {
			end--
		}
		start0 := start
		for start < end && text[start] == '\n' {
			start++
		}
		match := text[start:end]
		secStart, secEnd := start, end
		if groups := len(m) / 2; groups >= 2 {
			g := r.secretGroup
			if g == 0 {
				for k := 1; k < groups; k++ {
					if m[2*k] >= 0 && m[2*k+1] > m[2*k] {
						g = k
						break
					}
				}
			}
			if g > 0 && g < groups && m[2*g] >= 0 {
				secStart, secEnd = max(m[2*g], start), min(m[2*g+1], end)
			}
		}
		if secEnd <= secStart {
			continue
		}
		secret := text[secStart:secEnd]
		if r.entropy > 0 && entropy(secret) <= r.entropy {
			continue
		}
		line := lineOf(text, start0, end)
		if allowed(s.global, secret, match, line) || allowed(r.allow, secret, match, line) || s.allowed(secret) {
			continue
		}
		out = append(out, Finding{Rule: r.id, Start: secStart, End: secEnd})
	}
	return out
}

// generic reports whether rule is one of the catch-all rules.
func generic(rule string) bool { return strings.HasPrefix(rule, "generic-") }

func (s *Scanner) allowed(secret string) bool {
	for _, re := range s.allow {
		if re.MatchString(secret) {
			return true
		}
	}
	return false
}

// allowed reports whether one of lists allows the finding.
func allowed(lists []allowlist, secret, match, line string) bool {
	for _, a := range lists {
		target := secret
		switch a.target {
		case "match":
			target = match
		case "line":
			target = line
		}
		re := slices.ContainsFunc(a.regexes, func(r *regexp.Regexp) bool { return r.MatchString(target) })
		lowSecret := strings.ToLower(secret)
		stop := slices.ContainsFunc(a.stopWords, func(w string) bool { return strings.Contains(lowSecret, w) })
		if a.and {
			if (len(a.regexes) == 0 || re) && (len(a.stopWords) == 0 || stop) {
				return true
			}
			continue
		}
		if re || stop {
			return true
		}
	}
	return false
}

// lineOf is the line(s) of text holding [start, end).
func lineOf(text string, start, end int) string {
	ls := strings.LastIndexByte(text[:start], '\n') + 1
	le := strings.IndexByte(text[end:], '\n')
	if le < 0 {
		return text[ls:]
	}
	return text[ls : end+le]
}

// entropy is the Shannon entropy of s's bytes, in bits per byte.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	var h float64
	n := float64(len(s))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

// Marker is what Redact puts in place of a finding.
func Marker(rule string) string { return "[redacted:" + rule + "]" }

// Redact returns text with each finding replaced by its Marker, and the
// findings (offsets into the original text).
func (s *Scanner) Redact(text string) (string, []Finding) {
	fs := s.Scan(text)
	if len(fs) == 0 {
		return text, nil
	}
	var b strings.Builder
	last := 0
	for _, f := range fs {
		b.WriteString(text[last:f.Start])
		b.WriteString(Marker(f.Rule))
		last = f.End
	}
	b.WriteString(text[last:])
	return b.String(), fs
}

// Rules returns the ids of the rules s uses, in gitleaks' order then
// airlock's.
func (s *Scanner) Rules() []string {
	var ids []string
	for i, r := range s.rules {
		if !s.off[i] {
			ids = append(ids, r.id)
		}
	}
	return ids
}

// IDs returns the distinct rule ids of fs, sorted.
func IDs(fs []Finding) []string {
	var ids []string
	for _, f := range fs {
		ids = append(ids, f.Rule)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
