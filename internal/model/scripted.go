package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxScriptBytes is the largest script file ParseScript and LoadScript
// accept.
const MaxScriptBytes = 1 << 20

// Further script limits: bad input gets an error, not a huge allocation.
const (
	maxScriptTurns   = 10000
	maxScriptCalls   = 256
	maxScriptNesting = 64
)

// Script is a parsed script file: the model turns the scripted provider
// replays. The file format is a contract (tests and `make demo` use it):
//
//	turns:
//	  - text: "Let me run the tests."          # optional
//	    tool_calls:                             # optional
//	      - name: run_command                   # a tool name
//	        args: {command: "go test ./..."}    # optional mapping, any YAML
//	  - tool_calls:
//	      - name: finish
//	        args: {summary: "Fixed the sign error in Add."}
//
// Parsing is strict: one YAML document of at most MaxScriptBytes, no keys
// but these, every turn with text or a tool call, no anchors or aliases, no
// custom tags; errors give the line.
type Script struct {
	Turns []ScriptTurn `json:"turns"`
}

// ScriptTurn is one scripted model turn.
type ScriptTurn struct {
	Text      string       `json:"text,omitempty"`
	ToolCalls []ScriptCall `json:"tool_calls,omitempty"`
}

// ScriptCall is one scripted tool call; Args is canonical JSON (an object).
type ScriptCall struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ParseScript parses a script file's content.
func ParseScript(b []byte) (*Script, error) {
	if len(b) > MaxScriptBytes {
		return nil, fmt.Errorf("script is %d bytes, over the %d limit", len(b), MaxScriptBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("script is empty")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: a script is one YAML document", extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	var s Script
	err := walkMapping(root, "the script", map[string]func(*yaml.Node) error{
		"turns": func(n *yaml.Node) error {
			if err := plain(n); err != nil {
				return err
			}
			if n.Kind != yaml.SequenceNode {
				return lineErr(n, "turns must be a list")
			}
			if len(n.Content) > maxScriptTurns {
				return lineErr(n, "more than %d turns", maxScriptTurns)
			}
			for _, tn := range n.Content {
				t, err := parseTurn(tn)
				if err != nil {
					return err
				}
				s.Turns = append(s.Turns, t)
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	if len(s.Turns) == 0 {
		return nil, lineErr(root, "the script has no turns")
	}
	return &s, nil
}

func parseTurn(n *yaml.Node) (ScriptTurn, error) {
	var t ScriptTurn
	err := walkMapping(n, "a turn", map[string]func(*yaml.Node) error{
		"text": func(v *yaml.Node) error {
			s, err := scalarString(v, "text")
			t.Text = s
			return err
		},
		"tool_calls": func(v *yaml.Node) error {
			if err := plain(v); err != nil {
				return err
			}
			if isNull(v) {
				return nil
			}
			if v.Kind != yaml.SequenceNode {
				return lineErr(v, "tool_calls must be a list")
			}
			if len(v.Content) > maxScriptCalls {
				return lineErr(v, "more than %d tool calls in a turn", maxScriptCalls)
			}
			for _, cn := range v.Content {
				c, err := parseCall(cn)
				if err != nil {
					return err
				}
				t.ToolCalls = append(t.ToolCalls, c)
			}
			return nil
		},
	})
	if err != nil {
		return t, err
	}
	if t.Text == "" && len(t.ToolCalls) == 0 {
		return t, lineErr(n, "a turn needs text or tool_calls")
	}
	return t, nil
}

func parseCall(n *yaml.Node) (ScriptCall, error) {
	c := ScriptCall{Args: json.RawMessage("{}")}
	seenName := false
	err := walkMapping(n, "a tool call", map[string]func(*yaml.Node) error{
		"name": func(v *yaml.Node) error {
			s, err := scalarString(v, "name")
			if err != nil {
				return err
			}
			if !toolNameRE.MatchString(s) {
				return lineErr(v, "tool name %q does not match %s", s, toolNameRE)
			}
			c.Name, seenName = s, true
			return nil
		},
		"args": func(v *yaml.Node) error {
			if err := plain(v); err != nil {
				return err
			}
			if isNull(v) {
				return nil
			}
			if v.Kind != yaml.MappingNode {
				return lineErr(v, "args must be a mapping")
			}
			var buf bytes.Buffer
			if err := writeJSON(&buf, v, 0); err != nil {
				return err
			}
			c.Args = CanonicalArgs(buf.String())
			return nil
		},
	})
	if err == nil && !seenName {
		err = lineErr(n, "a tool call needs a name")
	}
	return c, err
}

// walkMapping checks that n is a mapping whose keys are all in fields, each
// at most once, and calls each key's function with its value.
func walkMapping(n *yaml.Node, what string, fields map[string]func(*yaml.Node) error) error {
	if err := plain(n); err != nil {
		return err
	}
	if n.Kind != yaml.MappingNode {
		return lineErr(n, "%s must be a mapping", what)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := plain(k); err != nil {
			return err
		}
		f, ok := fields[k.Value]
		if k.Kind != yaml.ScalarNode || !ok {
			return lineErr(k, "unknown key %q in %s (want %s)", k.Value, what, keyList(fields))
		}
		if seen[k.Value] {
			return lineErr(k, "key %q repeated in %s", k.Value, what)
		}
		seen[k.Value] = true
		if err := f(v); err != nil {
			return err
		}
	}
	return nil
}

func keyList(fields map[string]func(*yaml.Node) error) string {
	var keys []string
	for _, k := range []string{"turns", "text", "tool_calls", "name", "args"} {
		if fields[k] != nil {
			keys = append(keys, k)
		}
	}
	return strings.Join(keys, ", ")
}

// plain refuses aliases, anchors and custom tags, which a script never
// needs and which could make a small file expand into a large one.
func plain(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return lineErr(n, "anchors and aliases are not allowed in a script")
	}
	if n.Tag != "" && !strings.HasPrefix(n.Tag, "!!") {
		return lineErr(n, "custom tag %q not allowed in a script", n.Tag)
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!merge" {
		return lineErr(n, "merge keys (<<) are not allowed in a script")
	}
	return nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func scalarString(n *yaml.Node, what string) (string, error) {
	if err := plain(n); err != nil {
		return "", err
	}
	if isNull(n) {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", lineErr(n, "%s must be a string", what)
	}
	return strings.ToValidUTF8(n.Value, "\uFFFD"), nil
}

// writeJSON writes an args value as JSON, keeping the order of mapping keys
// as the script wrote them.
func writeJSON(buf *bytes.Buffer, n *yaml.Node, depth int) error {
	if err := plain(n); err != nil {
		return err
	}
	if depth > maxScriptNesting {
		return lineErr(n, "args nested deeper than %d", maxScriptNesting)
	}
	switch n.Kind {
	case yaml.MappingNode:
		seen := make(map[string]bool, len(n.Content)/2)
		buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if err := plain(k); err != nil {
				return err
			}
			if k.Kind != yaml.ScalarNode || isNull(k) {
				return lineErr(k, "args keys must be strings")
			}
			key := strings.ToValidUTF8(k.Value, "\uFFFD")
			if seen[key] {
				return lineErr(k, "key %q repeated in args", k.Value)
			}
			seen[key] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(key)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := writeJSON(buf, n.Content[i+1], depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c, depth+1); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	case yaml.ScalarNode:
		var v any
		switch n.ShortTag() {
		case "!!null":
		case "!!bool", "!!int", "!!float":
			if err := n.Decode(&v); err != nil {
				return lineErr(n, "args: %v", err)
			}
			if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
				return lineErr(n, "args: %s is not a JSON number", n.Value)
			}
		case "!!str", "!!timestamp":
			v = strings.ToValidUTF8(n.Value, "\uFFFD")
		default:
			return lineErr(n, "args: unsupported tag %s", n.ShortTag())
		}
		b, err := json.Marshal(v)
		if err != nil {
			return lineErr(n, "args: %v", err)
		}
		buf.Write(b)
		return nil
	}
	return lineErr(n, "args: unsupported YAML node")
}

func lineErr(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", n.Line, fmt.Sprintf(format, args...))
}

// Scripted is a Provider that replays a Script instead of asking a model.
// It is honest about it: every Response says Model "scripted" and
// ProviderStopReason "script", and its Usage is an estimate, marked so.
//
// The turn it replays is chosen by the conversation, not by a counter: a
// request whose messages hold N assistant turns gets turn N+1 of the script.
// So the provider is stateless and safe for concurrent use, and a run that
// is resumed, forked or replayed from its log picks up at the right turn.
// Past the last turn Complete fails with ErrScriptEnded. Tool call IDs are
// "call_T_I" for call I (from 0) of the conversation's turn T (from 1).
//
// A script may start after turns it did not write (After): a fork's new
// script starts at the fork point, its turn 1 answering the conversation
// the fork inherited.
type Scripted struct {
	name   string
	script Script
	// skip is how many assistant turns of a conversation come before the
	// script's first.
	skip int
}

var _ Provider = (*Scripted)(nil)

// NewScripted returns a provider replaying s; name appears in its errors.
func NewScripted(name string, s Script) *Scripted {
	return &Scripted{name: name, script: s}
}

// After returns a provider replaying the same script after the first n
// assistant turns of a conversation: a request whose messages hold n+K
// assistant turns gets turn K+1 of the script. Tool call IDs keep the
// conversation's turn numbers, so they never repeat an earlier turn's.
func (s *Scripted) After(n int) *Scripted {
	return &Scripted{name: s.name, script: s.script, skip: max(n, 0)}
}

// LoadScript reads and parses the script file at path.
func LoadScript(path string) (*Scripted, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scripted: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("scripted: read %s: %w", path, err)
	}
	s, err := ParseScript(b)
	if err != nil {
		return nil, fmt.Errorf("scripted: %s: %w", path, err)
	}
	return NewScripted(filepath.Base(path), *s), nil
}

// Complete implements Provider.
func (s *Scripted) Complete(ctx context.Context, req Request, stream func(Delta)) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, fmt.Errorf("scripted: %w", err)
	}
	// A real provider would refuse a malformed conversation; so does this.
	if err := req.Validate(); err != nil {
		return Response{}, fmt.Errorf("scripted: %w", err)
	}
	n := 0
	for _, m := range req.Messages {
		if m.Role == RoleAssistant {
			n++
		}
	}
	i := n - s.skip // the script's turn, from 0
	switch {
	case i < 0:
		return Response{}, fmt.Errorf("scripted %s: the script starts after assistant turn %d, and the conversation has only %d", s.name, s.skip, n)
	case i >= len(s.script.Turns) && s.skip > 0:
		return Response{}, fmt.Errorf("scripted %s: %w: the conversation already has %d assistant turns, %d of them before the script, and the script only %d",
			s.name, ErrScriptEnded, n, s.skip, len(s.script.Turns))
	case i >= len(s.script.Turns):
		return Response{}, fmt.Errorf("scripted %s: %w: the conversation already has %d assistant turns and the script only %d",
			s.name, ErrScriptEnded, n, len(s.script.Turns))
	}
	t := s.script.Turns[i]
	r := Response{
		ID:                 fmt.Sprintf("script-turn-%d", i+1),
		Model:              "scripted",
		Text:               t.Text,
		StopReason:         StopEndTurn,
		ProviderStopReason: "script",
	}
	emit := func(d Delta) {
		if stream != nil {
			stream(d)
		}
	}
	if t.Text != "" {
		emit(Delta{Kind: DeltaText, Text: t.Text})
	}
	for i, c := range t.ToolCalls {
		call := ToolCall{ID: fmt.Sprintf("call_%d_%d", n+1, i), Name: c.Name, Args: append(json.RawMessage(nil), c.Args...)}
		r.ToolCalls = append(r.ToolCalls, call)
		emit(Delta{Kind: DeltaToolCall, Index: i, ID: call.ID, Name: call.Name})
		emit(Delta{Kind: DeltaToolCall, Index: i, Args: string(call.Args)})
	}
	if len(r.ToolCalls) > 0 {
		r.StopReason = StopToolUse
	}
	r.Usage = estimateUsage(req, r)
	return r, nil
}
