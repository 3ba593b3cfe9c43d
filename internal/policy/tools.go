package policy

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Tools says which tools the model may call, and when. A call is judged by
// the first rule that matches among the tool's own rules and then the
// global rules, in document order; with none, by the tool's default; with
// none, by ExternalDefault for an external tool and Default for any other.
// A disabled tool is always denied.
//
// In a document the tool names sit next to the reserved keys default,
// external_default and rules:
//
//	tools:
//	  default: allow
//	  rules:
//	    - when: external
//	      action: ask
//	  run_command:
//	    rules:
//	      - when: args.command.matches("^git push")
//	        action: ask
//	        reason: pushing needs a person
type Tools struct {
	// Default decides a call to a tool that is not external when no rule
	// and no default of the tool decides (default allow: the built-in
	// sandbox tools and finish only touch the sandbox).
	Default Verdict `yaml:"default"`
	// ExternalDefault decides a call to an external tool when no rule and
	// no default of the tool decides (default deny).
	ExternalDefault Verdict `yaml:"external_default"`
	// MCPDefault decides a call to a tool of an MCP server (the mcp
	// section) when no rule and no default of the tool decides (default
	// deny, also when empty): a server's own account of its tools is
	// never trusted.
	MCPDefault Verdict `yaml:"mcp_default,omitempty"`
	// Rules apply to every tool, after the tool's own rules.
	Rules []ToolRule `yaml:"rules"`
	// ByName holds the settings of named tools.
	ByName map[string]ToolConfig `yaml:"-"`
}

// ToolConfig is the policy of one tool.
type ToolConfig struct {
	// Enabled false denies every call and hides the tool (default true).
	Enabled bool `yaml:"enabled"`
	// Default decides a call no rule matches; empty defers to the tools
	// section's defaults.
	Default Verdict `yaml:"default,omitempty"`
	// External marks a host tool that changes the world outside the run
	// (an issue tracker, a deployment). A call is external when the tool
	// says so here or the engine says so in ToolRequest.External.
	External bool `yaml:"external"`
	// Rules are tried in order; the first that matches decides.
	Rules []ToolRule `yaml:"rules"`
}

// ToolRule decides a call when its condition holds.
type ToolRule struct {
	// When is a CEL expression that must evaluate to a bool. It sees:
	//
	//	tool      string            the tool's name
	//	args      map(string, dyn)  the call's JSON arguments (an empty map
	//	                            when they are not a JSON object); JSON
	//	                            integers are ints, other numbers doubles
	//	external  bool              whether the call is external
	//	run       tenant, task (string), step, tokens, elapsed_seconds (int)
	//	sandbox   name (string): the sandbox the call targets
	//	server    string            the MCP server of the tool (mcp.servers),
	//	                            empty for other tools
	//
	// with CEL's standard functions (matches is RE2; startsWith, endsWith,
	// contains, size, has, all, exists...), the string extensions
	// (lowerAscii, split, replace, ...), and workspace_path(p), which
	// returns p as a clean path relative to /workspace (see WorkspacePath):
	// workspace_path("/workspace/src/../a.go") == "a.go", and a path
	// outside the workspace comes back absolute or starting with "../".
	// Numbers of different types compare as numbers.
	When string `yaml:"when"`
	// Action is the decision when the rule matches: allow, deny or ask.
	Action Verdict `yaml:"action"`
	// Reason is shown with the decision (to the model, in the run's log,
	// to an approver).
	Reason string `yaml:"reason,omitempty"`
}

// The keys of the tools section that are not tool names.
var reservedToolKeys = []string{"default", "external_default", "mcp_default", "rules"}

var toolName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$`)

// decodeNode decodes the tools section: reserved keys into their fields,
// every other key as the settings of the tool it names.
func (t *Tools) decodeNode(d *decoder, n *yaml.Node, field string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, keysHint("", reservedToolKeys)+", or tool names", "want a mapping, got %s", describe(n))
		return
	}
	d.eachKey(n, field, func(k, v *yaml.Node) {
		f := join(field, k.Value)
		switch k.Value {
		case "default":
			d.decode(v, f, refValue(&t.Default))
		case "external_default":
			d.decode(v, f, refValue(&t.ExternalDefault))
		case "mcp_default":
			d.decode(v, f, refValue(&t.MCPDefault))
		case "rules":
			d.decode(v, f, refValue(&t.Rules))
		default:
			rv := v
			for rv.Kind == yaml.AliasNode && rv.Alias != nil {
				rv = rv.Alias
			}
			if rv.Kind != yaml.MappingNode && !(rv.Kind == yaml.ScalarNode && rv.ShortTag() == "!!null") {
				hint := "a tool's settings are enabled, default, external and rules"
				if g := guess(k.Value, reservedToolKeys); g != "" {
					hint = "did you mean " + g + "? " + hint
				}
				d.fail(v, f, hint, "want the settings of tool %s, got %s", keyName(k.Value), describe(rv))
				return
			}
			if t.ByName == nil {
				t.ByName = map[string]ToolConfig{}
			}
			c := ToolConfig{Enabled: true}
			d.decode(v, f, refValue(&c))
			t.ByName[k.Value] = c
		}
	})
}

// MarshalYAML writes the reserved keys, then the tools by name.
func (t Tools) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode}
	add := func(key string, v any) error {
		var val yaml.Node
		if err := val.Encode(v); err != nil {
			return err
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, &val)
		return nil
	}
	if err := add("default", t.Default); err != nil {
		return nil, err
	}
	if err := add("external_default", t.ExternalDefault); err != nil {
		return nil, err
	}
	// mcp_default is written only when it is not the default (deny), so
	// the hash of every document written before it existed stays the
	// same.
	if t.MCPDefault != "" && t.MCPDefault != Deny {
		if err := add("mcp_default", t.MCPDefault); err != nil {
			return nil, err
		}
	}
	rules := t.Rules
	if rules == nil {
		rules = []ToolRule{}
	}
	if err := add("rules", rules); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(t.ByName))
	for name := range t.ByName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := t.ByName[name]
		if c.Rules == nil {
			c.Rules = []ToolRule{}
		}
		if err := add(name, c); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (t *Tools) validate(p *problems) {
	checkVerdict(p, "tools.default", t.Default, false)
	checkVerdict(p, "tools.external_default", t.ExternalDefault, false)
	checkVerdict(p, "tools.mcp_default", t.MCPDefault, true)
	checkRules(p, "tools.rules", t.Rules)
	if len(t.ByName) > maxTools {
		p.add("tools", "", "%d tools, at most %d", len(t.ByName), maxTools)
	}
	if n := t.ruleCount(); n > maxAllRules {
		p.add("tools", "", "%d rules in all, at most %d", n, maxAllRules)
	}
	for _, name := range sortedNames(t.ByName) {
		c := t.ByName[name]
		field := "tools." + name
		if !toolName.MatchString(name) {
			p.add(field, "a tool name: letters, digits and _ . : -, at most 128", "%q is not a tool name", shorten(name))
		}
		checkVerdict(p, field+".default", c.Default, true)
		checkRules(p, field+".rules", c.Rules)
	}
}

func (t *Tools) ruleCount() int {
	n := len(t.Rules)
	for _, c := range t.ByName {
		n += len(c.Rules)
	}
	return n
}

func checkVerdict(p *problems, field string, v Verdict, emptyOK bool) {
	switch v {
	case Allow, Deny, Ask:
	case "":
		if !emptyOK {
			p.add(field, "allow, deny or ask", "empty")
		}
	default:
		p.add(field, "allow, deny or ask", "%q is not one of allow, deny, ask", shorten(string(v)))
	}
}

func checkRules(p *problems, field string, rules []ToolRule) {
	if len(rules) > maxRules {
		p.add(field, "", "%d rules, at most %d", len(rules), maxRules)
	}
	for i, r := range rules {
		f := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(r.When) == "" {
			p.add(f+".when", `a CEL condition, like args.command.matches("^git push"); write "true" for a rule that always matches`, "missing")
		}
		if r.Action == "" {
			p.add(f+".action", "allow, deny or ask", "missing")
		} else {
			checkVerdict(p, f+".action", r.Action, false)
		}
		if len(r.Reason) > maxReason || hasCTL(r.Reason) {
			p.add(f+".reason", "one line of at most 1024 bytes", "too long or contains control characters")
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
