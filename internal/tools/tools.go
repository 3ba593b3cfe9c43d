// Package tools is the registry of the tools an agent's model may call and
// the tools themselves: the sandbox tools (run_command, read_file,
// write_file, edit_file, list_dir, search, and run_code, Python in a
// kernel of the code interpreter's server), which act only through a
// sandbox.Sandbox, and the host tools (finish), which run next to the agent
// loop. A tool decodes its arguments strictly: a malformed call becomes a
// tool error the model can read and correct, never a panic. Every tool says
// what a call of it may change (Mutating, External), so the loop never
// decides from a tool's name; a call travels as a Call, resolved once per
// step (Registry.Resolve), from the model's turn to its record.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Place says where a tool runs.
type Place string

// Places.
const (
	// PlaceSandbox tools act only through the Env's sandbox.
	PlaceSandbox Place = "sandbox"
	// PlaceHost tools run next to the agent loop, on the trusted host.
	PlaceHost Place = "host"
)

// Env is what a tool call may use.
type Env struct {
	// Sandbox is where sandbox tools act; host tools ignore it.
	Sandbox sandbox.Sandbox
}

// Details are the structured facts of a tool call, for the event log. Only
// the fields that apply to the tool are set.
type Details struct {
	Outcome  string        `json:"outcome,omitempty"` // a sandbox.Outcome for run_command and search
	ExitCode *int          `json:"exit_code,omitempty"`
	Signal   int           `json:"signal,omitempty"`
	Duration time.Duration `json:"duration_ns"`        // the whole tool call, set by Registry.Call
	Wall     time.Duration `json:"wall_ns,omitempty"`  // the command's own wall time
	Path     string        `json:"path,omitempty"`     // the resolved sandbox path
	Bytes    int64         `json:"bytes,omitempty"`    // bytes read, written or output
	Lines    int           `json:"lines,omitempty"`    // lines returned (read_file) or matches (search)
	Entries  int           `json:"entries,omitempty"`  // list_dir
	Replaced int           `json:"replaced,omitempty"` // edit_file
	// Truncated counts the bytes left out of Content.
	Truncated int64 `json:"truncated_bytes,omitempty"`
	// Fingerprint is the workspace's fingerprint after a command
	// (run_command), for telling whether it changed the workspace.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Finished and Summary record the model's claim of completion (finish).
	Finished bool   `json:"finished,omitempty"`
	Summary  string `json:"summary,omitempty"`
}

// Result is what a tool call returns.
type Result struct {
	// Content is fed back to the model; it is size-capped with a marker.
	Content string
	// IsError says the call failed in a way the model should see and handle.
	IsError bool
	Details Details
	// Files are kept as the run's artifacts (run_code's images); they
	// are not part of Content.
	Files []File
}

// Tool is one tool the model may call. Every tool says where it runs and
// what a call of it may change: the agent loop decides from these answers,
// never from a tool's name, which sandboxes to snapshot after a step and
// which calls it must not repeat blindly after a crash.
type Tool interface {
	Spec() model.ToolSpec
	Place() Place
	// Mutating reports whether a call may change the files of the sandbox
	// it acts in: the loop snapshots that sandbox after the step.
	Mutating() bool
	// External reports whether a call may change the world outside the
	// run's sandboxes (send a message, push, pay): a call that started
	// and has no recorded result is never run again (fail closed).
	External() bool
	// Run executes the tool. A failure the model should see (bad arguments,
	// missing file, failing command) is a Result with IsError; an error is
	// returned only when the call could not be carried out at all (the
	// sandbox is lost, ctx ended), and the agent loop decides what to do.
	Run(ctx context.Context, env Env, args json.RawMessage) (Result, error)
}

// ErrSandboxLost is returned (wrapped) when the sandbox is gone or its
// executor stopped answering.
var ErrSandboxLost = errors.New("tools: sandbox lost")

// ErrNoSandbox is returned when a sandbox tool is called without one.
var ErrNoSandbox = errors.New("tools: no sandbox in the environment")

// DefaultMaxContent caps Result.Content when the registry sets no cap.
const DefaultMaxContent = 32 << 10

// Registry holds the tools of a run by name. It is safe for concurrent Call
// once the tools are registered.
type Registry struct {
	tools      map[string]Tool
	order      []string
	maxContent int
}

// NewRegistry returns an empty registry whose results are capped at
// maxContent bytes (DefaultMaxContent if maxContent <= 0).
func NewRegistry(maxContent int) *Registry {
	if maxContent <= 0 {
		maxContent = DefaultMaxContent
	}
	return &Registry{tools: map[string]Tool{}, maxContent: maxContent}
}

// Default returns a registry with every sandbox tool configured by l,
// run_code, and the finish host tool.
func Default(l Limits) *Registry {
	r := NewRegistry(l.withDefaults().MaxContent)
	for _, t := range append(SandboxTools(l), RunCode(l), Finish()) {
		if err := r.Register(t); err != nil {
			panic(err) // the built-in names are distinct and valid
		}
	}
	return r
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Register adds t; a duplicate or invalid name is an error.
func (r *Registry) Register(t Tool) error {
	name := t.Spec().Name
	if !toolName.MatchString(name) {
		return fmt.Errorf("tools: invalid tool name %q", name)
	}
	if _, ok := r.tools[name]; ok {
		return fmt.Errorf("tools: tool %q registered twice", name)
	}
	switch t.Place() {
	case PlaceSandbox, PlaceHost:
	default:
		return fmt.Errorf("tools: tool %q: unknown place %q", name, t.Place())
	}
	if d, ok := t.(interface{ declared() bool }); ok && !d.declared() {
		return fmt.Errorf("tools: tool %q does not say what its calls may change", name)
	}
	r.tools[name] = t
	r.order = append(r.order, name)
	return nil
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (Tool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Specs returns the specs of every tool, in registration order, for the
// model request. With more than one sandbox, each sandbox tool's schema
// takes the optional SandboxArg naming one of them (see Resolve).
func (r *Registry) Specs(sandboxes ...string) []model.ToolSpec {
	out := make([]model.ToolSpec, 0, len(r.order))
	for _, n := range r.order {
		sp := r.tools[n].Spec()
		if len(sandboxes) > 1 && r.tools[n].Place() == PlaceSandbox {
			sp.Schema = withSandboxArg(sp.Schema, sandboxes)
		}
		out = append(out, sp)
	}
	return out
}

// Call runs c (as Resolve found it) with its Input. An unknown tool, or
// an unusable sandbox selector (c.Err), is a tool error. The result's
// Content is capped and Details.Duration is set.
func (r *Registry) Call(ctx context.Context, env Env, c Call) (Result, error) {
	start := time.Now()
	t, ok := r.tools[c.Name]
	var res Result
	var err error
	switch {
	case c.Err != nil:
		res = Result{Content: c.Err.Error(), IsError: true}
	case !ok:
		names := append([]string(nil), r.order...)
		sort.Strings(names)
		res = errResult("unknown tool %q; available tools: %s", c.Name, strings.Join(names, ", "))
	default:
		res, err = t.Run(ctx, env, c.Input)
	}
	var cut int64
	res.Content, cut = Truncate(res.Content, r.maxContent)
	res.Details.Truncated += cut
	res.Details.Duration = time.Since(start)
	return res, err
}

// Truncate caps s at about limit bytes, keeping its head and tail (on UTF-8
// boundaries) around a marker "[... N bytes truncated ...]", and returns the
// number of bytes left out.
func Truncate(s string, limit int) (string, int64) {
	if limit <= 0 || len(s) <= limit {
		return s, 0
	}
	head := limit / 2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := len(s) - (limit - head)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	cut := int64(tail - head)
	return s[:head] + marker(cut) + s[tail:], cut
}

func marker(n int64) string {
	return fmt.Sprintf("\n[... %d bytes truncated ...]\n", n)
}

// errResult is a tool error for the model.
func errResult(format string, a ...any) Result {
	return Result{Content: "error: " + fmt.Sprintf(format, a...), IsError: true}
}
