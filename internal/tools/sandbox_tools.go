package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Limits configure the sandbox tools; zero fields take the defaults.
type Limits struct {
	MaxContent     int           // bytes of Content per result; default DefaultMaxContent
	DefaultTimeout time.Duration // run_command without timeout_seconds; default 2 min
	MaxTimeout     time.Duration // the largest timeout_seconds; default 30 min
	// MaxCommandOutput is the sandbox's kill cap on a command's output
	// (stdout+stderr); default 64 MiB. Content keeps head and tail only.
	MaxCommandOutput int64
	MaxReadBytes     int64 // read_file and edit_file read at most this much; default 8 MiB
	MaxDepth         int   // list_dir depth bound; default 5
	MaxEntries       int   // list_dir entries shown; default 1000
	MaxMatches       int   // search matching lines shown; default 200
}

func (l Limits) withDefaults() Limits {
	if l.MaxContent <= 0 {
		l.MaxContent = DefaultMaxContent
	}
	if l.DefaultTimeout <= 0 {
		l.DefaultTimeout = 2 * time.Minute
	}
	if l.MaxTimeout <= 0 {
		l.MaxTimeout = 30 * time.Minute
	}
	if l.MaxTimeout < time.Second {
		l.MaxTimeout = time.Second
	}
	if l.DefaultTimeout > l.MaxTimeout {
		l.DefaultTimeout = l.MaxTimeout
	}
	if l.MaxCommandOutput <= 0 {
		l.MaxCommandOutput = 64 << 20
	}
	if l.MaxReadBytes <= 0 {
		l.MaxReadBytes = 8 << 20
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = 5
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 1000
	}
	if l.MaxMatches <= 0 {
		l.MaxMatches = 200
	}
	return l
}

// SandboxTools returns run_command, read_file, write_file, edit_file,
// list_dir and search, configured by l.
func SandboxTools(l Limits) []Tool {
	l = l.withDefaults()
	return []Tool{RunCommand(l), ReadFile(l), WriteFile(), EditFile(l), ListDir(l), Search(l)}
}

// ---- run_command ----

type runArgs struct {
	Command        string `json:"command"`
	TimeoutSeconds int64  `json:"timeout_seconds"`
}

// RunCommand returns the run_command tool: `sh -c COMMAND` in /workspace,
// with a bounded timeout; stdout and stderr come back labelled, each capped
// to half of l.MaxContent (head and tail kept). A command that exits
// non-zero or is ended by a limit is a tool error; a lost sandbox is an
// error. It is mutating (a command may write anywhere the sandbox lets it)
// and not external (the sandbox reaches out only through the host's
// egress proxy, which records and governs every request).
func RunCommand(l Limits) Tool {
	l = l.withDefaults()
	maxSec := int64(l.MaxTimeout / time.Second)
	return &spec[runArgs]{
		name:    "run_command",
		place:   PlaceSandbox,
		effects: sandboxFiles,
		desc: fmt.Sprintf("Run a shell command with `sh -c` in /workspace inside the sandbox. Returns the exit status and the labelled stdout and stderr (long output keeps its head and tail). Default timeout %v, at most %v.",
			l.DefaultTimeout, l.MaxTimeout),
		params: []param{
			{Name: "command", Type: typeString, Required: true, Desc: "The shell command line."},
			{Name: "timeout_seconds", Type: typeInteger, Min: 1, Max: maxSec, Desc: "Wall-clock timeout in seconds."},
		},
		validate: func(a *runArgs) error {
			if strings.TrimSpace(a.Command) == "" {
				return errors.New("command is empty")
			}
			if strings.ContainsRune(a.Command, 0) {
				return errors.New("command contains a NUL byte")
			}
			return nil
		},
		run: func(ctx context.Context, env Env, a runArgs) (Result, error) {
			timeout := l.DefaultTimeout
			if a.TimeoutSeconds > 0 {
				timeout = time.Duration(a.TimeoutSeconds) * time.Second
			}
			half := l.MaxContent / 2
			stdout, stderr := newHeadTail(half), newHeadTail(half)
			cmd := sandbox.Command{
				Argv:      []string{"sh", "-c", a.Command},
				Dir:       Workspace,
				Timeout:   timeout,
				MaxOutput: l.MaxCommandOutput,
				Stdout:    stdout,
				Stderr:    stderr,
			}
			if _, ok := env.Sandbox.(sandbox.Checkpointer); !ok {
				// A fingerprint (a walk of the whole tree) tells the
				// host it need not export an unchanged workspace; a
				// sandbox that checkpoints finds what changed cheaper.
				cmd.Fingerprint = Workspace
			}
			r, err := sandbox.Run(ctx, env.Sandbox, cmd)
			if err == nil && ctx.Err() != nil {
				err = errors.New("cancelled")
			}
			if err != nil {
				return infraFailure(ctx, env, "run_command", err)
			}
			code := r.ExitStatus()
			d := Details{
				Outcome: string(r.Outcome), ExitCode: &code, Signal: r.Signal, Wall: r.Usage.Wall,
				Bytes: stdout.total + stderr.total, Truncated: stdout.cut() + stderr.cut(), Fingerprint: r.Fingerprint,
			}
			var b strings.Builder
			fmt.Fprintf(&b, "exit status %d", code)
			if r.Outcome != sandbox.OutcomeExited {
				fmt.Fprintf(&b, " (%s", r.Outcome)
				if r.Message != "" {
					fmt.Fprintf(&b, ": %s", r.Message)
				}
				b.WriteString(")")
			}
			b.WriteString("\n")
			writeStream(&b, "stdout", stdout)
			writeStream(&b, "stderr", stderr)
			res := Result{Content: b.String(), IsError: code != 0 || r.Outcome != sandbox.OutcomeExited, Details: d}
			if r.Outcome == sandbox.OutcomeLost {
				return res, fmt.Errorf("%w: run_command: %s", ErrSandboxLost, r.Message)
			}
			return res, nil
		},
	}
}

func writeStream(b *strings.Builder, label string, h *headTail) {
	if h.total == 0 {
		return
	}
	fmt.Fprintf(b, "--- %s ---\n", label)
	s := h.String()
	b.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
}

// headTail keeps the first and last max/2 bytes written to it.
type headTail struct {
	mu    sync.Mutex
	max   int
	head  []byte
	tail  []byte // ring content, in order, at most max-len(head)
	total int64
}

func newHeadTail(limit int) *headTail { return &headTail{max: limit} }

func (h *headTail) Write(p []byte) (int, error) {
	n0 := len(p)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total += int64(len(p))
	hm := h.max / 2
	if n := min(hm-len(h.head), len(p)); n > 0 {
		h.head = append(h.head, p[:n]...)
		p = p[n:]
	}
	tm := h.max - hm
	if len(p) >= tm {
		h.tail = append(h.tail[:0], p[len(p)-tm:]...)
	} else if len(p) > 0 {
		h.tail = append(h.tail, p...)
		if over := len(h.tail) - tm; over > 0 {
			h.tail = append(h.tail[:0], h.tail[over:]...)
		}
	}
	return n0, nil
}

// cut is how many bytes were left out.
func (h *headTail) cut() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total - int64(len(h.head)+len(h.tail))
}

func (h *headTail) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	cut := h.total - int64(len(h.head)+len(h.tail))
	if cut == 0 {
		return string(h.head) + string(h.tail)
	}
	return string(h.head) + marker(cut) + string(h.tail)
}

// ---- read_file ----

type readArgs struct {
	Path      string `json:"path"`
	StartLine int64  `json:"start_line"`
	EndLine   int64  `json:"end_line"`
}

// ReadFile returns the read_file tool: a text file's content, or lines
// start_line..end_line of it (1-based, inclusive). Files larger than
// l.MaxReadBytes are read up to that size, with a marker. It changes
// nothing.
func ReadFile(l Limits) Tool {
	l = l.withDefaults()
	return &spec[readArgs]{
		name:    "read_file",
		place:   PlaceSandbox,
		effects: readOnly,
		desc:    "Read a text file in the sandbox (relative paths are under /workspace). Optionally only lines start_line to end_line (1-based, inclusive). Long content is truncated with a marker.",
		params: []param{
			{Name: "path", Type: typeString, Required: true, Desc: "File path."},
			{Name: "start_line", Type: typeInteger, Min: 1, Max: 1 << 31, Desc: "First line to return (1-based)."},
			{Name: "end_line", Type: typeInteger, Min: 1, Max: 1 << 31, Desc: "Last line to return (inclusive)."},
		},
		validate: func(a *readArgs) error {
			if a.StartLine > 0 && a.EndLine > 0 && a.EndLine < a.StartLine {
				return fmt.Errorf("end_line %d is before start_line %d", a.EndLine, a.StartLine)
			}
			return nil
		},
		run: func(ctx context.Context, env Env, a readArgs) (Result, error) {
			p, err := resolve(a.Path)
			if err != nil {
				return errResult("read_file: %v", err), nil
			}
			data, truncated, res, err := readRegular(ctx, env, "read_file", p, l.MaxReadBytes)
			if data == nil {
				return res, err
			}
			d := Details{Path: p, Bytes: int64(len(data))}
			if bytes.IndexByte(data, 0) >= 0 {
				return Result{Content: fmt.Sprintf("error: read_file %s: binary file (%d bytes shown as nothing)", p, len(data)), IsError: true, Details: d}, nil
			}
			text := string(data)
			if a.StartLine > 0 || a.EndLine > 0 {
				lines := strings.SplitAfter(text, "\n")
				if lines[len(lines)-1] == "" {
					lines = lines[:len(lines)-1]
				}
				start, end := max(a.StartLine, 1), a.EndLine
				if end == 0 || end > int64(len(lines)) {
					end = int64(len(lines))
				}
				if start > int64(len(lines)) {
					return Result{Content: fmt.Sprintf("error: read_file %s: start_line %d is past the end (%d lines)", p, start, len(lines)), IsError: true, Details: d}, nil
				}
				text = strings.Join(lines[start-1:end], "")
				d.Lines = int(end - start + 1)
			} else {
				d.Lines = strings.Count(text, "\n")
			}
			if truncated {
				text += fmt.Sprintf("\n[... file truncated: only the first %d bytes were read ...]\n", l.MaxReadBytes)
			}
			return Result{Content: text, Details: d}, nil
		},
	}
}

// readRegular reads a regular file at p up to limit bytes. When data is nil
// the returned Result and error describe the failure.
func readRegular(ctx context.Context, env Env, tool, p string, limit int64) (data []byte, truncated bool, res Result, err error) {
	fi, err := env.Sandbox.Stat(ctx, p)
	if err != nil {
		res, err = fileFailure(ctx, env, tool, err)
		return nil, false, res, err
	}
	if fi.Mode&fs.ModeSymlink != 0 {
		// Stat does not follow a final symlink; reading does.
		fi.Mode = 0
	}
	if fi.Mode.IsDir() {
		return nil, false, errResult("%s %s: is a directory; use list_dir", tool, p), nil
	}
	if fi.Mode&(fs.ModeNamedPipe|fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket) != 0 {
		return nil, false, errResult("%s %s: not a regular file", tool, p), nil
	}
	data, err = env.Sandbox.ReadFile(ctx, p, limit+1)
	if err != nil {
		res, err = fileFailure(ctx, env, tool, err)
		return nil, false, res, err
	}
	if int64(len(data)) > limit {
		data, truncated = data[:limit], true
	}
	if data == nil {
		data = []byte{}
	}
	return data, truncated, Result{}, nil
}

// ---- write_file ----

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// WriteFile returns the write_file tool: create or replace a file,
// creating its parent directories. It is mutating, not external.
func WriteFile() Tool {
	return &spec[writeArgs]{
		name:    "write_file",
		place:   PlaceSandbox,
		effects: sandboxFiles,
		desc:    "Create or overwrite a file in the sandbox with the given content, creating parent directories (relative paths are under /workspace).",
		params: []param{
			{Name: "path", Type: typeString, Required: true, Desc: "File path."},
			{Name: "content", Type: typeString, Required: true, Desc: "The complete new content."},
		},
		run: func(ctx context.Context, env Env, a writeArgs) (Result, error) {
			p, err := resolve(a.Path)
			if err != nil {
				return errResult("write_file: %v", err), nil
			}
			if p == "/" {
				return errResult("write_file: / is a directory"), nil
			}
			if err := env.Sandbox.Mkdir(ctx, path.Dir(p), 0o755, true); err != nil {
				return fileFailure(ctx, env, "write_file", err)
			}
			if err := env.Sandbox.WriteFile(ctx, p, strings.NewReader(a.Content), 0o644); err != nil {
				return fileFailure(ctx, env, "write_file", err)
			}
			return Result{Content: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), p), Details: Details{Path: p, Bytes: int64(len(a.Content))}}, nil
		},
	}
}

// ---- edit_file ----

type editArgs struct {
	Path       string `json:"path"`
	Old        string `json:"old"`
	New        string `json:"new"`
	ReplaceAll bool   `json:"replace_all"`
}

// EditFile returns the edit_file tool: replace the one occurrence of old
// with new, or every occurrence with replace_all. An absent old, or one that
// occurs more than once without replace_all, is a tool error and the file is
// left unchanged. It is mutating, not external.
func EditFile(l Limits) Tool {
	l = l.withDefaults()
	return &spec[editArgs]{
		name:    "edit_file",
		place:   PlaceSandbox,
		effects: sandboxFiles,
		desc:    "Replace an exact string in a file in the sandbox. `old` must occur exactly once (include surrounding lines to make it unique) unless replace_all is true.",
		params: []param{
			{Name: "path", Type: typeString, Required: true, Desc: "File path."},
			{Name: "old", Type: typeString, Required: true, Desc: "The exact text to replace."},
			{Name: "new", Type: typeString, Required: true, Desc: "The replacement text."},
			{Name: "replace_all", Type: typeBoolean, Desc: "Replace every occurrence."},
		},
		validate: func(a *editArgs) error {
			if a.Old == "" {
				return errors.New("old is empty")
			}
			if a.Old == a.New {
				return errors.New("old and new are identical")
			}
			return nil
		},
		run: func(ctx context.Context, env Env, a editArgs) (Result, error) {
			p, err := resolve(a.Path)
			if err != nil {
				return errResult("edit_file: %v", err), nil
			}
			data, truncated, res, err := readRegular(ctx, env, "edit_file", p, l.MaxReadBytes)
			if data == nil {
				return res, err
			}
			if truncated {
				return errResult("edit_file %s: file is larger than %d bytes", p, l.MaxReadBytes), nil
			}
			text := string(data)
			n := strings.Count(text, a.Old)
			switch {
			case n == 0:
				return errResult("edit_file %s: old string not found; nothing changed (read the file and copy the text exactly)", p), nil
			case n > 1 && !a.ReplaceAll:
				return errResult("edit_file %s: old string occurs %d times; nothing changed (add surrounding text to make it unique, or set replace_all)", p, n), nil
			}
			if a.ReplaceAll {
				text = strings.ReplaceAll(text, a.Old, a.New)
			} else {
				text = strings.Replace(text, a.Old, a.New, 1)
			}
			mode := fs.FileMode(0o644)
			if fi, err := env.Sandbox.Stat(ctx, p); err == nil && fi.Mode.IsRegular() {
				mode = fi.Mode.Perm()
			}
			if err := env.Sandbox.WriteFile(ctx, p, strings.NewReader(text), mode); err != nil {
				return fileFailure(ctx, env, "edit_file", err)
			}
			return Result{Content: fmt.Sprintf("replaced %d occurrence(s) in %s", n, p), Details: Details{Path: p, Bytes: int64(len(text)), Replaced: n}}, nil
		},
	}
}

// ---- list_dir ----

type listArgs struct {
	Path  string `json:"path"`
	Depth int64  `json:"depth"`
}

// ListDir returns the list_dir tool: the entries under a directory, to a
// bounded depth, one per line: directories end in "/", symlinks show their
// target, files their size. It changes nothing.
func ListDir(l Limits) Tool {
	l = l.withDefaults()
	return &spec[listArgs]{
		name:    "list_dir",
		place:   PlaceSandbox,
		effects: readOnly,
		desc:    fmt.Sprintf("List a directory in the sandbox (default /workspace), recursing to depth (default 1, at most %d). Directories end in /.", l.MaxDepth),
		params: []param{
			{Name: "path", Type: typeString, Desc: "Directory path; default /workspace."},
			{Name: "depth", Type: typeInteger, Min: 1, Max: int64(l.MaxDepth), Desc: "How many levels to list."},
		},
		run: func(ctx context.Context, env Env, a listArgs) (Result, error) {
			if a.Path == "" {
				a.Path = "."
			}
			if a.Depth == 0 {
				a.Depth = 1
			}
			root, err := resolve(a.Path)
			if err != nil {
				return errResult("list_dir: %v", err), nil
			}
			var b strings.Builder
			n, stopped := 0, false
			var walk func(dir, rel string, depth int64) (Result, bool, error)
			walk = func(dir, rel string, depth int64) (Result, bool, error) {
				entries, err := env.Sandbox.List(ctx, dir)
				if err != nil {
					res, err := fileFailure(ctx, env, "list_dir", err)
					return res, false, err
				}
				sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
				for _, e := range entries {
					if n >= l.MaxEntries {
						stopped = true
						return Result{}, true, nil
					}
					n++
					name := path.Join(rel, e.Name)
					switch {
					case e.Mode.IsDir():
						fmt.Fprintf(&b, "%s/\n", name)
						if depth > 1 {
							// A subdirectory that cannot be listed is noted, not fatal.
							if res, ok, err := walk(path.Join(dir, e.Name), name, depth-1); !ok {
								if err != nil {
									return res, false, err
								}
								fmt.Fprintf(&b, "%s/ [unreadable: %s]\n", name, strings.TrimPrefix(res.Content, "error: "))
							}
							if stopped {
								return Result{}, true, nil
							}
						}
					case e.Mode&fs.ModeSymlink != 0:
						link := e.Link
						if link == "" { // List does not read links; Stat does
							if fi, err := env.Sandbox.Stat(ctx, path.Join(dir, e.Name)); err == nil {
								link = fi.Link
							}
						}
						fmt.Fprintf(&b, "%s -> %s\n", name, link)
					default:
						fmt.Fprintf(&b, "%s (%d bytes)\n", name, e.Size)
					}
				}
				return Result{}, true, nil
			}
			if res, ok, err := walk(root, "", a.Depth); !ok {
				return res, err
			}
			if n == 0 {
				b.WriteString("(empty directory)\n")
			}
			if stopped {
				fmt.Fprintf(&b, "[... listing stopped at %d entries ...]\n", l.MaxEntries)
			}
			return Result{Content: b.String(), Details: Details{Path: root, Entries: n}}, nil
		},
	}
}

// ---- search ----

type searchArgs struct {
	Pattern         string `json:"pattern"`
	Path            string `json:"path"`
	Glob            string `json:"glob"`
	FixedString     bool   `json:"fixed_string"`
	CaseInsensitive bool   `json:"case_insensitive"`
}

// maxLineLen caps one matching line in search results.
const maxLineLen = 400

// Search returns the search tool: `grep -rnI` inside the sandbox, run with
// an argv (the pattern is never seen by a shell), showing at most
// l.MaxMatches matching lines. It changes nothing.
func Search(l Limits) Tool {
	l = l.withDefaults()
	return &spec[searchArgs]{
		name:    "search",
		place:   PlaceSandbox,
		effects: readOnly,
		desc:    fmt.Sprintf("Search file contents in the sandbox like `grep -rn`: pattern is an extended regular expression (the syntax Go regexp and POSIX ERE share) or, with fixed_string, a literal. Optional path (default /workspace) and glob on file names (e.g. *.go). At most %d matching lines.", l.MaxMatches),
		params: []param{
			{Name: "pattern", Type: typeString, Required: true, Desc: "Regular expression, or literal text with fixed_string."},
			{Name: "path", Type: typeString, Desc: "File or directory to search; default /workspace."},
			{Name: "glob", Type: typeString, Desc: "Only files whose name matches this glob."},
			{Name: "fixed_string", Type: typeBoolean, Desc: "Treat pattern as literal text."},
			{Name: "case_insensitive", Type: typeBoolean, Desc: "Ignore case."},
		},
		validate: func(a *searchArgs) error {
			if a.Pattern == "" {
				return errors.New("pattern is empty")
			}
			if strings.ContainsAny(a.Pattern, "\x00\n") || strings.ContainsRune(a.Glob, 0) {
				return errors.New("pattern and glob must be one line without NUL bytes")
			}
			if !a.FixedString {
				if _, err := regexp.Compile(a.Pattern); err != nil {
					return fmt.Errorf("pattern: %w", err)
				}
			}
			if a.Glob != "" {
				if _, err := path.Match(a.Glob, ""); err != nil {
					return fmt.Errorf("glob %q: %w", a.Glob, err)
				}
			}
			return nil
		},
		run: func(ctx context.Context, env Env, a searchArgs) (Result, error) {
			if a.Path == "" {
				a.Path = "."
			}
			p, err := resolve(a.Path)
			if err != nil {
				return errResult("search: %v", err), nil
			}
			argv := []string{"grep", "-r", "-n", "-I", "--color=never"}
			if a.FixedString {
				argv = append(argv, "-F")
			} else {
				argv = append(argv, "-E")
			}
			if a.CaseInsensitive {
				argv = append(argv, "-i")
			}
			if a.Glob != "" {
				argv = append(argv, "--include="+a.Glob)
			}
			// Paths under /workspace are given relative to it, so results read
			// like the paths the model uses.
			target := p
			if rel, ok := strings.CutPrefix(p, Workspace+"/"); ok {
				target = rel
			} else if p == Workspace {
				target = "."
			}
			argv = append(argv, "-e", a.Pattern, "--", target)
			out := &lineCollector{max: l.MaxMatches}
			stderr := newHeadTail(2048)
			r, err := sandbox.Run(ctx, env.Sandbox, sandbox.Command{
				Argv: argv, Dir: Workspace, Timeout: l.DefaultTimeout, MaxOutput: l.MaxCommandOutput,
				Stdout: out, Stderr: stderr,
			})
			if err == nil && ctx.Err() != nil {
				err = errors.New("cancelled")
			}
			if err != nil {
				return infraFailure(ctx, env, "search", err)
			}
			code := r.ExitStatus()
			d := Details{Outcome: string(r.Outcome), ExitCode: &code, Wall: r.Usage.Wall, Path: p, Bytes: out.bytes, Lines: out.count()}
			if r.Outcome == sandbox.OutcomeLost {
				return errResult("search: the sandbox was lost"), fmt.Errorf("%w: search: %s", ErrSandboxLost, r.Message)
			}
			var b strings.Builder
			lines, total := out.result()
			for _, ln := range lines {
				b.WriteString(ln)
				b.WriteString("\n")
			}
			switch {
			case r.Outcome == sandbox.OutcomeExited && code == 1 && total == 0:
				return Result{Content: "no matches", Details: d}, nil
			case r.Outcome == sandbox.OutcomeOutputLimit || r.Outcome == sandbox.OutcomeTimeout:
				fmt.Fprintf(&b, "[... search stopped (%s) after %d matching lines; narrow the path, glob or pattern ...]\n", r.Outcome, total)
			case total > len(lines):
				fmt.Fprintf(&b, "[... %d more matching lines not shown; narrow the path, glob or pattern ...]\n", total-len(lines))
			case code != 0:
				msg := strings.TrimSpace(stderr.String())
				if total == 0 {
					return Result{Content: fmt.Sprintf("error: search failed (exit status %d): %s", code, msg), IsError: true, Details: d}, nil
				}
				fmt.Fprintf(&b, "[search reported errors: %s]\n", msg)
			}
			return Result{Content: b.String(), Details: d}, nil
		},
	}
}

// lineCollector keeps the first max lines written to it (each cut to
// maxLineLen) and counts all of them.
type lineCollector struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
	total   int
	bytes   int64
}

func (c *lineCollector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bytes += int64(len(p))
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(c.partial) <= maxLineLen {
				c.partial = append(c.partial, p[:min(len(p), maxLineLen+1-len(c.partial))]...)
			}
			break
		}
		if len(c.partial) <= maxLineLen {
			c.partial = append(c.partial, p[:min(i, maxLineLen+1-len(c.partial))]...)
		}
		c.line()
		p = p[i+1:]
	}
	return n, nil
}

func (c *lineCollector) line() {
	c.total++
	if len(c.lines) < c.max {
		s := string(c.partial)
		if len(s) > maxLineLen {
			s = strings.ToValidUTF8(s[:maxLineLen], "") + " [... line cut ...]"
		}
		c.lines = append(c.lines, s)
	}
	c.partial = c.partial[:0]
}

func (c *lineCollector) result() ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.partial) > 0 {
		c.line()
	}
	return c.lines, c.total
}

func (c *lineCollector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
