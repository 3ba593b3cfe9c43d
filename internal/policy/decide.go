package policy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celchecker "github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"

	"github.com/airlockrun/airlock/internal/secret/scan"
)

// RuleCostLimit bounds the CEL cost of evaluating one tool rule (CEL's cost
// units: roughly one per operation, string and list work counted by size).
// A rule whose estimated cost can exceed it does not load; a rule that
// exceeds it at run time, on large arguments, denies the call.
const RuleCostLimit = 1_000_000

// assumedSize is the size the load-time cost estimate assumes for every
// string, list and map whose size it cannot know (the call's arguments):
// rules that stay under RuleCostLimit on such arguments load.
const assumedSize = 4096

// maxExpr bounds the length of one rule's condition, in bytes.
const maxExpr = 4096

// ToolRequest is one proposed tool call, for DecideTool.
type ToolRequest struct {
	// Tool is the tool's name as the model called it.
	Tool string
	// Args are the call's arguments as the model wrote them (JSON).
	Args json.RawMessage
	// External is true when the tool changes the world outside the run
	// (the engine's tools registry knows); a tool marked external in the
	// document is external either way.
	External bool
	// Run describes the run making the call.
	Run RunInfo
	// Sandbox names the sandbox the call targets; empty for host tools.
	Sandbox string
	// Server names the MCP server (the mcp section) whose tool this is;
	// empty means the one the document's mcp section gives the tool's
	// name (MCP.ServerOf), if any. A call of a server's tool that no rule
	// and no default of the tool decides is decided by tools.mcp_default.
	Server string
}

// RunInfo is what a rule sees of the run, as `run` in CEL.
type RunInfo struct {
	Tenant string `cel:"tenant"`
	Task   string `cel:"task"`
	// Step is the number of the step proposing the call (from 1).
	Step int64 `cel:"step"`
	// Tokens are the model tokens the run has used so far.
	Tokens int64 `cel:"tokens"`
	// ElapsedSeconds is the run's active wall time so far.
	ElapsedSeconds int64 `cel:"elapsed_seconds"`
}

// sandboxInfo is `sandbox` in CEL.
type sandboxInfo struct {
	Name string `cel:"name"`
}

// ToolDecision is the outcome of DecideTool.
type ToolDecision struct {
	// Action is Allow, Deny or Ask.
	Action Verdict
	// Rule names what decided, as a path into the document:
	// "tools.run_command.rules[0]", "tools.rules[1]",
	// "tools.write_file.default", "tools.write_file.enabled",
	// "tools.mcp_default", "tools.external_default" or "tools.default".
	Rule string
	// Reason says why: the rule's reason ("matched: " and its condition
	// when the rule gives none), a description of the default, or why a
	// rule could not decide.
	Reason string
	// Secrets are the ids of the scanner's rules that found something in
	// the call's arguments (secrets.*), sorted; none for most calls.
	Secrets []string
}

// The reasons of decisions no rule's reason explains.
const (
	// ReasonCostLimit: a rule exceeded RuleCostLimit on this call.
	ReasonCostLimit = "policy: rule cost limit exceeded"
	// ReasonDisabled: the tool is disabled.
	ReasonDisabled = "policy: the tool is disabled"
)

// toolPolicy is the tools section compiled: what DecideTool reads. It is
// immutable once built.
type toolPolicy struct {
	err                 error // the tools section does not compile: deny everything
	def, extDef, mcpDef Verdict
	global              []compiledRule
	tools               map[string]compiledTool
	// scanner finds credentials in arguments; it returns nil with
	// secrets.off. It is made on first use: most documents are parsed
	// and never decide a call.
	scanner func() *scan.Scanner
	// secretRules and secretsDef decide a call whose arguments carry
	// findings (secrets.rules, secrets.arguments).
	secretRules []compiledRule
	secretsDef  Verdict
}

type compiledTool struct {
	enabled, external bool
	def               Verdict
	rules             []compiledRule
}

type compiledRule struct {
	label  string // "tools.run_command.rules[0]"
	action Verdict
	reason string
	prg    cel.Program
}

// DecideTool judges one proposed tool call: the first matching rule among
// the tool's own and then the global rules decides; then the tool's default;
// then tools.external_default for an external call, tools.default for any
// other. A disabled tool is denied. A rule that fails to evaluate (a missing
// argument, a value of the wrong type, a result that is not a bool) or that
// exceeds RuleCostLimit denies the call: a rule the policy's author wrote
// must not be skipped. DecideTool is deterministic and safe for concurrent
// use.
func (d *Document) DecideTool(r ToolRequest) ToolDecision {
	tp := d.toolPolicy()
	if tp.err != nil {
		return ToolDecision{Action: Deny, Rule: "tools", Reason: "policy: the tools section is invalid"}
	}
	t, named := tp.tools[r.Tool]
	if named && !t.enabled {
		return ToolDecision{Action: Deny, Rule: "tools." + r.Tool + ".enabled", Reason: ReasonDisabled}
	}
	external := r.External || t.external
	if r.Server == "" {
		r.Server = d.MCP.ServerOf(r.Tool)
	}
	found := argFindings(tp.scanner(), r.Args)
	var vars map[string]any
	if len(t.rules)+len(tp.global)+len(tp.secretRules) > 0 {
		vars = map[string]any{
			"tool":     types.String(r.Tool),
			"args":     argsValue(r.Args),
			"external": types.Bool(external),
			"run":      r.Run,
			"sandbox":  sandboxInfo{Name: r.Sandbox},
			"server":   types.String(r.Server),
			"secrets":  types.NewStringList(types.DefaultTypeAdapter, found),
		}
	}
	d0 := tp.decideTool(r.Tool, t, r.Server != "", external, vars)
	if len(found) == 0 || d0.Action == Deny {
		return d0
	}
	// The arguments carry what looks like a credential: the secrets
	// section may only make the decision stricter.
	d0.Secrets = found
	for i := range tp.secretRules {
		if dec, ok := tp.secretRules[i].eval(vars); ok {
			dec.Secrets = found
			return stricter(d0, dec)
		}
	}
	return stricter(d0, ToolDecision{
		Action: tp.secretsDef, Rule: "secrets.arguments", Secrets: found,
		Reason: "the arguments carry what looks like a secret (" + strings.Join(found, ", ") + ")",
	})
}

// decideTool is the tools section's decision on a call to tool, whose
// settings are t.
func (tp *toolPolicy) decideTool(tool string, t compiledTool, mcp, external bool, vars map[string]any) ToolDecision {
	for _, rules := range [2][]compiledRule{t.rules, tp.global} {
		for i := range rules {
			if dec, ok := rules[i].eval(vars); ok {
				return dec
			}
		}
	}
	switch {
	case t.def != "":
		return ToolDecision{Action: t.def, Rule: "tools." + tool + ".default", Reason: "no rule matched; the tool's default"}
	case mcp:
		return ToolDecision{Action: tp.mcpDef, Rule: "tools.mcp_default", Reason: "no rule matched; the default for MCP servers' tools"}
	case external:
		return ToolDecision{Action: tp.extDef, Rule: "tools.external_default", Reason: "no rule matched; the default for external tools"}
	}
	return ToolDecision{Action: tp.def, Rule: "tools.default", Reason: "no rule matched; the default for tools"}
}

// ToolEnabled reports whether the policy lets the model see and call the
// tool at all: false only for a tool the document disables. The engine may
// leave disabled tools out of what it offers the model; DecideTool denies
// them either way.
func (d *Document) ToolEnabled(name string) bool {
	t, named := d.toolPolicy().tools[name]
	return !named || t.enabled
}

// eval runs the rule; ok is false when its condition is false.
func (cr *compiledRule) eval(vars map[string]any) (ToolDecision, bool) {
	out, _, err := cr.prg.Eval(vars)
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
			return ToolDecision{Action: Deny, Rule: cr.label, Reason: ReasonCostLimit}, true
		}
		// CEL's message names a key, a type or an overload, and may quote
		// an argument value: nothing the run's log does not hold already
		// (the proposed call is recorded with its arguments), and never a
		// host secret, which no argument can hold.
		msg := strings.Join(strings.Fields(err.Error()), " ")
		return ToolDecision{Action: Deny, Rule: cr.label, Reason: "policy: the rule failed: " + shorten(msg)}, true
	}
	b, isBool := out.(types.Bool)
	if !isBool { // a condition type-checks to bool: not expected, and fail closed
		return ToolDecision{Action: Deny, Rule: cr.label, Reason: "policy: the rule's condition is not a bool (" + out.Type().TypeName() + ")"}, true
	}
	if !b {
		return ToolDecision{}, false
	}
	return ToolDecision{Action: cr.action, Rule: cr.label, Reason: cr.reason}, true
}

// toolPolicy returns the compiled tools section, compiling it on first use
// for a Document that Parse did not build.
func (d *Document) toolPolicy() *toolPolicy {
	if tp := d.compiled.Load(); tp != nil {
		return tp
	}
	p := &problems{}
	d.Tools.validate(p)
	d.Secrets.validate(p)
	tp := compileTools(d, p)
	if len(p.errs) > 0 {
		tp = &toolPolicy{err: joinErrors(p.errs)}
	}
	d.compiled.CompareAndSwap(nil, tp)
	return d.compiled.Load()
}

// compileTools compiles every rule of a document's tools and secrets
// sections and its secret scanner, adding a problem for each rule that does
// not compile. It skips the rules validate refuses (no condition, no valid
// action): they are reported already.
func compileTools(d *Document, p *problems) *toolPolicy {
	t := &d.Tools
	if t.ruleCount()+len(d.Secrets.Rules) > maxAllRules {
		return nil // reported by validate; compiling them all would take long
	}
	env, err := celEnv()
	if err != nil {
		p.add("tools", "", "CEL environment: %v", err) // a bug of this package, not of the document
		return nil
	}
	tp := &toolPolicy{def: t.Default, extDef: t.ExternalDefault, mcpDef: cmp.Or(t.MCPDefault, Deny), tools: map[string]compiledTool{}}
	tp.global = compileRules(env, p, "tools.rules", t.Rules)
	tp.secretRules = compileRules(env, p, "secrets.rules", d.Secrets.Rules)
	tp.secretsDef = cmp.Or(d.Secrets.Arguments, Ask)
	off, opts := d.Secrets.Off, d.Secrets.ScanOptions()
	tp.scanner = sync.OnceValue(func() *scan.Scanner {
		if off {
			return nil
		}
		return scan.NewOrDefault(opts)
	})
	for name, c := range t.ByName {
		tp.tools[name] = compiledTool{
			enabled: c.Enabled, external: c.External, def: c.Default,
			rules: compileRules(env, p, "tools."+name+".rules", c.Rules),
		}
	}
	return tp
}

// ruleReason is a rule's reason, or what its condition says when it gives
// none.
func ruleReason(reason, when string) string {
	if reason != "" {
		return reason
	}
	return "matched: " + shorten(strings.Join(strings.Fields(when), " "))
}

func compileRules(env *cel.Env, p *problems, field string, rules []ToolRule) []compiledRule {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		label := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(r.When) == "" || r.Action != Allow && r.Action != Deny && r.Action != Ask {
			continue
		}
		prg, ok := compileRule(env, p, label+".when", r.When)
		if !ok {
			continue
		}
		out = append(out, compiledRule{label: label, action: r.Action, reason: ruleReason(r.Reason, r.When), prg: prg})
	}
	return out
}

const celHint = "a CEL condition over tool, args, external, run, sandbox and server that is true or false, " +
	`like args.command.matches("^git push") or !workspace_path(args.path).startsWith("src/")`

func compileRule(env *cel.Env, p *problems, field, expr string) (cel.Program, bool) {
	if len(expr) > maxExpr {
		p.add(field, "split the rule in several", "%d bytes, at most %d", len(expr), maxExpr)
		return nil, false
	}
	ast, iss := env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		for _, e := range iss.Errors() {
			msg := strings.TrimSuffix(e.Message, " (in container '')")
			if col := e.Location.Column(); col >= 0 {
				msg = fmt.Sprintf("column %d: %s", col+1, msg)
			}
			p.addExpr(field, e.Location.Line(), celHint, "%s", msg)
		}
		return nil, false
	}
	// Every condition must type-check to bool. A dyn one (an argument's
	// value, args.command) is refused too: whether it is a bool is known
	// only at the call, and a policy that loads must not turn out at run
	// time to deny every call it was written to allow (or the reverse).
	switch t := ast.OutputType(); {
	case t.IsExactType(types.BoolType):
	case t.IsExactType(types.DynType):
		p.add(field, `compare the value, like args.force == true or args.command == "make", or test it, like has(args.command)`,
			"the condition is an argument's value, of a type known only at the call (dyn), want bool")
		return nil, false
	default:
		p.add(field, celHint, "the condition is of type %s, want bool", t)
		return nil, false
	}
	est, err := env.EstimateCost(ast, costEstimator{})
	if err != nil {
		p.add(field, "", "cost estimate: %v", err)
		return nil, false
	}
	if est.Max > RuleCostLimit {
		p.add(field, fmt.Sprintf("the estimate assumes arguments of up to %d characters or items; avoid nested loops (all, exists, map, filter) over the arguments", assumedSize),
			"the condition may cost up to %s, more than the limit of %d", costString(est.Max), RuleCostLimit)
		return nil, false
	}
	prg, err := env.Program(ast,
		cel.CostLimit(RuleCostLimit),
		cel.CostTracking(costEstimator{}),
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		p.add(field, celHint, "%v", err)
		return nil, false
	}
	return prg, true
}

func costString(c uint64) string {
	if c == ^uint64(0) {
		return "an unbounded amount"
	}
	return fmt.Sprint(c)
}

// celEnv is the environment every rule compiles in. It is built once and
// immutable: a cel.Env is safe for concurrent use.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[RunInfo](), reflect.TypeFor[sandboxInfo](), ext.ParseStructTags(true)),
		cel.Variable("tool", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("external", cel.BoolType),
		cel.Variable("run", cel.ObjectType("policy.RunInfo")),
		cel.Variable("sandbox", cel.ObjectType("policy.sandboxInfo")),
		cel.Variable("server", cel.StringType),
		cel.Variable("secrets", cel.ListType(cel.StringType)),
		cel.Function("workspace_path",
			cel.Overload("workspace_path_string", []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					s, ok := v.(types.String)
					if !ok {
						return types.NewErr("workspace_path: want a string")
					}
					rel, _ := WorkspacePath(string(s))
					return types.String(rel)
				}))),
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true),
		cel.ParserExpressionSizeLimit(maxExpr),
	)
})

// costEstimator prices what CEL cannot know: argument sizes (at load) and
// workspace_path (at load and at run time, by the length of its input).
type costEstimator struct{}

func (costEstimator) EstimateSize(celchecker.AstNode) *celchecker.SizeEstimate {
	return &celchecker.SizeEstimate{Min: 0, Max: assumedSize}
}

func (costEstimator) EstimateCallCost(function, overloadID string, target *celchecker.AstNode, args []celchecker.AstNode) *celchecker.CallEstimate {
	if overloadID == "workspace_path_string" {
		return &celchecker.CallEstimate{CostEstimate: celchecker.CostEstimate{Min: 1, Max: 1 + assumedSize/10}}
	}
	return nil
}

func (costEstimator) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	if overloadID == "workspace_path_string" && len(args) == 1 {
		if s, ok := args[0].(types.String); ok {
			c := 1 + uint64(len(s))/10
			return &c
		}
	}
	return nil
}

// argsValue turns a call's JSON arguments into a CEL map: objects become
// maps that iterate in key order (CEL comprehensions over a Go map would
// see a random order, and a rule must decide the same way every time),
// integers ints, other numbers doubles. Arguments that are not one JSON
// object become an empty map.
func argsValue(raw json.RawMessage) ref.Val {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err == nil && !dec.More() {
		if m, ok := v.(map[string]any); ok {
			return celValue(m)
		}
	}
	return celValue(map[string]any{})
}

func celValue(v any) ref.Val {
	switch x := v.(type) {
	case nil:
		return types.NullValue
	case bool:
		return types.Bool(x)
	case string:
		return types.String(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return types.Int(i)
		}
		f, _ := x.Float64() // out of range is ±Inf, still a number
		return types.Double(f)
	case []any:
		elems := make([]ref.Val, len(x))
		for i, e := range x {
			elems[i] = celValue(e)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, elems)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := make(map[ref.Val]ref.Val, len(x))
		ordered := make([]ref.Val, len(keys))
		for i, k := range keys {
			ordered[i] = types.String(k)
			m[types.String(k)] = celValue(x[k])
		}
		return orderedMap{Mapper: types.NewRefValMap(types.DefaultTypeAdapter, m), keys: ordered}
	}
	return types.NewErr("unsupported JSON value")
}

// orderedMap is a CEL map that iterates in a fixed key order.
type orderedMap struct {
	traits.Mapper
	keys []ref.Val
}

// Iterator iterates over the keys in order.
func (m orderedMap) Iterator() traits.Iterator {
	return types.NewRefValList(types.DefaultTypeAdapter, m.keys).Iterator()
}
