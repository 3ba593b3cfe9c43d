package policy

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Error is one problem of a policy document. Parse reports every problem it
// finds, each as an *Error, joined with errors.Join; errors.As finds the
// first.
type Error struct {
	// File is the document's path; Load sets it, Parse leaves it empty.
	File string
	// Line is the 1-based line of the problem; 0 when it has no place
	// (a value that is missing, or a check of the whole document).
	Line int
	// Field is the dotted path of the value, e.g. "sandbox.limits.memory"
	// or "tools.write_file.rules[0].when"; empty for YAML syntax errors.
	Field string
	// Msg says what is wrong; Hint, when set, how to fix it.
	Msg  string
	Hint string
}

// Error formats e as "FILE:LINE: policy: FIELD: MSG (hint: HINT)" when the
// file is known, and as "policy: FIELD: MSG (line LINE; hint: HINT)" when
// it is not, so that Parse's messages start with "policy: " like every
// other error of this package.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	}
	b.WriteString("policy: ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	var notes []string
	if e.File == "" && e.Line > 0 {
		notes = append(notes, "line "+strconv.Itoa(e.Line))
	}
	if e.Hint != "" {
		notes = append(notes, "hint: "+e.Hint)
	}
	if len(notes) > 0 {
		b.WriteString(" (" + strings.Join(notes, "; ") + ")")
	}
	return b.String()
}

// index maps the fields of a parsed YAML tree to their lines.
type index struct {
	lines  map[string]int   // field path -> line of its key or item
	keys   map[keyAt]string // a mapping key at a line -> the path of its mapping
	byLine map[int]string   // line -> first field path on it
	// literal maps the path of each literal block scalar ("|") to the
	// line its text starts on, for errors inside multi-line rules.
	literal map[string]int
}

type keyAt struct {
	line int
	key  string
}

func newIndex(root *yaml.Node) *index {
	ix := &index{lines: map[string]int{}, keys: map[keyAt]string{}, byLine: map[int]string{}, literal: map[string]int{}}
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		ix.walk(root.Content[0], "")
	}
	return ix
}

// walk records n's fields. It does not follow aliases: an alias's contents
// have the lines of its anchor, and a field under one reports the line of
// the alias itself (its nearest indexed ancestor).
func (ix *index) walk(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				continue
			}
			ix.keys[keyAt{k.Line, k.Value}] = path
			p := join(path, k.Value)
			ix.record(p, k.Line)
			if v.Kind == yaml.ScalarNode && v.Style&yaml.LiteralStyle != 0 {
				ix.literal[p] = v.Line + 1
			}
			ix.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			ix.record(p, item.Line)
			ix.walk(item, p)
		}
	}
}

func (ix *index) record(path string, line int) {
	if _, ok := ix.lines[path]; !ok {
		ix.lines[path] = line
	}
	if _, ok := ix.byLine[line]; !ok {
		ix.byLine[line] = path
	}
}

// line returns the line of field, or of its nearest ancestor in the
// document; 0 when none is there.
func (ix *index) line(field string) int {
	for field != "" {
		if l, ok := ix.lines[field]; ok {
			return l
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			return 0
		}
		field = field[:i]
	}
	return 0
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	reLine         = regexp.MustCompile(`^line (\d+): (.*)$`)
	reUnknownField = regexp.MustCompile(`^field (.+) not found in type policy\.(\w+)$`)
)

// fromYAML turns an error of the YAML library into located errors.
func (ix *index) fromYAML(err error) []*Error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		out := make([]*Error, 0, len(te.Errors))
		for _, s := range te.Errors {
			out = append(out, ix.typeError(s))
		}
		return out
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &Error{Msg: msg, Hint: "this is not valid YAML: check the indentation, and quote values that contain \": \" or start with a special character"}
	if m := reLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = m[2]
	}
	return []*Error{e}
}

func (ix *index) typeError(s string) *Error {
	m := reLine.FindStringSubmatch(s)
	if m == nil {
		return &Error{Msg: s}
	}
	line, _ := strconv.Atoi(m[1])
	msg := m[2]
	if u := reUnknownField.FindStringSubmatch(msg); u != nil {
		key := u[1]
		return &Error{
			Line: line, Field: ix.keys[keyAt{line, key}], Msg: "field " + key + " not found",
			Hint: keysHint(key, knownKeys[u[2]]),
		}
	}
	if strings.Contains(msg, "into policy.rawDocument") {
		return &Error{Line: line, Msg: "the document must be a mapping of sections", Hint: keysHint("", knownKeys["rawDocument"])}
	}
	return &Error{Line: line, Field: ix.byLine[line], Msg: msg}
}

// knownKeys are the keys of the types the YAML library decodes strictly,
// for hints.
var knownKeys = map[string][]string{
	"rawDocument": yamlKeys(reflect.TypeFor[rawDocument]()),
	"Network":     yamlKeys(reflect.TypeFor[Network]()),
	"Rule":        yamlKeys(reflect.TypeFor[Rule]()),
	"Pin":         yamlKeys(reflect.TypeFor[Pin]()),
	"Credential":  yamlKeys(reflect.TypeFor[Credential]()),
}

// keysHint lists the keys a mapping may have, with a guess when key is a
// misspelling of one of them.
func keysHint(key string, keys []string) string {
	list := "known keys: " + strings.Join(keys, ", ")
	if g := guess(key, keys); g != "" {
		return "did you mean " + g + "? " + list
	}
	return list
}

// guess returns the candidate closest to s, if it is close enough to be a
// misspelling.
func guess(s string, candidates []string) string {
	if s == "" {
		return ""
	}
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), c); d < bestD && d < len(c) {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// yamlKeys lists the yaml names of t's fields, in order.
func yamlKeys(t reflect.Type) []string {
	var out []string
	for _, f := range fieldsOf(t) {
		out = append(out, f.name)
	}
	return out
}

type fieldInfo struct {
	name  string
	index int
}

func fieldsOf(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		out = append(out, fieldInfo{name, i})
	}
	return out
}

// maxErrors bounds the problems one Parse reports: past it, more are only
// noise.
const maxErrors = 50

// maxVisits bounds the nodes a decode visits, aliases expanded, so that an
// alias bomb in a 1 MiB document costs milliseconds, not gigabytes.
const maxVisits = 1 << 18

// decoder fills Go values from YAML nodes strictly: unknown and duplicate
// keys, wrong kinds and out-of-range scalars are errors with their lines.
// A null value leaves the target as it was (its default).
type decoder struct {
	errs   []*Error
	visits int
}

// scalarDecoder is a type written as one YAML scalar.
type scalarDecoder interface {
	decodeScalar(n *yaml.Node) *Error
}

// nodeDecoder is a type that decodes its own node.
type nodeDecoder interface {
	decodeNode(d *decoder, n *yaml.Node, field string)
}

func (d *decoder) fail(n *yaml.Node, field, hint, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		return
	}
	d.errs = append(d.errs, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// resolve follows aliases and counts the visit; nil means stop (null, or
// the visit budget is spent).
func (d *decoder) resolve(n *yaml.Node, field string) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	d.visits++
	if d.visits == maxVisits {
		d.fail(n, field, "do not nest aliases", "the document expands to too many values")
	}
	if n == nil || d.visits >= maxVisits || len(d.errs) >= maxErrors || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	return n
}

func (d *decoder) decode(n *yaml.Node, field string, v reflect.Value) {
	if n = d.resolve(n, field); n == nil {
		return
	}
	switch x := v.Addr().Interface().(type) {
	case nodeDecoder:
		x.decodeNode(d, n, field)
		return
	case scalarDecoder:
		// decodeScalar refuses mappings and lists by their tags.
		if e := x.decodeScalar(n); e != nil {
			e.Line, e.Field = n.Line, field
			d.errs = append(d.errs, e)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.mapping(n, field, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, field, "write a list, like [a, b] or one \"- item\" per line", "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, fmt.Sprintf("%s[%d]", field, i), s.Index(i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			d.fail(n, field, "quote it if it is meant as text", "want a string, got %s", describe(n))
			return
		}
		if !utf8.ValidString(n.Value) {
			d.fail(n, field, "", "the string is not valid UTF-8")
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			d.fail(n, field, "write true or false", "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Pointer:
		// An optional value (nil: not written): a pointer to what the
		// node decodes to.
		e := reflect.New(v.Type().Elem())
		d.decode(n, field, e.Elem())
		v.Set(e)
	case reflect.Int, reflect.Int64:
		var i int64
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&i) != nil {
			d.fail(n, field, "write a whole number, like 10", "want a whole number, got %s", describe(n))
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		tag := n.ShortTag()
		if n.Kind != yaml.ScalarNode || tag != "!!int" && tag != "!!float" || n.Decode(&f) != nil || f != f || f > 1e300 || f < -1e300 {
			d.fail(n, field, "write a number, like 1 or 0.5", "want a number, got %s", describe(n))
			return
		}
		v.SetFloat(f)
	default:
		panic("policy: no decoder for " + v.Type().String()) // a schema type this decoder does not know
	}
}

// mapping decodes a mapping node into the struct v, by yaml tags.
func (d *decoder) mapping(n *yaml.Node, field string, v reflect.Value) {
	fields := fieldsOf(v.Type())
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, keysHint("", yamlKeys(v.Type())), "want a mapping, got %s", describe(n))
		return
	}
	d.eachKey(n, field, func(k, val *yaml.Node) {
		for _, f := range fields {
			if f.name == k.Value {
				d.decode(val, join(field, k.Value), v.Field(f.index))
				return
			}
		}
		d.fail(k, field, keysHint(k.Value, yamlKeys(v.Type())), "field %s not found", keyName(k.Value))
	})
}

// eachKey calls fn for each key of the mapping n, refusing duplicate,
// merge and non-string keys.
func (d *decoder) eachKey(n *yaml.Node, field string, fn func(k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" && k.ShortTag() != "!!merge":
			d.fail(k, field, "keys are names", "want a key, got %s", describe(k))
			continue
		case k.ShortTag() == "!!merge":
			d.fail(k, field, "write the keys out", "merge keys (<<) are not supported here")
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.fail(k, field, "", "mapping key %q already defined at line %d", shorten(k.Value), line)
			continue
		}
		seen[k.Value] = k.Line
		fn(k, v)
	}
}

// keyName shows a key in a message: bare when it is a plain name.
func keyName(k string) string {
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return strconv.Quote(shorten(k))
		}
	}
	if k == "" {
		return `""`
	}
	return shorten(k)
}

// describe names a node's kind and value for a message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing"
	case "!!str":
		return "the string " + strconv.Quote(shorten(n.Value))
	case "!!int", "!!float":
		return "the number " + shorten(n.Value)
	case "!!bool":
		return shorten(n.Value)
	}
	return shorten(n.Value)
}

// refValue returns the addressable value ptr points to.
func refValue(ptr any) reflect.Value { return reflect.ValueOf(ptr).Elem() }

// shorten keeps error messages bounded when the input is hostile.
func shorten(s string) string {
	const limit = 80
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
