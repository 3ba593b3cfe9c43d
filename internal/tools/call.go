package tools

import (
	"encoding/json"
	"fmt"

	"github.com/airlockrun/airlock/internal/model"
)

// Call is one tool call as the agent loop carries it from the model's
// response through the policy, its run and its record: the call as the
// model wrote it, and what Registry.Resolve found of it, once per step
// (where it acts, with what arguments, what it may change).
type Call struct {
	// ToolCall is the call as the model wrote it: what the model's turn,
	// tool.proposed and an approval show.
	model.ToolCall
	// Place is where the call runs: its tool's place, or PlaceHost for a
	// tool the registry does not know (Registry.Call answers it there,
	// with an error).
	Place Place
	// Sandbox names the sandbox a sandbox tool acts in.
	Sandbox string
	// Input is the arguments without the sandbox selector: what the
	// policy judges and what the tool runs with.
	Input json.RawMessage
	// Err, when not nil, says why the sandbox selector is unusable: the
	// call does not run, and Registry.Call answers it with Err as a tool
	// error.
	Err error
	// Mutating and External are its tool's answers (false for a tool the
	// registry does not know: it runs nowhere).
	Mutating, External bool
}

// SandboxArg is the argument that selects the sandbox a sandbox tool acts
// in, in a run with more than one (Specs adds it to their schemas).
const SandboxArg = "sandbox"

// Resolve finds where c acts among sandboxes (the run's, the first being
// the default) and what it may change. With more than one sandbox, c's
// arguments may name one in SandboxArg; the selector is taken out of the
// arguments the tool sees, whatever the tool.
func (r *Registry) Resolve(c model.ToolCall, sandboxes ...string) Call {
	rc := Call{ToolCall: c, Place: PlaceHost}
	var name string
	name, rc.Input, rc.Err = route(c, sandboxes)
	if t, ok := r.tools[c.Name]; ok {
		rc.Mutating, rc.External = t.Mutating(), t.External()
		if t.Place() == PlaceSandbox {
			rc.Place, rc.Sandbox = PlaceSandbox, name
		}
	}
	return rc
}

// route returns the sandbox c names (the first when it names none) and its
// arguments without the selector.
func route(c model.ToolCall, sandboxes []string) (string, json.RawMessage, error) {
	var first string
	if len(sandboxes) > 0 {
		first = sandboxes[0]
	}
	if len(sandboxes) < 2 {
		return first, c.Args, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(c.Args, &m) != nil {
		return first, c.Args, nil // the tool reports the malformed arguments
	}
	raw, ok := m[SandboxArg]
	if !ok {
		return first, c.Args, nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		return first, c.Args, fmt.Errorf("%s: argument sandbox must be a string", c.Name)
	}
	found := false
	for _, s := range sandboxes {
		found = found || s == name
	}
	if !found {
		return first, c.Args, fmt.Errorf("%s: no sandbox called %q", c.Name, name)
	}
	delete(m, SandboxArg)
	b, err := json.Marshal(m)
	if err != nil {
		return first, c.Args, err
	}
	return name, model.CanonicalArgs(string(b)), nil
}

// withSandboxArg adds the optional selector to a sandbox tool's schema.
func withSandboxArg(schema json.RawMessage, sandboxes []string) json.RawMessage {
	var m map[string]any
	if json.Unmarshal(schema, &m) != nil || m == nil {
		m = map[string]any{"type": "object"}
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props[SandboxArg] = map[string]any{"type": "string", "enum": sandboxes, "description": "Which sandbox to act in (default " + sandboxes[0] + ")."}
	m["properties"] = props
	b, _ := json.Marshal(m)
	return b
}
