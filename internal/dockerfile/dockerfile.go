// Package dockerfile parses the subset of the Dockerfile language that
// `airlock template build` builds: FROM, RUN (shell and exec form), COPY,
// ADD (local sources), ENV, WORKDIR, USER, ARG, LABEL, CMD and ENTRYPOINT,
// with line continuations, comments, the escape parser directive and
// variable substitution (Expander) in the instructions that take it.
//
// Multi-stage builds are: FROM IMAGE AS NAME starts a stage, a later FROM
// may name an earlier stage, and COPY --from=STAGE (a name or an index,
// or else an image) copies out of one.
//
// Everything else (HEALTHCHECK, ONBUILD, SHELL, EXPOSE, VOLUME,
// RUN --mount, heredocs, ...) is refused by Parse with
// its line number and what to do instead: a build never silently does less
// than its Dockerfile says.
//
// It is a leaf: no I/O beyond the reader it is given, no imports from
// airlock.
//
// Importers: internal/build, internal/host.
package dockerfile

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Instruction is one instruction of a Dockerfile.
type Instruction struct {
	// Line is the line it starts on (1-based).
	Line int
	// Cmd is the instruction's name, upper-case (FROM, RUN, ...).
	Cmd string
	// Flags are its --name=value options, by name without the dashes.
	Flags map[string]string
	// Args is the rest of the instruction (continuations joined, flags
	// removed), unexpanded.
	Args string
	// Exec is set when Args was a JSON array (exec form): then Argv holds
	// its strings, which are never expanded.
	Exec bool
	Argv []string
}

// String is the instruction as a cache key and history entry: its name,
// flags and arguments, without the comments and line breaks around it.
func (in Instruction) String() string {
	var b strings.Builder
	b.WriteString(in.Cmd)
	for _, k := range slices.Sorted(maps.Keys(in.Flags)) {
		fmt.Fprintf(&b, " --%s=%s", k, in.Flags[k])
	}
	if in.Exec {
		j, _ := json.Marshal(in.Argv)
		b.WriteString(" ")
		b.Write(j)
	} else if in.Args != "" {
		b.WriteString(" ")
		b.WriteString(in.Args)
	}
	return b.String()
}

// Error is a Dockerfile that cannot be built, at a line.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("Dockerfile line %d: %s", e.Line, e.Msg) }

// MaxSize bounds a Dockerfile: a build reads it whole.
const MaxSize = 1 << 20

// flagsAllowed are the options each instruction takes here.
var flagsAllowed = map[string][]string{
	"FROM": nil,
	"RUN":  nil,
	"COPY": {"chown", "chmod", "from"},
	"ADD":  {"chown", "chmod"},
}

// unsupported says why an instruction is not built and what to do.
var unsupported = map[string]string{
	"HEALTHCHECK": "HEALTHCHECK is not supported: give the template a readiness check instead",
	"ONBUILD":     "ONBUILD is not supported",
	"SHELL":       "SHELL is not supported: RUN uses /bin/sh -c; use the exec form (RUN [\"bash\", \"-c\", \"...\"]) for another shell",
	"EXPOSE":      "EXPOSE is not supported: sandboxes take no inbound connections",
	"VOLUME":      "VOLUME is not supported: a sandbox's /workspace is its volume",
	"STOPSIGNAL":  "STOPSIGNAL is not supported",
	"MAINTAINER":  "MAINTAINER is not supported: use LABEL maintainer=...",
}

// flagRefused says why an option is refused.
var flagRefused = map[string]string{
	"from":     "ADD --from is not supported: use COPY --from",
	"mount":    "RUN --mount is not supported",
	"network":  "RUN --network is not supported: the build policy decides a step's network",
	"security": "RUN --security is not supported",
	"platform": "--platform is not supported: images are built for this machine's platform",
	"link":     "--link is not supported",
	"checksum": "ADD --checksum is not supported (ADD takes local files only)",
	"parents":  "--parents is not supported",
	"exclude":  "--exclude is not supported: use .dockerignore",
}

var directiveRE = regexp.MustCompile(`^#\s*([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$`)

// heredocRE finds a BuildKit heredoc (<<EOF, <<-"EOF") at a word's start.
var heredocRE = regexp.MustCompile(`(^|\s)<<-?["']?[A-Za-z_][A-Za-z0-9_]*["']?(\s|$)`)

// File is a parsed Dockerfile.
type File struct {
	Instructions []Instruction
	// Escape is its escape character: \ or ` (the escape directive).
	Escape byte
}

// Parse reads a Dockerfile and returns its instructions, or the first
// problem, with its line, of a file that is not the subset this package
// builds. It checks the structure (one FROM, first but for ARGs; known
// instructions and options; arguments present and well formed), not what
// the arguments name.
func Parse(r io.Reader) (*File, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read Dockerfile: %w", err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("read Dockerfile: over %d bytes", MaxSize)
	}
	if !utf8.Valid(b) {
		return nil, &Error{Line: 1, Msg: "not UTF-8 text"}
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 64<<10), MaxSize+1)
	escape := byte('\\')
	directives := true
	var (
		out   []Instruction
		cur   strings.Builder
		start int
		line  int
		open  bool // a continuation is pending
	)
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		trimmed := strings.TrimLeftFunc(text, unicode.IsSpace)
		if directives {
			if m := directiveRE.FindStringSubmatch(trimmed); m != nil {
				if strings.EqualFold(m[1], "escape") {
					switch m[2] {
					case "\\":
						escape = '\\'
					case "`":
						escape = '`'
					default:
						return nil, &Error{Line: line, Msg: fmt.Sprintf("escape directive %q: want \\ or `", m[2])}
					}
				}
				// Other directives (syntax, check) choose BuildKit features
				// this builder does not have; the instructions below say
				// whether the file needs them.
				continue
			}
			directives = false
		}
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment, also between continued lines
		}
		if !open {
			if trimmed == "" {
				continue
			}
			start = line
			cur.Reset()
		} else if trimmed == "" {
			continue // an empty line inside a continuation
		}
		body := strings.TrimRightFunc(text, unicode.IsSpace)
		if n := len(body); n > 0 && body[n-1] == escape && !escapedEscape(body, escape) {
			cur.WriteString(body[:n-1])
			open = true
			continue
		}
		cur.WriteString(body)
		open = false
		in, err := parseLine(start, cur.String())
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read Dockerfile: %w", err)
	}
	if open {
		in, err := parseLine(start, cur.String())
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	if err := check(out); err != nil {
		return nil, err
	}
	return &File{Instructions: out, Escape: escape}, nil
}

// escapedEscape reports whether the escape character ending body is itself
// escaped (an even run of them): then it is a literal, not a continuation.
func escapedEscape(body string, escape byte) bool {
	n := 0
	for i := len(body) - 1; i >= 0 && body[i] == escape; i-- {
		n++
	}
	return n%2 == 0
}

// parseLine parses one instruction, continuations joined.
func parseLine(line int, s string) (Instruction, error) {
	s = strings.TrimSpace(s)
	var word, rest string
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		word, rest = s[:i], s[i:]
	} else {
		word, rest = s, ""
	}
	cmd := strings.ToUpper(word)
	in := Instruction{Line: line, Cmd: cmd}
	if why, ok := unsupported[cmd]; ok {
		return in, &Error{Line: line, Msg: why}
	}
	allowed, known := flagsAllowed[cmd]
	switch cmd {
	case "ENV", "WORKDIR", "USER", "ARG", "LABEL", "CMD", "ENTRYPOINT":
		known = true
	}
	if !known {
		return in, &Error{Line: line, Msg: fmt.Sprintf("unknown instruction %q", word)}
	}
	rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
	for strings.HasPrefix(rest, "--") {
		tok := rest
		if i := strings.IndexFunc(rest, unicode.IsSpace); i >= 0 {
			tok, rest = rest[:i], strings.TrimLeftFunc(rest[i:], unicode.IsSpace)
		} else {
			rest = ""
		}
		name, val, _ := strings.Cut(tok[2:], "=")
		ok := slices.Contains(allowed, name)
		if why, refused := flagRefused[name]; refused && !ok {
			return in, &Error{Line: line, Msg: why}
		}
		if !ok {
			return in, &Error{Line: line, Msg: fmt.Sprintf("%s does not take the option --%s here", cmd, name)}
		}
		if in.Flags == nil {
			in.Flags = map[string]string{}
		}
		in.Flags[name] = val
	}
	in.Args = strings.TrimSpace(rest)
	if strings.HasPrefix(in.Args, "[") {
		var argv []string
		if err := json.Unmarshal([]byte(in.Args), &argv); err == nil {
			switch cmd {
			case "RUN", "CMD", "ENTRYPOINT", "COPY", "ADD":
				in.Exec, in.Argv = true, argv
			}
		} else if cmd == "CMD" || cmd == "ENTRYPOINT" || cmd == "RUN" {
			// Docker runs it as a shell command; say so rather than surprise.
			if strings.HasSuffix(in.Args, "]") {
				return in, &Error{Line: line, Msg: fmt.Sprintf("%s: %q looks like the exec form but is not a JSON array of strings (%v)", cmd, in.Args, err)}
			}
		}
	}
	if !in.Exec && (cmd == "RUN" || cmd == "COPY" || cmd == "ADD") && heredocRE.MatchString(in.Args) {
		return in, &Error{Line: line, Msg: "heredocs (<<EOF) are not supported: put the script in a file and COPY it, or use line continuations"}
	}
	if in.Args == "" && !in.Exec {
		switch cmd {
		case "CMD", "ENTRYPOINT":
		default:
			return in, &Error{Line: line, Msg: cmd + " needs arguments"}
		}
	}
	return in, nil
}

// check checks the instructions' order (ARGs, then stages, each a FROM
// and the rest), the stages' names, and that a COPY --from names a stage
// before its own (or an image).
func check(ins []Instruction) error {
	var all []string // every stage's name
	for _, in := range ins {
		if _, name, err := in.Stage(); in.Cmd == "FROM" && err == nil && name != "" {
			all = append(all, name)
		}
	}
	var stages []string // names so far, "" for an unnamed stage
	for _, in := range ins {
		switch {
		case in.Cmd == "FROM":
			_, name, err := in.Stage()
			if err != nil {
				return &Error{Line: in.Line, Msg: err.Error()}
			}
			if name != "" && slices.Contains(stages, name) {
				return &Error{Line: in.Line, Msg: fmt.Sprintf("a second stage named %q", name)}
			}
			stages = append(stages, name)
		case len(stages) == 0 && in.Cmd != "ARG":
			return &Error{Line: in.Line, Msg: in.Cmd + " before FROM: only ARG may come before it"}
		case (in.Cmd == "COPY" || in.Cmd == "ADD") && len(in.Sources()) == 0:
			return &Error{Line: in.Line, Msg: in.Cmd + " needs a source and a destination"}
		}
		if from, ok := in.Flags["from"]; ok {
			cur := len(stages) - 1
			if n, err := strconv.Atoi(from); err == nil && (n < 0 || n >= cur) {
				return &Error{Line: in.Line, Msg: fmt.Sprintf("COPY --from=%d: want the index of an earlier stage (0 to %d)", n, cur-1)}
			}
			switch i := slices.Index(stages, strings.ToLower(from)); {
			case from == "":
				return &Error{Line: in.Line, Msg: "COPY --from needs a stage or an image"}
			case i == cur:
				return &Error{Line: in.Line, Msg: fmt.Sprintf("COPY --from=%s: the stage it is in", from)}
			case i < 0 && slices.Contains(all, strings.ToLower(from)):
				return &Error{Line: in.Line, Msg: fmt.Sprintf("COPY --from=%s: a later stage (a stage copies from those before it)", from)}
			}
		}
	}
	if len(stages) == 0 {
		line := 1
		if len(ins) > 0 {
			line = ins[len(ins)-1].Line
		}
		return &Error{Line: line, Msg: "no FROM"}
	}
	return nil
}

// stageName is a stage's name: docker's, compared lower-case.
var stageName = regexp.MustCompile(`^[a-z][a-z0-9._-]{0,63}$`)

// Stage is a FROM's image (unexpanded) and the stage's name ("" for none),
// from FROM IMAGE [AS NAME].
func (in Instruction) Stage() (image, name string, err error) {
	w := strings.Fields(in.Args)
	switch {
	case len(w) == 1:
		return w[0], "", nil
	case len(w) == 3 && strings.EqualFold(w[1], "AS"):
		name = strings.ToLower(w[2])
		if !stageName.MatchString(name) {
			return "", "", fmt.Errorf("stage name %q: want a letter, then letters, digits, '.', '_' or '-'", w[2])
		}
		return w[0], name, nil
	}
	return "", "", errors.New("FROM takes an image and, optionally, AS NAME")
}

// Sources are a COPY or ADD's unexpanded words but the last (in exec
// form, its array's strings): empty when it has fewer than two.
func (in Instruction) Sources() []string {
	w := in.Argv
	if !in.Exec {
		w = strings.Fields(in.Args)
	}
	if len(w) < 2 {
		return nil
	}
	return w[:len(w)-1]
}
