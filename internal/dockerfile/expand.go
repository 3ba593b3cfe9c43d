package dockerfile

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Expander substitutes variables in the arguments of the instructions
// that take it (FROM, COPY, ADD, ENV, WORKDIR, USER, LABEL, ARG), as
// Docker does: $NAME, ${NAME}, ${NAME:-word}, ${NAME-word}, ${NAME:+word},
// ${NAME+word}, ${NAME:?message} and ${NAME?message}; single quotes keep
// everything literal, double quotes keep whitespace, and the escape
// character makes the next character literal (inside double quotes only
// before ", $ and itself). An unset variable is empty.
type Expander struct {
	// Escape is the escape character; 0 means \.
	Escape byte
	// Lookup returns a variable's value and whether it is set.
	Lookup func(name string) (string, bool)
}

// maxExpansion bounds what one expansion may produce.
const maxExpansion = 1 << 20

// Words splits s into words at unquoted whitespace, with quotes removed
// and variables substituted (a variable's value is not split).
func (e Expander) Words(s string) ([]string, error) {
	x := &lexer{e: e, src: []rune(s)}
	if x.e.Escape == 0 {
		x.e.Escape = '\\'
	}
	words, err := x.words(0)
	if err != nil {
		return nil, err
	}
	return words, nil
}

// Word is s as one word: its words joined by single spaces (what WORKDIR,
// USER and FROM take).
func (e Expander) Word(s string) (string, error) {
	w, err := e.Words(s)
	return strings.Join(w, " "), err
}

type lexer struct {
	e   Expander
	src []rune
	pos int
	n   int // bytes produced, against maxExpansion
}

var errTooLong = errors.New("expansion too long")

// words reads words until the end of src, or until an unmatched "}" when
// inBrace (a ${...} word, which is not split: one word comes back).
func (x *lexer) words(inBrace int) ([]string, error) {
	var (
		words   []string
		cur     strings.Builder
		started bool
	)
	emit := func() {
		if started {
			words = append(words, cur.String())
		}
		cur.Reset()
		started = false
	}
	for x.pos < len(x.src) {
		c := x.src[x.pos]
		switch {
		case inBrace > 0 && c == '}':
			return []string{cur.String()}, nil
		case inBrace == 0 && unicode.IsSpace(c):
			x.pos++
			emit()
			continue
		case c == rune(x.e.Escape):
			x.pos++
			started = true
			if x.pos < len(x.src) {
				cur.WriteRune(x.src[x.pos])
				x.pos++
			}
		case c == '\'':
			x.pos++
			started = true
			end := x.index('\'')
			if end < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(string(x.src[x.pos:end]))
			x.pos = end + 1
		case c == '"':
			x.pos++
			started = true
			if err := x.double(&cur); err != nil {
				return nil, err
			}
		case c == '$':
			// An unquoted variable that is empty makes no word, as in sh.
			n := cur.Len()
			if err := x.dollar(&cur); err != nil {
				return nil, err
			}
			started = started || cur.Len() > n
		default:
			started = true
			cur.WriteRune(c)
			x.pos++
		}
		if x.n += cur.Len(); x.n > maxExpansion*64 || cur.Len() > maxExpansion {
			return nil, errTooLong
		}
	}
	if inBrace > 0 {
		return nil, errors.New("missing }")
	}
	emit()
	return words, nil
}

func (x *lexer) index(r rune) int {
	for i := x.pos; i < len(x.src); i++ {
		if x.src[i] == r {
			return i
		}
	}
	return -1
}

// double reads a double-quoted string, its opening quote read.
func (x *lexer) double(cur *strings.Builder) error {
	for x.pos < len(x.src) {
		c := x.src[x.pos]
		switch {
		case c == '"':
			x.pos++
			return nil
		case c == rune(x.e.Escape):
			x.pos++
			if x.pos < len(x.src) {
				n := x.src[x.pos]
				if n == '"' || n == '$' || n == rune(x.e.Escape) {
					cur.WriteRune(n)
					x.pos++
					continue
				}
			}
			cur.WriteRune(c)
		case c == '$':
			if err := x.dollar(cur); err != nil {
				return err
			}
		default:
			cur.WriteRune(c)
			x.pos++
		}
		if cur.Len() > maxExpansion {
			return errTooLong
		}
	}
	return errors.New("unterminated double quote")
}

func isNameStart(c rune) bool { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }
func isName(c rune) bool      { return isNameStart(c) || (c >= '0' && c <= '9') }

// dollar reads a variable reference at x.pos (a "$") and writes its value.
func (x *lexer) dollar(cur *strings.Builder) error {
	x.pos++ // $
	if x.pos >= len(x.src) {
		cur.WriteRune('$')
		return nil
	}
	c := x.src[x.pos]
	if isNameStart(c) {
		start := x.pos
		for x.pos < len(x.src) && isName(x.src[x.pos]) {
			x.pos++
		}
		v, _ := x.lookup(string(x.src[start:x.pos]))
		cur.WriteString(v)
		return nil
	}
	if c != '{' {
		cur.WriteRune('$')
		return nil
	}
	x.pos++ // {
	start := x.pos
	for x.pos < len(x.src) && isName(x.src[x.pos]) {
		x.pos++
	}
	name := string(x.src[start:x.pos])
	if name == "" || !isNameStart(rune(name[0])) {
		return fmt.Errorf("bad substitution at %q", "${"+string(x.src[start:min(len(x.src), start+16)]))
	}
	if x.pos >= len(x.src) {
		return errors.New("missing }")
	}
	if x.src[x.pos] == '}' {
		x.pos++
		v, _ := x.lookup(name)
		cur.WriteString(v)
		return nil
	}
	colon := false
	if x.src[x.pos] == ':' {
		colon = true
		x.pos++
		if x.pos >= len(x.src) {
			return errors.New("missing }")
		}
	}
	op := x.src[x.pos]
	if op != '-' && op != '+' && op != '?' {
		return fmt.Errorf("${%s%c...}: unsupported modifier", name, op)
	}
	x.pos++
	w, err := x.words(1)
	if err != nil {
		return err
	}
	x.pos++ // }
	word := strings.Join(w, "")
	v, set := x.lookup(name)
	present := set && (!colon || v != "")
	switch op {
	case '-':
		if !present {
			v = word
		}
	case '+':
		v = ""
		if present {
			v = word
		}
	case '?':
		if !present {
			if word == "" {
				word = "not set"
			}
			return fmt.Errorf("%s: %s", name, word)
		}
	}
	cur.WriteString(v)
	return nil
}

func (x *lexer) lookup(name string) (string, bool) {
	if x.e.Lookup == nil {
		return "", false
	}
	return x.e.Lookup(name)
}

// Pair is one KEY=VALUE of ENV, LABEL or ARG.
type Pair struct {
	Key, Value string
	// HasValue is false for an ARG with no default (ARG NAME).
	HasValue bool
}

// Pairs parses the arguments of ENV, LABEL or ARG (cmd): KEY=VALUE words,
// each expanded; ENV also takes the legacy form "KEY VALUE...", and ARG a
// bare NAME.
func (e Expander) Pairs(cmd, args string) ([]Pair, error) {
	if f := strings.Fields(args); cmd == "ENV" && len(f) > 0 && !strings.Contains(f[0], "=") {
		key := f[0]
		val, err := e.Word(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(args), key)))
		if err != nil {
			return nil, err
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("ENV %s: no value (ENV KEY=VALUE or ENV KEY VALUE)", key)
		}
		return []Pair{{Key: key, Value: val, HasValue: true}}, nil
	}
	words, err := e.Words(args)
	if err != nil {
		return nil, err
	}
	var out []Pair
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok && cmd != "ARG" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", cmd, w)
		}
		if k == "" || (cmd != "LABEL" && !validName(k)) {
			return nil, fmt.Errorf("%s: %q is not a valid name", cmd, k)
		}
		out = append(out, Pair{Key: k, Value: v, HasValue: ok})
	}
	return out, nil
}

func validName(s string) bool {
	for i, c := range s {
		if !isName(c) || (i == 0 && !isNameStart(c)) {
			return false
		}
	}
	return s != ""
}
