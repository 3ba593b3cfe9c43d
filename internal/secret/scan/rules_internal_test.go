package scan

import (
	"math/rand/v2"
	"regexp/syntax"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// sampler makes strings that a rule's regular expression matches, from a
// fixed seed: a fake credential of every rule's shape, none of them real.
type sampler struct{ r *rand.Rand }

// class picks a rune of the ranges (pairs, inclusive), preferring letters
// and digits (a credential's characters), then other printable ASCII.
func (s sampler) class(ranges []rune) rune {
	var pool []rune
	for _, pick := range []func(rune) bool{
		func(c rune) bool { return c < 128 && (unicode.IsLetter(c) || unicode.IsDigit(c)) },
		func(c rune) bool { return c > 32 && c < 127 },
		func(c rune) bool { return c == ' ' || c == '\t' || c == '\n' },
	} {
		for i := 0; i+1 < len(ranges); i += 2 {
			for c := ranges[i]; c <= ranges[i+1] && c < 128; c++ {
				if pick(c) {
					pool = append(pool, c)
				}
			}
		}
		if len(pool) > 0 {
			return pool[s.r.IntN(len(pool))]
		}
	}
	if len(ranges) == 0 {
		return 'x'
	}
	return ranges[0]
}

// count is how many times a repetition of min..max (max -1: unbounded)
// repeats: the least for a lazy one (a rule's optional context), else
// anything in range, at most 40 over the least.
func (s sampler) count(re *syntax.Regexp, lo, hi int) int {
	if re.Flags&syntax.NonGreedy != 0 {
		return lo
	}
	if hi < 0 || hi > lo+40 {
		hi = lo + 40
	}
	return lo + s.r.IntN(hi-lo+1)
}

func (s sampler) gen(re *syntax.Regexp, b *strings.Builder) {
	switch re.Op {
	case syntax.OpLiteral:
		for _, c := range re.Rune {
			b.WriteRune(c)
		}
	case syntax.OpCharClass:
		b.WriteRune(s.class(re.Rune))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		// A rule's lone "." is nearly always a host name's dot
		// (hooks.slack.com) written loosely.
		b.WriteByte('.')
	case syntax.OpWordBoundary:
		b.WriteByte(' ')
	case syntax.OpCapture:
		s.gen(re.Sub[0], b)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			s.gen(sub, b)
		}
	case syntax.OpAlternate:
		s.gen(re.Sub[s.r.IntN(len(re.Sub))], b)
	case syntax.OpQuest:
		if re.Flags&syntax.NonGreedy == 0 && s.r.IntN(2) == 0 {
			s.gen(re.Sub[0], b)
		}
	case syntax.OpStar, syntax.OpPlus, syntax.OpRepeat:
		lo, hi := 0, -1
		switch re.Op {
		case syntax.OpPlus:
			lo = 1
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
		}
		for range s.count(re, lo, hi) {
			s.gen(re.Sub[0], b)
		}
	}
	// Anchors and empty matches add nothing: the sample stands on a line
	// of its own.
}

// sample is a string re (its source) matches.
func (s sampler) sample(src string) (string, error) {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	s.gen(re.Simplify(), &b)
	return b.String(), nil
}

// perRuleSamples is how many samples each rule gets.
const perRuleSamples = 5

// TestEveryRule makes perRuleSamples fake credentials from each rule's
// own regular expression (a fixed seed), each on a line of its own, and
// scans them: a sample counts as found when a finding of that rule covers
// text of it. It reports the recall over samples and over rules, and
// fails for a rule none of whose samples is found unless rulesNoSample
// names it (where the generator's strings, not the scanner, are the
// reason). A sample the rule's expression does not match proves nothing
// and is not counted.
func TestEveryRule(t *testing.T) {
	rs, err := defaults()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := sampler{rand.New(rand.NewPCG(27, 1))}
	var samples, found, rulesFound, rulesTried int
	var missed []string
	for _, r := range rs.rules {
		hits, tried := 0, 0
		for range perRuleSamples {
			smp, err := g.sample(r.re.String())
			if err != nil {
				t.Fatalf("rule %s: %v", r.id, err)
			}
			if !r.re.MatchString(smp) {
				continue
			}
			tried++
			// A credential is written next to its name: a rule whose
			// expression does not hold its keyword (airtable's "pat…")
			// gets it before the sample, as an assignment.
			line := smp
			if len(r.keywords) > 0 && !slices.ContainsFunc(r.keywords, func(k string) bool { return strings.Contains(strings.ToLower(smp), k) }) {
				line = r.keywords[0] + "_token=" + smp
			}
			text := "\n" + line + "\n"
			if !r.re.MatchString(text) {
				// The expression ends at the end of the text ($):
				// so does the sample (sidekiq-sensitive-url).
				text = "\n" + line
			}
			fs := sc.Scan(text)
			if slices.ContainsFunc(fs, func(f Finding) bool { return f.Rule == r.id }) {
				hits++
			} else {
				t.Logf("rule %s: sample not found (findings %v): %q", r.id, IDs(fs), line)
			}
		}
		samples += tried
		found += hits
		if tried == 0 {
			t.Logf("rule %s: no sample its expression matches", r.id)
			continue
		}
		rulesTried++
		if hits > 0 {
			rulesFound++
		} else {
			missed = append(missed, r.id)
		}
	}
	for _, id := range missed {
		if !slices.Contains(rulesNoSample, id) {
			t.Errorf("rule %s found none of its %d samples", id, perRuleSamples)
		}
	}
	for _, id := range rulesNoSample {
		if !slices.Contains(missed, id) {
			t.Errorf("rule %s is listed in rulesNoSample but found a sample: take it out", id)
		}
	}
	t.Logf("every rule: %d rules, %d with samples; %d samples, %d found (recall %.3f); rules with a sample found: %d (recall %.3f); none found: %v",
		len(rs.rules), rulesTried, samples, found, float64(found)/float64(max(samples, 1)), rulesFound, float64(rulesFound)/float64(max(rulesTried, 1)), missed)
}

// rulesNoSample are the rules none of whose generated samples the scanner
// reports, each for a reason of the sample, not of the scanner.
var rulesNoSample = []string{
	// The same expression as bittrex-access-key, whose finding is the
	// one kept (the earlier rule of two alike).
	"bittrex-secret-key",
}

// TestScanDeterministic: the same text gets the same findings every time,
// also where two rules find the same secret (the map of windows once
// decided which one, at random).
func TestScanDeterministic(t *testing.T) {
	sc, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	text := "BITTREX_KEY=YcI3l1BK05SVeEeW3e2Yq1rh23DMt6dc"
	first := IDs(sc.Scan(text))
	if len(first) != 1 {
		t.Fatalf("Scan(%q) = %v, want one finding", text, first)
	}
	for range 100 {
		if got := IDs(sc.Scan(text)); !slices.Equal(got, first) {
			t.Fatalf("Scan(%q) = %v, then %v", text, first, got)
		}
	}
}
