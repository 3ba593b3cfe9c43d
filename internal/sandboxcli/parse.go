package sandboxcli

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// parse fills cmd, a pointer to one of this package's command structs, from
// args (what follows the command's name), reading them exactly as the
// whole command line's parser (kong, in airlock-host) does. It reads only
// the plain forms: --name value, --name=value, -x value, boolean flags
// without a value, then the positional arguments. Anything else (short
// flags run together, a value that looks like a flag, a repeated flag, a
// number in another base, bytes that are not UTF-8, a list value that kong
// would split, a flag it does not know) makes it decline, with false;
// airlock-host then parses args itself and says what is wrong in its own
// words. It exists because kong builds its model of a grammar by
// reflection on every start, which cost the front end a fifth of its page
// faults (FuzzParse keeps the two in agreement).
func parse(cmd any, args []string) bool {
	// kong replaces bytes that are not UTF-8.
	if slices.ContainsFunc(args, func(a string) bool { return !utf8.ValidString(a) }) {
		return false
	}
	g := grammarOf(reflect.ValueOf(cmd).Elem())
	set := map[*flagField]bool{}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		var f *flagField
		val, hasVal := "", false
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, val, hasVal = strings.Cut(name, "=")
			f = g.long[name]
		} else if len(a) == 2 {
			f = g.short[rune(a[1])]
		}
		if f == nil {
			return false
		}
		if f.v.Kind() == reflect.Bool {
			if hasVal {
				return false
			}
			f.v.SetBool(true)
			continue
		}
		if !hasVal {
			if i++; i == len(args) {
				return false
			}
			val = args[i]
		}
		if strings.HasPrefix(val, "-") || !f.set(val, set[f]) {
			return false
		}
		set[f] = true
	}
	return g.positionals(args[i:])
}

// grammar is a command struct's flags and positional arguments.
type grammar struct {
	long  map[string]*flagField
	short map[rune]*flagField
	args  []argField
}

type flagField struct {
	v    reflect.Value
	enum []string // the values allowed, when the tag lists them
	sep  bool     // kong splits a list value at commas
}

type argField struct {
	v           reflect.Value
	passthrough bool
}

// grammarOf reads the flags and arguments of command struct v, and of the
// structs it embeds, from their fields and kong tags.
func grammarOf(v reflect.Value) *grammar {
	g := &grammar{long: map[string]*flagField{}, short: map[rune]*flagField{}}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			ft, fv := v.Type().Field(i), v.Field(i)
			if ft.Anonymous {
				walk(fv)
				continue
			}
			tag := ft.Tag
			if _, ok := tag.Lookup("arg"); ok {
				_, pass := tag.Lookup("passthrough")
				g.args = append(g.args, argField{v: fv, passthrough: pass})
				continue
			}
			f := &flagField{v: fv, sep: tag.Get("sep") != "none"}
			if e, ok := tag.Lookup("enum"); ok {
				f.enum = strings.Split(e, ",")
			}
			name := tag.Get("name")
			if name == "" {
				name = flagName(ft.Name)
			}
			g.long[name] = f
			if s := tag.Get("short"); s != "" {
				g.short[[]rune(s)[0]] = f
			}
		}
	}
	walk(v)
	return g
}

// flagName is kong's flag name for a field: its words lower-cased and
// joined by dashes (WorkspaceMode: workspace-mode).
func flagName(field string) string {
	var b strings.Builder
	rs := []rune(field)
	for i, r := range rs {
		if i > 0 && unicode.IsUpper(r) && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// set stores val in the flag; false when kong might read it otherwise.
func (f *flagField) set(val string, again bool) bool {
	if f.enum != nil && !slices.Contains(f.enum, val) {
		return false
	}
	switch p := f.v.Addr().Interface().(type) {
	case *string:
		if again {
			return false
		}
		*p = val
	case *[]string:
		if f.sep && strings.ContainsAny(val, ",\\") {
			return false
		}
		*p = append(*p, val)
	case *time.Duration:
		d, err := time.ParseDuration(val)
		if again || err != nil {
			return false
		}
		*p = d
	case *int64:
		n, err := strconv.ParseInt(val, 10, 64)
		if again || err != nil || !decimal(val, false) {
			return false
		}
		*p = n
	case *float64:
		n, err := strconv.ParseFloat(val, 64)
		if again || err != nil || !decimal(val, true) {
			return false
		}
		*p = n
	default:
		return false
	}
	return true
}

// decimal reports whether s is a plain decimal number: digits, not led by
// a zero, and with frac at most one point among them (no sign, exponent,
// base prefix or underscore, which kong's parser and this one might read
// differently).
func decimal(s string, frac bool) bool {
	whole, f, point := strings.Cut(s, ".")
	digits := func(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }
	switch {
	case !digits(whole) || len(whole) > 1 && whole[0] == '0':
		return false
	case point:
		return frac && digits(f)
	}
	return true
}

// positionals fills the positional arguments from rest, what follows the
// flags: a passthrough argument takes all that is left, as kong gives it
// (a leading -- included) when that does not start with a flag; any other
// takes one word that is not a flag
// (a list argument: all the words left, none a flag).
func (g *grammar) positionals(rest []string) bool {
	for _, a := range g.args {
		switch {
		case a.passthrough:
			// kong reads flags up to the passthrough's first word.
			if len(rest) == 0 || rest[0] != "--" && strings.HasPrefix(rest[0], "-") {
				return false
			}
			a.v.Set(reflect.ValueOf(slices.Clone(rest)))
			return true
		case a.v.Kind() == reflect.String:
			if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
				return false
			}
			a.v.SetString(rest[0])
			rest = rest[1:]
		default: // []string
			if len(rest) == 0 || slices.ContainsFunc(rest, func(s string) bool { return strings.HasPrefix(s, "-") }) {
				return false
			}
			a.v.Set(reflect.ValueOf(slices.Clone(rest)))
			rest = nil
		}
	}
	return len(rest) == 0
}
