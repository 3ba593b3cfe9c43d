package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrPayload is wrapped by every error about a payload's shape or size.
var ErrPayload = errors.New("invalid payload")

// redactedNumber replaces a JSON number in which a scrubber found a secret.
const redactedNumber = "[redacted]"

// maxDepth bounds the nesting of a payload's arrays and objects.
const maxDepth = 1000

// CanonicalPayload returns p in the canonical form every stored payload has:
// one JSON object, compact, members in the order written (duplicates
// kept), numbers as written, and each string in the form encoding/json
// writes it: <, >, &, U+2028 and U+2029 escaped, other escapes resolved,
// invalid UTF-8 replaced by U+FFFD. An empty p means "{}". The canonical
// form is a fixed point both of CanonicalPayload and of the compacting
// Decode applies, so a payload keeps its bytes (and its hash) through any
// JSON round trip that preserves its meaning and member order.
//
// scrub, when not nil, is applied to the text of every string, object key
// and number before it is written: a string or key is replaced by its
// scrubbed text, and a number in which scrub changes anything by the
// string "[redacted]". Working on decoded strings rather than raw bytes
// means a secret cannot hide behind a JSON escape (\u0041 for A, \/ for /),
// and a scrubbed value can never break the JSON. scrub must change any text
// that contains a secret (as secret.Redactor does): CanonicalPayload first
// scrubs p whole and, if that changes nothing, skips scrubbing the strings
// that have no escapes.
//
// The result is at most MaxPayloadSize bytes; errors wrap ErrPayload and
// never quote the payload (it may hold the very secret being scrubbed).
func CanonicalPayload(p []byte, scrub func([]byte) []byte) ([]byte, error) {
	if len(bytes.TrimSpace(p)) == 0 {
		return []byte("{}"), nil
	}
	// A payload that shrinks to the limit only after compaction is rare;
	// refusing anything far larger up front bounds the work.
	if len(p) > 4*MaxPayloadSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrPayload, len(p), MaxPayloadSize)
	}
	c := canonicalizer{in: p, scrub: scrub, out: make([]byte, 0, len(p))}
	if scrub != nil && bytes.Equal(scrub(p), p) {
		c.rawClean = true
	}
	c.space()
	if c.pos >= len(p) || p[c.pos] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrPayload)
	}
	if err := c.value(0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPayload, err)
	}
	c.space()
	if c.pos != len(p) {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrPayload)
	}
	if len(c.out) > MaxPayloadSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrPayload, len(c.out), MaxPayloadSize)
	}
	return c.out, nil
}

// canonicalizer is a one-pass JSON parser that writes the canonical form
// of what it reads. Error messages never quote the input.
type canonicalizer struct {
	in    []byte
	pos   int
	out   []byte
	scrub func([]byte) []byte
	// rawClean: scrub found nothing in the raw input, so text copied from
	// it verbatim needs no scrubbing.
	rawClean bool
}

var errSyntax = errors.New("not valid JSON")

func (c *canonicalizer) space() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(depth int) error {
	if c.pos >= len(c.in) {
		return errSyntax
	}
	switch b := c.in[c.pos]; {
	case b == '{':
		return c.object(depth + 1)
	case b == '[':
		return c.array(depth + 1)
	case b == '"':
		return c.string()
	case b == '-' || (b >= '0' && b <= '9'):
		return c.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
				c.out = append(c.out, lit...)
				c.pos += len(lit)
				return nil
			}
		}
		return errSyntax
	}
}

func (c *canonicalizer) object(depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	c.out = append(c.out, '{')
	c.pos++ // {
	c.space()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		return nil
	}
	for {
		c.space()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return errSyntax
		}
		if err := c.string(); err != nil {
			return err
		}
		c.space()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return errSyntax
		}
		c.pos++
		c.out = append(c.out, ':')
		c.space()
		if err := c.value(depth); err != nil {
			return err
		}
		c.space()
		if c.pos >= len(c.in) {
			return errSyntax
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
		case '}':
			c.pos++
			c.out = append(c.out, '}')
			return nil
		default:
			return errSyntax
		}
	}
}

func (c *canonicalizer) array(depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	c.out = append(c.out, '[')
	c.pos++ // [
	c.space()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for {
		c.space()
		if err := c.value(depth); err != nil {
			return err
		}
		c.space()
		if c.pos >= len(c.in) {
			return errSyntax
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			return nil
		default:
			return errSyntax
		}
	}
}

// number copies a number as written, after checking its grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *canonicalizer) number() error {
	start := c.pos
	in := c.in
	i := c.pos
	if in[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(in) && in[i] >= '0' && in[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case digits() == 0:
		return errSyntax
	}
	if i < len(in) && in[i] == '.' {
		i++
		if digits() == 0 {
			return errSyntax
		}
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if digits() == 0 {
			return errSyntax
		}
	}
	c.pos = i
	num := in[start:i]
	if c.scrub != nil && !c.rawClean && !bytes.Equal(c.scrub(num), num) {
		c.out = append(c.out, `"`+redactedNumber+`"`...)
		return nil
	}
	c.out = append(c.out, num...)
	return nil
}

// string copies a string literal. A literal already in the form
// encoding/json writes (valid UTF-8, nothing it would escape, and no escape
// but \" \\ \n \r \t) is copied as it is, after scrubbing its text; any
// other is decoded and re-encoded by encoding/json.
func (c *canonicalizer) string() error {
	in := c.in
	start := c.pos
	i := c.pos + 1
	canonical := true // no rewriting needed
	escaped := false  // has an escape (so its text differs from its bytes)
	ascii := true
	for {
		if i >= len(in) {
			return errSyntax
		}
		b := in[i]
		if b == '"' {
			break
		}
		switch {
		case b < 0x20:
			return errSyntax
		case b == '\\':
			escaped = true
			i++
			if i >= len(in) {
				return errSyntax
			}
			switch in[i] {
			case '"', '\\', 'n', 'r', 't':
			case '/', 'b', 'f':
				canonical = false
			case 'u':
				canonical = false
				if i+4 >= len(in) {
					return errSyntax
				}
				for _, h := range in[i+1 : i+5] {
					if !isHex(h) {
						return errSyntax
					}
				}
				i += 4
			default:
				return errSyntax
			}
		case b == '<' || b == '>' || b == '&':
			canonical = false
		case b >= 0x80:
			ascii = false
		}
		i++
	}
	lit := in[start : i+1] // with the quotes
	c.pos = i + 1
	if canonical && !ascii {
		content := lit[1 : len(lit)-1]
		if !utf8.Valid(content) || bytes.Contains(content, []byte("\u2028")) || bytes.Contains(content, []byte("\u2029")) {
			canonical = false
		}
	}
	if !canonical {
		var s string
		if err := json.Unmarshal(lit, &s); err != nil {
			return errSyntax
		}
		text := []byte(s)
		if c.scrub != nil {
			text = c.scrub(text)
		}
		return c.appendString(text)
	}
	// Scrub the text, unless the raw input was clean and the text is the
	// raw bytes (no escape): a secret cannot hide there.
	if c.scrub != nil && (escaped || !c.rawClean) {
		text := lit[1 : len(lit)-1]
		if escaped {
			text = unescapeSimple(text)
		}
		if s := c.scrub(text); !bytes.Equal(s, text) {
			return c.appendString(s)
		}
	}
	c.out = append(c.out, lit...)
	return nil
}

// unescapeSimple decodes a string body whose only escapes are \" \\ \n
// \r and \t.
func unescapeSimple(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			out = append(out, b[i])
			continue
		}
		i++
		switch b[i] {
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default: // " and \
			out = append(out, b[i])
		}
	}
	return out
}

func (c *canonicalizer) appendString(text []byte) error {
	enc, err := json.Marshal(string(text))
	if err != nil {
		return err
	}
	c.out = append(c.out, enc...)
	return nil
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

// checkCanonical reports whether p is a payload as stored: a JSON object of
// at most MaxPayloadSize bytes, valid UTF-8, that compacting and
// HTML-escaping leave unchanged. (It accepts escapes CanonicalPayload would
// have resolved, such as \u0041: a reader has nothing to gain from refusing
// them, and the hash covers the bytes either way.)
func checkCanonical(p []byte) error {
	if len(p) > MaxPayloadSize {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrPayload, len(p), MaxPayloadSize)
	}
	if len(p) == 0 || p[0] != '{' {
		return fmt.Errorf("%w: not a JSON object", ErrPayload)
	}
	if !utf8.Valid(p) || !json.Valid(p) {
		return fmt.Errorf("%w: not valid JSON", ErrPayload)
	}
	c, err := compactPayload(p)
	if err != nil {
		return err
	}
	if !bytes.Equal(c, p) {
		return fmt.Errorf("%w: not in canonical form", ErrPayload)
	}
	return nil
}

// compactPayload removes insignificant space and escapes HTML characters:
// the normalization Decode applies to a payload read from JSON text, which
// leaves every canonical payload as it is.
func compactPayload(p []byte) ([]byte, error) {
	var c bytes.Buffer
	if err := json.Compact(&c, p); err != nil {
		return nil, fmt.Errorf("%w: not valid JSON", ErrPayload)
	}
	var h bytes.Buffer
	json.HTMLEscape(&h, c.Bytes())
	return h.Bytes(), nil
}
